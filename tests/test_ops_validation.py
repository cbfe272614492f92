"""Bad input to any op fails early with a ValueError that names the argument and what was expected."""

from __future__ import annotations

import pytest
import torch

from k3lite.ops import delta_rule, gated_delta_rule, kda, linear_attention

B, T, H, K, V = 2, 5, 3, 4, 6
MODULES = {"linear_attention": linear_attention, "delta_rule": delta_rule,
           "gated_delta_rule": gated_delta_rule, "kda": kda}
GATE_SHAPE = {"gated_delta_rule": (B, T, H), "kda": (B, T, H, K)}


def good_inputs(kind, *, steps=True):
    """Valid keyword inputs; ``steps=False`` drops the T axis (for ``step``)."""
    lead = (B, T, H) if steps else (B, H)
    inputs = {"q": torch.randn(*lead, K), "k": torch.randn(*lead, K), "v": torch.randn(*lead, V)}
    if kind in GATE_SHAPE:
        inputs["g"] = -torch.rand(*lead, *GATE_SHAPE[kind][3:])
    if kind != "linear_attention":
        inputs["beta"] = torch.rand(*lead)
    return inputs


def call(kind, form, inputs, **kwargs):
    """Call ``form`` with positional tensors in the API's order (q, k, v[, g][, beta])."""
    order = [name for name in ("q", "k", "v", "g", "beta") if name in good_inputs(kind)]
    return getattr(MODULES[kind], form)(*(inputs[name] for name in order), **kwargs)


def expect(argument, kind, form, inputs, **kwargs):
    with pytest.raises(ValueError, match=argument):
        call(kind, form, inputs, **kwargs)


def replaced(kind, steps=True, **changes):
    inputs = good_inputs(kind, steps=steps)
    inputs.update(changes)
    return inputs


FORMS = ["recurrent", "chunked"]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("kind", MODULES)
def test_valid_inputs_pass(kind, form):
    o, state = call(kind, form, good_inputs(kind))
    assert o.shape == (B, T, H, V) and state.shape == (B, H, K, V)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("kind", MODULES)
def test_wrong_rank_names_the_argument(kind, form):
    expect(r"q must have shape \[B, T, H, K\]", kind, form, replaced(kind, q=torch.randn(B, T, K)))
    expect(r"v must have shape \[B, T, H, V\]", kind, form, replaced(kind, v=torch.randn(B, T, H, V, 1)))


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("kind", MODULES)
def test_mismatched_sizes_name_the_argument(kind, form):
    for bad_k in (torch.randn(B + 1, T, H, K), torch.randn(B, T + 1, H, K),
                  torch.randn(B, T, H + 1, K), torch.randn(B, T, H, K + 1)):
        expect("k must have the same shape as q", kind, form, replaced(kind, k=bad_k))
    for bad_v in (torch.randn(B + 1, T, H, V), torch.randn(B, T - 1, H, V), torch.randn(B, T, H + 1, V)):
        expect("v must have shape", kind, form, replaced(kind, v=bad_v))


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("kind", MODULES)
def test_non_float_dtypes_are_refused(kind, form):
    expect("q must have a floating-point dtype", kind, form,
           replaced(kind, q=torch.randint(0, 3, (B, T, H, K))))
    expect("share one dtype", kind, form, replaced(kind, k=torch.randn(B, T, H, K, dtype=torch.float64)))
    if kind != "linear_attention":
        expect("beta must have a floating-point dtype", kind, form,
               replaced(kind, beta=torch.ones(B, T, H, dtype=torch.int64)))
    if kind in GATE_SHAPE:
        expect("g must have a floating-point dtype", kind, form,
               replaced(kind, g=torch.zeros(GATE_SHAPE[kind], dtype=torch.bool)))


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("kind", ["gated_delta_rule", "kda"])
def test_gates_must_be_log_space_and_shaped_per_head_or_channel(kind, form):
    positive = -torch.rand(GATE_SHAPE[kind])
    positive[0, 0, 0] = 0.1
    expect("g is a log-space decay and must be <= 0", kind, form, replaced(kind, g=positive))
    wrong = (B, T, H, K) if kind == "gated_delta_rule" else (B, T, H)
    expect(r"g must have shape \[B, T, H", kind, form, replaced(kind, g=-torch.rand(wrong)))
    call(kind, form, replaced(kind, g=torch.zeros(GATE_SHAPE[kind])))   # g = 0 (no decay) is fine


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("kind", ["delta_rule", "gated_delta_rule", "kda"])
def test_beta_must_lie_in_zero_to_two(kind, form):
    for bad in (-0.01, 2.01):
        beta = torch.rand(B, T, H)
        beta[1, 2, 0] = bad
        expect(r"beta must lie in \[0, 2\]", kind, form, replaced(kind, beta=beta))
    expect(r"beta must have shape \[B, T, H\]", kind, form, replaced(kind, beta=torch.rand(B, T, H, 1)))
    call(kind, form, replaced(kind, beta=torch.full((B, T, H), 2.0)))    # the edges are allowed
    call(kind, form, replaced(kind, beta=torch.zeros(B, T, H)))


@pytest.mark.parametrize("kind", MODULES)
def test_chunk_size_must_be_a_positive_integer(kind):
    for bad in (0, -4, 2.5, True, None):
        expect("chunk_size must be an integer >= 1", kind, "chunked", good_inputs(kind), chunk_size=bad)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("kind", MODULES)
def test_initial_state_must_be_b_h_k_v(kind, form):
    for shape in ((B, H, V, K), (B, H, K), (1, H, K, V)):
        expect(r"initial_state must have shape \[B, H, K, V\]", kind, form, good_inputs(kind),
               initial_state=torch.zeros(shape))
    expect("initial_state must have a floating-point dtype", kind, form, good_inputs(kind),
           initial_state=torch.zeros(B, H, K, V, dtype=torch.int32))


@pytest.mark.parametrize("kind", MODULES)
def test_step_checks_its_shapes_and_state(kind):
    inputs = good_inputs(kind, steps=False)
    call(kind, "step", inputs, state=torch.zeros(B, H, K, V))
    expect(r"state must have shape \[B, H, K, V\]", kind, "step", inputs, state=torch.zeros(B, H, K, V + 1))
    expect(r"q must have shape \[B, H, K\]", kind, "step", good_inputs(kind), state=torch.zeros(B, H, K, V))
    if kind != "linear_attention":
        expect(r"beta must lie in \[0, 2\]", kind, "step",
               replaced(kind, steps=False, beta=torch.full((B, H), 3.0)), state=torch.zeros(B, H, K, V))
    if kind in GATE_SHAPE:
        expect("g is a log-space decay", kind, "step",
               replaced(kind, steps=False, g=torch.ones(GATE_SHAPE[kind][:1] + GATE_SHAPE[kind][2:])),
               state=torch.zeros(B, H, K, V))


@pytest.mark.parametrize("kind", MODULES)
def test_unknown_backend_scale_and_empty_sequence(kind):
    expect("backend must be one of", kind, "chunked", good_inputs(kind), backend="cuda")
    expect("backend must be one of", kind, "step", good_inputs(kind, steps=False),
           state=torch.zeros(B, H, K, V), backend="gpu")
    expect("scale must be a number", kind, "chunked", good_inputs(kind), scale="0.5")
    empty = {name: x[:, :0] for name, x in good_inputs(kind).items()}
    expect(r"T >= 1", kind, "recurrent", empty)


def test_linear_attention_options():
    inputs = good_inputs("linear_attention")
    expect("feature_map must be one of", "linear_attention", "recurrent", inputs, feature_map="relu")
    expect("feature_map must be one of", "linear_attention", "parallel", inputs, feature_map="softmax")
    expect("initial_state cannot be combined with normalize", "linear_attention", "recurrent", inputs,
           feature_map="elu1", normalize=True, initial_state=torch.zeros(B, H, K, V))
    for form in ("recurrent", "parallel"):   # raw scores can sum to zero: the normaliser needs phi > 0
        expect(r"normalize=True needs feature_map='elu1' \(positive features\)", "linear_attention", form,
               inputs, normalize=True)
    expect("q must have a floating-point dtype", "linear_attention", "parallel",
           replaced("linear_attention", q=torch.ones(B, T, H, K, dtype=torch.int32)))


@pytest.mark.parametrize("kind", MODULES)
def test_empty_head_sizes_name_q_k_v_and_the_shapes(kind):
    no_keys = replaced(kind, q=torch.randn(B, T, H, 0), k=torch.randn(B, T, H, 0))
    if kind == "kda":
        no_keys["g"] = -torch.rand(B, T, H, 0)
    for form in FORMS:
        expect(r"q, k, v need a head size of at least 1 .*\(2, 5, 3, 0\)", kind, form, no_keys)
        expect(r"q, k, v need a head size of at least 1 .*v \(2, 5, 3, 0\)", kind, form,
               replaced(kind, v=torch.randn(B, T, H, 0)))
    no_keys_step = {name: x[:, 0] for name, x in no_keys.items()}
    expect(r"q, k, v need a head size of at least 1", kind, "step", no_keys_step, state=torch.zeros(B, H, 0, V))


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("kind", MODULES)
def test_scale_must_be_finite(kind, scale):
    for form in FORMS:
        expect("scale must be a finite number", kind, form, good_inputs(kind), scale=scale)
    expect("scale must be a finite number", kind, "step", good_inputs(kind, steps=False),
           state=torch.zeros(B, H, K, V), scale=scale)


def test_value_checks_skip_meta_tensors_but_keep_shape_checks():
    from k3lite import _validate

    dims = _validate.check_qkv(*(torch.empty(B, T, H, d, device="meta") for d in (K, K, V)))
    _validate.check_gate(torch.empty(B, T, H, K, device="meta"), dims, per_channel=True)   # no numbers to read
    _validate.check_beta(torch.empty(B, T, H, device="meta"), dims)
    with pytest.raises(ValueError, match="g must have shape"):
        _validate.check_gate(torch.empty(B, T, H, device="meta"), dims, per_channel=True)
    with pytest.raises(ValueError, match="beta must have shape"):
        _validate.check_beta(torch.empty(B, T, device="meta"), dims)
    # ... and keep checking values everywhere else.
    with pytest.raises(ValueError, match="g is a log-space decay"):
        _validate.check_gate(torch.ones(B, T, H, K), dims, per_channel=True)
    with pytest.raises(ValueError, match="beta must lie in"):
        _validate.check_beta(torch.full((B, T, H), 3.0), dims)


def test_value_checks_skip_while_compiling(monkeypatch):
    from k3lite import _validate

    dims = _validate.Dims(B, T, H, K, V)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    _validate.check_gate(torch.ones(B, T, H, K), dims, per_channel=True)    # values not read while tracing
    _validate.check_beta(torch.full((B, T, H), 3.0), dims)
    with pytest.raises(ValueError, match="beta must have shape"):
        _validate.check_beta(torch.full((B, T), 3.0), dims)


def test_a_layout_that_passed_is_looked_up_and_any_other_is_checked(monkeypatch):
    from k3lite import _validate

    monkeypatch.setattr(_validate, "_PASSED_LAYOUTS", {})
    good = good_inputs("kda")
    call("kda", "chunked", good)
    assert len(_validate._PASSED_LAYOUTS) == 1
    # The same layout again is a lookup: the shape checks are not run (a check that would fail proves it) ...
    with monkeypatch.context() as patch:
        patch.setattr(_validate, "check_qkv", lambda *args, **kwargs: pytest.fail("checked a known layout again"))
        call("kda", "chunked", good_inputs("kda"))
    # ... but the values are checked on every call, and every layout that differs meets the checks.
    expect("g is a log-space decay", "kda", "chunked", replaced("kda", g=torch.rand(B, T, H, K)))
    expect("k must have a floating-point dtype", "kda", "chunked", replaced("kda", k=good["k"].long()))
    expect(r"v must have shape", "kda", "chunked", replaced("kda", v=torch.randn(B, T, H + 1, V)))
    expect(r"g must have shape \[B, T, H, K\]", "kda", "chunked", replaced("kda", g=-torch.rand(B, T, H)))
    expect("q must be a torch.Tensor", "kda", "chunked", replaced("kda", q=good["q"].tolist()))
    assert len(_validate._PASSED_LAYOUTS) == 1    # a layout that failed is never kept


def test_the_passed_layouts_are_bounded(monkeypatch):
    from k3lite import _validate

    monkeypatch.setattr(_validate, "_PASSED_LAYOUTS", {})
    monkeypatch.setattr(_validate, "_PASSED_LAYOUTS_MAX", 3)
    for length in range(1, 6):
        delta_rule.chunked(*(torch.randn(1, length, 1, 2) for _ in range(3)), torch.rand(1, length, 1))
    assert len(_validate._PASSED_LAYOUTS) == 3
