"""Another distribution's top-level ``agents`` package is detected at import, with a message that says what to do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO


def _python(code: str, *path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, path), str(REPO)])}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=path[0] if path else REPO,
                          env=env, timeout=120)


def _foreign_agents(root: Path) -> Path:
    package = root / "agents"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('"""Someone else\'s agents package."""\nclass Agent:\n    pass\n')
    return root


@pytest.mark.parametrize("package", ["mas_orchestra", "graphs", "training"])
def test_a_foreign_agents_package_fails_the_import_clearly(tmp_path: Path, package: str) -> None:
    foreign = _foreign_agents(tmp_path / "site")
    proc = _python(f"import {package}", foreign)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("mas_orchestra.package_check.AgentsPackageClashError: the 'agents' package Python "
                           f"imported (from {foreign / 'agents'}) is not mas-orchestra's agents layer"), last
    assert "`pip uninstall agents`" in last and "virtual environment of its own" in last
    assert "agents.lazy" not in proc.stderr  # not the confusing error from deep inside


def test_an_agents_module_imported_earlier_is_checked_too(tmp_path: Path) -> None:
    foreign = _foreign_agents(tmp_path / "site")
    proc = _python("import agents\nassert not hasattr(agents, '__mas_orchestra__')\nimport mas_orchestra", foreign)
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1].startswith("mas_orchestra.package_check.AgentsPackageClashError")


def test_our_agents_package_passes_and_carries_the_marker() -> None:
    import agents
    from mas_orchestra.package_check import MARKER, check_agents_package

    assert getattr(agents, MARKER) is True
    assert Path(agents.__file__).parent == REPO / "agents"
    check_agents_package()  # no error
    proc = _python("import mas_orchestra, graphs; print('ok')")
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
