"""Where the course runs: device, size profile, seeding.

Chapters call :func:`profile` to choose between a ``"small"`` setting that fits a 2-core CPU
budget and a ``"full"`` setting for a GPU. The environment variable ``K3LITE_PROFILE`` overrides
the automatic choice, so a lecturer can force the small setting on a GPU (to reproduce the stored
notebooks) or the full one on a big CPU.
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch

PROFILES = ("small", "full")


def device() -> torch.device:
    """CUDA when a GPU is present, otherwise the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def profile() -> str:
    """``"small"`` on a CPU, ``"full"`` on a GPU, unless ``K3LITE_PROFILE`` says otherwise."""
    chosen = os.environ.get("K3LITE_PROFILE", "").strip().lower()
    if chosen:
        if chosen not in PROFILES:
            raise ValueError(f"K3LITE_PROFILE must be one of {PROFILES}, got {chosen!r}")
        return chosen
    return "full" if torch.cuda.is_available() else "small"


def pick(small, full):
    """Return ``small`` or ``full`` according to :func:`profile` (for sizes, steps, sweeps)."""
    return full if profile() == "full" else small


def seed_everything(seed: int = 0) -> torch.Generator:
    """Seed Python, NumPy and PyTorch; return a CPU generator seeded the same way."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def describe() -> str:
    """One line naming the device, the profile and the library versions (it varies between machines)."""
    dev = device()
    name = torch.cuda.get_device_name(0) if dev.type == "cuda" else "CPU"
    return (f"device={dev.type} ({name}), profile={profile()}, torch={torch.__version__}, "
            f"threads={torch.get_num_threads()}")
