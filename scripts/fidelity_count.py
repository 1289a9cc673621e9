"""Count how many orchestration texts we read the way the original system read them.

Usage: python scripts/fidelity_count.py DIR [DIR ...]   (files named <anything>.<high|low>.txt)

Each text is read twice: by our parser (``parse_orchestration``, default lenient reading) and by a model of
the original's reading written here from its public code's documented behaviour (DESIGN.md §11): low DoM
takes the first ``<agent_name>`` / ``<required_arguments>`` anywhere and ignores ``<answer>`` when an agent
exists; high DoM takes every closed ``<agent>…</agent>`` block that has an id and a name, the first
``<edge>`` block's ``<from>``/``<to>`` pairs in order, and checks the graph; with no agent, the first
``<answer>`` is the direct answer, and with none the whole response is. Two readings agree when both run
the same agents (kind and input; ids and edges in high DoM), or give the same direct answer, or both
refuse. Prints one line per text and the totals (``--json`` for machine-readable output).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

_ORIGINAL_KINDS = {"cotagent": "cot", "scagent": "sc", "reflexionagent": "reflexion", "debateagent": "debate",
                   "websearchagent": "search"}
_HARMONY = re.compile(r"<\|assistant_final\|>|assistantfinal|assistant[ \t]final(?![a-z])", re.I)


def _extract(text: str, tag: str) -> str:
    """First ``<tag>`` (any case): up to its close, else up to the next tag, else to the end; stripped."""
    for pattern in (rf"<{tag}>\s*(.*?)\s*</{tag}>", rf"<{tag}>\s*(.*?)(?=\s*<[^>]+>)", rf"<{tag}>\s*(.*)"):
        found = re.search(pattern, text, re.S | re.I)
        if found:
            return found.group(1).strip()
    return ""


def _input(raw: str) -> str:
    return "" if raw in ('""', "") else raw


def _graph_ok(ids: list[str], edges: list[tuple[str, str]]) -> bool:
    known = set(ids)
    if any(a not in known or b not in known for a, b in edges):
        return False
    if len(ids) > 1 and not edges:
        return False
    if len(ids) == 1:
        return True
    sinks = known - {a for a, _ in edges}
    if len(sinks) != 1 or not known - {b for _, b in edges}:
        return False
    order, indeg = [], {i: 0 for i in known}
    for _, b in edges:
        indeg[b] += 1
    queue = [i for i in known if indeg[i] == 0]
    while queue:
        node = queue.pop()
        order.append(node)
        for a, b in edges:
            if a == node:
                indeg[b] -= 1
                if indeg[b] == 0:
                    queue.append(b)
    return len(order) == len(known)


def original_reading(text: str, dom: str) -> tuple[Any, ...]:
    """What the original ran for ``text``: ("agents", agents, edges) | ("direct", answer) | ("fails",)."""
    last = None
    for match in _HARMONY.finditer(text):
        last = match
    text = text[last.end():] if last else text
    if dom == "low":
        name = _extract(text, "agent_name")
        if name:
            kind = _ORIGINAL_KINDS.get(name.lower())
            args = _extract(text, "required_arguments")
            if kind is None or not args:
                return ("fails",)
            return _agents([(None, kind, _input(_extract(args, "agent_input")))], set())
    else:
        agents = []
        for block in re.findall(r"<agent>(.*?)</agent>", text, re.S | re.I):
            agent_id, name = _extract(block, "agent_id"), _extract(block, "agent_name")
            if agent_id and name:
                args = _extract(block, "required_arguments")
                agents.append((agent_id, name.lower(), _input(_extract(args, "agent_input"))))
        if agents:
            edge_block = _extract(text, "edge")
            sources = re.findall(r"<from>(.*?)</from>", edge_block, re.S | re.I)
            targets = re.findall(r"<to>(.*?)</to>", edge_block, re.S | re.I)
            edges = tuple((a.strip(), b.strip()) for a, b in zip(sources, targets))
            first: dict[str, tuple[str, str, str]] = {}
            for agent in agents:  # a repeated id: its execution looks the id up and finds the first block
                first.setdefault(agent[0], agent)
            agents = list(first.values())
            if not _graph_ok(list(first), list(edges)) or any(a[1] not in _ORIGINAL_KINDS for a in agents):
                return ("fails",)
            return _agents([(i, _ORIGINAL_KINDS[n], inp) for i, n, inp in agents], set(edges))
    answer = _extract(text, "answer")
    return ("direct", answer if answer else text.strip())


def our_reading(text: str, dom: str, *, whole_response_fallback: bool = False) -> tuple[Any, ...]:
    """What we run for ``text`` (same shape as :func:`original_reading`), and nothing else."""
    from mas_orchestra import SpecError, parse_orchestration

    try:
        spec = parse_orchestration(text, dom=dom)  # type: ignore[arg-type]
    except SpecError as exc:
        fallback = None
        if whole_response_fallback:
            from mas_orchestra.runtime import Status, whole_response_answer

            fallback = whole_response_answer(Status.INVALID_SPEC, str(exc), text)
        return ("direct", fallback.strip()) if fallback is not None else ("fails",)
    if not spec.nodes:
        return ("direct", spec.direct_answer or "")
    return _agents([(n.id, n.agent, n.input) for n in spec.nodes], {(e.source, e.target) for e in spec.edges})


def _agents(agents: list[tuple[Any, str, str]], edges: set[tuple[str, str]]) -> tuple[Any, ...]:
    """One shape for both readings: a lone agent's id is a label only (neither system uses it)."""
    if len(agents) == 1 and not edges:
        return ("agents", ((None, agents[0][1], agents[0][2]),), ())
    return ("agents", tuple(agents), tuple(sorted(edges)))


def compare(paths: list[Path], *, whole_response_fallback: bool = False) -> list[dict[str, Any]]:
    """One row per text: its name, DoM, both readings, whether they agree and our warnings."""
    from mas_orchestra import SpecError, parse_orchestration

    rows = []
    for path in paths:
        dom = "low" if path.name.endswith(".low.txt") else "high"
        text = path.read_text(encoding="utf-8")
        theirs = original_reading(text, dom)
        ours = our_reading(text, dom, whole_response_fallback=whole_response_fallback)
        try:
            spec = parse_orchestration(text, dom=dom)  # type: ignore[arg-type]
            warnings = sorted({w.kind for w in getattr(spec, "warnings", [])})
        except SpecError:
            warnings = []
        rows.append({"file": path.name, "dom": dom, "original": theirs[0], "ours": ours[0],
                     "same": theirs == ours, "warnings": warnings})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dirs", nargs="+", help="folders of <name>.<high|low>.txt orchestration texts")
    parser.add_argument("--whole-response-fallback", action="store_true", help="read as eval with that option")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    paths = sorted(p for d in args.dirs for p in Path(d).glob("*.txt"))
    rows = compare(paths, whole_response_fallback=args.whole_response_fallback)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            mark = "same" if row["same"] else "DIFFERS"
            print(f"{mark:8} {row['file']}: original {row['original']}, ours {row['ours']} {row['warnings'] or ''}")
    runs = sum(r["original"] != "fails" for r in rows)
    same = sum(r["same"] for r in rows)
    print(f"{len(rows)} texts; the original runs {runs}; we read {same} the same way", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
