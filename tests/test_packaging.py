"""The wheel ships what type checkers and users need: a ``py.typed`` marker in every package."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGES = ("agents", "mas_orchestra", "graphs", "training")


def test_every_package_has_a_py_typed_marker() -> None:
    assert [p for p in PACKAGES if not (REPO / p / "py.typed").is_file()] == []


def test_the_wheel_ships_the_markers(tmp_path: Path) -> None:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs a git checkout to list the project's files")
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True,
                            check=True).stdout.decode().split("\0")
    source = tmp_path / "src"
    for name in filter(None, listed):
        path = REPO / name
        if name.startswith("mas_orchestra/studio/frontend/") or not path.is_file():
            continue
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, source / name)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", ".",
                           "-w", str(tmp_path / "dist")], cwd=source, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert [f"{p}/py.typed" for p in PACKAGES if f"{p}/py.typed" not in names] == []
