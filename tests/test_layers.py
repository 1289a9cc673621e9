"""Layering: lower layers never import higher ones; the core loads no torch/transformers/TRL/vLLM."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from tests.conftest import REPO

HEAVY = ("torch", "transformers", "trl", "peft", "vllm")
ORDER = ["agents", "mas_orchestra", "graphs", "training"]


@pytest.mark.parametrize("package", ["agents", "mas_orchestra", "mas_orchestra.compile", "mas_orchestra.cli", "graphs"])
def test_core_imports_no_heavy_packages(package):
    if not (REPO / package.split(".")[0]).is_dir():
        pytest.skip(f"{package} not present")
    code = f"import sys, {package}; print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "", f"{package} imported {proc.stdout.strip()}"



# What a command imports only when it runs: ``--help`` and argument errors stay at argparse level (fast start-up).
LOADED_WHEN_RUN = (*HEAVY, "langgraph", "langchain_core", "langsmith", "pydantic", "numpy", "pandas", "starlette",
                   "uvicorn", "matplotlib", "xgrammar")
SUBCOMMANDS = ["validate", "draw", "convert", "schema", "plot-training", "run", "eval", "pareto", "masbench",
               "masbench generate", "masbench verify", "studio"]


def _cli_in_fresh_process(argv):
    code = (
        "import sys\n"
        "from mas_orchestra.cli import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit as exc:\n"
        "    print('exit', exc.code)\n"
        f"print('loaded', ','.join(sorted({{m.split('.')[0] for m in sys.modules}} & set({LOADED_WHEN_RUN!r}))))\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)


@pytest.mark.parametrize("command", ["", *SUBCOMMANDS])
def test_help_imports_only_argparse_level_modules(command):
    proc = _cli_in_fresh_process([*command.split(), "--help"])
    assert proc.returncode == 0, proc.stderr
    assert f"usage: mas-orchestra {command}".rstrip() in proc.stdout
    assert "exit 0" in proc.stdout
    assert proc.stdout.strip().endswith("loaded"), f"mas-orchestra {command} --help imported {proc.stdout.split()[-1]}"


def test_bad_arguments_stay_clear_without_the_runtime():
    proc = _cli_in_fresh_process(["eval", "--data", "x.jsonl", "--baseline", "nope"])
    assert "exit 2" in proc.stdout
    assert "argument --baseline: invalid choice: 'nope'" in proc.stderr and "'cot'" in proc.stderr
    assert proc.stdout.strip().endswith("loaded"), proc.stdout
    proc = _cli_in_fresh_process(["run"])
    assert "exit 2" in proc.stdout and "the following arguments are required: question" in proc.stderr


def _imports(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module.split(".")[0]


def test_layers_import_downward_only():
    violations = []
    for level, package in enumerate(ORDER):
        folder = REPO / package
        if not folder.is_dir():
            continue
        higher = set(ORDER[level + 1 :])
        for path in folder.rglob("*.py"):
            bad = higher & set(_imports(path))
            if bad:
                violations.append(f"{path.relative_to(REPO)} imports {sorted(bad)}")
    assert violations == []


def test_no_exec_or_eval_of_model_text():
    offenders = []
    for package in ORDER:
        for path in (REPO / package).rglob("*.py") if (REPO / package).is_dir() else []:
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {"exec", "eval", "compile"}:
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno} {node.func.id}()")
    assert offenders == []


# Old import paths whose re-export modules were removed: one import path per thing.
REMOVED_PATHS = [
    "mas_orchestra.checkpoint",
    "mas_orchestra.datasets",
    "mas_orchestra.eval",
    "mas_orchestra.grading",
    "mas_orchestra.grammar",
    "mas_orchestra.hf_chat",
    "mas_orchestra.masbench",
    "mas_orchestra.pricing",
    "mas_orchestra.threads",
]


@pytest.mark.parametrize("old", REMOVED_PATHS)
def test_removed_reexport_paths_stay_removed(old):
    import importlib

    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)


def test_no_module_only_reexports_another():
    """A module whose body is only imports plus ``__all__`` is a re-export shim; we keep none."""
    shims = []
    for package in ORDER:
        for path in (REPO / package).rglob("*.py") if (REPO / package).is_dir() else []:
            if path.name == "__init__.py" or path.name == "__main__.py":
                continue
            body = ast.parse(path.read_text(encoding="utf-8")).body
            kinds = {type(node) for node in body if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))}
            imports_only = kinds <= {ast.Import, ast.ImportFrom, ast.Assign}
            if body and imports_only and any(isinstance(node, ast.ImportFrom) for node in body):
                shims.append(str(path.relative_to(REPO)))
    assert shims == []


def test_the_package_exports_the_entry_points():
    import mas_orchestra
    from mas_orchestra.compile import compile_spec
    from mas_orchestra.runtime import Orchestra, Outcome, Status
    from mas_orchestra.spec import GraphSpec

    assert (mas_orchestra.Orchestra, mas_orchestra.Outcome, mas_orchestra.Status) == (Orchestra, Outcome, Status)
    assert (mas_orchestra.compile_spec, mas_orchestra.GraphSpec) == (compile_spec, GraphSpec)


def test_no_module_is_over_500_lines():
    sizes = {str(path.relative_to(REPO)): len(path.read_text(encoding="utf-8").splitlines())
             for package in ORDER for path in (REPO / package).rglob("*.py")}
    assert {name: n for name, n in sizes.items() if n > 500} == {}


def test_lazy_exports_load_on_first_use_and_refuse_submodule_names():
    import agents
    from agents.lazy import lazy_exports
    from agents.self_consistency import SCAgent

    assert agents.SCAgent is SCAgent and "SCAgent" in dir(agents)
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        agents.Nope  # noqa: B018
    with pytest.raises(ValueError, match="templates named like a submodule"):
        lazy_exports("pkg", {"pkg.templates": ["templates"]})
