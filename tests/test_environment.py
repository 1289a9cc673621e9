"""The environment module: one declaration per variable, precedence, old names, cache root, the reference page,
and no module outside it reading our variables or writing ``os.environ``."""

from __future__ import annotations

import ast
import os
import re
import warnings
from pathlib import Path

import pytest

from mas_orchestra import environment
from mas_orchestra.environment import EnvironmentVariableError
from tests.conftest import REPO

PACKAGES = ("agents", "mas_orchestra", "graphs", "training")
REFERENCE = REPO / "docs" / "reference" / "environment.md"


def _library_files() -> list[Path]:
    return [path for package in PACKAGES for path in sorted((REPO / package).rglob("*.py"))]


def test_the_reference_page_is_generated_from_the_module() -> None:
    assert environment.generated_part(REFERENCE.read_text(encoding="utf-8")) == environment.reference_tables(), (
        "docs/reference/environment.md is stale: run `python -m mas_orchestra.environment --write "
        "docs/reference/environment.md`")


def test_write_reference_replaces_only_the_generated_part(tmp_path: Path) -> None:
    page = tmp_path / "environment.md"
    page.write_text(f"# Title\n\n{environment.BEGIN_GENERATED}\nold\n{environment.END_GENERATED}\n\n## By hand\n")
    environment.write_reference(page)
    text = page.read_text()
    assert text.startswith("# Title\n\n") and text.endswith("\n\n## By hand\n")
    assert environment.generated_part(text) == environment.reference_tables()
    assert "| `MAS_CACHE_DIR` |" in text and "\nold\n" not in text
    page.write_text("# no markers\n")
    with pytest.raises(ValueError, match="no <!-- BEGIN generated"):
        environment.write_reference(page)


def test_every_variable_has_one_declaration_with_the_prefix_and_a_doc() -> None:
    names = [v.name for v in environment.VARIABLES]
    assert len(names) == len(set(names))
    assert all(name.startswith("MAS_") and not name.startswith("MAS_ORCHESTRA_") for name in names)
    assert all(v.doc and v.kind for v in (*environment.VARIABLES, *environment.EXTERNAL))
    old = [o for v in environment.VARIABLES for o in v.old_names]
    assert old and all(o.startswith("MAS_ORCHESTRA_") and o not in names for o in old)
    with pytest.raises(KeyError, match="MAS_NOT_A_THING is not declared"):
        environment.raw("MAS_NOT_A_THING")


def _mas_names_read(path: Path) -> list[str]:
    """``MAS_*`` names a file mentions as string constants next to an ``os.environ`` / ``getenv`` use."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv") and isinstance(node.value, ast.Name) \
                and node.value.id == "os":
            found.append(f"{path.relative_to(REPO)}:{node.lineno} os.{node.attr}")
        elif isinstance(node, ast.Name) and node.id in ("environ", "getenv"):
            found.append(f"{path.relative_to(REPO)}:{node.lineno} {node.id}")
    if not found:
        return []
    # a file that touches the environment directly may do so only for variables others define
    mas = re.findall(r"[\"'](MAS_[A-Z0-9_]+)[\"']", source)
    return [f"{where} (file names {sorted(set(mas))})" for where in found] if mas else []


def test_no_module_outside_the_environment_module_reads_our_variables() -> None:
    offenders = []
    for path in _library_files():
        if path == REPO / "mas_orchestra" / "environment.py":
            continue
        offenders += _mas_names_read(path)
    assert offenders == []


def test_every_mas_name_in_the_libraries_is_declared() -> None:
    declared = {v.name for v in environment.VARIABLES}
    undeclared = set()
    for path in _library_files():
        for name in re.findall(r"\b(MAS_[A-Z][A-Z0-9_]*[A-Z0-9])\b", path.read_text(encoding="utf-8")):
            if name not in declared and not any(name in v.old_names for v in environment.VARIABLES):
                undeclared.add(f"{path.relative_to(REPO)}: {name}")
    assert undeclared == set()


def test_no_library_module_writes_the_environment() -> None:
    writes = []
    for path in _library_files():
        if path == REPO / "mas_orchestra" / "environment.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            target = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr in ("setdefault", "update", "pop", "clear", "__setitem__"):
                    target = node.func.value
                elif node.func.attr in ("putenv", "unsetenv"):
                    writes.append(f"{path.relative_to(REPO)}:{node.lineno}")
            elif isinstance(node, (ast.Assign, ast.Delete)):
                targets = node.targets
                target = next((t.value for t in targets if isinstance(t, ast.Subscript)), None)
            if isinstance(target, ast.Attribute) and target.attr == "environ":
                writes.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert writes == []


def test_nothing_is_read_at_import(tmp_path: Path) -> None:
    import subprocess
    import sys

    # a bad value at import time would fail the import; read when the object is built, it fails there
    code = ("import importlib, sys\n"
            "for m in ('mas_orchestra.local.threads', 'mas_orchestra.local.prefix_cache', "
            "'mas_orchestra.bench.grading.bounded', 'agents.search.web', 'graphs.end_to_end'):\n"
            "    importlib.import_module(m)\n"
            "print('imported')\n")
    env = {"MAS_TORCH_THREADS": "many", "MAS_PREFIX_CACHE_MB": "lots", "MAS_GRADING_BACKEND": "carrier-pigeon",
           "MAS_GRADING_WORKERS": "x", "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "imported"


def test_explicit_beats_environment_beats_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MAS_DOM", raising=False)
    assert environment.text("MAS_DOM", default="high") == "high"
    monkeypatch.setenv("MAS_DOM", "low")
    assert environment.text("MAS_DOM", default="high") == "low"
    assert environment.text("MAS_DOM", "high", default="high") == "high"
    monkeypatch.setenv("MAS_TORCH_THREADS", "3")
    assert environment.positive_int("MAS_TORCH_THREADS") == 3
    assert environment.positive_int("MAS_TORCH_THREADS", 1) == 1
    monkeypatch.setenv("MAS_PREFIX_CACHE_MB", "2")
    assert environment.mebibytes("MAS_PREFIX_CACHE_MB", 256) == 2 * 2**20
    assert environment.mebibytes("MAS_PREFIX_CACHE_MB", 256, 10) == 10
    monkeypatch.setenv("MAS_APPROVAL", "yes")
    assert environment.flag("MAS_APPROVAL") is True
    assert environment.flag("MAS_APPROVAL", False) is False
    monkeypatch.setenv("MAS_DECODE_WEIGHTS", "int4")
    assert environment.choice("MAS_DECODE_WEIGHTS", None, field="w", choices=("auto", "int4"), default="auto") == "int4"
    assert environment.choice("MAS_DECODE_WEIGHTS", "auto", field="w", choices=("auto", "int4"), default="auto") == "auto"


def test_bad_values_name_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAS_APPROVAL", "perhaps")
    with pytest.raises(EnvironmentVariableError, match="MAS_APPROVAL='perhaps' is not a yes/no value"):
        environment.flag("MAS_APPROVAL")
    monkeypatch.setenv("MAS_GRADING_WORKERS", "0")
    with pytest.raises(EnvironmentVariableError, match="MAS_GRADING_WORKERS='0' is not a positive integer"):
        environment.positive_int("MAS_GRADING_WORKERS")


def test_old_names_are_read_with_a_deprecation_warning_and_the_new_name_wins(monkeypatch: pytest.MonkeyPatch,
                                                                           tmp_path: Path) -> None:
    monkeypatch.delenv("MAS_CACHE_DIR", raising=False)
    monkeypatch.setenv("MAS_ORCHESTRA_CACHE", str(tmp_path / "old"))
    with pytest.warns(DeprecationWarning, match="MAS_ORCHESTRA_CACHE is deprecated .* rename it to MAS_CACHE_DIR"):
        assert environment.cache_root() == tmp_path / "old"
    monkeypatch.setenv("MAS_CACHE_DIR", str(tmp_path / "new"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert environment.cache_root() == tmp_path / "new"


def test_one_cache_root_for_model_prefixes_and_search(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from mas_orchestra.local.embedded import default_cache_root
    from mas_orchestra.local.prefix_store import PrefixStore

    for name in ("MAS_CACHE_DIR", "MAS_ORCHESTRA_CACHE", "MAS_PREFIX_STORE_DIR", "MAS_SEARCH_CACHE",
                 "MAS_ORCHESTRA_SEARCH_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    root = tmp_path / "xdg" / "mas-orchestra"
    assert environment.cache_root() == default_cache_root() == root
    assert PrefixStore("m", "f", max_bytes=0).folder.parent == root / "prefixes"
    assert environment.search_cache_path() == root / "search.sqlite"
    monkeypatch.setenv("MAS_CACHE_DIR", str(tmp_path / "mine"))
    assert default_cache_root() == tmp_path / "mine"
    assert PrefixStore("m", "f", max_bytes=0).folder.parent == tmp_path / "mine" / "prefixes"
    assert PrefixStore("m", "f", root=tmp_path / "arg", max_bytes=0).folder.parent == tmp_path / "arg"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.delenv("MAS_CACHE_DIR")
    assert environment.cache_root() == Path.home() / ".cache" / "mas-orchestra"


def test_library_switches_never_override_the_user(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
    environment.prefer_library_default("TOKENIZERS_PARALLELISM", "false")
    assert os.environ["TOKENIZERS_PARALLELISM"] == "true"
    monkeypatch.delenv("TOKENIZERS_PARALLELISM")
    environment.prefer_library_default("TOKENIZERS_PARALLELISM", "false")
    assert os.environ["TOKENIZERS_PARALLELISM"] == "false"
    for name in ("LRU_CACHE_CAPACITY", "ONEDNN_PRIMITIVE_CACHE_CAPACITY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LRU_CACHE_CAPACITY", "512")  # the user's value stays
    from mas_orchestra.local.precision import KERNEL_CACHE_ENTRIES, bound_kernel_caches

    bound_kernel_caches()
    assert os.environ["LRU_CACHE_CAPACITY"] == "512"
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == str(KERNEL_CACHE_ENTRIES)
    with pytest.raises(KeyError, match="not a library switch"):
        environment.prefer_library_default("PATH", "/tmp")


def test_loading_a_local_model_bounds_the_kernel_caches(monkeypatch, tiny) -> None:  # type: ignore[no-untyped-def]
    # A served model prefills prompts of many lengths in bf16: without the bound each length keeps a kernel.
    from mas_orchestra.local.engine import clear_loaded_models, load_engine
    from mas_orchestra.local.precision import KERNEL_CACHE_ENTRIES

    for name in ("LRU_CACHE_CAPACITY", "ONEDNN_PRIMITIVE_CACHE_CAPACITY"):
        monkeypatch.delenv(name, raising=False)
    clear_loaded_models()  # a model loaded by an earlier test would be returned without loading
    load_engine(tiny[0])
    assert os.environ["LRU_CACHE_CAPACITY"] == str(KERNEL_CACHE_ENTRIES)
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == str(KERNEL_CACHE_ENTRIES)


def test_served_graph_reads_the_environment_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    from graphs.end_to_end import ServedContext, approval_from_context, checked_model, orchestra_from_context
    from mas_orchestra import OrchestraConfig

    monkeypatch.setenv("MAS_SUBAGENT", "scripted:x")
    assert checked_model(None, "subagent", "MAS_SUBAGENT") == "scripted:x"
    monkeypatch.delenv("MAS_SUBAGENT")
    assert checked_model(None, "subagent", "MAS_SUBAGENT") == "embedded"
    monkeypatch.setenv("MAS_APPROVAL", "1")
    assert approval_from_context(None) is True
    assert approval_from_context(ServedContext(config=OrchestraConfig(interrupt_before_execute=False))) is False
    assert approval_from_context(ServedContext(config=OrchestraConfig(dom="low"))) is True  # not set: from env
    # The DoM not set in the context comes from $MAS_DOM; one the context sets wins.
    monkeypatch.setenv("MAS_DOM", "low")
    context = ServedContext(orchestrator="scripted:1", subagent="scripted:1")
    assert orchestra_from_context(context).dom == "low"
    assert orchestra_from_context(context.model_copy(update={"config": OrchestraConfig(dom="high")})).dom == "high"
