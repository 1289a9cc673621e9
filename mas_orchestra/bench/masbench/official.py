"""The official MASBench: a local copy of the paper's published benchmark, read as ``{id, question, answer}`` rows.

The paper's data are published as a dataset with one subset per axis (``breadth``, ``depth``, ``horizon``,
``parallel``, ``robustness``) plus ``combine`` (every axis' train rows together), each with ``train``/``test``
splits stored as ``<subset>/<split>-*.parquet``. Every row has these string columns (the dataset card's
features): ``prompt_json`` (the verl chat messages, the question in the first user message),
``reward_model_json`` (``{"ground_truth": ...}``), ``extra_info_json``, ``axis``, ``data``, and ``value`` (the
axis value; the ``combine`` subset has none). A multi-answer ground truth (horizon, parallel, …) is one string
whose answers are joined by ``<<horizon>>``; the original splits it there and requires one ``\\boxed{}`` per
answer, all correct, in order. We split it the same way into a list, which
:func:`mas_orchestra.bench.grading.grade` grades answer by answer.

Data source string (eval ``--data`` and training ``--dataset`` / ``--val-dataset``)::

    masbench-official:<path>[:<subset>][:split=train|test]

``<path>`` is a parquet or JSONL file with those columns (``datasets``' ``to_parquet``/``to_json`` write
them), a subset folder (``depth/``) or the dataset's root folder (``<subset>/`` folders inside). For a file,
``<subset>`` keeps the rows whose ``axis`` is that subset; for the root folder it picks the folder. A folder
holding both splits needs ``split=``. Bad input raises :class:`OfficialMasbenchError` (a ``ValueError``)
naming the file: other columns than the official ones, an unknown subset (listing the subsets found), a
cell that is not JSON, a row without a question or ground truth.

Numbers on these rows are comparable with the paper's; numbers on our generator
(:func:`mas_orchestra.bench.masbench.generate`, an iGSM-style re-implementation) are not (docs/guides/evaluation.md,
"How its numbers relate to our generator's").
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from mas_orchestra.bench.datasets import jsonl_objects
from mas_orchestra.errors import DataError, MissingExtraError

__all__ = [
    "ANSWER_SEPARATOR",
    "OFFICIAL_COLUMNS",
    "OFFICIAL_SUBSETS",
    "SOURCE_PREFIX",
    "OfficialMasbenchError",
    "is_official_source",
    "load_official",
    "load_official_source",
    "parse_official_source",
]

SOURCE_PREFIX = "masbench-official:"
#: The columns every official row carries (``value`` too, except in the ``combine`` subset).
OFFICIAL_COLUMNS: tuple[str, ...] = ("prompt_json", "reward_model_json", "extra_info_json", "axis", "data")
OPTIONAL_COLUMNS: tuple[str, ...] = ("value",)
#: The subsets the published dataset card lists.
OFFICIAL_SUBSETS: tuple[str, ...] = ("breadth", "combine", "depth", "horizon", "parallel", "robustness")
ANSWER_SEPARATOR = "<<horizon>>"
_SPLITS = ("train", "test")
_SPLIT_OPTION = re.compile(r"^split=(.*)$")
_DATA_SUFFIXES = (".parquet", ".jsonl", ".json")


class OfficialMasbenchError(DataError):
    """A local copy of the official MASBench cannot be read as one: the message names the file and the fix."""


def is_official_source(spec: object) -> bool:
    """Whether ``spec`` is a ``masbench-official:…`` data source string.

    Args:
        spec: A data source (a path, a string, rows).

    Returns:
        True for such a string.
    """
    return isinstance(spec, str) and spec.strip().lower().startswith(SOURCE_PREFIX)


def parse_official_source(spec: str) -> tuple[Path, str | None, str | None]:
    """``masbench-official:<path>[:<subset>][:split=<s>]`` → ``(path, subset or None, split or None)``.

    Args:
        spec: The data source string.

    Raises:
        OfficialMasbenchError: Not such a source, or a split other than ``train`` / ``test``.
    """
    if not is_official_source(spec):
        raise OfficialMasbenchError(f"{spec!r}: not a {SOURCE_PREFIX}<path>[:<subset>][:split=train|test] source")
    parts = spec.strip()[len(SOURCE_PREFIX):].split(":")
    split = None
    if parts and _SPLIT_OPTION.match(parts[-1]):
        split = parts.pop()[len("split="):]
        if split not in _SPLITS:
            raise OfficialMasbenchError(f"{spec!r}: split must be one of {', '.join(_SPLITS)}, got {split!r}")
    subset = None
    # A last part that names no existing file is the subset (paths may hold ':' themselves, rarely).
    if len(parts) > 1 and not Path(":".join(parts)).expanduser().exists():
        subset = parts.pop()
    path_text = ":".join(parts)
    if not path_text:
        raise OfficialMasbenchError(f"{spec!r}: no path; write {SOURCE_PREFIX}<path>[:<subset>][:split=train|test]")
    return Path(path_text).expanduser(), subset or None, split


def _data_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in _DATA_SUFFIXES)


def _split_of(path: Path) -> str | None:
    stem = path.name.split(".")[0]
    return next((s for s in _SPLITS if stem == s or stem.startswith(f"{s}-") or stem.startswith(f"{s}_")), None)


def _choose_split(files: list[Path], split: str | None, where: Path) -> list[Path]:
    splits = sorted({s for s in map(_split_of, files) if s})
    if split is not None:
        chosen = [f for f in files if _split_of(f) == split]
        if not chosen:
            found = ", ".join(splits) or "none (files not named train-*/test-*)"
            raise OfficialMasbenchError(f"{where}: no {split} split; splits found: {found}")
        return chosen
    if len(splits) > 1:
        raise OfficialMasbenchError(f"{where}: holds splits {', '.join(splits)}; add :split=train or :split=test")
    return files


def _resolve_files(path: Path, subset: str | None, split: str | None) -> tuple[list[Path], bool]:
    """The data files to read, and whether ``subset`` still has to filter rows by their ``axis``."""
    if not path.exists():
        raise OfficialMasbenchError(f"{path}: no such file or folder (a local copy of the official MASBench)")
    if path.is_file():
        if split is not None and _split_of(path) not in (None, split):
            raise OfficialMasbenchError(f"{path}: a {_split_of(path)} file, but split={split} was asked for")
        return [path], subset is not None
    files = _data_files(path)
    subsets = sorted(p.name for p in path.iterdir() if p.is_dir() and _data_files(p))
    if files and not subsets:  # a subset folder: test-*.parquet, train-*.parquet
        return _choose_split(files, split, path), subset is not None
    if subset is None:
        raise OfficialMasbenchError(
            f"{path}: name a subset ({SOURCE_PREFIX}{path}:<subset>); subsets found: {', '.join(subsets) or 'none'}")
    if subset not in subsets:
        raise OfficialMasbenchError(f"{path}: unknown subset {subset!r}; subsets found: {', '.join(subsets) or 'none'}")
    return _choose_split(_data_files(path / subset), split, path / subset), False


def _read_table(path: Path) -> tuple[list[str], Iterable[tuple[str, Mapping[str, Any]]]]:
    """(columns, (where, row) pairs) of one parquet or JSONL file."""
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise MissingExtraError("reading parquet files", extra="eval", package="pyarrow") from None
        try:
            table = pq.read_table(path)
        except Exception as exc:  # pyarrow raises its own ArrowInvalid/OSError kinds for a damaged file
            raise OfficialMasbenchError(f"{path}: not a readable parquet file ({exc})") from None
        return list(table.column_names), ((f"{path} row {i}", row) for i, row in enumerate(table.to_pylist()))
    rows: list[tuple[str, Mapping[str, Any]]] = []
    columns: dict[str, None] = {}
    for where, obj in jsonl_objects(path, error=OfficialMasbenchError):
        if not isinstance(obj, dict):
            raise OfficialMasbenchError(f"{where}: a row must be a JSON object")
        columns.update(dict.fromkeys(obj))
        rows.append((where, obj))
    return list(columns), rows


def _check_columns(path: Path, columns: list[str]) -> None:
    missing = [c for c in OFFICIAL_COLUMNS if c not in columns]
    if missing:
        raise OfficialMasbenchError(
            f"{path}: not an official MASBench file: missing column(s) {', '.join(missing)}; expected "
            f"{', '.join(OFFICIAL_COLUMNS)} (and {', '.join(OPTIONAL_COLUMNS)} except in 'combine'); found "
            f"{', '.join(columns) or 'no columns'}")


def _json_cell(row: Mapping[str, Any], column: str, where: str) -> Any:
    value = row.get(column)
    if not isinstance(value, str):  # a JSONL export may already hold the decoded object
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise OfficialMasbenchError(f"{where}: column {column} is not JSON ({exc.msg})") from None


def _question(prompt: Any, extra: Any, where: str) -> str:
    if isinstance(extra, Mapping) and isinstance(extra.get("question"), str) and extra["question"].strip():
        return str(extra["question"])
    messages = [m for m in prompt if isinstance(m, Mapping)] if isinstance(prompt, list) else []
    users = [m for m in messages if m.get("role") == "user"]
    content = users[0].get("content") if users else None
    if not isinstance(content, str) or not content.strip():
        raise OfficialMasbenchError(f"{where}: prompt_json holds no user message with the question")
    return content


def _answers(reward: Any, where: str) -> str | list[str]:
    truth = reward.get("ground_truth") if isinstance(reward, Mapping) else None
    if isinstance(truth, (int, float)) and not isinstance(truth, bool):
        truth = str(truth)
    if isinstance(truth, list):
        parts = [str(t).strip() for t in truth]
    elif isinstance(truth, str):
        parts = [t.strip() for t in truth.split(ANSWER_SEPARATOR)]
    else:
        raise OfficialMasbenchError(f"{where}: reward_model_json has no ground_truth")
    if not parts or any(not p for p in parts):
        raise OfficialMasbenchError(f"{where}: ground_truth {truth!r} has an empty answer")
    return parts[0] if len(parts) == 1 else parts


def load_official(
    path: str | Path, subset: str | None = None, *, split: str | None = None
) -> list[dict[str, Any]]:
    """Rows ``{id, question, answer, source, axis, value, split}`` of a local copy of the official MASBench.

    ``answer`` is a string, or a list of strings for a multi-answer row (split at ``<<horizon>>``). ``id`` is
    ``masbench-<axis>-<split or file stem>-<n>``, ``n`` counting the rows read (stable for a given copy).

    Args:
        path: The dataset's root folder, a subset folder, or one parquet/JSONL file with the same columns.
        subset: The subset (``breadth``, ``depth``, ``horizon``, ``parallel``, ``robustness``, ``combine``).
        split: ``train`` or ``test`` (needed when a folder holds both).

    Returns:
        The rows.

    Raises:
        OfficialMasbenchError: A missing path, an unknown subset (the found ones listed), missing columns (the
            expected ones listed) or a folder with both splits and no ``split``.
    """
    path = Path(path).expanduser()
    files, filter_rows = _resolve_files(path, subset, split)
    out: list[dict[str, Any]] = []
    axes_seen: set[str] = set()
    for file in files:
        columns, rows = _read_table(file)
        _check_columns(file, columns)
        label = split or _split_of(file) or file.stem
        for where, row in rows:
            axis = str(row.get("axis") or "")
            axes_seen.add(axis)
            if filter_rows and axis != subset:
                continue
            extra = _json_cell(row, "extra_info_json", where)
            question = _question(_json_cell(row, "prompt_json", where), extra, where)
            value = row.get("value")
            out.append({
                "id": f"masbench-{axis or 'row'}-{label}-{len(out)}",
                "question": question,
                "answer": _answers(_json_cell(row, "reward_model_json", where), where),
                "source": f"masbench-official-{axis}" if axis else "masbench-official",
                "axis": axis,
                "value": None if value is None else str(value),
                "split": _split_of(file),
            })
    if filter_rows and not out:
        raise OfficialMasbenchError(
            f"{path}: unknown subset {subset!r}; subsets found (axis column): {', '.join(sorted(axes_seen)) or 'none'}")
    if not out:
        raise OfficialMasbenchError(f"{path}: no rows")
    return out


def load_official_source(spec: str) -> list[dict[str, Any]]:
    """:func:`load_official` of a ``masbench-official:<path>[:<subset>][:split=…]`` string.

    Args:
        spec: The source string.

    Returns:
        The rows.

    Raises:
        OfficialMasbenchError: A malformed string, or anything :func:`load_official` refuses.
    """
    path, subset, split = parse_official_source(spec)
    return load_official(path, subset, split=split)
