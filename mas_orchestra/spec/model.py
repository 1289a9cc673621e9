"""The graph spec: a declarative multi-agent system, validated before anything runs.

``GraphSpec`` is a pydantic model (and so a JSON / function-calling schema). Constructing one runs
every structural check (:mod:`mas_orchestra.spec.validation`); :func:`parse_spec` and
:func:`parse_orchestration` read text with the format readers (:mod:`~mas_orchestra.spec.json_format`,
:mod:`~mas_orchestra.spec.xml_format`, which return plain data) and validate it here, turning any failure
into a :class:`~mas_orchestra.errors.SpecError` that lists every problem with its location.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, model_validator

from mas_orchestra.errors import SpecError
from mas_orchestra.registry import AgentRegistry, default_registry
from mas_orchestra.spec.json_format import read_json_spec
from mas_orchestra.spec.limits import (
    MAX_DESCRIPTION_CHARS,
    MAX_INPUT_CHARS,
    MAX_NODES,
    MAX_THINKING_CHARS,
    Dom,
    check_dom,
)
from mas_orchestra.spec.validation import check_spec, problems_of, topological_order
from mas_orchestra.spec.warnings import SpecWarning, raise_if_strict
from mas_orchestra.spec.xml_format import detect_dom, read_orchestration, spec_to_xml

__all__ = ["AgentNode", "Edge", "GraphSpec", "parse_orchestration", "parse_spec", "spec_from_data"]


class AgentNode(BaseModel):
    """One sub-agent: an instance of a registered agent kind.

    Attributes:
        id: Unique id, letters, digits and ``_`` (e.g. ``WS_1``).
        agent: Agent kind: ``cot``, ``sc``, ``reflexion``, ``debate``, ``search`` or a registered one (block
            names and aliases accepted).
        description: Short purpose.
        input: The sub-task; may reference upstream outputs as ``${ID}``. Empty: the original question.
        params: The kind's parameters, e.g. ``debate_roles`` for debate, ``samples`` for sc.
    """

    model_config = ConfigDict(str_strip_whitespace=True, extra="forbid")

    id: str = Field(..., description="Unique id, letters, digits and '_' (e.g. 'WS_1').")
    agent: str = Field(
        ..., description="Agent kind: cot, sc, reflexion, debate, search (block names and aliases accepted)."
    )
    description: str = Field("", max_length=MAX_DESCRIPTION_CHARS, description="Short purpose.")
    input: str = Field(
        "",
        max_length=MAX_INPUT_CHARS,
        description="The sub-task; may reference upstream outputs as ${ID}. Empty = the original question.",
    )
    params: dict[str, Any] = Field(
        default_factory=dict, description="Kind parameters, e.g. roles for debate, samples for sc."
    )


class Edge(BaseModel):
    """Data flows from ``source`` to ``target``.

    Attributes:
        source: The upstream node id.
        target: The downstream node id.
    """

    model_config = ConfigDict(str_strip_whitespace=True, extra="forbid")

    source: str
    target: str


class GraphSpec(BaseModel):
    """A whole multi-agent system: agents, the DAG between them and its single sink.

    Validated when built (every problem is listed in one error); ``GraphSpec.model_json_schema()`` doubles as a
    function-calling schema. Text → spec → text and JSON → spec round trips are lossless.

    Attributes:
        nodes: The agents.
        edges: The data flow between them (acyclic).
        sink: The node whose answer is the system's answer.
        direct_answer: Low DoM: the answer given without any agent.
        thinking: The orchestrator's ``<thinking>`` text.
        dom: Degree of MAS the spec was written for (``high`` or ``low``).
        warnings: Leniencies applied while reading the text (filled by the parser; not part of the graph's
            identity, see :meth:`spec_hash`).
    """

    model_config = ConfigDict(str_strip_whitespace=True, extra="forbid")

    nodes: list[AgentNode] = Field(default_factory=list, max_length=MAX_NODES)
    edges: list[Edge] = Field(default_factory=list, max_length=MAX_NODES * (MAX_NODES - 1) // 2)
    sink: str | None = Field(None, description="The node whose answer is the system's answer.")
    direct_answer: str | None = Field(
        None, max_length=MAX_INPUT_CHARS, description="Low DoM: answered without any agent."
    )
    thinking: str = Field("", max_length=MAX_THINKING_CHARS)
    dom: Dom = Field("high", description="Degree of MAS the spec was written for.")
    warnings: list[SpecWarning] = Field(
        default_factory=list,
        description="Leniencies applied while reading the text (filled by the parser; not part of the graph).",
    )

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> GraphSpec:
        registry = (info.context or {}).get("registry") if info is not None else None
        self._drop_duplicate_edges()
        problems = check_spec(self, registry or default_registry)
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def _drop_duplicate_edges(self) -> None:
        """Keep each edge once: a repeated edge is a harmless redundancy, recorded as a warning."""
        seen: set[tuple[str, str]] = set()
        kept = []
        for i, e in enumerate(self.edges, 1):
            if (e.source, e.target) in seen:
                self.warnings.append(SpecWarning(
                    kind="duplicate_edge", location=f"edge {i}",
                    message=f"{e.source} -> {e.target} listed again; kept once",
                ))
                continue
            seen.add((e.source, e.target))
            kept.append(e)
        if len(kept) != len(self.edges):
            self.edges = kept

    # -- conveniences -------------------------------------------------------------------------

    def node(self, node_id: str) -> AgentNode:
        """The node with this id.

        Args:
            node_id: A node id of this spec.

        Returns:
            The node.

        Raises:
            KeyError: No node has that id (the message lists the ids).
        """
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise KeyError(f"no node {node_id!r}; nodes: {', '.join(n.id for n in self.nodes)}")

    def predecessors(self, node_id: str) -> list[str]:
        """The ids of the nodes with an edge into ``node_id``.

        Args:
            node_id: A node id of this spec.

        Returns:
            Source ids, in edge order.
        """
        return [e.source for e in self.edges if e.target == node_id]

    def topological_order(self) -> list[str]:
        """Node ids such that every edge goes from an earlier to a later one.

        Returns:
            Every node id once.
        """
        return topological_order(self)[0]

    def layers(self) -> list[list[str]]:
        """Nodes grouped by depth: each layer can run concurrently once the previous ones finished.

        Returns:
            Lists of node ids, the sources first.
        """
        depth: dict[str, int] = {}
        for node_id in self.topological_order():
            preds = self.predecessors(node_id)
            depth[node_id] = 1 + max((depth[p] for p in preds), default=-1)
        out: list[list[str]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
        for node_id, d in depth.items():
            out[d].append(node_id)
        return out

    def spec_hash(self) -> str:
        """Stable short hash of the structure (nodes, edges, parameters), for tracing metadata.

        ``thinking`` and ``warnings`` are left out: the same graph read from a clean text and from a messy
        one is the same system (and a checkpointed thread resumes it as such).

        Returns:
            16 hexadecimal digits.
        """
        payload = self.model_dump(exclude={"thinking", "warnings"})
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]

    def agent_counts(self) -> dict[str, int]:
        """How many nodes of each agent kind the spec has.

        Returns:
            Agent kind → number of nodes.
        """
        counts: dict[str, int] = defaultdict(int)
        for node in self.nodes:
            counts[node.agent] += 1
        return dict(counts)

    def to_xml(self, *, registry: AgentRegistry | None = None) -> str:
        """The orchestration text of this spec, in the original format of its DoM.

        Args:
            registry: The registry that names the agent kinds and parameter tags (default: the default one).

        Returns:
            Canonical orchestration text; it reads back without warnings.
        """
        return spec_to_xml(self, registry=registry)

    def to_mermaid(self, *, registry: AgentRegistry | None = None) -> str:
        """A Mermaid flowchart of the spec.

        Args:
            registry: The registry that names the blocks in the labels (default: the default one).

        Returns:
            The ``flowchart TD`` text; the sink is drawn rounded.
        """
        registry = registry or default_registry
        lines = ["flowchart TD"]
        if not self.nodes:
            text = " ".join((self.direct_answer or "").split()).replace('"', "'")[:80]  # one line, as Mermaid needs
            lines.append(f'    answer(["direct answer: {text}"])')
            return "\n".join(lines)
        for node in self.nodes:
            kind = registry.resolve(node.agent)
            label = f"{node.id} · {kind.block if kind else node.agent}"
            shape = f'(["{label}"])' if node.id == self.sink else f'["{label}"]'
            lines.append(f"    {node.id}{shape}")
        lines.extend(f"    {e.source} --> {e.target}" for e in self.edges)
        return "\n".join(lines)

    @classmethod
    def from_text(
        cls, text: str, *, dom: Dom | None = None, registry: AgentRegistry | None = None, strict: bool = False
    ) -> GraphSpec:
        """Parse JSON (our schema) or the orchestration text format, whichever ``text`` is.

        Args:
            text: A JSON spec or orchestration text.
            dom: The DoM of the text; without it, text with an ``<agent_output_id>`` and no ``<agent_id>`` is
                read as low DoM.
            registry: Which agent kinds and parameter tags exist (default: the default registry), so a spec
                naming a user-registered kind loads with the registry that kind was registered in.
            strict: Any leniency (see :attr:`warnings`) is a :class:`SpecError`.

        Returns:
            The validated spec.

        Raises:
            SpecError: The text is not a valid spec (every problem listed).
        """
        if text.lstrip().startswith("{"):
            return parse_spec(text, registry=registry, dom=dom, strict=strict)  # dom: for JSON that states none
        return parse_orchestration(text, dom=dom or detect_dom(text), registry=registry, strict=strict)

    @classmethod
    def from_file(
        cls, path: str | Path, *, dom: Dom | None = None, registry: AgentRegistry | None = None,
        strict: bool = False,
    ) -> GraphSpec:
        """Read a spec from a ``.json`` or orchestration-text (``.xml``/``.txt``) file (see :meth:`from_text`).

        Args:
            path: The file.
            dom: The DoM of orchestration text (default: detected).
            registry: Which agent kinds and parameter tags exist (default: the default registry).
            strict: Any leniency is a :class:`SpecError`.

        Returns:
            The validated spec.

        Raises:
            SpecError: The file's text is not a valid spec (every problem listed).
            OSError: The file cannot be read.
        """
        return cls.from_text(Path(path).read_text(encoding="utf-8"), dom=dom, registry=registry, strict=strict)

    def to_file(self, path: str | Path, *, registry: AgentRegistry | None = None) -> Path:
        """Write JSON for ``.json`` paths, the orchestration text otherwise (rendered with ``registry``).

        Args:
            path: The file to write (replaced if it exists).
            registry: The registry that names kinds and tags in orchestration text.

        Returns:
            ``path``.
        """
        path = Path(path)
        text = self.model_dump_json(indent=2) if path.suffix == ".json" else self.to_xml(registry=registry)
        path.write_text(text + "\n", encoding="utf-8")
        return path


def spec_from_data(data: Any, *, registry: AgentRegistry | None = None) -> GraphSpec:
    """Validate a mapping into a :class:`GraphSpec`.

    Args:
        data: The spec as plain data (a parsed JSON object).
        registry: Which agent kinds exist (default: the default registry).

    Returns:
        The validated spec.

    Raises:
        SpecError: ``data`` is not a valid spec (every problem listed).
    """
    if not isinstance(data, dict):
        raise SpecError(f"spec must be a JSON object, got {type(data).__name__}")
    try:
        return GraphSpec.model_validate(data, context={"registry": registry or default_registry})
    except ValidationError as exc:
        raise SpecError(problems_of(exc)) from None
    except RecursionError:
        raise SpecError("spec is nested too deeply") from None


def parse_spec(
    text: str | bytes, *, registry: AgentRegistry | None = None, dom: Dom | None = None, strict: bool = False
) -> GraphSpec:
    """Parse our JSON spec format.

    Args:
        text: The JSON text.
        registry: Which agent kinds exist (default: the default registry).
        dom: The DoM of a spec that does not state one (default: the schema's, high).
        strict: A leniency (a duplicated edge) is an error.

    Returns:
        The validated spec.

    Raises:
        SpecError: Anything malformed or invalid, every problem listed (the only exception it raises).
    """
    spec = spec_from_data(read_json_spec(text, dom=dom), registry=registry)
    raise_if_strict(spec.warnings, strict)
    return spec


def parse_orchestration(
    text: str, dom: Dom = "high", *, registry: AgentRegistry | None = None, strict: bool = False
) -> GraphSpec:
    """Parse orchestration text (DESIGN §3, §11) into a validated :class:`GraphSpec`.

    Reads real orchestrator output the way the original system did: the first complete orchestration is
    the plan, and each leniency applied is recorded in ``spec.warnings`` (:class:`SpecWarning`). Text that is
    one JSON object is read as our JSON spec form (what an orchestrator constrained by a JSON schema writes).

    Args:
        text: The orchestrator's reply.
        dom: ``high`` or ``low``; also the default DoM of a JSON spec that states none.
        registry: Which agent kinds and parameter tags exist (default: the default registry).
        strict: Any leniency raises instead of being recorded as a warning.

    Returns:
        The validated spec, with ``warnings`` listing the leniencies applied.

    Raises:
        SpecError: Anything malformed or invalid, listing every problem found (the only exception it raises).

    Example:
        ```python
        spec = parse_orchestration(open("graphs/specs/diamond.xml").read())
        print(spec.to_mermaid(), spec.warnings)
        ```
    """
    registry = registry or default_registry
    spec = spec_from_data(read_orchestration(text, check_dom(dom), registry=registry), registry=registry)
    raise_if_strict(spec.warnings, strict)
    return spec
