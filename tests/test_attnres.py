"""Attention Residuals: uniform start, weights that sum to one, block size 1 = full, block bookkeeping."""

import pytest
import torch

from k3lite.layers.attnres import AttnResMixer, AttnResSources, attnres_mix, num_block_sources, stack_sources


def _sources(count, shape=(2, 5, 8), seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=generator) * (i + 1) for i in range(count)]


def test_zero_query_gives_uniform_weights_and_the_mean():
    sources = _sources(4)
    mixed, weights = AttnResMixer(8)(sources)
    assert weights.shape == (4, 2, 5)
    torch.testing.assert_close(weights, torch.full_like(weights, 0.25))
    torch.testing.assert_close(mixed, torch.stack(sources).mean(0))


def test_weights_sum_to_one_and_match_a_hand_softmax():
    sources = _sources(5)
    mixer = AttnResMixer(8)
    with torch.no_grad():
        mixer.query.copy_(torch.linspace(-2.0, 3.0, 8))
    mixed, weights = mixer(sources)
    torch.testing.assert_close(weights.sum(0), torch.ones(2, 5))
    stacked = torch.stack(sources)
    keys = stacked / stacked.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt()
    expected_weights = torch.softmax(keys @ mixer.query.detach(), dim=0)
    torch.testing.assert_close(weights, expected_weights)
    torch.testing.assert_close(mixed, (expected_weights.unsqueeze(-1) * stacked).sum(0))
    assert not torch.allclose(weights, torch.full_like(weights, 0.2)), "a non-zero query must move the weights"


def test_list_and_stacked_inputs_agree():
    sources = _sources(3)
    query = torch.randn(8, generator=torch.Generator().manual_seed(1))
    from_list = attnres_mix(sources, query)
    from_stack = attnres_mix(torch.stack(sources), query)
    for a, b in zip(from_list, from_stack):
        torch.testing.assert_close(a, b)


def test_values_are_not_normalised():
    # Scaling one source scales its contribution to the mix but not its weight (keys are RMS-normalised).
    sources = _sources(2)
    query = torch.randn(8, generator=torch.Generator().manual_seed(2))
    _, weights = attnres_mix(sources, query)
    mixed_big, weights_big = attnres_mix([sources[0] * 10.0, sources[1]], query)
    torch.testing.assert_close(weights, weights_big)
    torch.testing.assert_close(mixed_big,
                               10.0 * weights[0, ..., None] * sources[0] + weights[1, ..., None] * sources[1])


def _run_stack(outputs_fn, embedding, mixers, sublayers_per_block):
    """Walk a stack where sub-layer l's output is outputs_fn(l, its input); return inputs, final mix."""
    state = AttnResSources(embedding, sublayers_per_block)
    inputs = []
    for layer, mixer in enumerate(mixers[:-1]):
        h, _ = mixer(state.sources())
        inputs.append(h)
        state.add(outputs_fn(layer, h))
    final, _ = mixers[-1](state.sources())
    return inputs, final, state


def _mixers(count, d, seed=3):
    generator = torch.Generator().manual_seed(seed)
    mixers = [AttnResMixer(d) for _ in range(count)]
    with torch.no_grad():
        for mixer in mixers:
            mixer.query.copy_(torch.randn(d, generator=generator))
    return mixers


def _sublayer(layer, h):
    weight = torch.randn(h.shape[-1], h.shape[-1], generator=torch.Generator().manual_seed(100 + layer))
    return torch.tanh(h @ weight) * (layer + 1)


def test_block_size_one_equals_full_attnres_written_out():
    embedding = torch.randn(2, 3, 6, generator=torch.Generator().manual_seed(4))
    mixers = _mixers(7, 6)
    # Full AttnRes by hand: v_0 = embedding, h_l = mix(v_0..v_{l-1}), v_l = f_l(h_l).
    values = [embedding]
    for layer in range(6):
        h, _ = mixers[layer](values)
        values.append(_sublayer(layer, h))
    expected_final, _ = mixers[-1](values)
    for block in (None, 1):
        _, final, state = _run_stack(_sublayer, embedding, mixers, block)
        torch.testing.assert_close(final, expected_final)
        assert state.num_stored == 7


def test_block_sources_are_embedding_completed_blocks_and_partial_sum():
    embedding = torch.zeros(1, 1, 4)
    state = AttnResSources(embedding, sublayers_per_block=3)
    outputs = [torch.full((1, 1, 4), float(i + 1)) for i in range(7)]
    for output in outputs:
        state.add(output)
    sources = state.sources()
    assert len(sources) == 4 and state.num_stored == 3
    torch.testing.assert_close(sources[1], outputs[0] + outputs[1] + outputs[2])
    torch.testing.assert_close(sources[2], outputs[3] + outputs[4] + outputs[5])
    torch.testing.assert_close(sources[3], outputs[6])


def test_block_attnres_differs_from_full_when_blocks_are_larger_than_one():
    embedding = torch.randn(2, 3, 6, generator=torch.Generator().manual_seed(5))
    mixers = _mixers(7, 6)
    _, full, _ = _run_stack(_sublayer, embedding, mixers, None)
    _, block, _ = _run_stack(_sublayer, embedding, mixers, 2)
    assert not torch.allclose(full, block)


def test_gradients_reach_the_queries():
    sources = [s.requires_grad_() for s in _sources(3)]
    mixer = AttnResMixer(8)
    with torch.no_grad():
        mixer.query.add_(0.1)
    mixed, _ = mixer(sources)
    mixed.pow(2).sum().backward()
    assert mixer.query.grad is not None and mixer.query.grad.abs().sum() > 0
    assert all(s.grad is not None for s in sources)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_sources_keep_their_dtype(dtype):
    sources = [s.to(dtype) for s in _sources(3)]
    mixed, weights = AttnResMixer(8)(sources)
    assert mixed.dtype == dtype and weights.dtype == torch.float32


def test_k3_blocks_of_twelve_layers_store_eight_sources():
    assert num_block_sources(2 * 93, 24) == (8, 18)
    assert num_block_sources(2 * 93, None) == (187, 0)
    assert num_block_sources(0, 24) == (1, 0)
    state = AttnResSources(torch.zeros(1, 2), sublayers_per_block=24)
    for _ in range(2 * 93):
        state.add(torch.ones(1, 2))
    assert state.num_stored == 8 and len(state.sources()) == 9
    torch.testing.assert_close(state.sources()[-1], torch.full((1, 2), 18.0))


def test_bad_inputs_raise_value_errors():
    mixer = AttnResMixer(8)
    with pytest.raises(ValueError, match="sources"):
        mixer([])
    with pytest.raises(ValueError, match="d_model=8"):
        mixer([torch.zeros(2, 3, 7)])
    with pytest.raises(ValueError, match=r"sources\[1\]"):
        mixer([torch.zeros(2, 3, 8), torch.zeros(2, 4, 8)])
    with pytest.raises(ValueError, match="at least 2-D"):
        stack_sources(torch.zeros(8))
    with pytest.raises(ValueError, match="query"):
        attnres_mix([torch.zeros(3, 8)], torch.zeros(2, 8))
    with pytest.raises(ValueError, match="d_model"):
        AttnResMixer(0)
    with pytest.raises(ValueError, match="sublayers_per_block"):
        AttnResSources(torch.zeros(1, 8), sublayers_per_block=0)
    state = AttnResSources(torch.zeros(1, 8), sublayers_per_block=2)
    with pytest.raises(ValueError, match="output"):
        state.add(torch.zeros(1, 7))
    with pytest.raises(ValueError, match="num_sublayers"):
        num_block_sources(-1, 2)
