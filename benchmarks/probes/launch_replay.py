"""Find the first Triton kernel whose compiled result differs from the interpreter's, launch by launch.

A wrong gradient on the GPU that the CPU interpreter does not reproduce is a compiled-only effect (a layout, a
pipelining or a race), and it sits in one of the eight to twelve launches of a forward and backward. This probe
takes the guesswork out: on the GPU, ``record`` runs one case through ``k3lite.ops.<kind>.chunked(backend="triton")``
forward and backward, and snapshots every tensor argument of every launch before and after it (the GPU is
synchronised after each launch, so a fault is also pinned to the launch that raised it). On a machine without CUDA,
``replay`` runs each recorded launch again under the interpreter, from the GPU's own inputs to that launch, and
compares outputs: the first launch whose outputs differ is the culprit, with the inputs it failed on.

    python benchmarks/probes/launch_replay.py record gated_delta_rule 64 float32 launches.pt --gates zero   # GPU
    python benchmarks/probes/launch_replay.py replay launches.pt                                            # CPU

The interpreter of Triton 3.6 (the device's) could not replay the two sequential state passes (a TypeError inside
the interpreter); those launches are reported as such and the others are still compared. Not part of any test; a
diagnosis tool for kernel work.
"""

from __future__ import annotations

import argparse
import sys

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _key(t: torch.Tensor):
    return (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype)


def record(args) -> None:
    import torch.nn.functional as F

    from k3lite import ops
    from k3lite.kernels import _launch

    launches, tensors = [], {}

    def launch(self, grid, call_args, options):
        index = []
        for a in call_args:
            if isinstance(a, torch.Tensor):
                index.append(("T", tensors.setdefault(_key(a), len(tensors))))
            else:
                index.append(("V", a.value if hasattr(a, "value") else a))
        live = {i: a for a, (tag, i) in zip(call_args, index) if tag == "T"}
        before = {i: a.detach().cpu().clone() for i, a in live.items()}
        name = self.kernel.fn.__name__
        print(f"launch {len(launches)}: {name} grid {grid}", flush=True)
        result = self.kernel[grid](*call_args, **options)
        torch.cuda.synchronize()
        after = {i: a.detach().cpu().clone() for i, a in live.items()}
        launches.append(dict(name=name, module=self.kernel.fn.__module__, grid=tuple(grid), args=index,
                             options=dict(options), before=before, after=after))
        return result

    _launch.CachedLaunch.launch = launch
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    B, T, H, D = args.batch, args.length, args.heads, args.width
    rnd = lambda *shape: torch.randn(*shape, device="cuda", generator=gen)  # noqa: E731
    dtype = DTYPES[args.dtype]
    q, k, v = rnd(B, T, H, D), F.normalize(rnd(B, T, H, D), dim=-1), rnd(B, T, H, D)
    named = {"q": q, "k": k, "v": v}
    if args.kind == "gated_delta_rule":
        named["g"] = F.logsigmoid(rnd(B, T, H) + 3.0)
    if args.kind == "kda":
        named["g"] = -5.0 * torch.sigmoid(rnd(B, T, H, D) - 4.0)
    if "g" in named and args.gates == "zero":
        named["g"] = torch.zeros_like(named["g"])
    if args.kind != "linear_attention":
        named["beta"] = torch.sigmoid(rnd(B, T, H))
    leaves = {n: (x.to(dtype) if n in "qkv" else x).requires_grad_(True) for n, x in named.items()}
    o, state = getattr(ops, args.kind).chunked(*leaves.values(), backend="triton")
    torch.autograd.backward([o, state], [torch.randn_like(o), 0.1 * torch.ones_like(state)])
    torch.cuda.synchronize()
    torch.save(dict(case=vars(args), launches=launches), args.path)
    print(f"recorded {len(launches)} launches into {args.path}")


def replay(args) -> int:
    from k3lite import kernels
    from k3lite.kernels import chunk_bwd_triton, chunk_fwd  # noqa: F401  (interpreted: no CUDA here)

    if not kernels._INTERPRETING:
        print("replay runs under the interpreter: hide the GPU (CUDA_VISIBLE_DEVICES=)", file=sys.stderr)
        return 2
    saved = torch.load(args.path, weights_only=False)
    print("case:", saved["case"])
    first_bad = None
    for n, rec in enumerate(saved["launches"]):
        kernel = getattr(sys.modules[rec["module"]], rec["name"])
        live = {i: t.clone() for i, t in rec["before"].items()}
        call_args = [live[v] if tag == "T" else v for tag, v in rec["args"]]
        try:
            kernel[rec["grid"]](*call_args, **rec["options"])
        except Exception as err:   # report and go on: the launches after it still have their own recorded inputs
            kinds = [type(a).__name__ for a in call_args]
            print(f"{n:2d} {rec['name']:<24} could not replay: {err!r}; argument types {kinds}")
            continue
        worst = []
        for i, expected in rec["after"].items():
            got, gpu = live[i].double(), expected.double()
            if torch.equal(rec["before"][i], expected) and torch.equal(live[i], expected):
                continue   # an input: untouched by both
            scale = got.norm().item() or 1.0
            rel = (got - gpu).norm().item() / scale
            if not rel <= args.tolerance:
                worst.append(f"arg {i} {tuple(expected.shape)} rel {rel:.2e}")
        print(f"{n:2d} {rec['name']:<24} grid {rec['grid']}: " + ("; ".join(worst) if worst else "matches"))
        if worst and first_bad is None:
            first_bad = rec["name"]
    print("first differing launch:", first_bad)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("kind")
    rec.add_argument("width", type=int)
    rec.add_argument("dtype", choices=list(DTYPES))
    rec.add_argument("path")
    rec.add_argument("--gates", choices=["random", "zero"], default="random")
    rec.add_argument("--batch", type=int, default=1)
    rec.add_argument("--length", type=int, default=300)
    rec.add_argument("--heads", type=int, default=2)
    rec.add_argument("--seed", type=int, default=0)
    rep = sub.add_parser("replay")
    rep.add_argument("path")
    rep.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args()
    if args.command == "record":
        record(args)
        return 0
    return replay(args)


if __name__ == "__main__":
    sys.exit(main())
