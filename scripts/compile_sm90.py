"""Compile stage 1 of the chunked pipeline (kernels/chunk_fwd.py: _chunk_cumsum) for Hopper (sm90) on a machine
without a GPU, under whichever Triton is importable: a compiler failure of one Triton version shows up here
without device time. Triton's front and middle end (Python -> TTIR -> TTGIR -> LLVM -> PTX) and ptxas need no
GPU; the real launcher's 16-byte alignment of pointer arguments is passed as attributes (without it the
Triton 3.6.0 failure below did not appear).

    python3.12 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \\
        --platform manylinux_2_28_x86_64 -d /tmp/w triton==3.6.0 && (cd /tmp/t360 && unzip -q /tmp/w/triton-3.6.0-*.whl)
    PYTHONPATH=/tmp/t360 python3.12 scripts/compile_sm90.py

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

SOURCE = Path(__file__).resolve().parent.parent / "k3lite" / "kernels" / "chunk_fwd.py"


def load_chunk_fwd():
    # The module's source without its package import; the line stays (as a blank) so Triton finds each
    # kernel's source at the right line.
    src = SOURCE.read_text().replace("from . import _ensure_backend\n", "\n").replace("_ensure_backend()", "")
    module = types.ModuleType("chunk_fwd")
    module.__file__ = str(SOURCE)
    sys.modules["chunk_fwd"] = module
    exec(compile(src, str(SOURCE), "exec"), module.__dict__)
    return module


def compiles(fn, pointer_types, constants, **options):
    # pointer_types: the type of each pointer and float argument; the other runtime arguments are i32.
    names = fn.arg_names
    signature = {n: "constexpr" if n in constants else pointer_types.get(n, "i32") for n in names}
    constexprs = {(names.index(n),): v for n, v in constants.items()}
    aligned = {(names.index(n),): [["tt.divisibility", 16]] for n, t in pointer_types.items() if t.startswith("*")}
    try:
        triton.compile(triton.compiler.ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=aligned),
                       target=GPUTarget("cuda", 90, 32), options=options)
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
