"""Regenerate every bake-off figure from the stored runs (the store is only read).

    python scripts/plot_bakeoff.py [--json figures/bakeoff.json] [--out-dir figures]
"""

from __future__ import annotations

import argparse

from k3lite.bakeoff.plots import plot_all


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", default="figures/bakeoff.json", help="the store to read (default: %(default)s)")
    parser.add_argument("--out-dir", default="figures", help="where the PNGs go (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        written = plot_all(args.json, args.out_dir)
    except ValueError as err:   # a damaged or empty store: one line, exit 2
        parser.error(str(err))
    for path in written:
        print(path)


if __name__ == "__main__":
    main()
