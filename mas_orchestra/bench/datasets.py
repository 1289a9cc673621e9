"""The one reader of question/answer rows: JSONL files (or in-memory dicts) of ``{id, question, answer}``.

Evaluation (:func:`mas_orchestra.bench.evaluation.load_rows`) and training (:func:`training.data.load_jsonl`) both read
their data through :func:`read_rows`, so a file that one accepts the other reads the same way and both
report a bad row by file and line (``data.jsonl:3: row without 'answer'``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from mas_orchestra.errors import DataError

__all__ = ["IdPolicy", "check_row", "jsonl_objects", "read_rows", "scalar_text"]

IdPolicy = Literal["require", "default"]
"""``"require"``: a row without ``id`` is an error (eval: ids key the resume). ``"default"``: it gets
``<file stem>-<n>`` (``row-<n>`` for in-memory rows), ``n`` counting rows from 0 (training)."""


def scalar_text(value: Any) -> str | None:
    """A row value as text: strings as they are, numbers written out; anything else is not an answer.

    Args:
        value: A row value.

    Returns:
        The text, or ``None`` for anything that is not a string or a finite number (booleans included).
    """
    if isinstance(value, str):
        return value
    if isinstance(value, bool):  # bool is an int, but True is no answer to a math problem
        return None
    if isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
        return str(value)
    return None


def check_row(obj: Any, where: str, *, default_id: str | None = None) -> dict[str, Any]:
    """One row checked and normalised: ``id`` and ``question`` strings, ``answer`` a string or list of strings.

    Other keys are kept as they are. ``default_id`` (None: the id is required) stands in for a missing or
    null ``id``. Raises :class:`DataError` prefixed with ``where``.

    Args:
        obj: The parsed row.
        where: Where it was read (``file:line`` or ``row N``), prefixed to every error.
        default_id: Stands in for a missing or null ``id`` (``None``: the id is required).

    Returns:
        The normalised row.

    Raises:
        DataError: A row that breaks the rules.
    """
    if not isinstance(obj, Mapping):
        raise DataError(f"{where}: a row must be a JSON object, got {type(obj).__name__}")
    required = ("id", "question", "answer") if default_id is None else ("question", "answer")
    missing = [key for key in required if obj.get(key) is None]
    if missing:
        raise DataError(f"{where}: row without {', '.join(repr(k) for k in missing)}")
    raw_id = obj.get("id")
    row_id = default_id if raw_id is None else scalar_text(raw_id)
    if row_id is None or not row_id.strip():
        raise DataError(f"{where}: 'id' must be a non-empty string or integer, got {raw_id!r}")
    question = obj["question"]
    if not isinstance(question, str) or not question.strip():
        raise DataError(f"{where}: 'question' must be a non-empty string")
    raw = obj["answer"]
    answer: str | list[str]
    if isinstance(raw, list):
        parts = [scalar_text(a) for a in raw]
        if not parts or any(p is None or not p.strip() for p in parts):
            raise DataError(f"{where}: 'answer' list must hold non-empty strings")
        answer = [p for p in parts if p is not None]
    else:
        text = scalar_text(raw)
        if text is None or not text.strip():
            raise DataError(f"{where}: 'answer' must be a non-empty string, number or list of strings")
        answer = text
    row = dict(obj)
    row.update(id=row_id, question=question, answer=answer)
    return row


def jsonl_objects(path: str | os.PathLike[str], *, error: type[DataError] = DataError
                  ) -> Iterable[tuple[str, Any]]:
    """``(where, parsed object)`` for each non-blank line of a JSONL file, ``where`` being ``<path>:<line>``.

    A missing file, a line that is not JSON or a file that is not UTF-8 raises ``error`` (a :class:`DataError`
    subclass the caller names its own source by) with the place and the reason.

    Args:
        path: The JSONL file.
        error: The :class:`DataError` subclass to raise (the caller names its own source by it).

    Yields:
        ``(where, parsed object)`` pairs.

    Raises:
        DataError: A missing file, a line that is not JSON, or a file that is not UTF-8 (as ``error``).
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise error(f"{path}: no such data file")
    try:
        with path.open(encoding="utf-8") as handle:
            for lineno, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                where = f"{path}:{lineno}"
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise error(f"{where}: not valid JSON ({exc.msg})") from None
                yield where, obj
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text ({exc.reason})") from None


def _objects(source: str | os.PathLike[str] | Iterable[Mapping[str, Any]]) -> Iterable[tuple[str, Any]]:
    """``(where, parsed object)`` for each non-blank line of a file, or each item of an iterable."""
    if isinstance(source, (str, os.PathLike)):
        yield from jsonl_objects(source)
        return
    for index, obj in enumerate(source, 1):
        yield f"row {index}", obj


def read_rows(
    source: str | os.PathLike[str] | Iterable[Mapping[str, Any]],
    *,
    ids: IdPolicy = "require",
    unique_ids: bool = True,
) -> list[dict[str, Any]]:
    """Read and check rows from a JSONL file (or an iterable of dicts), in order.

    Every row needs ``question`` (non-empty string) and ``answer`` (string, number, or a non-empty list of
    them for multi-answer tasks; numbers are written out as strings); blank lines are skipped and other keys
    kept. An empty source gives ``[]``: whether that is an error is the caller's call.

    Args:
        source: A JSONL file or an iterable of dicts.
        ids: ``"require"``: every row needs an ``id`` (string or integer); ``"default"``: a missing one becomes
            ``<stem>-<n>`` (see :data:`IdPolicy`).
        unique_ids: Reject a repeated id, naming where it first appeared.

    Returns:
        The rows, in order.

    Raises:
        DataError: A bad row (a ``ValueError`` naming the file and line, or ``row N`` for an iterable), or a
            missing or non-UTF-8 file.
        ValueError: An unknown ``ids`` policy.
    """
    if ids not in ("require", "default"):
        raise ValueError(f"ids must be 'require' or 'default', got {ids!r}")
    stem = Path(source).stem if isinstance(source, (str, os.PathLike)) else "row"
    rows: list[dict[str, Any]] = []
    where_of: dict[str, str] = {}
    for where, obj in _objects(source):
        row = check_row(obj, where, default_id=f"{stem}-{len(rows)}" if ids == "default" else None)
        if unique_ids:
            # Ids key an eval's resume: two rows with one id would make one of them look already done.
            if row["id"] in where_of:
                raise DataError(f"{where}: duplicate id {row['id']!r} (first at {where_of[row['id']]})")
            where_of[row["id"]] = where
        rows.append(row)
    return rows
