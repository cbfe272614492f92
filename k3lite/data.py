"""Offline data: a byte-level tokenizer, a corpus that every machine already has, synthetic tasks.

Nothing here downloads anything. The text corpus is a fixed list of pure-Python modules from the
standard library of the interpreter that runs the course: the same bytes on every machine with the
same Python version (the stored notebooks were made with Python 3.11).
"""

from __future__ import annotations

import hashlib
import sysconfig
from pathlib import Path

import torch

VOCAB_SIZE = 256  # one token per byte value

# Stable, mostly prose-and-code modules; their order fixes the corpus.
CORPUS_MODULES = (
    "textwrap", "difflib", "heapq", "bisect", "fractions", "statistics", "string",
    "calendar", "dataclasses", "functools", "shlex", "colorsys", "queue", "sched",
)


def encode(text: str) -> torch.Tensor:
    """UTF-8 bytes as a 1-D ``torch.long`` tensor of token ids in [0, 256)."""
    return torch.tensor(list(text.encode("utf-8")), dtype=torch.long)


def decode(ids) -> str:
    """Token ids back to text (invalid UTF-8 sequences become U+FFFD)."""
    if isinstance(ids, torch.Tensor):
        ids = ids.tolist()
    return bytes(int(i) for i in ids).decode("utf-8", errors="replace")


def corpus_text(max_bytes: int | None = None) -> str:
    """The standard-library corpus as one string (optionally cut to ``max_bytes`` bytes)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    parts = [(stdlib / f"{name}.py").read_text(encoding="utf-8") for name in CORPUS_MODULES]
    text = "\n".join(parts)
    if max_bytes is not None:
        text = text.encode("utf-8")[:max_bytes].decode("utf-8", errors="ignore")
    return text


def library_corpus(val_every: int = 10) -> tuple[torch.Tensor, torch.Tensor, str]:
    """Every ``.py`` file of the standard library (about 30 MB): ``(train_ids, val_ids, fingerprint)``.

    For training runs that see tens of millions of bytes: ``corpus_text`` (about 0.4 MB) would be repeated
    dozens of times and memorised, which makes validation loss measure memory, not modelling. Every
    ``val_every``-th file (sorted by path) is held out, so validation text comes from across the library
    but never from a file seen in training. Installed packages (``site-packages``) are left out.
    """
    if val_every < 2:
        raise ValueError(f"val_every must be >= 2, got {val_every}")
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in stdlib.rglob("*.py")
                   if not {"site-packages", "dist-packages", "__pycache__"} & set(p.parts))
    if not files:
        raise RuntimeError(f"no .py files under {stdlib}")
    train, val, digest = bytearray(), bytearray(), hashlib.sha256()
    for index, path in enumerate(files):
        content = path.read_bytes() + b"\n"
        (val if index % val_every == 0 else train).extend(content)
        digest.update(content)
    as_ids = lambda raw: torch.frombuffer(raw, dtype=torch.uint8).long()  # noqa: E731  (bytearray: writable)
    return as_ids(train), as_ids(val), digest.hexdigest()[:12]


def corpus_fingerprint(text: str) -> str:
    """First 12 hex digits of the SHA-256 of ``text``: shows which corpus a run used."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def train_val_split(ids: torch.Tensor, val_fraction: float = 0.1):
    """Split a token stream into a training head and a validation tail."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    cut = int(len(ids) * (1.0 - val_fraction))
    return ids[:cut], ids[cut:]


def random_batch(ids: torch.Tensor, batch_size: int, seq_len: int, generator: torch.Generator):
    """``batch_size`` random windows of ``seq_len + 1`` tokens, as (inputs, next-token targets)."""
    if len(ids) <= seq_len + 1:
        raise ValueError(f"seq_len={seq_len} needs a token stream longer than {seq_len + 1}, got {len(ids)}")
    starts = torch.randint(0, len(ids) - seq_len - 1, (batch_size,), generator=generator)
    window = torch.stack([ids[s:s + seq_len + 1] for s in starts.tolist()])
    return window[:, :-1], window[:, 1:]


def mqar_batch(batch_size: int, num_pairs: int, num_queries: int | None = None, *,
               vocab_size: int = 256, generator: torch.Generator):
    """Multi-query associative recall (MQAR).

    Each sequence first lists ``num_pairs`` key-value pairs ``k1 v1 k2 v2 ...`` (keys distinct,
    drawn from the lower half of the vocabulary, values from the upper half), then asks
    ``num_queries`` of the keys again in random order. The target after each queried key is its
    value; every other target is ``-100`` (ignored by ``cross_entropy``).

    Returns ``(inputs, targets)``, both ``[batch_size, 2 * num_pairs + num_queries]``.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    num_queries = num_pairs if num_queries is None else num_queries
    half = vocab_size // 2
    if num_pairs < 1 or num_pairs > half:
        raise ValueError(f"num_pairs must be in [1, {half}] for vocab_size={vocab_size}, got {num_pairs}")
    if not 1 <= num_queries <= num_pairs:
        raise ValueError(f"num_queries must be in [1, num_pairs={num_pairs}], got {num_queries}")
    keys = torch.stack([torch.randperm(half, generator=generator)[:num_pairs] for _ in range(batch_size)])
    values = half + torch.randint(0, half, (batch_size, num_pairs), generator=generator)
    order = torch.stack([torch.randperm(num_pairs, generator=generator)[:num_queries] for _ in range(batch_size)])
    context = torch.stack([keys, values], dim=-1).reshape(batch_size, 2 * num_pairs)
    query_keys = torch.gather(keys, 1, order)
    query_values = torch.gather(values, 1, order)
    inputs = torch.cat([context, query_keys], dim=1)
    targets = torch.full_like(inputs, -100)
    targets[:, 2 * num_pairs:] = query_values
    return inputs, targets
