"""Launching an already compiled Triton kernel without Triton's per-call dispatch.

``kernel[grid](*args)`` runs ``JITFunction.run`` on every call, also when the kernel was compiled long ago: it binds
the arguments, works out how they specialise the kernel (each pointer's dtype and 16-byte alignment, integers equal
to 1 or divisible by 16, the constexpr values, the launch options), turns that into a cache key, looks the compiled
kernel up and only then calls its launcher, which costs several times what calling the compiled kernel's launcher
directly costs (a public launch-latency study, facebookexperimental/triton pull request 1231, found the same). A
forward is five to eight launches and a decode step one; where the GPU's work is short (small shapes, a decode
step), a slow host spends longer issuing the kernels than the GPU spends running them, so everything the host does
shows in the time.

:func:`cached_launch` wraps a kernel so that a call that looks like an earlier one goes straight to the launcher of
the kernel that earlier call compiled. "Looks like" is a key built from what a call site can vary: the dtype of every
tensor argument, every other argument's exact value (scalars and constexprs alike), the launch options and the
device. That key is finer than Triton's specialisation (Triton only asks whether an integer is 1 or a multiple of 16;
here each value is its own entry), so a lookup can miss where Triton would have hit, never the other way round. Every
tensor must also start on a 16-byte boundary, as the compiled kernel may assume; a call with one that does not, a
new key, a profiler's launch hook (``triton.knobs.runtime.launch_enter_hook``), a kernel's pre-run hook, or more than
:data:`MAX_ENTRIES` keys all take ``kernel[grid]`` as before. Under the CPU interpreter nothing is compiled and the
kernel is returned unchanged. ``K3LITE_TRITON_DISPATCH=1`` in the environment, or :data:`ENABLED` set to False,
switches the shortcut off (every call through Triton's dispatch, as a benchmark's A/B needs). Also skipped, as
nothing in k3lite needs them: Triton's check that a global a kernel reads has not changed since it was compiled
(k3lite's are constants), and a change of Triton's compile-time settings (``TRITON_DEBUG`` and the like) after a
key's first call.
"""

from __future__ import annotations

import functools
import operator
import os

import torch

MAX_ENTRIES = 256   # keys per kernel; a caller cycling through more (a new T every call) falls back to Triton
# Whether wrapped kernels take the shortcut; a benchmark or a test may set it. K3LITE_TRITON_DISPATCH=1 switches it off.
ENABLED = os.environ.get("K3LITE_TRITON_DISPATCH") != "1"


class CachedLaunch:
    """``kernel[grid](*args, **options)`` as Triton writes it, with the dispatch skipped for a call seen before."""

    def __init__(self, kernel, *, runtime=None):
        self.kernel = kernel
        self.fn = getattr(kernel, "fn", None)          # the Python function, as k3lite.course.listing reads it
        self.launchers: dict = {}
        # The launcher takes every parameter, positionally: a call that leaves one to its default or passes it by
        # name is never kept (k3lite's call sites pass them all).
        self.n_params, self.param_names = len(kernel.arg_names), frozenset(kernel.arg_names)
        self._runtime = runtime                         # (knobs.runtime, get_device, get_stream), found on first use

    def __getattr__(self, name):                        # everything else (params, warmup, ...) is the kernel's
        return getattr(self.kernel, name)

    def __getitem__(self, grid):
        return lambda *args, **options: self.launch(grid, args, options)

    def launch(self, grid, args, options):
        runtime = self._runtime or self._find_runtime()
        if runtime is None or not ENABLED or type(grid) is not tuple:   # a grid may also be a function of the meta
            return self.kernel[grid](*args, **options)
        knobs_runtime, get_device, get_stream = runtime
        if (_hooked(knobs_runtime.launch_enter_hook) or _hooked(knobs_runtime.launch_exit_hook)
                or getattr(self.kernel, "pre_run_hooks", None)):
            return self.kernel[grid](*args, **options)
        device = get_device()
        key, aligned = call_key(args, options, device)
        launcher = self.launchers.get(key) if aligned else None
        if launcher is None:
            compiled = self.kernel[grid](*args, **options)
            keep = aligned and len(args) == self.n_params and not options.keys() & self.param_names
            if keep and len(self.launchers) < MAX_ENTRIES and hasattr(compiled, "run"):
                self.launchers[key] = (compiled.run, compiled.function, compiled.packed_metadata)
            return compiled
        run, function, metadata = launcher
        run(grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1, get_stream(device),
            function, metadata, None, None, None, *args)
        return None

    def _find_runtime(self):
        try:
            from triton import knobs
            from triton.runtime.driver import driver
            self._runtime = (knobs.runtime, driver.active.get_current_device, driver.active.get_current_stream)
        except (ImportError, AttributeError):   # a Triton without knobs (before 3.4): its own dispatch every time
            return None
        return self._runtime


def _hooked(hook) -> bool:
    """Whether a launch hook is set: a function (Triton 3.4-3.7), or a HookChain with calls in it (3.8 on)."""
    return hook is not None and bool(getattr(hook, "calls", True))


_DTYPE = operator.attrgetter("dtype")
_ADDRESS = torch.Tensor.data_ptr
_SPLITS: dict = {}   # the argument types of a call -> how to pick its tensors and its other arguments


def call_key(args, options, device):
    """(key, aligned): what a compiled kernel depends on in one call, and whether every tensor is 16-byte aligned.

    A tensor enters the key by its dtype (its address changes every call; only its alignment matters, and that must
    hold for the shortcut at all); every other argument by its value, and every argument by its type (True and 1 are
    different kernels). Built with C-level maps: on a slow host, Python per argument costs what Triton's dispatch does.
    """
    types = tuple(map(type, args))
    split = _SPLITS.get(types)
    if split is None:
        split = _splitter(types)
        if len(_SPLITS) < MAX_ENTRIES:
            _SPLITS[types] = split
    tensors, others = split(args)
    misaligned = functools.reduce(operator.or_, map(_ADDRESS, tensors), 0) & 15
    return (device, types, tuple(map(_DTYPE, tensors)), others, tuple(options.items())), misaligned == 0


def _splitter(types):
    """A function args -> (tensors, other arguments), both tuples, for calls whose arguments have these types."""
    tensor_at = [i for i, kind in enumerate(types) if issubclass(kind, torch.Tensor)]
    other_at = [i for i, kind in enumerate(types) if not issubclass(kind, torch.Tensor)]
    pick_tensors, pick_others = _picker(tensor_at), _picker(other_at)
    return lambda args: (pick_tensors(args), pick_others(args))


def _picker(positions):
    """args -> the tuple of args at these positions (itemgetter returns a bare item for one position, () for none)."""
    if len(positions) > 1:
        return operator.itemgetter(*positions)
    if positions:
        return lambda args: (args[positions[0]],)
    return lambda args: ()


def cached_launch(kernel):
    """Wrap a ``@triton.jit`` kernel in :class:`CachedLaunch`; an interpreted kernel (no GPU) is returned as it is."""
    if type(kernel).__name__ != "JITFunction":
        return kernel
    return CachedLaunch(kernel)
