"""k3lite.kernels._launch: when a call skips Triton's dispatch, and that it never takes a kernel compiled for other
arguments. A stand-in for Triton's JITFunction records which path each call took (the real one runs on the GPU:
tests/test_kernels_gpu.py compares both paths' outputs)."""

from types import SimpleNamespace

import pytest
import torch

from k3lite.kernels import _launch


@pytest.fixture(autouse=True)
def shortcut_on(monkeypatch):
    monkeypatch.setattr(_launch, "ENABLED", True)


class Compiled:
    def __init__(self, log, tag):
        self.log, self.tag = log, tag
        self.function, self.packed_metadata = f"function-{tag}", f"metadata-{tag}"

    @property
    def run(self):
        return lambda *launch: self.log.append(("direct", self.tag, launch))


class JITFunction:   # the name cached_launch looks for
    def __init__(self):
        self.log, self.compiles = [], 0
        self.fn = lambda: None
        self.params = ["a", "b"]
        self.arg_names = ["x", "n", "s", "flag", "prec"]
        self.pre_run_hooks = []

    def __getitem__(self, grid):
        def run(*args, **options):
            self.compiles += 1
            self.log.append(("jit", grid, args, options))
            return Compiled(self.log, self.compiles)
        return run


def wrapped(hooks=None):
    kernel = JITFunction()
    knobs_runtime = SimpleNamespace(launch_enter_hook=hooks, launch_exit_hook=None)
    return kernel, _launch.CachedLaunch(kernel, runtime=(knobs_runtime, lambda: 0, lambda device: 777))


def paths(kernel):
    return [entry[0] for entry in kernel.log]


def test_a_repeated_call_goes_straight_to_the_compiled_kernel_with_its_grid_stream_and_arguments():
    kernel, fast = wrapped()
    x, y = torch.zeros(8), torch.ones(8)
    fast[(3, 2)](x, 5, 0.5, True, "tf32", num_warps=4)
    fast[(4,)](y, 5, 0.5, True, "tf32", num_warps=4)
    assert paths(kernel) == ["jit", "direct"]
    _, tag, launch = kernel.log[1]
    assert tag == 1
    assert launch[:9] == (4, 1, 1, 777, "function-1", "metadata-1", None, None, None)
    assert launch[9] is y and launch[10:] == (5, 0.5, True, "tf32")


@pytest.mark.parametrize("change", ["dtype", "int", "float", "bool_for_int", "option", "constexpr_str"])
def test_anything_a_compiled_kernel_depends_on_gives_a_new_key(change):
    kernel, fast = wrapped()
    base = dict(x=torch.zeros(8), n=5, s=0.5, flag=1, prec="tf32", warps=4)
    call = lambda x, n, s, flag, prec, warps: fast[(1,)](x, n, s, flag, prec, num_warps=warps)  # noqa: E731
    call(**base)
    changed = dict(base, **{"dtype": {"x": torch.zeros(8, dtype=torch.float64)}, "int": {"n": 6},
                            "float": {"s": 0.25}, "bool_for_int": {"flag": True}, "option": {"warps": 8},
                            "constexpr_str": {"prec": "ieee"}}[change])
    call(**changed)
    call(**changed)
    assert paths(kernel) == ["jit", "jit", "direct"]
    assert kernel.log[2][1] == 2   # the kernel compiled for the changed call, not the first one


def test_a_tensor_off_a_16_byte_boundary_always_takes_the_dispatch_and_is_never_kept():
    kernel, fast = wrapped()
    misaligned = torch.zeros(9)[1:]   # 4 bytes into its storage
    assert misaligned.data_ptr() % 16 != 0
    for _ in range(3):
        fast[(1,)](misaligned, 5, 0.5, 1, "tf32")
    assert paths(kernel) == ["jit"] * 3 and fast.launchers == {}
    fast[(1,)](torch.zeros(8), 5, 0.5, 1, "tf32")
    fast[(1,)](torch.zeros(8), 5, 0.5, 1, "tf32")
    assert paths(kernel)[3:] == ["jit", "direct"]


def test_a_launch_hook_a_pre_run_hook_or_the_switch_sends_every_call_through_triton(monkeypatch):
    kernel, fast = wrapped(hooks=lambda *args: None)
    for _ in range(3):
        fast[(1,)](torch.zeros(8), 5, 0.5, 1, "tf32")
    assert paths(kernel) == ["jit"] * 3
    kernel, fast = wrapped(hooks=SimpleNamespace(calls=[print]))   # Triton 3.8 on: a HookChain with a hook in it
    for _ in range(2):
        fast[(1,)](torch.zeros(8), 5, 0.5, 1, "tf32")
    assert paths(kernel) == ["jit"] * 2
    kernel, fast = wrapped(hooks=SimpleNamespace(calls=[]))        # an empty chain is no hook
    for _ in range(2):
        fast[(1,)](torch.zeros(8), 5, 0.5, 1, "tf32")
    assert paths(kernel) == ["jit", "direct"]
    kernel, fast = wrapped()
    kernel.pre_run_hooks.append(print)
    for _ in range(2):
        fast[(1,)](torch.zeros(8), 5, 0.5, 1, "tf32")
    assert paths(kernel) == ["jit"] * 2
    kernel, fast = wrapped()
    monkeypatch.setattr(_launch, "ENABLED", False)
    for _ in range(3):
        fast[(1,)](torch.zeros(8), 5, 0.5, 1, "tf32")
    assert paths(kernel) == ["jit"] * 3


def test_a_grid_given_as_a_function_takes_tritons_dispatch():
    kernel, fast = wrapped()
    for _ in range(2):
        fast[lambda meta: (1,)](torch.zeros(8), 5, 0.5, 1, "tf32")
    assert paths(kernel) == ["jit", "jit"]


def test_the_keys_per_kernel_are_bounded(monkeypatch):
    monkeypatch.setattr(_launch, "MAX_ENTRIES", 4)
    kernel, fast = wrapped()
    for n in range(10):
        fast[(1,)](torch.zeros(8), n, 0.5, 1, "tf32")
    assert len(fast.launchers) == 4
    fast[(1,)](torch.zeros(8), 9, 0.5, 1, "tf32")   # the tenth value found no room: Triton's dispatch again
    fast[(1,)](torch.zeros(8), 3, 0.5, 1, "tf32")
    assert paths(kernel)[10:] == ["jit", "direct"]


def test_a_call_leaving_a_parameter_to_its_default_or_naming_it_is_never_kept():
    kernel, fast = wrapped()
    for _ in range(2):
        fast[(1,)](torch.zeros(8), 5, 0.5, 1)                 # prec left to a default
        fast[(1,)](torch.zeros(8), 5, 0.5, 1, prec="tf32")    # prec by name
    assert paths(kernel) == ["jit"] * 4 and fast.launchers == {}


def test_only_a_compiled_kernel_is_wrapped_and_the_wrapper_still_shows_its_source():
    from k3lite.course import listing
    from k3lite.kernels import recurrent_step

    interpreted = recurrent_step._decode_step   # no GPU here: the interpreter's function, returned as it is
    assert _launch.cached_launch(interpreted) is interpreted
    kernel = JITFunction()
    kernel.fn = test_a_repeated_call_goes_straight_to_the_compiled_kernel_with_its_grid_stream_and_arguments
    fast = _launch.cached_launch(kernel)
    assert isinstance(fast, _launch.CachedLaunch) and fast.params == ["a", "b"]
    assert "def test_a_repeated_call" in listing.source(fast)


def test_the_triangular_solve_keeps_fp16_digits():
    """TF32 products (10-bit mantissa) in the solve cost fp16 inputs the digits an ill-conditioned I + Akk needs;
    bf16 (7 bits) loses nothing to them, float32 needs IEEE products."""
    from k3lite.kernels.chunk_fwd import solve_precision

    assert solve_precision(torch.float16) == "ieee"
    assert solve_precision(torch.float32) == "ieee"
    assert solve_precision(torch.bfloat16) == "tf32"
