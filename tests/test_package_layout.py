"""One ShortConv, one RMSNorm, one list of the recurrent kinds, and models that did not change by getting them.

The MQAR models (``k3lite.models.mixers``) and the bake-off models (``k3lite.bakeoff.models``) were trained, and
their stored results produced, with ``torch.nn.RMSNorm`` and with a short convolution built on ``nn.Conv1d``; the
KDA layer (and K3) with a convolution over explicit taps. Each test of the second part builds a model the new way
and again with the old modules put back (``nn.RMSNorm`` and the pre-clean-up convolutions, copied verbatim below),
from one seed, and asks for the same parameter names and bit-identical outputs and gradients.
"""

from __future__ import annotations

import ast
import pathlib

import pytest
import torch
import torch.nn.functional as F
from torch import nn

# k3lite.kernels first: it switches on the Triton interpreter before triton is imported
from k3lite import kernels, ops
from k3lite.bakeoff import models as bakeoff_models
from k3lite.bakeoff import plots
from k3lite.layers import conv, kda_layer, norms
from k3lite.models import mixers

PACKAGE = pathlib.Path(ops.__file__).resolve().parents[1]


def _sources():
    return {path: path.read_text() for path in sorted(PACKAGE.rglob("*.py"))}


# ----- the duplicates are gone ---------------------------------------------------------------------------------

def test_one_short_conv_and_one_rms_norm_class():
    defined = {}
    for path, text in _sources().items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.name in ("ShortConv", "RMSNorm"):
                defined.setdefault(node.name, []).append(path.relative_to(PACKAGE).as_posix())
    assert defined == {"ShortConv": ["layers/conv.py"], "RMSNorm": ["layers/norms.py"]}
    assert mixers.ShortConv is conv.ShortConv and kda_layer.ShortConv is conv.ShortConv
    assert mixers.RMSNorm is norms.RMSNorm


def test_no_module_builds_its_own_norm_or_convolution():
    """``nn.RMSNorm`` and ``nn.Conv1d`` appear only inside the one RMSNorm and the one ShortConv."""
    for path, text in _sources().items():
        relative = path.relative_to(PACKAGE).as_posix()
        if relative != "layers/conv.py":
            assert "nn.Conv1d(" not in text, relative
        assert "nn.RMSNorm(" not in text, relative


def test_one_list_of_recurrent_kinds():
    kinds = ("linear_attention", "delta_rule", "gated_delta_rule", "kda")
    assert ops.KINDS == kinds and tuple(ops.RECURRENT_KINDS) == kinds
    for kind, entry in ops.RECURRENT_KINDS.items():
        assert entry.module.KIND == kind and callable(entry.module.chunked)
        assert plots.LABELS[kind] == entry.label
    assert kernels.KINDS is ops.KINDS
    assert mixers.RECURRENT is ops.KINDS and mixers.MECHANISMS == ("softmax", *ops.KINDS)
    assert bakeoff_models.BUILTIN == ("softmax", *ops.KINDS, "k3_hybrid")
    # ...and nowhere else is the list spelled out: no tuple or list literal holding all four names (__all__ aside).
    for path, text in _sources().items():
        tree = ast.parse(text)
        exports = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Assign)
                   and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Tuple, ast.List)) and id(node) not in exports:
                names = {e.value for e in node.elts if isinstance(e, ast.Constant)}
                assert not set(kinds) <= names, f"{path.relative_to(PACKAGE)}:{node.lineno} lists the kinds again"


def test_one_pre_norm_block_for_the_mqar_and_bake_off_models():
    assert bakeoff_models.Block is mixers.Block
    mqar = mixers.build("kda", num_layers=1)
    bake = bakeoff_models.build_model("kda", vocab_size=32, d_model=16, num_layers=1, backend="torch")
    assert type(mqar.blocks[0]) is type(bake.blocks[0]) is mixers.Block


# ----- the old construction path against the new ---------------------------------------------------------------

class OldMixerShortConv(nn.Module):
    """``k3lite.models.mixers.ShortConv`` before the clean-up, verbatim (returning a tuple, as ShortConv does)."""

    def __init__(self, channels: int, conv_size: int):
        super().__init__()
        self.conv_size = conv_size
        self.conv = nn.Conv1d(channels, channels, conv_size, groups=channels, bias=False)

    def forward(self, x):
        padded = F.pad(x.transpose(1, 2), (self.conv_size - 1, 0))
        return self.conv(padded).transpose(1, 2), None


class OldKDAShortConv(nn.Module):
    """``k3lite.layers.kda_layer.ShortConv`` before the clean-up, verbatim."""

    def __init__(self, channels: int, kernel_size: int = 4):
        super().__init__()
        self.kernel_size = kernel_size
        self.weight = nn.Parameter(torch.empty(channels, kernel_size))
        bound = 1.0 / kernel_size ** 0.5
        nn.init.uniform_(self.weight, -bound, bound)

    def forward(self, x, state=None):
        batch, _, channels = x.shape
        history = self.kernel_size - 1
        if state is None:
            state = x.new_zeros(batch, channels, history)
        padded = torch.cat([state.to(x.dtype), x.transpose(1, 2)], dim=-1)
        windows = padded.unfold(-1, self.kernel_size, 1)
        y = (windows * self.weight.to(x.dtype)[:, None, :]).sum(-1)
        return F.silu(y).transpose(1, 2), padded[..., padded.shape[-1] - history:]


def _seeded(make, seed=0):
    torch.manual_seed(seed)
    return make()


def _same_module(new, old, *inputs):
    assert list(new.state_dict()) == list(old.state_dict())
    for (name, a), b in zip(new.state_dict().items(), old.state_dict().values()):
        assert torch.equal(a, b), name
    outputs = []
    for module in (new, old):
        module.zero_grad()
        leaves = [x.detach().clone().requires_grad_(x.is_floating_point()) for x in inputs]
        out = module(*leaves)
        out = out[0] if isinstance(out, tuple) else out
        out.float().square().sum().backward()
        outputs.append((out.detach(), [p.grad for p in module.parameters()], [x.grad for x in leaves]))
    (out_new, grads_new, input_grads_new), (out_old, grads_old, input_grads_old) = outputs
    assert out_new.dtype == out_old.dtype and torch.equal(out_new, out_old)
    assert all(torch.equal(a, b) for a, b in zip(grads_new, grads_old))
    assert all(torch.equal(a, b) for a, b in zip(input_grads_new, input_grads_old))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_short_conv_forms_are_the_old_convolutions(dtype):
    x = torch.randn(2, 13, 12, dtype=dtype)
    new = _seeded(lambda: conv.ShortConv(12, 4, silu=False, form="conv1d")).to(dtype)
    _same_module(new, _seeded(lambda: OldMixerShortConv(12, 4)).to(dtype), x)
    new = _seeded(lambda: conv.ShortConv(12, 4))
    old = _seeded(lambda: OldKDAShortConv(12, 4))
    _same_module(new, old, x)
    state = torch.randn(2, 12, 3, dtype=dtype)
    (y_new, s_new), (y_old, s_old) = new(x[:, :1], state), old(x[:, :1], state)
    assert torch.equal(y_new, y_old) and torch.equal(s_new, s_old)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_rms_norm_without_upcast_is_torch_rms_norm(dtype):
    new = norms.RMSNorm(12, eps=None, upcast=False)
    old = nn.RMSNorm(12)
    with torch.no_grad():
        for p in (new.weight, old.weight):
            p.copy_(torch.linspace(0.5, 1.5, 12))
    _same_module(new.to(dtype), old.to(dtype), torch.randn(3, 5, 12, dtype=dtype) * 4)
    with pytest.raises(ValueError, match="eps=None"):
        norms.RMSNorm(12, eps=None)


def test_short_conv_forms_compute_one_convolution_and_both_stream():
    x = torch.randn(2, 11, 6)
    taps = _seeded(lambda: conv.ShortConv(6, 4, silu=False))
    conv1d = conv.ShortConv(6, 4, silu=False, form="conv1d")
    with torch.no_grad():
        conv1d.conv.weight.copy_(taps.weight[:, None, :])
    for module in (taps, conv1d):
        full, _ = module(x)
        first, state = module(x[:, :5])
        pieces = [first]
        for t in range(5, 11):
            y, state = module(x[:, t:t + 1], state)
            pieces.append(y)
        torch.testing.assert_close(torch.cat(pieces, 1), full, atol=1e-6, rtol=0)
    torch.testing.assert_close(taps(x)[0], conv1d(x)[0], atol=1e-6, rtol=0)


@pytest.fixture
def old_modules(monkeypatch):
    """Build the MQAR and bake-off models with nn.RMSNorm and the old nn.Conv1d ShortConv, as before the clean-up."""
    def put_back():
        old_norm = lambda size: nn.RMSNorm(size)  # noqa: E731
        monkeypatch.setattr(mixers, "norm", old_norm)
        monkeypatch.setattr(bakeoff_models, "norm", old_norm)
        monkeypatch.setattr(mixers, "short_conv", OldMixerShortConv)
    return put_back


def _forward_and_grads(model, ids):
    logits = model(ids)
    logits.square().mean().backward()
    return list(model.state_dict()), model.state_dict(), logits.detach(), {
        n: p.grad for n, p in model.named_parameters()}


def _assert_identical(new, old):
    keys_new, state_new, logits_new, grads_new = new
    keys_old, state_old, logits_old, grads_old = old
    assert keys_new == keys_old
    assert all(torch.equal(state_new[k], state_old[k]) for k in keys_new)
    assert torch.equal(logits_new, logits_old)
    assert list(grads_new) == list(grads_old) and all(torch.equal(grads_new[n], grads_old[n]) for n in grads_new)


@pytest.mark.parametrize("mechanism", mixers.MECHANISMS)
def test_mqar_models_are_bit_identical_to_the_old_construction(mechanism, old_modules):
    ids = torch.randint(0, 32, (2, 11), generator=torch.Generator().manual_seed(1))
    build = lambda: mixers.build(mechanism, d_model=16, num_layers=2, num_heads=2, vocab_size=32,  # noqa: E731
                                 chunk_size=4)
    new = _forward_and_grads(_seeded(build), ids)
    old_modules()
    _assert_identical(new, _forward_and_grads(_seeded(build), ids))


@pytest.mark.parametrize("mixer", [*bakeoff_models.BUILTIN, plots.GDN_IN_KDA_LAYER])
def test_bake_off_models_are_bit_identical_to_the_old_construction(mixer, old_modules):
    ids = torch.randint(0, 80, (2, 13), generator=torch.Generator().manual_seed(1))
    build = lambda: bakeoff_models.build_model(mixer, vocab_size=80, d_model=16, num_layers=4)  # noqa: E731
    new = _forward_and_grads(_seeded(build), ids)
    old_modules()
    _assert_identical(new, _forward_and_grads(_seeded(build), ids))


# The parameter names of the committed code before the clean-up (read from models built there): checkpoints and
# the chapters that read weights by name depend on them.
MQAR_KEYS = ["embed.weight", "blocks.0.mixer_norm.weight", "blocks.0.mixer.qkv.weight",
             "blocks.0.mixer.conv_q.conv.weight", "blocks.0.mixer.conv_k.conv.weight",
             "blocks.0.mixer.conv_v.conv.weight", "blocks.0.mixer.out.weight", "blocks.0.mixer.beta.weight",
             "blocks.0.mixer.beta.bias", "blocks.0.mixer.decay.weight", "blocks.0.mixer.decay.bias",
             "blocks.0.mixer.head_norm.weight", "blocks.0.mlp_norm.weight", "blocks.0.mlp.up.weight",
             "blocks.0.mlp.up.bias", "blocks.0.mlp.down.weight", "blocks.0.mlp.down.bias", "final_norm.weight",
             "head.weight"]
BAKEOFF_BLOCK_KEYS = ["mixer_norm.weight", "mixer.A_log", "mixer.qkv.weight", "mixer.conv_q.conv.weight",
                      "mixer.conv_k.conv.weight", "mixer.conv_v.conv.weight", "mixer.out.weight", "mixer.beta.weight",
                      "mixer.beta.bias", "mixer.decay.weight", "mixer.decay.bias", "mixer.head_norm.weight",
                      "mixer.out_gate.weight", "mlp_norm.weight", "mlp.0.weight", "mlp.0.bias", "mlp.2.weight",
                      "mlp.2.bias"]
KDA_LAYER_KEYS = ["A_log", "dt_bias", "q_proj.weight", "k_proj.weight", "v_proj.weight", "q_conv.weight",
                  "k_conv.weight", "v_conv.weight", "decay_down.weight", "decay_up.weight", "beta_proj.weight",
                  "gate_proj.weight", "o_norm.weight", "o_proj.weight"]


def test_parameter_names_are_the_old_ones():
    assert list(mixers.build("kda", num_layers=1).state_dict()) == MQAR_KEYS
    bake = bakeoff_models.build_model("gated_delta_rule", vocab_size=32, d_model=16, num_layers=1)
    assert list(bake.state_dict()) == ["embed.weight", *(f"blocks.0.{k}" for k in BAKEOFF_BLOCK_KEYS),
                                       "final_norm.weight", "head.weight"]
    layer = kda_layer.KDALayer(24, 3, 8)
    assert list(layer.state_dict()) == KDA_LAYER_KEYS
    assert layer.q_conv.weight.shape == (24, 4)
