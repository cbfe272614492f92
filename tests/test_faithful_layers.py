"""The bake-off's gated layers against the published ones (fla's Gated DeltaNet and KDA layers).

(i) each decay equals the published formula, written here independently, on random inputs and parameters;
(ii) at initialisation the retention exp(g) per token is spread out, not pinned at 1, and the loss reaches
A_log; (iii) the same holds for the models the bake-off builds from a mixer name at its width (d 64).

Why the gradient criterion: float32 carries about 7 significant digits, so an A_log gradient 1e-7 times the
projection weights' is rounding noise: the gate does not take part in the loss at all (the saturated
initialisation gave 1e-9 to 1e-19). Requiring at least 1e-3 of the mean |gradient| of the same layer's
q/k/v weights stays four orders of magnitude above that noise and far below what an unsaturated gate gets
(0.07 to 10 here), so it fails only for a gate that does not take part.
"""

from __future__ import annotations

import math

import pytest
import torch

from k3lite.bakeoff.models import (
    BUILTIN,
    DEFAULT_KDA_FORM,
    KDA_FORMS,
    VARIANTS,
    BakeoffMixer,
    build_model,
    check_mixer,
    gate_form,
    matched_mlp_hidden,
    num_parameters,
    softplus_inverse,
)
from k3lite.models.mixers import MixerConfig

D_MODEL, HEADS = 64, 2            # the bake-off's width and head count
SEEDS = range(5)
MIN_A_LOG_GRADIENT = 1e-3         # relative to the mean |dL/dW_qkv| of the same layer (module docstring)
LAYERS = {"gated_delta_rule": ("gated_delta_rule", {}), "kda_k3": ("kda", {"kda_form": "k3"}),
          "kda_kimi_linear": ("kda", {"kda_form": "kimi_linear"})}


def _layer(name, seed, d_model=D_MODEL, heads=HEADS):
    mechanism, options = LAYERS[name]
    torch.manual_seed(seed)
    return BakeoffMixer(MixerConfig(mechanism=mechanism, d_model=d_model, num_heads=heads, backend="torch",
                                    chunk_size=32), **options)


def _inputs(seed, batch=2, length=64, width=D_MODEL):
    """Unit-RMS activations, as the block's RMSNorm hands them to the mixer."""
    return torch.randn(batch, length, width, generator=torch.Generator().manual_seed(1000 + seed))


def _softplus(z):
    return torch.log1p(torch.exp(z))


def _sigmoid(z):
    return 1.0 / (1.0 + torch.exp(-z))


def _randomise_gate(layer, seed):
    """Parameters well away from initialisation, so both branches of every nonlinearity are exercised."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in layer.named_parameters():
            if name == "A_log" or name.startswith("decay."):
                p.copy_(torch.randn(p.shape, generator=gen) * (0.3 if name.endswith("weight") else 1.5))


# (i) the formulas -----------------------------------------------------------------------------------------

def published_gated_deltanet_gate(x, a_weight, dt_bias, A_log):
    """fla/layers/gated_deltanet.py + fla/ops/gated_delta_rule/gate.py: -exp(A_log) softplus(a_proj(x) + dt_bias)."""
    a = torch.einsum("btd,hd->bth", x.double(), a_weight.double()) + dt_bias.double()
    return -torch.exp(A_log.double()) * _softplus(a)


def published_kda_gate(x, down_weight, up_weight, dt_bias, A_log, form, lower_bound=-5.0):
    """fla/layers/kda.py + fla/ops/kda/gate.py (naive_kda_gate, naive_kda_lowerbound_gate) on f_proj(x)."""
    heads = A_log.numel()
    f = torch.einsum("btr,cr->btc", torch.einsum("btd,rd->btr", x.double(), down_weight.double()),
                     up_weight.double()) + dt_bias.double()
    f = f.reshape(*f.shape[:2], heads, -1)
    A = torch.exp(A_log.double()).reshape(heads, 1)
    if form == "kimi_linear":
        return -A * _softplus(f)
    return lower_bound * _sigmoid(A * f)


@pytest.mark.parametrize("randomised", [False, True])
def test_gated_deltanet_decay_is_the_published_formula(randomised):
    layer = _layer("gated_delta_rule", 0)
    if randomised:
        _randomise_gate(layer, 1)
    x = _inputs(0)
    expected = published_gated_deltanet_gate(x, layer.decay.weight, layer.decay.bias, layer.A_log)
    got = layer.log_decay(x)
    assert got.shape == (2, 64, HEADS) and got.dtype == torch.float32
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-6)
    assert (got <= 0).all()


@pytest.mark.parametrize("form", KDA_FORMS)
@pytest.mark.parametrize("randomised", [False, True])
def test_kda_decay_is_the_published_formula(form, randomised):
    layer = _layer(f"kda_{form}", 0)
    if randomised:
        _randomise_gate(layer, 2)
    x = _inputs(1)
    expected = published_kda_gate(x, layer.decay.down.weight, layer.decay.up.weight, layer.decay.bias,
                                  layer.A_log, form)
    got = layer.log_decay(x)
    head_dim = D_MODEL // HEADS
    assert got.shape == (2, 64, HEADS, head_dim)
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-6)
    if form == "k3":
        assert got.min() >= -5.0 and got.max() <= 0.0
    # fla's f_proj: hidden -> head_v_dim -> key_dim, no bias (the bias here is dt_bias, one per channel)
    assert layer.decay.down.weight.shape == (head_dim, D_MODEL)
    assert layer.decay.up.weight.shape == (HEADS * head_dim, head_dim)
    assert layer.decay.bias.shape == (HEADS * head_dim,) and layer.A_log.shape == (HEADS,)


def test_the_kda_forms_differ_only_where_the_references_differ():
    k3, kimi = _layer("kda_k3", 0), _layer("kda_kimi_linear", 0)
    assert torch.equal(k3.A_log, torch.zeros(HEADS))                  # fla: zeros when safe_gate is on
    assert k3.out_gate.weight.shape == (D_MODEL, D_MODEL) and k3.out_gate.bias is None   # K3: full rank
    down, up = kimi.out_gate                                          # fla's g_proj: low rank, bias on up
    assert down.weight.shape == (D_MODEL // HEADS, D_MODEL) and down.bias is None
    assert up.weight.shape == (D_MODEL, D_MODEL // HEADS) and up.bias.shape == (D_MODEL,)


def _softplus_inverse_reference(dt):
    """log(e^dt - 1), the plain form of softplus^-1."""
    return math.log(math.expm1(dt))


def test_initialisation_follows_the_published_recipes():
    """A ~ U(0, 16) for Gated DeltaNet, U(1, 16) for Kimi Linear; dt = softplus(dt_bias) log-uniform in
    [1e-3, 1e-1]. Many heads, so the draws fill their ranges."""
    wide = dict(d_model=256, heads=128)
    gdn, kimi, k3 = (_layer(name, 3, **wide) for name in ("gated_delta_rule", "kda_kimi_linear", "kda_k3"))
    A_gdn, A_kimi = gdn.A_log.exp(), kimi.A_log.exp()
    assert 0.0 <= A_gdn.min() < 1.0 and 15.0 < A_gdn.max() <= 16.0   # reaches below 1: U(0, 16), not U(1, 16)
    assert 1.0 <= A_kimi.min() < 1.5 and 15.0 < A_kimi.max() <= 16.0
    for dt_bias in (gdn.decay.bias, kimi.decay.bias, k3.decay.bias):
        dt = torch.nn.functional.softplus(dt_bias.detach().double())
        assert dt.min() >= 1e-3 * (1 - 1e-5) and dt.max() <= 1e-1 * (1 + 1e-5)
        log_dt = dt.log()
        # log-uniform: a quarter of the draws per quarter of [log 1e-3, log 1e-1]
        quarters = torch.histc(log_dt, bins=4, min=math.log(1e-3), max=math.log(1e-1)) / log_dt.numel()
        assert (quarters > 0.15).all() and (quarters < 0.35).all(), quarters
    for dt in (1e-4, 1e-3, 1e-2, 1e-1):
        assert softplus_inverse(torch.tensor(dt, dtype=torch.float64)).item() == pytest.approx(
            _softplus_inverse_reference(dt), rel=1e-12)


# (ii) retention and gradient at initialisation, one layer ---------------------------------------------------

def _retention_and_gradient(layer, seed):
    x = _inputs(seed)
    retention = layer.log_decay(x).exp().detach().flatten()
    out = layer(x)
    target = torch.randn(out.shape, generator=torch.Generator().manual_seed(2000 + seed))
    torch.nn.functional.mse_loss(out, target).backward()
    relative = layer.A_log.grad.abs() / layer.qkv.weight.grad.abs().mean()
    return retention, relative


def _assert_not_degenerate(retention, relative):
    median = retention.median().item()
    low, high = torch.quantile(retention, torch.tensor([0.1, 0.9])).tolist()
    assert 0.1 < median < 0.99, f"median retention {median:.4f}"
    assert high - low > 0.05, f"retention 10-90% range {low:.4f}..{high:.4f} is a point mass"
    assert relative.min() > MIN_A_LOG_GRADIENT, f"A_log gradient / W_qkv gradient = {relative.tolist()}"


@pytest.mark.parametrize("name", LAYERS)
@pytest.mark.parametrize("seed", SEEDS)
def test_initial_retention_is_spread_and_A_log_gets_gradient(name, seed):
    _assert_not_degenerate(*_retention_and_gradient(_layer(name, seed), seed))


def test_the_checks_catch_the_saturated_initialisation():
    """The previous bake-off layer: K3's bounded gate on Gated DeltaNet with Mamba's A in [1, 16]. The sigmoid
    saturates (A * dt_bias in [-110, -2.3]), retention starts at 1 and A_log gets no gradient."""
    layer = _layer("gated_delta_rule", 0)
    with torch.no_grad():
        layer.A_log.copy_(torch.empty(HEADS).uniform_(1.0, 16.0, generator=torch.Generator().manual_seed(0)).log())
    layer.gate_form = "k3"
    retention, relative = _retention_and_gradient(layer, 0)
    assert retention.median() >= 0.99 and relative.max() < MIN_A_LOG_GRADIENT
    with pytest.raises(AssertionError):
        _assert_not_degenerate(retention, relative)


# (iii) the models the bake-off builds -----------------------------------------------------------------------

def _model_retention_and_gradient(mixer, seed=0, vocab_size=512):
    torch.manual_seed(seed)
    model = build_model(mixer, vocab_size=vocab_size, d_model=D_MODEL, num_layers=4, backend="torch")
    ids = torch.randint(0, vocab_size, (2, 64), generator=torch.Generator().manual_seed(seed))
    gated = [block.mixer for block in model.blocks if hasattr(block.mixer, "A_log")]
    seen = {}
    hooks = [m.register_forward_pre_hook(lambda module, args: seen.__setitem__(module, args[0])) for m in gated]
    logits = model(ids)
    for hook in hooks:
        hook.remove()
    torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()).backward()
    retention = torch.cat([m.log_decay(seen[m]).exp().detach().flatten() for m in gated])
    relative = torch.cat([m.A_log.grad.abs() / m.qkv.weight.grad.abs().mean() for m in gated])
    return gated, retention, relative


@pytest.mark.parametrize("mixer", ["gated_delta_rule", "kda", "k3_hybrid", *VARIANTS])
def test_bakeoff_models_start_with_the_gate_in_use(mixer):
    gated, retention, relative = _model_retention_and_gradient(mixer)
    assert len(gated) == (3 if mixer == "k3_hybrid" else 4)
    assert retention.median() < 0.99, f"{mixer}: median initial retention {retention.median():.4f}"
    assert (retention >= 0.99).float().mean() < 0.5
    assert relative.min() > MIN_A_LOG_GRADIENT, f"{mixer}: {relative.tolist()}"


def test_bakeoff_kda_uses_k3s_form_by_default():
    assert DEFAULT_KDA_FORM == "k3"
    for mixer in ("kda", "k3_hybrid", "k3lite.bakeoff.variants:gated_delta_rule_in_kda_layer"):
        layers = [b.mixer for b in build_model(mixer, vocab_size=40, d_model=16).blocks if hasattr(b.mixer, "A_log")]
        assert layers and all(m.gate_form == "k3" and torch.equal(m.A_log, torch.zeros(2)) for m in layers)
        assert gate_form(mixer) == "lower bound -5, A_log = 0"
    assert gate_form("gated_delta_rule") == "softplus, A ~ U(0, 16)" and gate_form("delta_rule") is None
    assert gate_form("kda_kimi_linear") == "softplus, A ~ U(1, 16)"


def test_variants_are_built_by_name_and_matched():
    for mixer in VARIANTS:
        check_mixer(mixer)
        hidden = matched_mlp_hidden(mixer, vocab_size=80, d_model=32)
        count = num_parameters(build_model(mixer, vocab_size=80, d_model=32, mlp_hidden=hidden))
        largest = max(num_parameters(build_model(m, vocab_size=80, d_model=32,
                                                 mlp_hidden=matched_mlp_hidden(m, vocab_size=80, d_model=32)))
                      for m in BUILTIN)
        assert abs(count / largest - 1) < 0.01
    # the sigmoid-gate variant is Gated DeltaNet's layer with only the output activation swapped
    ids = torch.randint(0, 40, (1, 12), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    silu = build_model("gated_delta_rule", vocab_size=40, d_model=16, backend="torch")
    torch.manual_seed(0)
    sigmoid = build_model("gated_delta_rule_sigmoid_gate", vocab_size=40, d_model=16, backend="torch")
    assert all(torch.equal(a, b) for a, b in zip(silu.state_dict().values(), sigmoid.state_dict().values()))
    assert not torch.allclose(silu(ids), sigmoid(ids))
    # the unit-A variant is Gated DeltaNet's layer with only the starting A_log changed: 0 instead of log U(0, 16)
    torch.manual_seed(0)
    unit_a = build_model("gated_delta_rule_unit_a", vocab_size=40, d_model=16, backend="torch")
    for (name, a), b in zip(silu.state_dict().items(), unit_a.state_dict().values()):
        if name.endswith("A_log"):
            assert torch.equal(b, torch.zeros_like(b)) and not torch.equal(a, b)
        else:
            assert torch.equal(a, b), name
    assert gate_form("gated_delta_rule_unit_a") == "softplus, A = 1"


def test_bad_layer_options_are_rejected():
    config = MixerConfig(mechanism="kda", d_model=16, num_heads=2)
    with pytest.raises(ValueError, match="kda_form"):
        BakeoffMixer(config, kda_form="mamba")
    with pytest.raises(ValueError, match="output_gate"):
        BakeoffMixer(config, output_gate="tanh")
    with pytest.raises(ValueError, match="A_log_init"):
        BakeoffMixer(config, A_log_init="zeros")   # KDA's A_log has its own form's initialisation
    with pytest.raises(ValueError, match="mixer"):
        check_mixer("kda_mamba")


def test_every_variant_has_a_label_and_a_colour():
    from k3lite.bakeoff.models import VARIANTS
    from k3lite.bakeoff.plots import COLORS, LABELS

    assert all(name in LABELS and name in COLORS for name in VARIANTS)


def test_trained_retention_groups_each_runs_layers_by_cell():
    from k3lite.bakeoff.plots import trained_retention

    runs = {"a": {"mixer": "kda", "d_model": 64, "metrics": {"retention_mean": [0.9, 0.8]}},
            "b": {"mixer": "kda", "d_model": 64, "metrics": {"retention_mean": [0.7, 0.95]}},
            "c": {"mixer": "kda", "d_model": 128, "metrics": {"retention_mean": [0.5]}},
            "d": {"mixer": "softmax", "d_model": 64, "metrics": {"accuracy": 1.0}}}
    assert trained_retention(runs) == {("kda", 64): [[0.9, 0.8], [0.7, 0.95]], ("kda", 128): [[0.5]]}


def test_saturated_recipe_retention_is_the_bounded_gate_at_its_softplus_initialisation():
    # Independently: exp(-5 sigmoid(A softplus^-1(dt))), A ~ U(1, 16), dt log-uniform in [1e-3, 1e-1]; the product
    # A dt_bias lies in [16 log(expm1(1e-3)), log(expm1(1e-1))] = [-110.5, -2.25], so the retention is at least
    # exp(-5 sigmoid(-2.25)) = 0.59 and almost every draw is above 0.999.
    from k3lite.bakeoff.plots import saturated_recipe_retention

    state = torch.random.get_rng_state()
    retention = saturated_recipe_retention(draws=20_000, seed=3)
    assert torch.equal(state, torch.random.get_rng_state())   # the global generator is left as it was
    floor = math.exp(-5 / (1 + math.exp(-math.log(math.expm1(0.1)))))
    assert retention.min() >= floor - 1e-6 and retention.max() <= 1.0
    assert retention.median() > 0.999 and (retention > 0.999).float().mean() > 0.85
    assert torch.equal(retention, saturated_recipe_retention(draws=20_000, seed=3))


def test_readers_keep_the_published_layers_runs_apart_from_the_earlier_ones():
    from k3lite.bakeoff.plots import final_cells, trained_retention

    def record(key, seed, metric, retention, published):
        r = {"key": key, "task": "mqar16", "mixer": "kda", "d_model": 64, "lr": 3e-3, "seed": seed, "steps": 2000,
             "metric": metric, "metrics": {"accuracy": metric, "retention_mean": retention}}
        return {**r, "evaluations": [{"step": 2000, "accuracy": metric}]} if published else r

    runs = {"old0": record("old0", 0, 0.2, [0.999], False), "old1": record("old1", 1, 0.3, [0.998], False),
            "new0": record("new0", 0, 0.95, [0.7], True)}
    assert [r["key"] for r in final_cells(runs, layers="earlier")["mqar16", 64, "kda"]] == ["old0", "old1"]
    assert [r["key"] for r in final_cells(runs, layers="published")["mqar16", 64, "kda"]] == ["new0"]
    # latest: one published seed does not displace two earlier ones (a grid still being trained) ...
    assert [r["key"] for r in final_cells(runs)["mqar16", 64, "kda"]] == ["old0", "old1"]
    finished = {**runs, "new1": record("new1", 1, 0.97, [0.6], True)}
    # ... as many published seeds at one rate do
    assert [r["key"] for r in final_cells(finished)["mqar16", 64, "kda"]] == ["new0", "new1"]
    # a rate chosen by the published sweep does not pick among the earlier runs it did not displace
    choice = {"c": {"source_task": "mqar16", "d_model": 64, "mixer": "kda", "choice": 1e-2, "verdict": "chosen"}}
    earlier_at_two_rates = {**runs, "old2": {**record("old2", 2, 0.4, [0.99], False), "lr": 1e-2}}
    assert [r["key"] for r in final_cells(earlier_at_two_rates, choice)["mqar16", 64, "kda"]] == ["old0", "old1"]
    assert trained_retention(runs) == {("kda", 64): [[0.999], [0.998]]}
    assert trained_retention(runs, "published") == {("kda", 64): [[0.7]]}
    with pytest.raises(ValueError, match="layers must be one of"):
        trained_retention(runs, "faithful")


def test_a_published_cell_is_final_only_at_the_rate_its_familys_sweep_chose():
    # One sweep seed per rate is not a result at one rate: before its choice is stored, a cell has no final runs.
    from k3lite.bakeoff.plots import final_cells

    def record(task, lr, seed, metric, phase="seeds", mixer="kda", published=True):
        r = {"key": f"{task}{mixer}{lr}{seed}{published}", "task": task, "mixer": mixer, "d_model": 64, "lr": lr,
             "seed": seed, "steps": 2000, "metric": metric, "phase": phase}
        return {**r, "evaluations": [{"step": 2000, "accuracy": metric}]} if published else r

    def choice(mixer, lr):
        verdict = "chosen" if lr else "all at chance"
        return {f"mqar16{mixer}": {"source_task": "mqar16", "d_model": 64, "mixer": mixer, "choice": lr,
                                   "verdict": verdict}}

    sweep = [record("mqar16", lr, 0, 0.9 + lr, "lr") for lr in (1e-3, 3e-3, 1e-2)]
    earlier = [record("mqar16", 3e-3, seed, 0.5, published=False) for seed in range(3)]
    runs = {r["key"]: r for r in sweep + earlier}
    other = choice("softmax", 3e-3)                     # a store with choices, none of them this cell's yet
    assert ("mqar16", 64, "kda") not in final_cells(runs, other, layers="published")
    assert ["evaluations" in r for r in final_cells(runs, other)["mqar16", 64, "kda"]] == [False] * 3   # latest
    seeds = [record("mqar16", 3e-3, seed, 0.95) for seed in range(1, 5)] + [record("mqar32", 3e-3, s, 0.8)
                                                                              for s in range(5)]
    seeds += [record("mqar32", 1e-2, seed, 0.99) for seed in range(6)]   # not the family's chosen rate
    runs.update({r["key"]: r for r in seeds})
    cells = final_cells(runs, {**other, **choice("kda", 3e-3)}, layers="published")
    assert [(r["lr"], r["seed"]) for r in cells["mqar16", 64, "kda"]] == [(3e-3, s) for s in range(5)]
    assert {r["lr"] for r in cells["mqar32", 64, "kda"]} == {3e-3}   # MQAR-32 takes MQAR-16's rate
    hopeless = final_cells(runs, {**other, **choice("kda", None)})
    assert ("mqar16", 64, "kda") not in hopeless   # a sweep all at chance displaces the earlier cell too
    only_earlier = {r["key"]: r for r in (record("mqar64", 3e-3, s, 0.5, published=False) for s in range(3))}
    runs.update(only_earlier)                        # a family task where the seeds phase never ran
    assert ("mqar64", 64, "kda") not in final_cells(runs, {**other, **choice("kda", None)})
    assert ("mqar64", 64, "kda") in final_cells(runs, {**other, **choice("kda", None)}, layers="earlier")
    assert ("mqar64", 64, "kda") in final_cells(runs, {**other, **choice("kda", 3e-3)})   # earlier, until seeds


def test_sweep_metrics_lists_each_rates_seeds_in_order():
    from k3lite.bakeoff.plots import sweep_metrics

    def record(seed, lr, metric, status=None):
        r = {"key": f"{seed}{lr}", "task": "mqar16", "mixer": "kda", "d_model": 64, "lr": lr, "seed": seed,
             "metric": metric, "evaluations": []}
        return {**r, "status": status} if status else r

    runs = {str(i): r for i, r in enumerate([record(1, 3e-3, 0.5), record(0, 3e-3, 0.25), record(0, 1e-3, 0.125),
                                             record(1, 1e-3, None, "diverged")])}
    assert sweep_metrics(runs, "mqar16", 64) == {"kda": {1e-3: [0.125, None], 3e-3: [0.25, 0.5]}}
    assert sweep_metrics(runs, "mqar16", 64, layers="earlier") == {}
    assert sweep_metrics(runs, "mqar16", 128) == {}


def _budget_record(steps, seed, metric, lr=3e-3):
    return {"key": f"{steps}-{seed}-{lr}", "task": "mqar16", "mixer": "kda", "d_model": 64, "lr": lr, "seed": seed,
            "steps": steps, "metric": metric, "evaluations": [{"step": steps, "accuracy": metric}]}


def test_sweep_metrics_never_mixes_step_budgets():
    # Seeds are keyed by number: without the guard the 4000-step seed 0 would silently replace the 2000-step one.
    from k3lite.bakeoff.plots import sweep_metrics

    records = [_budget_record(2000, 0, 0.25), _budget_record(2000, 1, 0.5), _budget_record(4000, 0, 0.75)]
    runs = {r["key"]: r for r in records}
    with pytest.raises(ValueError, match=r"2000, 4000.*steps="):
        sweep_metrics(runs, "mqar16", 64)
    assert sweep_metrics(runs, "mqar16", 64, steps=2000) == {"kda": {3e-3: [0.25, 0.5]}}
    assert sweep_metrics(runs, "mqar16", 64, steps=4000) == {"kda": {3e-3: [0.75]}}
    assert sweep_metrics(runs, "mqar16", 64, steps=1000) == {}


def test_sweep_table_tells_a_cell_at_chance_from_an_unfinished_sweep(capsys):
    # "every rate at chance" is a finding and "no final cell yet" is missing data: the table must not confuse them.
    from k3lite.bakeoff.plots import print_sweep_table

    def record(mixer, lr, seed, metric):
        return {**_budget_record(2000, seed, metric, lr=lr), "key": f"{mixer}-{lr}-{seed}", "mixer": mixer}

    records = [record("kda", lr, seed, metric) for lr, seed, metric in
               ((1e-3, 0, 0.5), (1e-3, 1, 0.6), (3e-3, 0, 0.95), (3e-3, 1, 0.97), (3e-3, 2, 0.99))]
    records += [record("delta_rule", lr, seed, 0.02) for lr in (1e-3, 3e-3) for seed in (0, 1)]
    records += [record("softmax", 1e-3, 0, 0.9)]
    records += [record("delta_rule", 3e-3, 2, 0.99)]   # a later seed: not what the rate choice was made from
    records += [record("kda_state_decay", lr, seed, 0.02) for lr in (1e-3, 3e-3) for seed in (0, 1)]
    runs = {r["key"]: r for r in records}
    cells = {("mqar16", 64, "kda"): [r for r in records if r["mixer"] == "kda" and r["lr"] == 3e-3]}

    def choice(mixer, verdict, lr):
        return {"source_task": "mqar16", "d_model": 64, "mixer": mixer, "verdict": verdict, "choice": lr}

    # the verdict is the stored choice's: a sweep at chance whose choice is not stored yet is not a finding
    choices = {"a": choice("kda", "chosen", 3e-3), "b": choice("delta_rule", "all at chance", None)}
    sweep = print_sweep_table(runs, cells, "mqar16", ("kda", "delta_rule", "softmax", "kda_state_decay"),
                              steps=2000, choices=choices)
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert sweep["kda"] == {1e-3: [0.5, 0.6], 3e-3: [0.95, 0.97, 0.99]}
    assert "0.95 0.97 " in rows["KDA"] and "0.99" not in rows["KDA"].split("   lr 0.003")[0]   # two sweep seeds
    assert "lr 0.003: 3/3" in rows["KDA"] and "mean 0.970 ± 0.020" in rows["KDA"]
    assert rows["DeltaNet"].endswith("every rate at chance: no final cell")
    assert rows["softmax"].endswith("no final cell yet")
    assert rows["kda_state_decay"].endswith("no final cell yet")
    print_sweep_table(runs, cells, "mqar32", ("delta_rule",), steps=2000, choices=choices)   # MQAR-16's sweep decides
    assert capsys.readouterr().out.splitlines()[1].endswith("every rate at chance: no final cell")
    print_sweep_table(runs, cells, "mqar16", ("kda",), steps=2000, choices=choices, sweep_seeds=None,
                      labels={"kda": "per channel"})
    assert "0.95 0.97 0.99" in capsys.readouterr().out


def test_lr_sweep_figure_draws_one_budget_and_the_mean_over_seeds():
    # The figure is the evidence of a choice: one budget per line, and the line is the seeds' mean, not seed 0.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from k3lite.bakeoff.plots import plot_lr_sweep

    records = [_budget_record(2000, 0, 0.25), _budget_record(2000, 1, 0.75), _budget_record(4000, 0, 1.0),
               _budget_record(2000, 0, 0.0, lr=1e-3), _budget_record(2000, 1, 0.5, lr=1e-3)]
    runs = {r["key"]: {**r, "metric_name": "accuracy"} for r in records}
    fig, ax = plt.subplots()
    plot_lr_sweep(runs, "mqar16", 64, ax, steps=2000)
    (line,) = ax.get_lines()
    assert list(line.get_xdata()) == [1e-3, 3e-3] and list(line.get_ydata()) == [0.25, 0.5]
    dots = sorted(float(y) for collection in ax.collections for y in collection.get_offsets()[:, 1])
    assert dots == [0.0, 0.25, 0.5, 0.75]   # every seed of the 2000-step budget, none of the 4000-step run
    assert line.get_label() == "KDA"
    plt.close(fig)
    fig, ax = plt.subplots()
    plot_lr_sweep(runs, "mqar16", 64, ax, steps=2000, labels={"kda": "one decay per channel"})
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["one decay per channel"]   # as the chapter names it
    plt.close(fig)


def test_final_cells_at_a_chosen_rate_run_at_two_budgets_takes_the_group_with_more_seeds():
    # Both budgets ran at the chosen rate: the 2000-step group has more seeds and wins, although the 4000-step
    # group's mean is higher; its runs never join the 2000-step group (steps is part of the set-up).
    from k3lite.bakeoff.plots import final_cells

    records = [_budget_record(2000, s, 0.5) for s in range(6)] + [_budget_record(4000, s, 0.9) for s in range(5)]
    runs = {r["key"]: r for r in records}
    choices = {"c": {"source_task": "mqar16", "d_model": 64, "mixer": "kda", "choice": 3e-3}}
    for cells in (final_cells(runs, choices), final_cells(runs, choices, layers="published")):
        cell = cells["mqar16", 64, "kda"]
        assert [r["steps"] for r in cell] == [2000] * 6 and sorted(r["seed"] for r in cell) == list(range(6))
