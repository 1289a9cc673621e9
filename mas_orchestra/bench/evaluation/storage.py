"""The run directory on disk: ``results.jsonl`` (append-only, fsync'ed, resumable), the atomic JSON
files, the directory lock and the config check that refuses to mix different runs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mas_orchestra.bench.evaluation.common import (
    CONFIG_FILE,
    IDENTITY_KEYS,
    LOCK_FILE,
    ConfigMismatchError,
    EvalInputError,
    log,
)

__all__ = ["read_results"]


def _key(record: Mapping[str, Any]) -> tuple[str, int]:
    return str(record["id"]), int(record["sample"])


def read_results(path: str | os.PathLike[str]) -> dict[tuple[str, int], dict[str, Any]]:
    """The records of a ``results.jsonl`` by (id, sample), in file order (a repeated pair: last wins).

    An unterminated last line (the writer was killed mid-line) is ignored, and so is, with a warning,
    any line that is not a JSON record with ``id`` and ``sample``.

    Args:
        path: The ``results.jsonl`` file; a missing file reads as no records.

    Returns:
        The records keyed by ``(id, sample)``, ordered by each pair's last occurrence.
    """
    file = Path(path)
    if not file.is_file():
        return {}
    data = file.read_bytes()
    records: dict[tuple[str, int], dict[str, Any]] = {}
    lines = data.split(b"\n")
    # After the last b"\n" is either b"" (a clean file) or a partial line: never a finished record.
    for lineno, raw in enumerate(lines[:-1], 1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
            key = _key(record)
        except (ValueError, KeyError, TypeError):
            log.warning("%s:%d: skipping an unreadable results line", file, lineno)
            continue
        records.pop(key, None)  # re-insert so the order is that of the last occurrence
        records[key] = record
    return records


def _cut_partial_tail(path: Path) -> int:
    """Remove an unterminated last line so new lines are not glued onto it; returns bytes removed."""
    if not path.is_file():
        return 0
    with path.open("rb+") as handle:
        size = handle.seek(0, os.SEEK_END)
        if size == 0:
            return 0
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            return 0
        # Scan back in blocks for the last newline; the tail is at most one record long.
        pos, block = size, 1 << 16
        keep = 0
        while pos > 0:
            start = max(0, pos - block)
            handle.seek(start)
            chunk = handle.read(pos - start)
            idx = chunk.rfind(b"\n")
            if idx >= 0:
                keep = start + idx + 1
                break
            pos = start
        handle.truncate(keep)
        handle.flush()
        os.fsync(handle.fileno())
    log.warning("%s: removed an unterminated last line (%d bytes); its run is done again", path, size - keep)
    return size - keep


class _ResultWriter:
    """Appends one JSON line per finished run: flushed at once, then fsync'ed."""

    def __init__(self, path: Path) -> None:
        self._handle = path.open("a", encoding="utf-8")

    async def write(self, record: Mapping[str, Any]) -> None:
        # The line is written and flushed synchronously, in the event loop thread, as one write(): lines
        # never interleave, and once flush() returns the line is in the kernel, so a killed process keeps
        # it (a kill mid-write leaves at most one unterminated line, which the next run cuts off). The
        # fsync, so that a machine crash keeps it too, takes milliseconds on a real disk: it runs in a
        # thread so it never stalls the other runs in flight.
        self._handle.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
        self._handle.flush()
        await asyncio.to_thread(os.fsync, self._handle.fileno())

    def close(self) -> None:
        self._handle.close()


@contextlib.contextmanager
def _dir_lock(out_dir: Path) -> Any:
    """Hold an exclusive lock on the run directory, or raise EvalInputError if another eval holds it."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no locking, as before
        yield
        return
    handle = (out_dir / LOCK_FILE).open("a")
    try:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise EvalInputError(f"{out_dir}: another eval is writing to this run directory") from None
        yield
    finally:
        handle.close()  # closing releases the lock


def _write_json(path: Path, payload: Any) -> None:
    """Write JSON atomically (temp file + rename), so a kill never leaves half a config or summary."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        json.dump(payload, handle, indent=2, ensure_ascii=False, default=str)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def _check_config(out_dir: Path, config: dict[str, Any], force: bool) -> dict[str, Any]:
    """Compare with the directory's config.json; returns the config to write (keeps ``created``)."""
    path = out_dir / CONFIG_FILE
    if not path.is_file():
        return config
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        if not force:
            raise ConfigMismatchError(f"{path}: unreadable ({exc}); pass --force to overwrite it") from None
        return config
    diffs = [f"{key}: {old.get(key)!r} -> {config.get(key)!r}" for key in IDENTITY_KEYS
             if old.get(key) != config.get(key)]
    if diffs and not force:
        raise ConfigMismatchError(
            f"{out_dir} holds results of a different run ({'; '.join(diffs)}); use another --out, "
            "or pass --force to add to it anyway"
        )
    if diffs:
        log.warning("%s: config changed with force (%s); existing results are kept", out_dir, "; ".join(diffs))
    return {**config, "created": old.get("created", config["created"])}
