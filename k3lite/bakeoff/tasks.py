"""Synthetic tasks of the bake-off, generated on the training device from a seeded generator.

Every task returns ``(inputs [B, T], targets [B, T], score [B, T] bool)``: targets are -100 where
nothing is trained, and ``score`` marks the positions the task's metric is measured on. Token layout
of the recall tasks: 0 blank, 1 reset marker, 2 "none" answer, 3 unused, then the keys, then the values.

* ``mqarN``   multi-query associative recall (Zoology, Arora et al. 2023, Sec. 3): N key-value pairs, then
              the N keys queried at uniformly random positions of a blank tail (sequence ``max(seq_len, 4 N)``).
* ``zoologyN`` MQAR as Zoology generates it (its ``multiquery_ar`` generator, paper Sec. 3 and App. E): the
              N queries sit on the tail's even slots, the slot index drawn without replacement with
              probability ``p(i) ∝ i^(a - 1)``, ``a = 0.01`` (a power law: most queries come soon after the
              pairs, a few far later, as repeated bigrams do in text), values distinct within a sequence,
              and every non-query position of the tail filled with random tokens (no blank to lean on).
              Zoology's experiments use a vocabulary of 8,192; the command line's default for this family.
* ``rebind``  16 keys are bound again and again; the query asks for the latest value (overwrite vs sum);
              ``rebindN`` uses N keys (``rebind4``: the CPU demo's size).
* ``switch``  episodes start with a reset marker; a query for a key bound only before the last reset
              must answer "none" (forgetting on demand vs no gate).
* ``twoscale`` facts at the start must survive a long stream of fast pairs that are asked back at
              once and never again; the metric is recall of the facts (per-channel vs scalar decay).
* ``lm``      byte-level language modelling on the standard library's ``.py`` files (``k3lite.data.library_corpus``,
              about 30 MB, so a run of 16 M bytes does not repeat it) at T = 2048, with a code planted
              early and asked for late in every window (``probe_recall``); metric: validation bits/byte.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import torch

BLANK, RESET, NONE = 0, 1, 2
SPECIAL = 4
REBIND_KEYS = 16
TASK_FAMILIES = ("mqar", "rebind", "switch", "twoscale", "lm", "zoology")
ZOOLOGY_POWER_A = 0.01   # Zoology's default train/test power_a: p(slot i) ∝ i^(a - 1)
# "At chance": a metric that closes less than this fraction of the distance from chance to perfect.
AT_CHANCE_FRACTION = 0.1
PROBE_MARK = b"\n#k="
PROBE_ALPHABET = b"abcdefghijklmnopqrstuvwxyz0123456789"
PROBE_LENGTH = 8
MIN_KEYS = {"rebind": 16, "switch": 32, "twoscale": 32}   # distinct keys each sequence draws


@dataclass
class Task:
    name: str
    vocab_size: int
    seq_len: int
    metric: str
    higher_is_better: bool
    sample: object = field(repr=False)  # sample(batch_size, generator, device) -> inputs, targets, score
    chance: float = 0.0   # the metric of the best guess that uses no recall (see ``chance`` below)


def family(name: str) -> str:
    if re.fullmatch(r"mqar\d+", name):
        return "mqar"
    if re.fullmatch(r"zoology\d+", name):
        return "zoology"
    if re.fullmatch(r"rebind\d+", name):
        return "rebind"
    if name in ("rebind", "switch", "twoscale", "lm"):
        return name
    raise ValueError(f"task must be mqar<pairs> (e.g. mqar64), zoology<pairs> (e.g. zoology64), rebind<keys> "
                     f"(e.g. rebind4) or one of ('rebind', 'switch', 'twoscale', 'lm'), got {name!r}")


def pairs_of(name: str) -> int | None:
    """The number of key-value pairs of an MQAR task (``mqar64``, ``zoology64``), None for other tasks."""
    match = re.fullmatch(r"(?:mqar|zoology)(\d+)", name)
    return int(match.group(1)) if match else None


def chance(name: str, *, vocab_size: int = 512) -> float:
    """The metric of the best guess that recalls nothing, per task (what "at chance" is measured from).

    * MQAR (both kinds): ``1 / pairs``: a model that has learned which tokens of the sequence are values, but
      not which key each belongs to, picks one of the ``pairs`` values (uniform over the whole value range,
      ``1 / num_values``, is lower, and a model reaches ``1 / pairs`` without any recall).
    * ``rebindN``: ``1 / N``: one of the N bound keys' values, without knowing which key was asked.
    * ``switch``: 0.5: always answering "none" is right on the half of the queries that want it.
    * ``twoscale``: ``1 / 8``: one of the 8 facts' values.
    * ``lm`` (bits per byte, lower is better): 8, a uniform guess over 256 bytes.
    """
    kind = family(name)
    count = pairs_of(name) if kind in ("mqar", "zoology") else int(name[6:] or REBIND_KEYS) if kind == "rebind" \
        else None
    if count is not None:
        if count < 1:
            raise ValueError(f"task {name!r}: the count in its name must be >= 1, got {count}")
        return 1 / count
    return {"switch": 0.5, "twoscale": 1 / 8, "lm": 8.0}[kind]


def at_chance(metric, chance_level: float, higher_is_better: bool = True) -> bool:
    """Whether ``metric`` closes less than :data:`AT_CHANCE_FRACTION` of the way from ``chance_level`` to a
    perfect score (1 for an accuracy, 0 bits for bits per byte). None or NaN (a diverged run) is at chance."""
    if not isinstance(metric, (int, float)) or not math.isfinite(metric):
        return True
    perfect = 1.0 if higher_is_better else 0.0
    closed = (metric - chance_level) / (perfect - chance_level)
    return closed < AT_CHANCE_FRACTION


def make_task(name: str, *, vocab_size: int = 512, seq_len: int = 256, lm_seq_len: int = 2048) -> Task:
    kind = family(name)
    if kind == "lm":
        return _lm_task(lm_seq_len)
    num_keys = (vocab_size - SPECIAL) // 2
    level = chance(name, vocab_size=vocab_size)
    if kind in ("mqar", "zoology"):
        pairs = pairs_of(name)
        if not 1 <= pairs <= num_keys:
            raise ValueError(f"task {name!r}: pairs must be in [1, {num_keys}] for vocab_size={vocab_size}")
        length = max(seq_len, 4 * pairs)
        sampler = _mqar if kind == "mqar" else _zoology_mqar
        return Task(name, vocab_size, length, "accuracy", True,
                    lambda b, gen, dev: sampler(b, pairs, length, num_keys, gen, dev), chance=level)
    if seq_len < 64:
        raise ValueError(f"seq_len must be >= 64 for task {name!r}, got {seq_len}")
    if num_keys < MIN_KEYS[kind]:
        raise ValueError(f"task {name!r} needs vocab_size >= {SPECIAL + 2 * MIN_KEYS[kind]}, got {vocab_size}")
    if kind == "rebind":
        bound = int(name[6:] or REBIND_KEYS)
        if not 1 <= bound <= min(num_keys, seq_len // 4):
            raise ValueError(f"task {name!r}: keys must be in [1, {min(num_keys, seq_len // 4)}] for "
                             f"vocab_size={vocab_size}, seq_len={seq_len}")
        return Task(name, vocab_size, seq_len, "accuracy", True,
                    lambda b, gen, dev: _rebind(b, seq_len, num_keys, gen, dev, bound), chance=level)
    sampler = {"switch": _switch, "twoscale": _twoscale}[kind]
    return Task(name, vocab_size, seq_len, "accuracy", True,
                lambda b, gen, dev: sampler(b, seq_len, num_keys, gen, dev), chance=level)


def _choose_distinct(batch_shape, pool: int, count: int, gen, device) -> torch.Tensor:
    """``count`` distinct indices in [0, pool) per row, in random order."""
    return torch.rand(*batch_shape, pool, generator=gen, device=device).argsort(dim=-1)[..., :count]


def _randint(high: int, shape, gen, device) -> torch.Tensor:
    return torch.randint(0, high, shape, generator=gen, device=device)


def _mqar(batch, pairs, length, num_keys, gen, device):
    keys = SPECIAL + _choose_distinct((batch,), num_keys, pairs, gen, device)
    values = SPECIAL + num_keys + _randint(num_keys, (batch, pairs), gen, device)
    inputs = torch.full((batch, length), BLANK, dtype=torch.long, device=device)
    inputs[:, 0:2 * pairs:2], inputs[:, 1:2 * pairs:2] = keys, values
    positions = 2 * pairs + _choose_distinct((batch,), length - 2 * pairs, pairs, gen, device)
    order = _choose_distinct((batch,), pairs, pairs, gen, device)
    targets = torch.full_like(inputs, -100)
    inputs.scatter_(1, positions, keys.gather(1, order))
    targets.scatter_(1, positions, values.gather(1, order))
    return inputs, targets, targets != -100


def _zoology_mqar(batch, pairs, length, num_keys, gen, device):
    """Zoology's MQAR layout: pairs first, then the queries on even tail slots placed by a power law.

    The tail after the ``2 pairs`` context tokens has ``(length - 2 pairs) // 2`` slots of two tokens; the
    query of pair ``j`` goes to the first token of a slot drawn without replacement with weight ``i^(a - 1)``
    for slot ``i = 1, 2, ...`` (Gumbel top-k: adding Gumbel noise to the log weights and keeping the
    ``pairs`` largest draws without replacement in proportion to the weights). Every other tail token is a
    random non-special token."""
    keys = SPECIAL + _choose_distinct((batch,), num_keys, pairs, gen, device)
    values = SPECIAL + num_keys + _choose_distinct((batch,), num_keys, pairs, gen, device)
    context = 2 * pairs
    slots = (length - context) // 2
    log_weight = (ZOOLOGY_POWER_A - 1) * torch.arange(1, slots + 1, device=device, dtype=torch.float32).log()
    uniform = torch.rand(batch, slots, generator=gen, device=device).clamp_min(1e-20)
    gumbel = -(-uniform.log()).log()
    slot = (log_weight + gumbel).topk(pairs, dim=-1).indices                                 # [B, pairs]
    inputs = SPECIAL + _randint(2 * num_keys, (batch, length), gen, device)                  # random filler
    inputs[:, 0:context:2], inputs[:, 1:context:2] = keys, values
    positions = context + 2 * slot
    targets = torch.full_like(inputs, -100)
    inputs.scatter_(1, positions, keys)
    targets.scatter_(1, positions, values)
    return inputs, targets, targets != -100


def _rebind(batch, length, num_keys, gen, device, bound=16):
    """``bound`` keys bound once each, then rebound at random; ``bound`` queries at the end want the latest value."""
    updates = (length - bound) // 2
    keys = SPECIAL + _choose_distinct((batch,), num_keys, bound, gen, device)           # [B, bound]
    first = _choose_distinct((batch,), bound, bound, gen, device)
    later = _randint(bound, (batch, updates - bound), gen, device)
    which = torch.cat([first, later], dim=1)                                            # [B, updates]
    values = SPECIAL + num_keys + _randint(num_keys, (batch, updates), gen, device)
    step = torch.arange(updates, device=device).expand(batch, updates)
    last = torch.zeros(batch, bound, dtype=torch.long, device=device).scatter_reduce(1, which, step, "amax")
    latest = values.gather(1, last)                                                     # [B, bound]
    order = _choose_distinct((batch,), bound, bound, gen, device)
    inputs = torch.full((batch, length), BLANK, dtype=torch.long, device=device)
    inputs[:, 0:2 * updates:2], inputs[:, 1:2 * updates:2] = keys.gather(1, which), values
    query = slice(2 * updates, 2 * updates + bound)
    inputs[:, query] = keys.gather(1, order)
    targets = torch.full_like(inputs, -100)
    targets[:, query] = latest.gather(1, order)
    return inputs, targets, targets != -100


def _switch(batch, length, num_keys, gen, device):
    """Episodes ``[reset, 8 pairs, 8 queries]`` over a pool of 32 keys; half the queries ask a key of the pool
    that the current episode did not bind (answer: none), most of which an earlier episode did bind."""
    pool, pairs, queries = 32, 8, 8
    episode = 1 + 2 * pairs + queries
    episodes = length // episode
    keys = SPECIAL + _choose_distinct((batch,), num_keys, pool, gen, device)            # [B, pool]
    picks = _choose_distinct((batch, episodes), pool, pool, gen, device)                # [B, E, pool]
    bound, absent = picks[..., :pairs], picks[..., pairs:]
    values = SPECIAL + num_keys + _randint(num_keys, (batch, episodes, pairs), gen, device)
    present = torch.rand(batch, episodes, queries, generator=gen, device=device) < 0.5
    slot = _randint(pairs, (batch, episodes, queries), gen, device)
    other = _randint(pool - pairs, (batch, episodes, queries), gen, device)
    asked = torch.where(present, bound.gather(2, slot), absent.gather(2, other))
    answer = torch.where(present, values.gather(2, slot), torch.full_like(slot, NONE))
    pool_keys = keys[:, None, :].expand(batch, episodes, pool)
    block = torch.empty(batch, episodes, episode, dtype=torch.long, device=device)
    block[..., 0] = RESET
    block[..., 1:1 + 2 * pairs:2], block[..., 2:1 + 2 * pairs:2] = pool_keys.gather(2, bound), values
    block[..., 1 + 2 * pairs:] = pool_keys.gather(2, asked)
    block_targets = torch.full_like(block, -100)
    block_targets[..., 1 + 2 * pairs:] = answer
    return _pad(block.flatten(1), block_targets.flatten(1), length)


def _twoscale(batch, length, num_keys, gen, device):
    """8 facts (slow keys), a stream of units ``[3 fast pairs, one of their keys again]``, the 8 facts asked last.

    Slow and fast keys come from disjoint halves of the key range, so a model can tell them apart; fast keys
    repeat with new values, so a memory that never forgets fills with stale fast pairs."""
    facts, unit_pairs = 8, 3
    unit = 2 * unit_pairs + 1
    units = (length - 3 * facts) // unit
    half = num_keys // 2
    slow = SPECIAL + _choose_distinct((batch,), half, facts, gen, device)
    slow_values = SPECIAL + num_keys + _randint(num_keys, (batch, facts), gen, device)
    fast = SPECIAL + half + _randint(num_keys - half, (batch, units, unit_pairs), gen, device)
    fast_values = SPECIAL + num_keys + _randint(num_keys, (batch, units, unit_pairs), gen, device)
    asked = _randint(unit_pairs, (batch, units, 1), gen, device)
    stream = torch.empty(batch, units, unit, dtype=torch.long, device=device)
    stream[..., 0:2 * unit_pairs:2], stream[..., 1:2 * unit_pairs:2] = fast, fast_values
    stream[..., -1:] = fast.gather(2, asked)
    stream_targets = torch.full_like(stream, -100)
    stream_targets[..., -1:] = fast_values.gather(2, asked)
    order = _choose_distinct((batch,), facts, facts, gen, device)
    head = torch.stack([slow, slow_values], dim=-1).flatten(1)
    tail = slow.gather(1, order)
    inputs = torch.cat([head, stream.flatten(1), tail], dim=1)
    targets = torch.cat([torch.full_like(head, -100), stream_targets.flatten(1), slow_values.gather(1, order)], 1)
    inputs, targets, _ = _pad(inputs, targets, length)
    score = torch.zeros_like(targets, dtype=torch.bool)
    tail_start = head.shape[1] + units * unit
    score[:, tail_start:tail_start + facts] = True
    return inputs, targets, score


def _pad(inputs, targets, length):
    missing = length - inputs.shape[1]
    if missing:
        inputs = torch.nn.functional.pad(inputs, (0, missing), value=BLANK)
        targets = torch.nn.functional.pad(targets, (0, missing), value=-100)
    return inputs, targets, targets != -100


_CORPUS = {}


def _corpus(device) -> tuple[torch.Tensor, torch.Tensor, str]:
    from k3lite.data import library_corpus

    key = str(device)
    if key not in _CORPUS:
        train_ids, val_ids, fingerprint = library_corpus()
        _CORPUS[key] = (train_ids.to(device), val_ids.to(device), fingerprint)
    return _CORPUS[key]


def corpus_fingerprint(device) -> str:
    """Which corpus the LM task trained on (the standard library differs between Python versions)."""
    return _corpus(device)[2]


def _lm_task(length: int) -> Task:
    if length < 128:
        raise ValueError(f"lm_seq_len must be >= 128 (room for the planted probe), got {length}")

    def sample(batch, gen, device, split="train"):
        train_ids, val_ids, _ = _corpus(device)
        ids = train_ids if split == "train" else val_ids
        starts = _randint(len(ids) - length - 1, (batch,), gen, device)
        window = ids[starts[:, None] + torch.arange(length + 1, device=device)]
        window, code_at = _plant_probe(window, gen)
        inputs, targets = window[:, :-1], window[:, 1:]
        score = torch.zeros_like(targets, dtype=torch.bool)
        # Input position j predicts byte j + 1, so the code's bytes are scored one position earlier.
        rows = torch.arange(batch, device=device)[:, None]
        score[rows, code_at[:, None] - 1 + torch.arange(PROBE_LENGTH, device=device)] = True
        return inputs, targets.clone(), score

    return Task("lm", 256, length, "val_bpb", False, sample, chance=chance("lm"))


_PROBE_BYTES = {}


def _probe_bytes(device):
    """The marker and the code alphabet as tensors, copied to the device once (a copy per step would sync)."""
    if str(device) not in _PROBE_BYTES:
        _PROBE_BYTES[str(device)] = (torch.tensor(list(PROBE_MARK), device=device),
                                     torch.tensor(list(PROBE_ALPHABET), device=device))
    return _PROBE_BYTES[str(device)]


def _plant_probe(window, gen):
    """Write ``\\n#k=<code>\\n`` near the start and ``\\n#k=<code>`` near the end of every window; returns the
    window and where the late code starts."""
    batch, length = window.shape
    device = window.device
    mark, alphabet = _probe_bytes(device)
    code = alphabet[_randint(len(alphabet), (batch, PROBE_LENGTH), gen, device)]
    early = torch.cat([mark.expand(batch, -1), code, mark[:1].expand(batch, 1)], dim=1)
    late = torch.cat([mark.expand(batch, -1), code], dim=1)
    early_at = 16 + _randint(max(1, length // 8), (batch,), gen, device)
    late_at = length - 2 * late.shape[1] - _randint(max(1, length // 16), (batch,), gen, device)
    rows = torch.arange(batch, device=device)[:, None]
    window = window.clone()
    window[rows, early_at[:, None] + torch.arange(early.shape[1], device=device)] = early
    window[rows, late_at[:, None] + torch.arange(late.shape[1], device=device)] = late
    return window, late_at + len(PROBE_MARK)


def bits_per_byte(loss: float) -> float:
    return loss / math.log(2)
