"""The bake-off's JSON store: every run with its provenance; locked, merged, atomic writes; resume and merge.

Layout: ``{"format": 1, "runs": [record, ...]}``, sorted by key (other top-level keys are kept as found); each
record carries ``provenance`` (git commit, device name, torch/triton versions, command). A run whose key is
stored is never redone. A record's ``status`` is absent for a trained run, ``"diverged"`` for a run whose loss
or weights turned non-finite (``diverged_step``, ``reason``, ``metric`` null) and ``"failed"`` for a run that
could not finish (``reason``; a later result for the key replaces it).

Writing never loses a run: :func:`save` takes an exclusive lock (``fcntl.flock`` on ``<store>.lock``),
re-reads the file, adds the new runs to what it holds (a key already stored keeps its record), writes a
temporary file in the same folder and renames it over the old one, keeping the file's mode. Two processes
saving to one store at once therefore keep every run of both. JSON has no NaN or infinity: such a number is
stored as ``null`` and the record's ``non_finite`` names the field and what it was (``{"metric": "nan"}``).

Learning-rate choices live beside the runs, in the top-level object ``"lr_choices"`` (choice key -> the choice
with its evidence: each rate's per-seed metrics, the means, the rule, the verdict; see
``k3lite.bakeoff.cli.decide_lr``). A save replaces an entry with the newer computation (it is recomputed from the
stored runs); a merge keeps the first entry of a key and reports a differing one. Stores written before the
choices were stored have no such object: :func:`load_choices` gives ``{}``.

The course's evidence, ``figures/bakeoff.json`` (:data:`COMMITTED`), is written only when a command names it;
the command line's default store is the git-ignored scratch file :data:`SCRATCH`.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shlex
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

try:
    import fcntl
except ImportError:   # Windows: no advisory locks; writes stay atomic
    fcntl = None

FORMAT = 1
COMMITTED = "figures/bakeoff.json"   # the course's evidence: read by the chapters, written only when named
SCRATCH = "runs/bakeoff.json"        # the command line's default store (runs/ is git-ignored)
ROOT = Path(__file__).resolve().parents[2]
STATUSES = ("ok", "diverged", "failed")
CHOICES = "lr_choices"   # the top-level object of learning-rate choices


class StoreError(ValueError):
    """A file that is not a bake-off store this code can read: damaged, truncated, empty or another schema."""


def status(record: dict) -> str:
    """``"ok"`` (a trained run: its record has no ``status``), ``"diverged"`` or ``"failed"``."""
    return record.get("status", "ok")


def finite_metric(record: dict) -> float | None:
    """The run's metric, or None for a diverged or failed run (or a metric that is not a finite number)."""
    value = record.get("metric")
    if status(record) != "ok" or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value


# ---------------------------------------------------------------- reading


def _refuse(path, what: str) -> StoreError:
    return StoreError(f"store {str(path)!r} {what}")


def _read(path) -> tuple[dict, dict[str, dict]]:
    """``(top-level object, runs by key)`` of the store at ``path``; an absent file is ``({}, {})``."""
    path = Path(path)
    if not path.exists():
        return {}, {}
    if path.is_dir():
        raise _refuse(path, "is a directory, not a file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise _refuse(path, "is not UTF-8 text: not a bake-off store") from None
    except OSError as err:
        raise _refuse(path, f"cannot be read ({err.strerror})") from None
    if not text.strip():
        raise _refuse(path, "is empty (a store holds {\"format\": 1, \"runs\": [...]}); remove it to start anew")
    try:
        data = json.loads(text)   # NaN/Infinity tokens of stores written before null was used still parse
    except json.JSONDecodeError as err:
        raise _refuse(path, f"is not valid JSON ({err.msg}: line {err.lineno}, column {err.colno}): "
                            "truncated or damaged; restore it, or name another --out") from None
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        raise _refuse(path, "is not a bake-off store (expected an object with \"format\" and a \"runs\" list)")
    if data.get("format") != FORMAT:
        raise _refuse(path, f"has format {data.get('format')!r}; this k3lite reads and writes format {FORMAT}")
    runs: dict[str, dict] = {}
    for index, record in enumerate(data["runs"]):
        if not isinstance(record, dict) or not isinstance(record.get("key"), str):
            raise _refuse(path, f"is damaged: run {index} is not an object with a string \"key\"")
        if record["key"] in runs:
            raise _refuse(path, f"is damaged: run {record['key']!r} is stored twice")
        if status(record) not in STATUSES:
            raise _refuse(path, f"is damaged: run {record['key']!r} has status {record['status']!r}, "
                                f"expected one of {STATUSES}")
        runs[record["key"]] = _finite(record)
    return data, runs


def check(path) -> None:
    """Raise :class:`StoreError` (one line naming the file and what is wrong) unless ``path`` is a readable
    store or absent."""
    _read(path)


def load(path) -> dict[str, dict]:
    """Runs stored at ``path`` by key; an absent file is an empty store (anything else unreadable raises
    :class:`StoreError`)."""
    return _read(path)[1]


def load_choices(path) -> dict[str, dict]:
    """The learning-rate choices stored at ``path`` by choice key (``{}`` for an absent file or a store
    written before choices were stored)."""
    choices = _read(path)[0].get(CHOICES, {})
    if not isinstance(choices, dict):
        raise _refuse(path, f"is damaged: {CHOICES!r} is not an object")
    return choices


# ---------------------------------------------------------------- writing


def _finite(record: dict) -> dict:
    """``record`` with every NaN/infinity replaced by None, and ``non_finite`` saying which field held what."""
    found: dict[str, str] = {}

    def clean(value, where):
        if isinstance(value, float) and not math.isfinite(value):
            found.setdefault(where, "nan" if math.isnan(value) else "inf" if value > 0 else "-inf")
            return None
        if isinstance(value, dict):
            return {k: clean(v, f"{where}.{k}" if where else str(k)) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v, where) for v in value]   # a list's items share its name: "curve.loss"
        return value

    cleaned = clean(record, "")
    if found:
        cleaned["non_finite"] = {**(record.get("non_finite") or {}), **found}
    return cleaned


def _same(a: dict, b: dict) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _add(runs: dict[str, dict], key: str, record: dict, conflicts: list[str]) -> None:
    """Add ``record`` to ``runs``: a new key is added; a stored key keeps its record (a different one is a
    conflict), except that a failed record gives way to a result."""
    old = runs.get(key)
    if old is None or (status(old) == "failed" and status(record) != "failed"):
        runs[key] = record
    elif status(record) != "failed" and not _same(old, record):
        conflicts.append(key)


@contextmanager
def _locked(path: Path):
    """An exclusive lock on ``path``'s sidecar ``<name>.lock`` (held by every writer of the store)."""
    if fcntl is None:
        yield
        return
    handle = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)   # closing releases the lock


def _write(path: Path, top: dict, runs: dict[str, dict]) -> None:
    """Atomically: a temporary file in the same folder (the old file's mode, or the umask's for a new one),
    flushed to disk, then renamed over ``path``."""
    # One key order whatever the history (format, runs, then the rest sorted), so that merging into an old store and
    # into a new one write the same bytes.
    rest = {key: top[key] for key in sorted(top) if key not in ("format", "runs")}
    top = {"format": FORMAT, "runs": [runs[k] for k in sorted(runs)], **rest}
    payload = json.dumps(top, indent=1, allow_nan=False)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as f:
            if path.exists():
                os.chmod(temporary, path.stat().st_mode & 0o7777)
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _report(conflicts: list[str], path, warn) -> None:
    if not conflicts:
        return
    shown = ", ".join(conflicts[:5]) + (f" and {len(conflicts) - 5} more" if len(conflicts) > 5 else "")
    warn(f"[bakeoff] {len(conflicts)} runs differ from the ones already in {str(path)!r}; kept the stored "
         f"records: {shown}")


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def save(path, runs: dict[str, dict], *, choices: dict[str, dict] | None = None, warn=_stderr) -> dict[str, dict]:
    """Add ``runs`` to the store at ``path`` and return everything it now holds.

    Under the store's lock: re-read the file (a damaged one raises :class:`StoreError` and is left alone), add
    each run whose key it lacks (a stored key keeps its record; a differing one is reported through ``warn``;
    a failed record gives way to a result), write atomically, keeping the file's mode and its other top-level
    keys. ``choices`` (choice key -> learning-rate choice) replace the stored entries of their keys. Nothing is
    written when nothing changes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path):
        top, stored = _read(path)
        merged, conflicts = dict(stored), []
        for key, record in runs.items():
            _add(merged, key, _finite(record), conflicts)
        new_top = top
        if choices:
            old = top.get(CHOICES, {}) if isinstance(top.get(CHOICES), dict) else {}
            updated = {**old, **{k: _finite(v) for k, v in choices.items()}}
            if updated != old:
                new_top = {**top, CHOICES: dict(sorted(updated.items()))}
        if merged != stored or new_top is not top or not path.exists():
            _write(path, new_top, merged)
    _report(conflicts, path, warn)
    return merged


def merge(paths, out, *, warn=_stderr) -> dict[str, dict]:
    """Add the runs of the stores at ``paths`` to the store at ``out`` (kept: its runs come first, then each
    input's in order); a key held with different records is reported through ``warn`` and keeps the first.
    Every input is read and checked before ``out`` is touched. Returns the union."""
    if not paths:
        raise ValueError("merge needs at least one input path, got none")
    inputs = []
    for path in paths:
        if not Path(path).is_file():
            raise ValueError(f"merge input {str(path)!r} " + ("is not a file" if Path(path).exists() else
                                                              "does not exist"))
        inputs.append(_read(path))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with _locked(out):
        original, stored = _read(out)
        top, merged, conflicts = dict(original), dict(stored), []
        for other_top, runs in inputs:
            for name, value in other_top.items():
                if name == CHOICES and isinstance(value, dict) and isinstance(top.get(CHOICES, {}), dict):
                    kept = dict(top.get(CHOICES, {}))
                    for key, entry in value.items():
                        if key in kept and not _same(kept[key], entry):
                            conflicts.append(f"learning-rate choice {key!r}")
                        kept.setdefault(key, entry)
                    top[CHOICES] = dict(sorted(kept.items()))
                elif name not in ("format", "runs"):
                    if name in top and top[name] != value:
                        conflicts.append(f"top-level {name!r}")
                    top.setdefault(name, value)
            for key, record in runs.items():
                _add(merged, key, record, conflicts)
        if merged != stored or top != original or not out.exists():
            _write(out, top, merged)
    _report(conflicts, out, warn)
    return merged


# ---------------------------------------------------------------- provenance


def _portable(arg: str) -> str:
    """An argument as it may be recorded: an absolute path becomes relative to the repository (or ``.../name``
    outside it), so no machine's layout is stored."""
    flag, sep, value = arg.partition("=") if arg.startswith("-") else ("", "", arg)
    if not os.path.isabs(value):
        return arg
    path = Path(value)
    try:
        portable = str(path.resolve().relative_to(ROOT))
    except ValueError:
        portable = ".../" + path.name
    return flag + sep + portable


def command_line(argv) -> str:
    """How the run was started, without machine paths: ``python -m k3lite.bakeoff`` and its arguments."""
    return " ".join(["python -m k3lite.bakeoff", *(shlex.quote(_portable(str(a))) for a in argv)])


def provenance(device: str, argv=None) -> dict:
    import torch

    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                timeout=10).stdout.strip() or None
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "k3lite"], cwd=ROOT, capture_output=True,
                                    text=True, timeout=10).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        commit, dirty = None, None
    # A copy of the working tree (a device machine) is told its commit by the caller, and the caller wins: such a
    # copy may carry a .git whose HEAD is not the tree's, so neither its commit nor its dirty flag can be trusted.
    if os.environ.get("BAKEOFF_COMMIT"):
        commit, dirty = os.environ["BAKEOFF_COMMIT"], None
    name = torch.cuda.get_device_name(0) if device == "cuda" and torch.cuda.is_available() else platform.processor()
    return {"commit": commit, "k3lite_modified": dirty, "device_name": name or platform.machine(),
            "torch": torch.__version__, "triton": triton_version, "python": platform.python_version(),
            "command": command_line(sys.argv[1:] if argv is None else argv)}

