"""``figures/bakeoff.json``: every run with its provenance; atomic writes, resume and merge.

Layout: ``{"format": 1, "runs": [record, ...]}``, sorted by key; each record carries ``provenance``
(git commit, device name, torch/triton versions, command). A run whose key is stored is never redone.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

FORMAT = 1


def load(path) -> dict[str, dict]:
    """Runs stored at ``path`` by key; an absent file is an empty store."""
    path = Path(path)
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        raise ValueError(f"path {str(path)!r} is not a bake-off store (expected an object with a 'runs' list)")
    return {run["key"]: run for run in data["runs"]}


def save(path, runs: dict[str, dict]) -> None:
    """Write atomically: a temporary file in the same folder, then a rename over the old one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = json.dumps({"format": FORMAT, "runs": [runs[k] for k in sorted(runs)]}, indent=1)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(handle, "w") as f:
        f.write(payload)
    os.replace(temporary, path)


def merge(paths, out) -> dict[str, dict]:
    """Union of the stores at ``paths`` (the first store that holds a key wins), written to ``out``."""
    if not paths:
        raise ValueError("merge needs at least one input path, got none")
    runs: dict[str, dict] = {}
    for path in paths:
        if not Path(path).exists():
            raise ValueError(f"merge input {str(path)!r} does not exist")
        for key, record in load(path).items():
            runs.setdefault(key, record)
    save(out, runs)
    return runs


def provenance(device: str) -> dict:
    import torch

    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                timeout=10).stdout.strip() or None
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "k3lite"], cwd=root, capture_output=True,
                                    text=True, timeout=10).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        commit, dirty = None, None
    # A copy of the working tree without .git (a device machine) is told its commit by the caller.
    commit = commit or os.environ.get("BAKEOFF_COMMIT")
    name = torch.cuda.get_device_name(0) if device == "cuda" and torch.cuda.is_available() else platform.processor()
    return {"commit": commit, "k3lite_modified": dirty, "device_name": name or platform.machine(),
            "torch": torch.__version__, "triton": triton_version, "python": platform.python_version(),
            "command": " ".join(sys.argv)}
