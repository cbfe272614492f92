"""A bounds check for Triton's CPU interpreter: every load and store a mask lets through must land inside one of
the launch's tensor arguments.

On a GPU an address past a tensor's end either faults (an illegal memory access that poisons the process) or reads
a neighbour's bytes; under the interpreter it reads whatever host memory lies there, silently. So a mask that lets
one lane too many through passes every interpreter test that does not happen to compare that lane. With
:func:`checking` active, such an access raises instead, naming the kernel. It wraps three private pieces of
``triton.runtime.interpreter`` (the launch's argument copies and the masked load and store); :func:`available`
says whether this Triton has them. It sees accesses past a tensor's ends; one that lands in another row of the
same tensor reads a wrong value, which the tests that compare values catch.
"""

from __future__ import annotations

import contextlib

import numpy as np


def _interpreter():
    import triton.runtime.interpreter as interpreter

    return interpreter


def available() -> bool:
    try:
        interpreter = _interpreter()
    except ImportError:
        return False
    builder = getattr(interpreter, "InterpreterBuilder", None)
    return (hasattr(getattr(interpreter, "GridExecutor", None), "_init_args_hst")
            and hasattr(builder, "create_masked_load") and hasattr(builder, "create_masked_store"))


class OutOfBounds(AssertionError):
    pass


@contextlib.contextmanager
def checking():
    """Within the block, an interpreted launch that reads or writes outside its tensor arguments raises."""
    interpreter = _interpreter()
    executor, builder = interpreter.GridExecutor, interpreter.InterpreterBuilder
    original = executor._init_args_hst, builder.create_masked_load, builder.create_masked_store
    launch = {"kernel": None, "ranges": []}

    def init_args(self, args_dev, kwargs):
        args, kwargs_host = original[0](self, args_dev, kwargs)
        launch["kernel"] = getattr(self.fn, "__name__", "?")
        launch["ranges"] = [(t.data_ptr(), t.data_ptr() + t.numel() * t.element_size())
                            for t in [*args, *kwargs_host.values()] if hasattr(t, "data_ptr") and t.numel() > 0]
        return args, kwargs_host

    def check(pointers, mask, itemsize, what):
        addresses = pointers.data[mask.data.astype(bool)]
        inside = np.zeros(addresses.shape, dtype=bool)
        for low, high in launch["ranges"]:
            inside |= (addresses >= low) & (addresses + itemsize <= high)
        if not inside.all():
            raise OutOfBounds(f"{launch['kernel']}: {int((~inside).sum())} masked-in {what}(s) outside every "
                              "tensor argument")

    def load(self, ptrs, mask, other, cache_policy, is_volatile):
        itemsize = np.dtype(interpreter._get_np_dtype(ptrs.get_element_ty())).itemsize
        check(ptrs, mask, itemsize, "load")
        return original[1](self, ptrs, mask, other, cache_policy, is_volatile)

    def store(self, ptrs, value, mask, cache_policy):
        check(ptrs, mask, value.data.dtype.itemsize, "store")
        return original[2](self, ptrs, value, mask, cache_policy)

    executor._init_args_hst, builder.create_masked_load, builder.create_masked_store = init_args, load, store
    try:
        yield
    finally:
        executor._init_args_hst, builder.create_masked_load, builder.create_masked_store = original
