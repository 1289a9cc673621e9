"""No import cycles among our modules: none at the top of a module, none dodged by an import inside a function.

The graph is built from every import statement of ``agents``, ``mas_orchestra``, ``graphs`` and ``training``
(top level, inside functions and methods, and ``importlib.import_module`` / ``__import__`` of a literal
name). Imports under ``if TYPE_CHECKING:`` never run, so the first graph leaves them out; a second graph puts
them in, because a module that imports its own importer for type hints still depends on it (the circle is only
hidden from the interpreter). In that second graph a package's ``__init__`` keeps leaving its ``TYPE_CHECKING``
block out: there it only declares the lazily loaded exports for type checkers. Third-party and standard-library
imports are left out: only our own modules are nodes.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import REPO

PACKAGES = ("agents", "mas_orchestra", "graphs", "training")


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _our_modules(root: Path) -> dict[str, Path]:
    return {
        _module_name(path, root): path
        for package in PACKAGES
        if (root / package).is_dir()
        for path in sorted((root / package).rglob("*.py"))
    }


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_names(tree: ast.AST, module: str, is_package: bool, type_hints: bool = False) -> Iterator[str]:
    """Every dotted name an import of this module may load (``from X import a`` gives ``X.a`` and ``X``); with
    ``type_hints`` also those under ``if TYPE_CHECKING:`` (except in a package's ``__init__``)."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test) and not (type_hints and not is_package):
            stack.extend(node.orelse)  # the body only runs under a type checker
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, *([node.module] if node.module else [])])
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                or (isinstance(node.func, ast.Name) and node.func.id in {"import_module", "__import__"})
            )
        ):
            yield node.args[0].value
        stack.extend(ast.iter_child_nodes(node))


def import_graph(root: Path = REPO, *, type_hints: bool = False) -> dict[str, set[str]]:
    """Module -> the modules of ours it imports (``type_hints``: counting imports for type checkers too)."""
    modules = _our_modules(root)
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        targets = set()
        for name in _import_names(tree, module, path.name == "__init__.py", type_hints):
            if name in modules:
                targets.add(name)
        targets.discard(module)
        graph[module] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (``[a, b, …, a]``) per strongly connected component with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]  # iterative Tarjan: no recursion limit to hit
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return [_cycle_in(graph, set(component)) for component in components]


def _cycle_in(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A cycle through the first module of a strongly connected component (breadth-first, so a short one)."""
    start = min(component)
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for succ in sorted(graph[node] & component):
                if succ == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [*reversed(path), start]
                if succ not in parents:
                    parents[succ] = node
                    following.append(succ)
        frontier = following
    raise AssertionError(f"no cycle through {start} in {sorted(component)}")  # pragma: no cover


def test_no_import_cycles():
    found = cycles(import_graph())
    assert found == [], "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in found)


def test_the_graph_sees_imports_inside_functions_and_skips_type_checking(tmp_path):
    package = tmp_path / "agents"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from agents.c import C\n"
        "def f():\n    from agents.b import g\n    return g\n"
    )
    (package / "b.py").write_text("import importlib\ndef g():\n    return importlib.import_module('agents.a')\n")
    (package / "c.py").write_text("from agents import a\n")
    graph = import_graph(tmp_path)
    assert graph["agents.a"] == {"agents.b"}
    assert graph["agents.c"] == {"agents", "agents.a"}
    assert cycles(graph) == [["agents.a", "agents.b", "agents.a"]]


def test_no_import_cycles_even_through_type_hints():
    found = cycles(import_graph(type_hints=True))
    assert found == [], "import cycles through TYPE_CHECKING imports:\n" + "\n".join(" -> ".join(c) for c in found)


def test_the_type_hint_graph_sees_a_circle_hidden_behind_type_checking(tmp_path):
    package = tmp_path / "agents"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from agents.runner import Runner\n")
    (package / "runner.py").write_text("from agents import steps\nclass Runner:\n    pass\n")
    (package / "steps.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from agents.runner import Runner\n")
    assert cycles(import_graph(tmp_path)) == []  # invisible to the interpreter
    graph = import_graph(tmp_path, type_hints=True)
    assert graph["agents.steps"] == {"agents.runner"}
    assert graph["agents"] == set()  # a package's lazy-export declarations are not dependencies
    assert cycles(graph) == [["agents.runner", "agents.steps", "agents.runner"]]


def test_orchestra_is_a_pipeline_runner():
    import inspect

    from mas_orchestra.runtime import Orchestra
    from mas_orchestra.runtime.runner_protocol import PipelineRunner

    orchestra = Orchestra("scripted:x", "scripted:y")
    members = [name for name, _ in inspect.getmembers(PipelineRunner) if not name.startswith("_")]
    assert {"checkpointer", "registry", "settings", "aorchestrate", "parse"} <= set(members)
    assert [name for name in members if not hasattr(orchestra, name)] == []
    assert inspect.iscoroutinefunction(orchestra.aorchestrate)
