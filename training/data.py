"""Training data: our JSONL files, MASBench generated on the fly, and the original's verl parquet rows.

Every source becomes rows ``{"id", "question", "answer", "source"}`` (:func:`load_rows`) and then TRL rows
(:func:`build_dataset`)::

    {"prompt": orchestrator_messages(question, dom), "question": str, "answer": list[str], "id": str,
     "source": str}

``answer`` is ALWAYS a list of strings (one item for a single-answer task, several for the multi-answer
MASBench axes). Arrow cannot hold a column mixing strings and lists (``ArrowTypeError``), and a uniform
list column needs no encoding; grading treats ``["x"]`` exactly like ``"x"``.

Dataset spec strings (several joined by ``+``)::

    masbench:<axis>:<values>[:n=<per value>][:seed=<s>][:split=train|test]   e.g. masbench:depth:2,3:n=8:seed=0
    masbench-official:<path>[:<subset>][:split=train|test]                    the paper's published MASBench
    jsonl:<path>  or  <path>.jsonl                                           rows {id, question, answer}
    parquet:<path>[:prompt=rebuild|keep]  or  <path>.parquet                  verl rows (see load_verl_parquet)

``values`` is a comma list and/or ranges (``2-4``). MASBench defaults: ``n=8``, ``seed=0``, ``split=train``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from mas_orchestra.bench.datasets import read_rows
from mas_orchestra.bench.masbench import generate
from mas_orchestra.bench.masbench.graph import evaluate as evaluate_graph
from mas_orchestra.bench.masbench.graph import op_depths
from mas_orchestra.bench.masbench.official import is_official_source, load_official_source
from mas_orchestra.prompts import orchestrator_messages
from mas_orchestra.registry import AgentRegistry, default_registry

__all__ = [
    "build_dataset",
    "filter_long_prompts",
    "load_jsonl",
    "load_masbench",
    "load_rows",
    "load_verl_parquet",
    "parse_values",
    "to_trl_rows",
]

log = logging.getLogger(__name__)

_OPTION = re.compile(r"^(n|seed|split|prompt)=(.*)$")


def _answers(value: Any, where: str) -> list[str]:
    """A ground truth as a non-empty list of strings."""
    if hasattr(value, "tolist"):  # numpy scalars/arrays from parquet
        value = value.tolist()
    if isinstance(value, bool) or value is None:
        raise ValueError(f"{where}: answer must be a string, a number or a list of them, got {value!r}")
    if isinstance(value, (str, int, float)):
        return [str(value)]
    if isinstance(value, Sequence) and value and all(isinstance(v, (str, int, float)) for v in value):
        return [str(v) for v in value]
    raise ValueError(f"{where}: answer must be a string, a number or a non-empty list of them, got {value!r}")


def parse_values(text: str) -> list[int]:
    """``"2,3"`` → [2, 3]; ``"2-4"`` → [2, 3, 4]; combinations allowed (``"2,5-6"``).

    Args:
        text: The values as written in a ``masbench:`` spec.

    Returns:
        The values, in order.

    Raises:
        ValueError: Not numbers or ranges, or none at all.
    """
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            out.extend(range(int(lo), int(hi) + 1) if sep else [int(part)])
        except ValueError:
            raise ValueError(f"bad MASBench values {text!r}: write e.g. 2,3 or 2-4") from None
    if not out:
        raise ValueError(f"no MASBench values in {text!r}")
    return out


def load_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Rows ``{id, question, answer: list[str], source}`` of a JSONL file (blank lines skipped; ids default to
    ``<stem>-<n>``, ``source`` to the stem).

    Read by the reader evaluations use (:func:`mas_orchestra.bench.datasets.read_rows`), so a bad row raises
    :class:`~mas_orchestra.errors.DataError` (a ``ValueError``) naming the file and line. Repeated ids are
    allowed here (an eval refuses them: there they key the resume).

    Args:
        path: The JSONL file (``~`` expanded).

    Returns:
        The rows, ``answer`` always a list.
    """
    path = Path(path).expanduser()
    return [
        {
            "id": row["id"],
            "question": row["question"],
            "answer": [row["answer"]] if isinstance(row["answer"], str) else list(row["answer"]),
            "source": str(row.get("source", path.stem)),
        }
        for row in read_rows(path, ids="default", unique_ids=False)
    ]


def load_masbench(axis: str, values: Sequence[int], n: int = 8, seed: int = 0, split: str = "train") -> list[dict]:
    """MASBench problems generated on the fly (:func:`mas_orchestra.bench.masbench.generate`).

    Each row carries its ``intermediates``: the quantities on a longest dependency chain of each answer, one
    per level, as ``the <quantity> = <value>`` facts (the reward's optional partial credit counts how many of
    them the final agent's text states).

    Args:
        axis: The MASBench axis.
        values: The axis values.
        n: Problems per value.
        seed: The random seed.
        split: ``train`` or ``test``.

    Returns:
        Rows ``{id, question, answer: list[str], source, intermediates}``.
    """
    rows = generate(axis, list(values), n, seed, split)
    return [
        {"id": r["id"], "question": r["question"], "answer": _answers(r["answer"], r["id"]),
         "source": f"masbench-{axis}", "intermediates": intermediate_facts(r["graph"], r["targets"])}
        for r in rows
    ]


def intermediate_facts(graph: Mapping[str, Mapping[str, Any]], targets: Sequence[str]) -> list[str]:
    """``the <quantity> = <value>`` for the quantities on one longest dependency chain of each target, from the
    first operation up to the target: one fact per level, so the share a final agent states is how far up the
    chain it got (side quantities, which one round of arithmetic computes at once, are left out).

    Args:
        graph: The task's quantities by name, each with an ``op`` and its ``inputs`` (as the MASBench graph).
        targets: The quantities the question asks for.

    Returns:
        The facts, target after target, each chain from its first operation up.
    """
    values = evaluate_graph(graph)  # type: ignore[arg-type]
    depth = op_depths(graph)  # type: ignore[arg-type]
    facts: list[str] = []
    for target in targets:
        chain, name = [], target
        while graph[name]["op"] != "const":
            chain.append(name)
            name = max(graph[name]["inputs"], key=lambda x: depth[x])
        facts.extend(f"the {q} = {values[q]}" for q in reversed(chain))
    return facts


def _first_user_text(prompt: Any) -> str:
    if hasattr(prompt, "tolist"):
        prompt = prompt.tolist()
    if isinstance(prompt, str):
        return prompt
    messages = [m for m in prompt if isinstance(m, Mapping)]
    users = [m for m in messages if m.get("role") == "user"] or messages
    if not users:
        raise ValueError("the verl 'prompt' holds no chat message")
    return str(users[0].get("content", ""))


def load_verl_parquet(path: str | Path, *, prompt: str = "rebuild") -> list[dict[str, Any]]:
    """Rows of the original's verl parquet: ``prompt`` (chat messages, the question in the first user message),
    ``reward_model.ground_truth`` (a string or a list for multi-answer tasks), ``data_source``, ``extra_info``.

    The question is ``extra_info["question"]`` when present, else the first user message's content.

    Args:
        path: The parquet file (``~`` expanded).
        prompt: ``"rebuild"`` (default) writes our orchestrator prompt around that question (rows carry no
            ``prompt``); ``"keep"`` keeps the parquet's messages as the row's ``prompt`` (they then must
            already be an orchestrator prompt).

    Returns:
        Rows ``{id, question, answer: list[str], source}`` (plus ``prompt`` with ``"keep"``).

    Raises:
        ValueError: ``prompt`` is neither ``"rebuild"`` nor ``"keep"``, or a row has no
            ``reward_model.ground_truth``.
    """
    if prompt not in ("rebuild", "keep"):
        raise ValueError(f"prompt must be 'rebuild' or 'keep', got {prompt!r}")
    import pyarrow.parquet as pq

    path = Path(path).expanduser()
    rows = []
    for number, data in enumerate(pq.read_table(path).to_pylist()):
        where = f"{path} row {number}"
        reward_model = data.get("reward_model") or {}
        if "ground_truth" not in reward_model:
            raise ValueError(f"{where}: no reward_model.ground_truth")
        extra = data.get("extra_info") or {}
        question = extra.get("question") if isinstance(extra.get("question"), str) else None
        if question is None:
            question = _first_user_text(data.get("prompt") or [])
        source = str(data.get("data_source") or path.stem)
        index = extra.get("index", number)
        row: dict[str, Any] = {
            "id": str(extra.get("id", f"{source}-{index}")),
            "question": question,
            "answer": _answers(reward_model["ground_truth"], where),
            "source": source,
        }
        if prompt == "keep":
            row["prompt"] = [
                {"role": str(m["role"]), "content": str(m["content"])} for m in (data.get("prompt") or [])
            ]
        rows.append(row)
    return rows


def _split_options(parts: list[str]) -> tuple[list[str], dict[str, str]]:
    options: dict[str, str] = {}
    while parts and _OPTION.match(parts[-1]):
        key, value = _OPTION.match(parts.pop()).groups()  # type: ignore[union-attr]
        options[key] = value
    return parts, options


def _load_one(spec: str) -> list[dict[str, Any]]:
    text = spec.strip()
    kind, _, rest = text.partition(":")
    kind = kind.lower()
    if kind == "masbench":
        parts, options = _split_options(rest.split(":"))
        if len(parts) != 2:
            raise ValueError(f"dataset {spec!r}: write masbench:<axis>:<values>[:n=8][:seed=0][:split=train]")
        unknown = set(options) - {"n", "seed", "split"}
        if unknown:
            raise ValueError(f"dataset {spec!r}: unknown options {sorted(unknown)}")
        return load_masbench(
            parts[0], parse_values(parts[1]), n=int(options.get("n", 8)), seed=int(options.get("seed", 0)),
            split=options.get("split", "train"),
        )
    if is_official_source(text):
        return [
            {"id": r["id"], "question": r["question"], "answer": _answers(r["answer"], r["id"]), "source": r["source"]}
            for r in load_official_source(text)
        ]
    if kind == "jsonl" or text.endswith(".jsonl"):
        return load_jsonl(rest if kind == "jsonl" else text)
    if kind in ("parquet", "verl") or text.endswith(".parquet") or ".parquet:" in text:
        parts, options = _split_options((rest if kind in ("parquet", "verl") else text).split(":"))
        unknown = set(options) - {"prompt"}
        if unknown:
            raise ValueError(f"dataset {spec!r}: unknown options {sorted(unknown)}")
        return load_verl_parquet(":".join(parts), prompt=options.get("prompt", "rebuild"))
    raise ValueError(
        f"unknown dataset {spec!r}; valid forms: masbench:<axis>:<values>[:n=..][:seed=..][:split=..], "
        "masbench-official:<path>[:<subset>][:split=train|test], "
        "jsonl:<path> or <path>.jsonl, parquet:<path>[:prompt=rebuild|keep] or <path>.parquet; join several with +"
    )


def load_rows(spec: str, *, limit: int | None = None) -> list[dict[str, Any]]:
    """Rows ``{id, question, answer: list[str], source}`` (plus ``prompt`` for kept verl prompts) of a dataset.

    Args:
        spec: A dataset spec string (module docstring): ``masbench:…``, ``masbench-official:…``, ``jsonl:…``,
            ``parquet:…``, or several joined with ``+``.
        limit: Keep the first rows only.

    Returns:
        The rows.

    Raises:
        ValueError: An unknown form or no rows (a bad row is a ``DataError``, also a ``ValueError``).
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError("dataset spec must be a non-empty string")
    rows: list[dict[str, Any]] = []
    for part in spec.split("+"):
        rows.extend(_load_one(part))
    if limit is not None:
        rows = rows[: max(0, int(limit))]
    if not rows:
        raise ValueError(f"dataset {spec!r} has no rows")
    return rows


def to_trl_rows(
    rows: Iterable[Mapping[str, Any]], dom: str = "high", *, registry: AgentRegistry | None = None,
    prompt: str | None = None,
) -> list[dict[str, Any]]:
    """TRL rows: the orchestrator prompt as chat messages plus the columns the reward reads.

    Args:
        rows: Rows as :func:`load_rows` returns them (a row's own ``prompt`` is kept).
        dom: ``high`` or ``low``.
        registry: The kinds offered in the prompt (default: the built-in kinds without search).
        prompt: A template folder (see :mod:`mas_orchestra.prompt_templates`; ``None``: ours).

    Returns:
        Dicts with ``prompt``, ``question``, ``answer``, ``id`` and ``source``.
    """
    registry = registry or default_registry.without_search()
    out = []
    for row in rows:
        messages = row.get("prompt") or orchestrator_messages(
            row["question"], dom, registry=registry, prompt=prompt  # type: ignore[arg-type]
        )
        out.append({
            "prompt": [dict(m) for m in messages],
            "question": row["question"],
            "answer": list(row["answer"]),
            "id": str(row["id"]),
            "source": str(row.get("source", "")),
            "intermediates": [str(f) for f in row.get("intermediates") or ()],
        })
    return out


def build_dataset(
    spec: str, dom: str = "high", *, registry: AgentRegistry | None = None, limit: int | None = None,
    prompt: str | None = None,
) -> Any:
    """A ``datasets.Dataset`` of TRL rows for a dataset spec string.

    Args:
        spec: A dataset spec string (see :func:`load_rows`).
        dom: ``high`` or ``low``.
        registry: The kinds offered in the prompt.
        limit: Keep the first rows only.
        prompt: The template folder (``None``: ours).

    Returns:
        The dataset.
    """
    from datasets import Dataset

    return Dataset.from_list(to_trl_rows(load_rows(spec, limit=limit), dom, registry=registry, prompt=prompt))


def filter_long_prompts(dataset: Any, tokenizer: Any, max_prompt_length: int | None) -> Any:
    """Drop rows whose templated prompt is longer than ``max_prompt_length`` tokens (TRL 1.x no longer
    truncates prompts; cutting an orchestrator prompt would cut the question, which comes last).

    Args:
        dataset: A ``datasets.Dataset`` with a conversational ``prompt`` column.
        tokenizer: The orchestrator's tokenizer (its chat template measures the prompts).
        max_prompt_length: The most prompt tokens; ``None`` or 0 keeps every row.

    Returns:
        The rows that fit (a warning says how many were dropped).

    Raises:
        ValueError: No prompt fits.
    """
    if not max_prompt_length:
        return dataset

    def length(row: Mapping[str, Any]) -> int:
        ids = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True)
        if isinstance(ids, Mapping):  # transformers 5 returns a BatchEncoding
            ids = ids["input_ids"]
        return len(ids)

    kept = dataset.filter(lambda row: length(row) <= max_prompt_length)
    dropped = len(dataset) - len(kept)
    if dropped:
        log.warning("dropped %d of %d prompts longer than max_prompt_length=%d tokens",
                    dropped, len(dataset), max_prompt_length)
    if not len(kept):
        raise ValueError(f"every prompt is longer than max_prompt_length={max_prompt_length} tokens")
    return kept
