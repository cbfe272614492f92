"""Checkers of chapters 07-09: a correct answer passes, a wrong one raises ExerciseFailed with a hint."""

import pytest
import torch

from k3lite.exercises import ExerciseFailed, ch07

# ---------------------------------------------------------------- chapter 07


def _expand_kv_groups(kv, num_heads):
    groups = kv.shape[2]
    if num_heads % groups:
        raise ValueError(f"num_heads {num_heads} is not a multiple of {groups} groups")
    return kv.repeat_interleave(num_heads // groups, dim=2)


def test_ch07_expand_kv_groups(capsys):
    assert ch07.check_expand_kv_groups(_expand_kv_groups) is True
    assert "correct" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, hint", [
    (lambda kv, n: kv.repeat(1, 1, n // kv.shape[2], 1), "tiled"),      # head h reads group h % G
    (lambda kv, n: kv.repeat_interleave(n // kv.shape[2], dim=2), "ValueError"),  # no check of divisibility
    (lambda kv, n: kv, "shape"),                                        # not expanded at all
    (lambda kv, n: _expand_kv_groups(kv.flip(1), n), "values differ"),  # reads the cache in the wrong order
])
def test_ch07_expand_kv_groups_wrong(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ch07.check_expand_kv_groups(wrong)


def test_ch07_not_attempted(capsys):
    def stub(*args):
        raise NotImplementedError

    assert ch07.check_absorb_query(stub) is False
    assert "not attempted" in capsys.readouterr().out


def test_ch07_absorb_query():
    assert ch07.check_absorb_query(lambda q, w: torch.einsum("hn,hnc->hc", q, w))
    with pytest.raises(ExerciseFailed, match=r"\[H, d_c\]"):
        ch07.check_absorb_query(lambda q, w: q)
    with pytest.raises(ExerciseFailed, match="scores"):
        ch07.check_absorb_query(lambda q, w: torch.einsum("hn,hnc->hc", q, w.flip(0)))


def test_ch07_absorbed_output():
    assert ch07.check_absorbed_output(lambda p, c, w: torch.einsum("hvc,hc->hv", w, p @ c))
    with pytest.raises(ExerciseFailed, match="W_UV"):
        ch07.check_absorbed_output(lambda p, c, w: torch.einsum("hvc,hc->hv", w, p.softmax(-1) @ c))
    with pytest.raises(ExerciseFailed, match="shape"):
        ch07.check_absorbed_output(lambda p, c, w: p @ c)


# ---------------------------------------------------------------- chapter 09

from k3lite.exercises import ch09  # noqa: E402


def _depth_attention(values, query):
    keys = torch.nn.functional.rms_norm(values, (values.shape[-1],), eps=1e-6)
    weights = torch.softmax(keys @ query, dim=0)
    return (weights.unsqueeze(-1) * values).sum(0), weights


def test_ch09_depth_attention(capsys):
    assert ch09.check_depth_attention(_depth_attention) is True
    assert "correct" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, hint", [
    (lambda v, q: ((torch.softmax(v @ q, 0).unsqueeze(-1) * v).sum(0), torch.softmax(v @ q, 0)), "RMSNorm"),
    (lambda v, q: (_depth_attention(v, q)[0], torch.softmax(
        torch.nn.functional.rms_norm(v, (v.shape[-1],), eps=1e-6) @ q, dim=1)), "sum to 1"),
    (lambda v, q: ((_depth_attention(v, q)[1].unsqueeze(-1)
                    * torch.nn.functional.rms_norm(v, (v.shape[-1],), eps=1e-6)).sum(0), _depth_attention(v, q)[1]),
     "as they are"),
    (lambda v, q: (_depth_attention(v, q)[0] * 2, _depth_attention(v, q)[1]), "mixed"),
])
def test_ch09_depth_attention_wrong(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ch09.check_depth_attention(wrong)


def test_ch09_block_count():
    assert ch09.check_block_count(lambda layers, per_block: (1 + layers // per_block, layers % per_block))
    with pytest.raises(ExerciseFailed, match="embedding"):
        ch09.check_block_count(lambda layers, per_block: (layers // per_block, layers % per_block))
    with pytest.raises(ExerciseFailed, match="not stored"):
        ch09.check_block_count(lambda layers, per_block: (1 + -(-layers // per_block), layers % per_block))
    with pytest.raises(ExerciseFailed, match="block_count"):
        ch09.check_block_count(lambda layers, per_block: (1 + layers // per_block, 0))


def _block_sources(embedding, outputs, per_block):
    sources = [embedding]
    for start in range(0, len(outputs), per_block):
        sources.append(torch.stack(outputs[start:start + per_block]).sum(0))
    return sources


def test_ch09_block_sources():
    assert ch09.check_block_sources(_block_sources)
    with pytest.raises(ExerciseFailed, match="must not be listed"):
        ch09.check_block_sources(lambda e, outs, n: _block_sources(e, outs, n)
                                 + ([torch.zeros_like(e)] if len(outs) % n == 0 else []))
    with pytest.raises(ExerciseFailed, match="number of sources"):
        ch09.check_block_sources(lambda e, outs, n: _block_sources(e, outs, n)[1:])
    with pytest.raises(ExerciseFailed, match="sum of its sub-layer outputs"):
        ch09.check_block_sources(lambda e, outs, n: [e] + [torch.stack(outs[s:s + n]).mean(0)
                                                           for s in range(0, len(outs), n)])


# ---------------------------------------------------------------- chapter 08

from k3lite.exercises import ch08  # noqa: E402


def _route(scores, bias, top_k):
    indices = torch.topk(scores + bias, top_k, dim=-1).indices
    selected = scores.gather(-1, indices)
    return selected / selected.sum(-1, keepdim=True), indices


def test_ch08_route(capsys):
    assert ch08.check_route(_route) is True
    # The order of the k experts within a token does not matter.
    assert ch08.check_route(lambda s, b, k: tuple(t.flip(-1) for t in _route(s, b, k)))
    assert "correct" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, hint", [
    (lambda s, b, k: _route(s, torch.zeros_like(b), k), "bias steers"),
    (lambda s, b, k: (_route(s + b, torch.zeros_like(b), k)[0], _route(s, b, k)[1]), "only selects"),
    (lambda s, b, k: (s.gather(-1, _route(s, b, k)[1]), _route(s, b, k)[1]), "renormalise"),
    (lambda s, b, k: (torch.full((s.shape[0], k), 1.0 / k, dtype=s.dtype), _route(s, b, k)[1]), "weights are wrong"),
    (lambda s, b, k: _route(s, b, k + 1), r"\[N, top_k\]"),
])
def test_ch08_route_wrong(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ch08.check_route(wrong)


def _routed_macs(hidden, latent, width, top_k):
    return top_k * 3 * (latent or hidden) * width + (2 * hidden * latent if latent else 0)


def test_ch08_routed_macs():
    assert ch08.check_routed_macs(_routed_macs)
    with pytest.raises(ExerciseFailed, match="W_down"):
        ch08.check_routed_macs(lambda d, s, w, k: k * 3 * (s or d) * w)
    with pytest.raises(ExerciseFailed, match="three matrices"):
        ch08.check_routed_macs(lambda d, s, w, k: k * 2 * (s or d) * w + (2 * d * s if s else 0))
    with pytest.raises(ExerciseFailed, match="FLOPs"):
        ch08.check_routed_macs(lambda d, s, w, k: 2 * _routed_macs(d, s, w, k))
    with pytest.raises(ExerciseFailed, match="routed_macs"):
        ch08.check_routed_macs(lambda d, s, w, k: k * 3 * d * w)


def test_ch08_situ():
    assert ch08.check_situ(lambda x, beta: beta * torch.tanh(x / beta) * torch.sigmoid(x))
    with pytest.raises(ExerciseFailed, match="sigmoid gate"):
        ch08.check_situ(lambda x, beta: beta * torch.tanh(x / beta))
    with pytest.raises(ExerciseFailed, match="multiply tanh"):
        ch08.check_situ(lambda x, beta: torch.tanh(x / beta) * torch.sigmoid(x))
    with pytest.raises(ExerciseFailed, match="x / beta, not x"):
        ch08.check_situ(lambda x, beta: beta * torch.tanh(x) * torch.sigmoid(x))
    with pytest.raises(ExerciseFailed, match="situ"):
        ch08.check_situ(lambda x, beta: x * torch.sigmoid(x))
