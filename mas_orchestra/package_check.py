"""Fail early, and clearly, when ``import agents`` finds another distribution's ``agents`` package.

mas-orchestra's lowest layer is a top-level package called ``agents``; other distributions install a top-level
``agents`` too (PyPI's ``agents``, OpenAI's ``openai-agents``). With one of them in the same environment, either
it comes first on ``sys.path`` or pip overwrote our files with its own, and ``import mas_orchestra`` would fail
deep inside with ``No module named 'agents.lazy'`` or a missing name. :func:`check_agents_package` runs first
when ``mas_orchestra`` is imported and raises :class:`AgentsPackageClashError` saying what to do instead.

This module imports only the standard library: it runs before anything from ``agents`` may be imported.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

__all__ = ["MARKER", "AgentsPackageClashError", "check_agents_package"]

#: The attribute our ``agents/__init__.py`` sets; another distribution's ``agents`` does not have it.
MARKER = "__mas_orchestra__"


class AgentsPackageClashError(ImportError):
    """The ``agents`` package Python imports is not mas-orchestra's.

    An ``ImportError`` rather than a :class:`~mas_orchestra.errors.MasOrchestraError`: that base class lives in
    our ``agents`` package, which is exactly what cannot be imported here.
    """


def _where(module: object) -> str:
    file = getattr(module, "__file__", None)
    if file:
        return str(Path(file).parent)
    locations = list(getattr(module, "__path__", []) or [])
    return ", ".join(str(p) for p in locations) or "an unknown location"


def _owners() -> list[str]:
    """The installed distributions that provide a top-level ``agents`` package (other than ours)."""
    try:
        from importlib.metadata import packages_distributions

        return sorted({d for d in packages_distributions().get("agents", []) if d.lower() != "mas-orchestra"})
    except Exception:  # metadata of a broken installation: the message still says what to do
        return []


def check_agents_package() -> None:
    """Raise :class:`AgentsPackageClashError` unless ``agents`` is mas-orchestra's own layer.

    Raises:
        AgentsPackageClashError: the imported ``agents`` lacks our marker; the message names where it came from,
            the distributions that install an ``agents`` package, and how to fix the environment.
    """
    module = sys.modules.get("agents")
    if module is None:
        try:
            module = importlib.import_module("agents")
        except ImportError:
            return  # no agents at all: the import that needs it reports that itself
    if getattr(module, MARKER, False):
        return
    owners = _owners()
    uninstall = " ".join(owners) if owners else "agents"
    ours = Path(__file__).resolve().parents[1] / "agents"
    raise AgentsPackageClashError(
        f"the 'agents' package Python imported (from {_where(module)}) is not mas-orchestra's agents layer"
        f"{' (expected ' + str(ours) + ')' if ours.is_dir() else ''}. Another distribution installs a top-level "
        f"'agents' package too{' (installed here: ' + ', '.join(owners) + ')' if owners else ''}. Fix: "
        f"`pip uninstall {uninstall}`, then `pip install --force-reinstall --no-deps mas-orchestra` (pip may have "
        "overwritten our files); or install mas-orchestra in a virtual environment of its own "
        "(`python -m venv .venv`). If a folder called 'agents' in the current directory shadows it, run from "
        "elsewhere. See docs/guides/troubleshooting.md."
    )
