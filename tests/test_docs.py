"""The README stays a landing page and the documentation site (mkdocs.yml, docs/) stays whole and offline."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest
import yaml

from tests.conftest import REPO

README = REPO / "README.md"
QUICK_START = 'bash scripts/install.sh && .venv/bin/mas-orchestra run "What is 12 times 7?"'
TEST_COMMAND = "HF_HUB_OFFLINE=1 .venv/bin/python -m pytest -q"
README_MAX_LINES = 250


def bash_blocks(markdown: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", markdown, flags=re.DOTALL)


def load_mkdocs_config() -> dict:
    # mkdocs.yml may hold !!python tags in the future; none today, so the safe loader reads it.
    return yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))


def nav_targets(nav: object) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [target for item in nav for target in nav_targets(item)]
    if isinstance(nav, dict):
        return [target for value in nav.values() for target in nav_targets(value)]
    return []


def test_readme_is_a_landing_page_of_at_most_250_lines():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"


def test_readme_documents_the_quick_start_and_test_commands_ci_runs():
    blocks = [block.strip() for block in bash_blocks(README.read_text(encoding="utf-8"))]
    assert QUICK_START in blocks
    assert TEST_COMMAND in blocks
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "bash scripts/install.sh" in ci
    assert ".venv/bin/python -m pytest -q" in ci and "HF_HUB_OFFLINE=1" in ci
    docs_build = next(line for line in ci.splitlines() if "mkdocs build" in line and not line.startswith("#"))
    # --quiet would hide the warnings --strict counts, and the build would pass with broken links (measured)
    assert "--strict" in docs_build and "--quiet" not in docs_build.split("#")[0]


def test_readme_relative_links_resolve():
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    relative = [t for t in targets if not re.match(r"[a-z]+:", t)]
    assert relative, "the landing page links into docs/"
    missing = [t for t in relative if not (REPO / t).exists()]
    assert missing == []


def test_every_docs_page_and_every_example_notebook_is_in_the_nav():
    nav = set(nav_targets(load_mkdocs_config()["nav"]))
    pages = {p.relative_to(REPO / "docs").as_posix() for p in (REPO / "docs").rglob("*.md")}
    assert pages - nav == set(), "pages missing from mkdocs.yml's nav"
    # the notebooks the site renders are exactly the ones tests/test_notebooks.py executes
    notebooks = {f"examples/{p.name}" for p in (REPO / "examples").glob("*.ipynb")}
    assert {t for t in nav if t.endswith(".ipynb")} == notebooks
    assert (nav - notebooks) <= pages, "nav entries without a page"


def test_every_environment_variable_the_code_reads_is_documented():
    page = (REPO / "docs" / "reference" / "environment.md").read_text(encoding="utf-8")
    named: set[str] = set()
    for package in ("agents", "mas_orchestra", "graphs", "training"):
        for path in (REPO / package).rglob("*.py"):
            named |= set(re.findall(r"[\"'](MAS_[A-Z0-9_]+)[\"']", path.read_text(encoding="utf-8")))
    assert len(named) >= 20  # the scan found the variables (a broken pattern would pass vacuously)
    assert sorted(v for v in named if f"`{v}`" not in page) == []


def test_cli_reference_renders_every_subcommand_from_the_parser():
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", REPO / "scripts" / "mkdocs_hooks.py")
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed (the docs extra)")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    page = hooks.render_cli_reference()
    from mas_orchestra.cli import build_parser

    commands = hooks._subparsers(build_parser())
    assert {"run", "eval", "pareto", "masbench", "studio", "validate", "plot-training"} <= set(commands)
    for name in commands:
        assert f"## `mas-orchestra {name}`" in page, name
    assert "--orchestrator" in page and "--subagent-default" in page  # options come from the parser itself
    assert "### `mas-orchestra masbench generate`" in page  # nested subcommands too
    training = hooks.render_cli_reference("<!-- training-cli-reference -->")
    assert "### `python -m training.grpo`" in training and "--reward-concurrency" in training


@pytest.mark.slow  # 5-12 s on the shared 2-core machine (a whole site build); .ci/run also builds it
@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="mkdocs is not installed (the docs extra)")
def test_site_builds_strict_and_fetches_nothing_from_the_network(tmp_path):
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=REPO,
        capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    pages = list(site.rglob("*.html"))
    assert len(pages) > 30
    # no font, script, stylesheet or image is loaded from elsewhere (links to other sites are fine)
    remote_assets = re.compile(r"<(?:script|img|link|source|iframe)\b[^>]*\b(?:src|href)=\"(?:https?:)?//", re.I)
    offenders = {p.relative_to(site).as_posix() for p in pages if remote_assets.search(p.read_text(encoding="utf-8"))}
    assert offenders == set()
    for p in pages:
        text = p.read_text(encoding="utf-8")
        assert "fonts.googleapis" not in text and "cdnjs.cloudflare" not in text and "unpkg.com" not in text, p
    assert (site / "search" / "search_index.json").stat().st_size > 100_000  # search runs from the built index
    assert (site / "examples" / "02_orchestra" / "index.html").exists()
    assert (site / "studio" / "live.png").exists()


def test_every_callable_on_the_api_reference_pages_documents_its_parameters(monkeypatch):
    griffe = pytest.importorskip("griffe")  # the docs extra
    monkeypatch.chdir(REPO)  # griffe looks in the working directory first
    spec = importlib.util.spec_from_file_location("docstring_coverage", REPO / "scripts" / "docstring_coverage.py")
    coverage = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(coverage)
    shown: dict[str, list[str] | None] = {}  # object path -> the members its directive lists (None: all public)
    for page in sorted((REPO / "docs" / "reference" / "api").glob("*.md")):
        text = page.read_text(encoding="utf-8")
        for path, block in re.findall(r"^::: ([\w.]+)\n((?:    .*\n)*)", text + "\n", flags=re.MULTILINE):
            options = (yaml.safe_load(block.replace("\n    ", "\n")[4:]) or {}).get("options", {}) if block else {}
            shown[path] = options.get("members")
    assert len(shown) >= 30
    packages = {name: griffe.load(name, search_paths=[str(REPO)], docstring_parser="google")
                for name in {path.split(".")[0] for path in shown}}
    undocumented = []
    for path, members in shown.items():
        obj = packages[path.split(".")[0]][".".join(path.split(".")[1:])]
        objects = list(coverage._callables(obj)) if obj.is_module else [obj]
        if obj.is_class:
            objects += [m for m in coverage._callables(obj) if m.is_function]
        if members is not None:  # a list, or false for none
            objects = [o for o in objects if o is obj or o.name in (members or [])]
        for item in objects:
            params = coverage._parameters(item)
            names = coverage._documented_names(item)
            if params and (names is None or not all(p.lstrip("*") in names for p in params)):
                undocumented.append(item.path)
    assert undocumented == [], "\n".join(undocumented)
