"""Fetch the browser assets the site and the slides serve themselves: MathJax 3 and reveal.js.

    python scripts/fetch_assets.py          # install into _build/assets (once; later calls are offline)

Both come from the npm registry with the machine's npm, pinned, and are copied next to the pages
that use them, so the built book and decks load nothing from the internet.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ASSETS_DIR = ROOT / "_build" / "assets"
PACKAGES = {"mathjax": "3.2.2", "reveal.js": "5.2.1"}

# The parts of the MathJax package a page needs: the combined TeX->CommonHTML component plus the
# directories it loads from at run time (fonts, TeX extensions, the menu's accessibility modules).
MATHJAX_FILES = ("tex-chtml.js",)
MATHJAX_DIRS = ("input", "output", "ui", "a11y", "adaptors", "sre")
# reveal.js core, the one theme the decks use (its fonts ship with the package; several other
# themes import web fonts from another host, so they are left out) and the speaker-notes plugin.
REVEAL_FILES = ("dist/reveal.js", "dist/reveal.css", "dist/reset.css", "dist/theme/white.css", "LICENSE")
REVEAL_DIRS = ("dist/theme/fonts/source-sans-pro", "plugin/notes")
REVEAL_THEME = "white"


def _installed_version(package: str) -> str | None:
    manifest = ASSETS_DIR / "node_modules" / package / "package.json"
    if not manifest.exists():
        return None
    return json.loads(manifest.read_text(encoding="utf-8")).get("version")


def ensure_installed() -> Path:
    """Install the pinned packages into _build/assets/node_modules unless already there."""
    missing = [f"{name}@{version}" for name, version in PACKAGES.items()
               if _installed_version(name) != version]
    if missing:
        npm = shutil.which("npm")
        if npm is None:
            raise SystemExit("npm is needed once to fetch MathJax and reveal.js "
                             "(Debian: apt-get install npm); later builds are offline")
        ASSETS_DIR.mkdir(parents=True, exist_ok=True)
        print(f"fetching {' '.join(missing)} from the npm registry into {ASSETS_DIR}")
        subprocess.run([npm, "install", "--no-audit", "--no-fund", "--no-save",
                        "--prefix", str(ASSETS_DIR), *missing], check=True)
    return ASSETS_DIR / "node_modules"


def _sync_tree(source: Path, target: Path) -> None:
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target)


def copy_mathjax(target: Path) -> Path:
    """Copy MathJax into ``target``; return the path of its entry script (``tex-chtml.js``)."""
    es5 = ensure_installed() / "mathjax" / "es5"
    stamp, wanted = target / ".version", f"{PACKAGES['mathjax']} {MATHJAX_FILES} {MATHJAX_DIRS}"
    if not (stamp.exists() and stamp.read_text() == wanted):
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        for name in MATHJAX_FILES:
            shutil.copy2(es5 / name, target / name)
        for name in MATHJAX_DIRS:
            _sync_tree(es5 / name, target / name)
        stamp.write_text(wanted)
    return target / MATHJAX_FILES[0]


def copy_reveal(target: Path) -> Path:
    """Copy the parts of reveal.js the decks use into ``target``."""
    package = ensure_installed() / "reveal.js"
    stamp, wanted = target / ".version", f"{PACKAGES['reveal.js']} {REVEAL_FILES} {REVEAL_DIRS}"
    if not (stamp.exists() and stamp.read_text() == wanted):
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        for name in REVEAL_FILES:
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(package / name, target / name)
        for name in REVEAL_DIRS:
            _sync_tree(package / name, target / name)
        stamp.write_text(wanted)
    return target


def main() -> int:
    modules = ensure_installed()
    for name in PACKAGES:
        print(f"{name} {_installed_version(name)} in {modules / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
