"""Regenerate every bake-off figure from the stored runs.

    python scripts/plot_bakeoff.py [--json figures/bakeoff.json] [--out-dir figures]
"""

from __future__ import annotations

import argparse

from k3lite.bakeoff.plots import plot_all


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", default="figures/bakeoff.json")
    parser.add_argument("--out-dir", default="figures")
    args = parser.parse_args(argv)
    for path in plot_all(args.json, args.out_dir):
        print(path)


if __name__ == "__main__":
    main()
