"""Compile stage 1 of the chunked pipeline (kernels/chunk_fwd.py: _chunk_cumsum) for Hopper (sm90) on a machine
without a GPU, under whichever Triton is importable: a compiler failure of one Triton version shows up here
without device time. Triton's front and middle end (Python -> TTIR -> TTGIR -> LLVM -> PTX) and ptxas need no
GPU; the real launcher's 16-byte alignment of pointer arguments is passed as attributes (without it the
Triton 3.6.0 failure below did not appear).

    WHEELS=$(mktemp -d); T360=$(mktemp -d)
    python3.12 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \\
        --platform manylinux_2_28_x86_64 -d "$WHEELS" triton==3.6.0
    (cd "$T360" && unzip -q "$WHEELS"/triton-3.6.0-*.whl)
    PYTHONPATH=$T360 python3.12 benchmarks/probes/compile_sm90.py

Used on 2026-12-02: under Triton 3.6.0 the carry of b366cd8's _chunk_cumsum (the scan's last row picked out by
masked sums) failed for bf16 and fp16 gates with 64 and 128 channels ("operand #1 does not dominate this use"),
as on the H200; the form of d4c10f6 compiles under 3.6.0 and 3.7.1. torch is not needed: a stand-in module
answers the package's import. Prints one line per case; exits 1 if any failed.
"""

import sys
import types
from pathlib import Path

sys.modules.setdefault("torch", types.SimpleNamespace(float32="float32", empty_like=None))  # read only at launch
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402

KERNELS = Path(__file__).resolve().parents[2] / "k3lite" / "kernels"
SOURCE = KERNELS / "chunk_fwd.py"


def load_kernel_module(name="chunk_fwd"):
    # k3lite/kernels/<name>.py without its package imports (chunk_fwd first, the others import it); each removed
    # line stays (as a blank) so Triton finds each kernel's source at the right line. The launch wrapper
    # (k3lite.kernels._launch.cached_launch) becomes the identity: compiling needs the @triton.jit function itself.
    path = KERNELS / f"{name}.py"
    src = path.read_text().replace("from . import _ensure_backend\n", "\n").replace("_ensure_backend()", "")
    src = src.replace("from ._launch import cached_launch", "cached_launch = lambda kernel: kernel")
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    exec(compile(src.replace("from .chunk_fwd import", "from chunk_fwd import"), str(path), "exec"), module.__dict__)
    return module


def load_chunk_fwd():
    return load_kernel_module("chunk_fwd")


def compile_sm90(fn, pointer_types, constants, **options):
    """fn compiled for sm90 (Triton's compiler and ptxas, no GPU). pointer_types: the type of each pointer and float
    argument; the other runtime arguments are i32. Pointers get the real launcher's 16-byte alignment."""
    names = fn.arg_names
    signature = {n: "constexpr" if n in constants else pointer_types.get(n, "i32") for n in names}
    constexprs = {(names.index(n),): v for n, v in constants.items()}
    aligned = {(names.index(n),): [["tt.divisibility", 16]] for n, t in pointer_types.items() if t.startswith("*")}
    return triton.compile(triton.compiler.ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=aligned),
                          target=GPUTarget("cuda", 90, 32), options=options)


def compiles(fn, pointer_types, constants, **options):
    try:
        compile_sm90(fn, pointer_types, constants, **options)
        return True
    except Exception as err:  # a compiler failure is the finding
        print(f"   {type(err).__name__}: {str(err).strip().splitlines()[-1][:160]}")
        return False


def main():
    cf = load_chunk_fwd()
    print(f"triton {triton.__version__}, target sm90")
    failed = 0
    for gate_dtype in ("fp32", "bf16", "fp16"):
        for K in (1, 16, 40, 64, 128):
            block = min(cf._block(K), cf.CUMSUM_KEY_TILE)
            for check in (True, False):
                pointers = {"g_ptr": f"*{gate_dtype}", "hi_ptr": "*fp32", "lo_ptr": "*fp32",
                            "ok_ptr": "*i32" if check else "*fp32", "lo_from": "fp32"}
                ok = compiles(cf._chunk_cumsum, pointers, dict(H=16, K=K, BT=cf.CHUNK, BK=block, BS=cf.CUMSUM_ROWS,
                                                               CHECK=check), **cf.LAUNCH["cumsum"])
                failed += not ok
                print(f"{'ok  ' if ok else 'FAIL'} _chunk_cumsum gates {gate_dtype} K={K} BK={block} check={check}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
