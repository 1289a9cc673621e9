"""Eval and training output folders, read from disk through a byte-offset index.

An eval folder holds ``results.jsonl`` (one record per question × sample, written by ``mas-orchestra eval``);
a training folder holds ``rollouts.jsonl`` (one record per sampled orchestration, with its ``step``) and/or
``trainer_state.json`` (the per-step log the reward curve comes from). A JSONL file is scanned once, line by
line, keeping for each line only its byte offset, its length and the few fields the table filters on; a
record is read back with one ``seek`` when it is opened. A file that grows (a run still going) is indexed
further from where the last scan stopped; an unterminated last line (a writer stopped mid-line) waits until
it is complete, and a line that is not a JSON record is listed as a warning, never fatal.

Only the files of the folders given at start are ever opened: routes name a folder by its number and a
record by its row number, never by a path.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mas_orchestra.bench.training_curve import STATE_FILE, TrainingCurveError, find_trainer_state, load_curve
from mas_orchestra.studio.common import RunFolderError, StudioInputError, clip
from mas_orchestra.studio.graph import graph_of, spec_graph_or_problems

__all__ = ["RESULTS_FILE", "ROLLOUTS_FILE", "RowFilter", "RunFile", "RunFolder", "open_run_folders"]

RESULTS_FILE = "results.jsonl"
ROLLOUTS_FILE = "rollouts.jsonl"
MAX_PAGE = 200
_QUESTION_CHARS = 160
_READ_BLOCK = 1 << 20
_MAX_WARNINGS = 50


@dataclass(slots=True)
class Row:
    """What the table shows and filters on for one JSONL line (the record itself stays on disk).

    Attributes:
        number: Row number among the readable records, 0-based.
        line: 1-based line in the file.
        offset: Byte offset of the line.
        length: Byte length of the line.
        id: ``<id>#<sample>`` of an eval record, ``step <s> #<index>`` of a rollout.
        status: The run status.
        correct: Whether the answer was correct (``None``: not recorded).
        kinds: The agent kinds of the spec, sorted.
        agents: Agents in the spec (``None``: no valid spec).
        calls: Sub-agent calls.
        cost: Cost in USD.
        step: The training step (rollouts only).
        reward: The reward (rollouts only; NaN when not recorded).
        question: The question, clipped.
    """

    number: int
    line: int
    offset: int
    length: int
    id: str
    status: str
    correct: bool | None
    kinds: tuple[str, ...]
    agents: int | None
    calls: int
    cost: float
    step: int | None
    reward: float | None
    question: str

    def public(self) -> dict[str, Any]:
        return {
            "row": self.number, "line": self.line, "id": self.id, "status": self.status, "correct": self.correct,
            "kinds": list(self.kinds), "agents": self.agents, "calls": self.calls, "cost": self.cost,
            "step": self.step, "reward": self.reward, "question": self.question,
        }


_SHARED: dict[Any, Any] = {}


def _shared(value: Any) -> Any:
    """One object per distinct status string / kinds tuple across all rows (thousands of rows share a few)."""
    return _SHARED.setdefault(value, value)


def _number(value: Any, default: float = 0.0) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def _eval_row(record: dict[str, Any], number: int, line: int, offset: int, length: int) -> Row:
    spec = record["spec"] if isinstance(record.get("spec"), dict) else None
    nodes = (spec.get("nodes") or []) if spec else []
    usage: dict[str, Any] = record["usage"] if isinstance(record.get("usage"), dict) else {}
    return Row(
        number=number, line=line, offset=offset, length=length,
        id=f"{record.get('id', line)}#{record.get('sample', 0)}", status=_shared(str(record.get("status", "?"))),
        correct=bool(record["correct"]) if "correct" in record else None,
        kinds=_shared(tuple(sorted({str(n.get("agent")) for n in nodes if isinstance(n, dict)}))),
        agents=len(nodes) if spec else None, calls=int(_number(usage.get("subagent_calls"))),
        cost=_number(usage.get("cost_usd")), step=None, reward=None,
        question=clip(record.get("question"), _QUESTION_CHARS),
    )


def _rollout_row(record: dict[str, Any], number: int, line: int, offset: int, length: int) -> Row:
    counts: dict[str, Any] = record["agent_counts"] if isinstance(record.get("agent_counts"), dict) else {}
    agents = record.get("agents")
    step = record.get("step")
    return Row(
        number=number, line=line, offset=offset, length=length,
        id=f"step {step} #{record.get('index', line)}", status=_shared(str(record.get("status", "?"))),
        correct=bool(record["correct"]) if "correct" in record else None,
        kinds=_shared(tuple(sorted(str(k) for k, n in counts.items() if n))),
        agents=agents if isinstance(agents, int) else None,
        calls=int(_number(record.get("subagent_calls"))), cost=_number(record.get("cost_usd")),
        step=step if isinstance(step, int) else None, reward=_number(record.get("reward"), math.nan),
        question=clip(record.get("question"), _QUESTION_CHARS),
    )


@dataclass
class RowFilter:
    """The table's filters; ``None`` lets every row through.

    Attributes:
        status: The row's run status.
        correct: Whether the answer was correct.
        kind: An agent kind the row's spec uses.
        agents: The number of agents in the row's spec.
        step: The training step of the row.
        text: Lower-case text found in the row's question or id.
    """

    status: str | None = None
    correct: bool | None = None
    kind: str | None = None
    agents: int | None = None
    step: int | None = None
    text: str | None = None

    def accepts(self, row: Row) -> bool:
        """Whether an indexed row passes every set filter.

        Args:
            row: The indexed row.
        """
        return (
            (self.status is None or row.status == self.status)
            and (self.correct is None or row.correct is self.correct)
            and (self.kind is None or self.kind in row.kinds)
            and (self.agents is None or row.agents == self.agents)
            and (self.step is None or row.step == self.step)
            and (self.text is None or self.text in row.question.lower() or self.text in row.id.lower())
        )


@dataclass
class RunFile:
    """One JSONL file of a run folder and its index (see the module docstring).

    Attributes:
        path: The file.
        kind: ``eval`` (``results.jsonl``) or ``training`` (``rollouts.jsonl``).
        rows: The readable records indexed so far.
        warnings: Lines skipped as unreadable (the first few).
        indexed_to: Bytes of the file indexed so far.
        lines: Lines read so far.
        pending_tail: An unterminated last line is waiting for the rest.
    """

    path: Path
    kind: str  # "eval" | "training"
    rows: list[Row] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    indexed_to: int = 0
    lines: int = 0
    pending_tail: bool = False
    _stamp: tuple[int, int] = (-1, -1)

    def refresh(self) -> None:
        """Index what was appended since the last scan (all of it again if the file shrank or was replaced)."""
        try:
            stat = self.path.stat()
        except OSError as exc:
            raise StudioInputError(f"{self.path}: cannot be read any more ({exc})", status=410) from exc
        stamp = (stat.st_size, stat.st_mtime_ns)
        if stamp == self._stamp:
            return
        if stat.st_size < self.indexed_to:  # rewritten: start over
            self.rows.clear()
            self.warnings.clear()
            self.indexed_to = self.lines = 0
        self._scan(stat.st_size)
        self._stamp = stamp

    def _scan(self, size: int) -> None:
        make = _eval_row if self.kind == "eval" else _rollout_row
        with self.path.open("rb") as handle:
            handle.seek(self.indexed_to)
            offset, carry = self.indexed_to, b""
            while offset + len(carry) < size:
                block = handle.read(min(_READ_BLOCK, size - offset - len(carry)))
                if not block:
                    break
                data = carry + block
                start = 0
                while (end := data.find(b"\n", start)) >= 0:
                    self._index_line(data[start:end], offset + start, make)
                    start = end + 1
                offset += start
                carry = data[start:]
            self.indexed_to = offset
            self.pending_tail = bool(carry.strip())

    def _index_line(self, raw: bytes, offset: int, make: Any) -> None:
        self.lines += 1
        if not raw.strip():
            return
        try:
            record = json.loads(raw)
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
            row = make(record, len(self.rows), self.lines, offset, len(raw))
        except (ValueError, TypeError, KeyError) as exc:
            if len(self.warnings) < _MAX_WARNINGS:
                self.warnings.append(f"{self.path.name}:{self.lines}: skipped, not a readable record ({exc})")
            return
        self.rows.append(row)

    def record(self, number: int) -> dict[str, Any]:
        """The full record of row ``number`` (read from disk).

        Args:
            number: The row number (0-based, among the readable records).

        Raises:
            StudioInputError: No such row (404), or a line that changed on disk (409).
        """
        self.refresh()
        if not 0 <= number < len(self.rows):
            raise StudioInputError(
                f"{self.path.name} has rows 0..{len(self.rows) - 1}; there is no row {number}", status=404
            )
        row = self.rows[number]
        with self.path.open("rb") as handle:
            handle.seek(row.offset)
            raw = handle.read(row.length)
        try:
            record: dict[str, Any] = json.loads(raw)
        except ValueError as exc:
            where = f"{self.path.name}:{row.line}"
            raise StudioInputError(f"{where} changed on disk; reopen the folder", status=409) from exc
        return record

    def tail_warning(self) -> list[str]:
        """A warning about an incomplete last line, if the file has one."""
        if not self.pending_tail:
            return []
        return [f"{self.path.name}:{self.lines + 1}: the last line is incomplete (the writer stopped or is still "
                "writing it); it is left out until it ends"]


class RunFolder:
    """An eval or training output folder (see the module docstring).

    Args:
        number: The folder's number in the studio's list.
        path: The folder.
    """

    def __init__(self, number: int, path: Path) -> None:
        self.number = number
        self.path = path
        self.name = path.name or str(path)
        results, rollouts = path / RESULTS_FILE, path / ROLLOUTS_FILE
        self.kind = "eval" if results.is_file() else "training"
        self.file: RunFile | None = None
        if results.is_file():
            self.file = RunFile(results, "eval")
        elif rollouts.is_file():
            self.file = RunFile(rollouts, "training")
        self.state_file: Path | None = None
        if self.kind == "training":
            try:
                self.state_file = find_trainer_state(path)
            except TrainingCurveError:
                self.state_file = None

    @staticmethod
    def is_run_folder(path: Path) -> bool:
        """Whether ``path`` holds an eval or a training run (or a checkpoint folder of one).

        Args:
            path: The folder.
        """
        if (path / RESULTS_FILE).is_file() or (path / ROLLOUTS_FILE).is_file() or (path / STATE_FILE).is_file():
            return True
        return any((d / STATE_FILE).is_file() for d in path.glob("checkpoint-*"))

    def summary(self) -> dict[str, Any]:
        """The run's kind, counts and facets for the browse view (the file is indexed further first)."""
        if self.file is not None:
            self.file.refresh()
        rows = self.file.rows if self.file else []
        return {
            "folder": self.number, "name": self.name, "path": str(self.path), "kind": self.kind,
            "file": self.file.path.name if self.file else None, "rows": len(rows),
            "statuses": dict(Counter(r.status for r in rows)),
            "kinds": sorted({k for r in rows for k in r.kinds}),
            "steps": sorted({r.step for r in rows if r.step is not None}),
            "correct": sum(1 for r in rows if r.correct),
            "has_curve": self.kind == "training" and (self.state_file is not None or bool(rows)),
            "warnings": (self.file.warnings + self.file.tail_warning()) if self.file else [],
        }

    def page(self, row_filter: RowFilter, offset: int, limit: int) -> dict[str, Any]:
        """One page of rows passing ``row_filter`` (``StudioInputError`` for a bad offset or limit).

        Args:
            row_filter: The filters.
            offset: Matching rows to skip (at least 0).
            limit: Most rows on the page (1 to ``MAX_PAGE``).
        """
        if self.file is None:
            return {"total": 0, "offset": 0, "rows": []}
        if not 1 <= limit <= MAX_PAGE or offset < 0:
            raise StudioInputError(f"page: offset must be >= 0 and limit 1..{MAX_PAGE}, got {offset}, {limit}")
        self.file.refresh()
        matched = [row for row in self.file.rows if row_filter.accepts(row)]
        return {"total": len(matched), "offset": offset, "rows": [r.public() for r in matched[offset:offset + limit]]}

    def sample(self, number: int) -> dict[str, Any]:
        """One record with what the page derives from it (diagram, warnings, node outputs).

        Args:
            number: The row number.

        Raises:
            StudioInputError: The folder has no results or rollouts file (404), or no such row.
        """
        if self.file is None:
            raise StudioInputError(f"{self.path} has no {RESULTS_FILE} or {ROLLOUTS_FILE}: no samples", status=404)
        record = self.file.record(number)
        return {"row": number, "record": record, **_derived(record, self.kind)}

    def curve(self) -> dict[str, Any]:
        """Reward and agent-kind shares per step (and, from ``trainer_state.json``, the structure metrics
        ``structure/*``: mean depth along edges and along references, width, wired share): from
        ``trainer_state.json`` when there is one, else from the rollouts themselves."""
        if self.kind != "training":
            raise StudioInputError(f"{self.path} is an eval folder; reward curves belong to training folders")
        if self.state_file is not None:
            try:
                points = load_curve(self.state_file)
            except TrainingCurveError as exc:
                raise StudioInputError(str(exc), status=422) from exc
            return {"source": str(self.state_file.name), "points": [
                {"step": p.step, "reward": _finite(p.reward), "valid": _finite(p.valid_spec_rate),
                 "shares": {k: _finite(v) for k, v in p.agent_share.items()},
                 "structure": {k: _finite(v) for k, v in p.structure.items()}} for p in points]}
        return {"source": ROLLOUTS_FILE, "points": self._rollout_curve()}

    def _rollout_curve(self) -> list[dict[str, Any]]:
        assert self.file is not None
        self.file.refresh()
        rewards: dict[int, list[float]] = defaultdict(list)
        for row in self.file.rows:
            if row.step is not None and row.reward is not None and not math.isnan(row.reward):
                rewards[row.step].append(row.reward)
        # Kind shares need the per-kind counts, which the index does not keep: read them per step from disk.
        counts: dict[int, Counter[str]] = defaultdict(Counter)
        with self.file.path.open("rb") as handle:
            for row in self.file.rows:
                if row.step is None or not row.kinds:
                    continue
                handle.seek(row.offset)
                agent_counts = json.loads(handle.read(row.length)).get("agent_counts") or {}
                counts[row.step].update({k: int(v) for k, v in agent_counts.items() if isinstance(v, int)})
        points = []
        for step in sorted(set(rewards) | set(counts)):
            total = sum(counts[step].values())
            points.append({
                "step": step, "reward": sum(rewards[step]) / len(rewards[step]) if rewards[step] else None,
                "valid": None, "shares": {k: n / total for k, n in sorted(counts[step].items())} if total else {},
            })
        return points


def _finite(value: float) -> float | None:
    return None if math.isnan(value) else value


def _derived(record: dict[str, Any], kind: str) -> dict[str, Any]:
    """The diagram, orchestration text, warnings and node outputs of one record."""
    warnings: list[str] = []
    graph = None
    if kind == "eval":
        orchestration = str(record.get("orchestration") or "")
        graph, problems = spec_graph_or_problems(record.get("spec"))
        warnings += [f"stored spec: {p}" for p in problems]
        shown, chars = len(orchestration), record.get("orchestration_chars")
        if isinstance(chars, int) and chars > shown:
            warnings.append(f"orchestration text cut to {shown} of {chars} characters when it was stored")
    else:
        orchestration = str(record.get("completion") or "")
        if orchestration.strip():
            graph, problems = _parse_completion(orchestration)
            warnings += problems
    for key, label in (("error", "error"), ("grade_error", "grading"), ("failed_node", "failed node")):
        if record.get(key):
            warnings.append(f"{label}: {record[key]}")
    nodes = record.get("node_results") if isinstance(record.get("node_results"), dict) else {}
    return {"graph": graph, "orchestration": orchestration, "warnings": warnings, "node_results": nodes}


def _parse_completion(text: str) -> tuple[dict[str, Any] | None, list[str]]:
    from mas_orchestra.errors import SpecError
    from mas_orchestra.spec import GraphSpec

    try:
        return graph_of(GraphSpec.from_text(text)), []
    except SpecError as exc:
        return None, [f"orchestration: {p}" for p in exc.problems]


def open_run_folders(paths: list[str | os.PathLike[str]]) -> list[RunFolder]:
    """The run folders under ``paths``: each one a run folder or a folder whose sub-folders are.

    Args:
        paths: The folders given with ``--runs`` (``~`` expanded).

    Raises:
        RunFolderError: A path that is no folder, or neither kind, naming the files expected.
    """
    found: list[Path] = []
    for given in paths:
        path = Path(given).expanduser().resolve()
        if not path.is_dir():
            raise RunFolderError(f"--runs {given}: no such folder")
        if RunFolder.is_run_folder(path):
            found.append(path)
            continue
        children = sorted(d for d in path.iterdir() if d.is_dir() and RunFolder.is_run_folder(d))
        if not children:
            raise RunFolderError(
                f"--runs {given}: not a run folder: no {RESULTS_FILE} (an eval's --out), no {ROLLOUTS_FILE} or "
                f"{STATE_FILE} (a training --output-dir), and no sub-folder with one"
            )
        found.extend(children)
    return [RunFolder(number, path) for number, path in enumerate(dict.fromkeys(found))]
