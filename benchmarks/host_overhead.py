"""Host time of one chunked forward, the GPU's kernels aside: every Triton launch of the pipeline replaced by a no-op.

    python benchmarks/host_overhead.py [--out FILE.json] [--base DIR]

At small shapes the GPU can finish a forward sooner than Python issues it (the thirteenth run's Gated DeltaNet and
DeltaNet rows at (8, 2048), benchmarks/README.md). This measures what the package's own Python costs per call, on any
machine: float32 CPU tensors at (8, 256, 16, 128), the value checks of g and beta skipped (on CUDA the kernels make
them), each kind through k3lite.ops.<kind>.chunked(backend="triton"), through k3lite.kernels.chunked and through
k3lite.kernels.run_chunked (no argument checks: the path benchmarks.bench times as the kernels alone), the median of 7
rounds of 300 calls, in microseconds; and one KDA decode step (B = 64) through k3lite.ops.kda.step and through
k3lite.kernels.run_step. Triton's own launch cost is not in it. --base DIR measures the package found in DIR
instead (e.g. a `git archive <commit> k3lite | tar -x -C DIR` copy) in a child process. Not part of any test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

SHAPE = (8, 256, 16, 128)
ROUNDS, CALLS = 7, 300


def measure():
    import torch

    import k3lite
    from k3lite import _validate, kernels
    from k3lite.kernels import chunk_fwd
    from k3lite.ops import delta_rule, gated_delta_rule, kda

    class NoLaunch:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: None

    from k3lite.kernels import recurrent_step

    # A CachedLaunch (JITFunction) on a GPU, an InterpretedFunction under the interpreter.
    for module in (chunk_fwd, recurrent_step):
        for name in dir(module):
            if type(getattr(module, name)).__name__ in ("JITFunction", "InterpretedFunction", "CachedLaunch"):
                setattr(module, name, NoLaunch())
    _validate.check_values = lambda *args, **kwargs: None
    torch.manual_seed(0)
    B, T, H, D = SHAPE
    q, k, v = (torch.randn(B, T, H, D) for _ in range(3))
    beta = torch.rand(B, T, H)
    cases = {"delta_rule": (delta_rule, None),
             "gated_delta_rule": (gated_delta_rule, torch.nn.functional.logsigmoid(torch.randn(B, T, H) + 4)),
             "kda": (kda, -torch.rand(B, T, H, D))}
    result = {"package": k3lite.__file__, "shape": SHAPE, "us_per_call": {}}
    for kind, (op, g) in cases.items():
        args = (q, k, v) + ((g,) if g is not None else ()) + (beta,)
        # Each lambda binds this kind's op, args and g through its defaults (a closure would read the loop's).
        paths = {"ops": lambda op=op, args=args: op.chunked(*args, backend="triton"),
                 "kernels": lambda kind=kind, g=g: kernels.chunked(kind, q, k, v, g, beta),
                 "run_chunked": lambda kind=kind, g=g: kernels.run_chunked(kind, q, k, v, g, beta, scale=D ** -0.5)}
        for path, fn in paths.items():
            result["us_per_call"][f"{kind} {path}"] = _median_us(fn)
    # One KDA decode step (B = 64): through the ops API and through kernels.run_step, the path benchmarks.bench times as
    # the kernel alone.
    q1, k1, v1 = (torch.randn(64, H, D) for _ in range(3))
    g1, beta1, state = -torch.rand(64, H, D), torch.rand(64, H), torch.zeros(64, H, D, D)
    result["us_per_call"]["kda step ops"] = _median_us(lambda: kda.step(q1, k1, v1, g1, beta1, state=state,
                                                                         backend="triton"))
    result["us_per_call"]["kda step run_step"] = _median_us(lambda: kernels.run_step("kda", q1, k1, v1, g1, beta1,
                                                                                     state=state, scale=D ** -0.5))
    return result


def _median_us(fn):
    for _ in range(20):
        fn()
    rounds = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(CALLS):
            fn()
        rounds.append((time.perf_counter() - start) / CALLS * 1e6)
    return statistics.median(rounds)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--base", type=Path, help="measure the package in this folder instead (child process)")
    args = parser.parse_args()
    if args.base is not None:
        code = (f"import sys; sys.path.insert(0, {str(args.base.resolve())!r}); "
                f"sys.path.insert(1, {str(Path(__file__).parent)!r}); "
                "import json, host_overhead; print(json.dumps(host_overhead.measure()))")
        result = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                           cwd="/").stdout.splitlines()[-1])
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        result = measure()
    # The package measured, relative to where it was looked for (DIR as given, or this checkout): a result file that
    # gets committed carries no machine's paths. One found elsewhere (the wrong package measured) stays absolute.
    root = (args.base if args.base is not None else Path(__file__).parent.parent).resolve()
    if Path(result["package"]).resolve().is_relative_to(root):
        result["package"] = str(Path(args.base or ".") / Path(result["package"]).resolve().relative_to(root))
    for name, us in result["us_per_call"].items():
        print(f"{name:<30} {us:7.1f} us")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
