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
