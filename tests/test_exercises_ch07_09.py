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


def test_ch09_read_scale_prediction_accepts_the_reasoned_rms(capsys):
    assert ch09.check_read_scale_prediction(lambda: 13 ** -0.5, 0.278, num_sources=13) is True
    assert "correct" in capsys.readouterr().out


def test_ch09_read_scale_prediction_not_attempted(capsys):
    def stub():
        raise NotImplementedError

    assert ch09.check_read_scale_prediction(stub, 0.278, num_sources=13) is False
    assert "not attempted" in capsys.readouterr().out


@pytest.mark.parametrize("prediction, hint", [
    (13 ** 0.5, "That is the plain sum"),
    (1.0, "partly cancel"),
    (1 / 13, "add in quadrature"),
    (2.0, "is the mean of the 13 sources"),
    ("small", "one number"),
])
def test_ch09_read_scale_prediction_rejects_typical_mistakes(prediction, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ch09.check_read_scale_prediction(lambda: prediction, 0.278, num_sources=13)


# ---------------------------------------------------------------- chapter 07, the prediction

SAVING_SIZES = dict(cached_tokens=1024, latent_dim=512, nope_dim=128, value_dim=128)


def _counted_saving(cached_tokens, latent_dim, nope_dim, value_dim):
    """The step's multiply-adds per head, as FlopCounterMode counts them (softmax aside)."""
    rebuild = cached_tokens * (latent_dim * (nope_dim + value_dim) + nope_dim + value_dim)
    absorbed = latent_dim * (nope_dim + value_dim) + 2 * cached_tokens * latent_dim
    return rebuild / absorbed


def test_ch07_absorption_saving_accepts_the_limit(capsys):
    assert ch07.check_absorption_saving_prediction(lambda: 128, _counted_saving(**SAVING_SIZES), **SAVING_SIZES)
    assert "correct" in capsys.readouterr().out


def test_ch07_absorption_saving_not_attempted(capsys):
    def stub():
        raise NotImplementedError

    assert ch07.check_absorption_saving_prediction(stub, _counted_saving(**SAVING_SIZES), **SAVING_SIZES) is False
    assert "not attempted" in capsys.readouterr().out


@pytest.mark.parametrize("prediction, hint", [
    (1.0, "saves nothing"),                     # absorption taken for a mere reordering
    (1024.0, "still visits every cached token"),  # one rebuild per token, the absorbed step taken as free
    (8.0, "two d_c x d matrices"),              # the number of heads
    ("lots", "one number"),
])
def test_ch07_absorption_saving_rejects_typical_mistakes(prediction, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ch07.check_absorption_saving_prediction(lambda: prediction, _counted_saving(**SAVING_SIZES), **SAVING_SIZES)


# ---------------------------------------------------------------- chapter 08, prediction and transfer

def _situ_departure(beta):
    """The smallest x on a fine grid where SiTU falls more than 1 % below SiLU."""
    x = torch.linspace(0.001, 3 * beta, 30_001, dtype=torch.float64)
    gap = 1 - beta * torch.tanh(x / beta) / x
    return x[gap > 0.01][0].item()


def test_ch08_situ_departure_accepts_the_series_estimate(capsys):
    assert ch08.check_situ_departure_prediction(lambda: 10 * 0.03 ** 0.5, _situ_departure(10.0), beta=10.0)
    assert "correct" in capsys.readouterr().out


def test_ch08_situ_departure_not_attempted(capsys):
    def stub():
        raise NotImplementedError

    assert ch08.check_situ_departure_prediction(stub, _situ_departure(10.0), beta=10.0) is False
    assert "not attempted" in capsys.readouterr().out


@pytest.mark.parametrize("prediction, hint", [
    (10.0, "Too late"),                         # the cap taken to matter only near beta
    (0.5, "Too early"),
    ("soon", "one number"),
])
def test_ch08_situ_departure_rejects_typical_mistakes(prediction, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ch08.check_situ_departure_prediction(lambda: prediction, _situ_departure(10.0), beta=10.0)


def _dropped(indices, num_experts, capacity):
    load = torch.bincount(indices.reshape(-1), minlength=num_experts)
    return int((load - capacity).clamp_min(0).sum())


def test_ch08_dropped_assignments_accepts_the_solution(capsys):
    assert ch08.check_dropped_assignments(_dropped) is True
    assert "correct" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, hint", [
    (lambda i, e, c: int((torch.bincount(i.reshape(-1), minlength=e) - c).sum()), "does not take the overflow"),
    (lambda i, e, c: max(0, i.numel() - c * e), "does not take the overflow"),
    (lambda i, e, c: int((torch.bincount(i.reshape(-1), minlength=e) > c).sum()), "number of experts over"),
    (lambda i, e, c: _dropped(i, e, c) + 1, "dropped assignments"),
])
def test_ch08_dropped_assignments_rejects_typical_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ch08.check_dropped_assignments(wrong)
