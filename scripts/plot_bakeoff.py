"""Regenerate every bake-off figure from the stored runs (the store is only read).

    python scripts/plot_bakeoff.py [--json figures/bakeoff.json] [--out-dir runs/figures] [--layers published]

The figures go to git-ignored scratch by default; the chapters draw their own figures from the store.
"""

from __future__ import annotations

import argparse

from k3lite.bakeoff.cli import OneLineParser
from k3lite.bakeoff.plots import LAYERS, SCRATCH_FIGURES, plot_all


def main(argv=None) -> None:
    parser = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", default="figures/bakeoff.json", help="the store to read (default: %(default)s)")
    parser.add_argument("--out-dir", default=SCRATCH_FIGURES, help="where the PNGs go (default: %(default)s)")
    parser.add_argument("--layers", default="latest", choices=LAYERS,
                        help="which generation of runs: the layers as published, the earlier grid, or both, a "
                             "cell's published runs replacing its earlier ones (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        written = plot_all(args.json, args.out_dir, args.layers)
    except ValueError as err:   # a damaged or empty store: one line, exit 2
        parser.error(str(err))
    for path in written:
        print(path)


if __name__ == "__main__":
    main()
