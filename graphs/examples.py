"""Example specs shipped with the package (``graphs/specs``)."""

from __future__ import annotations

from importlib import resources

from mas_orchestra.spec import GraphSpec

__all__ = ["example_names", "example_spec"]


def example_names() -> list[str]:
    """Names of the valid example specs (file names without suffix).

    Returns:
        Sorted names, e.g. ``diamond``.
    """
    folder = resources.files("graphs").joinpath("specs")
    return sorted(p.name.rsplit(".", 1)[0] for p in folder.iterdir() if not p.name.startswith("invalid"))


def example_spec(name: str) -> GraphSpec:
    """Load an example spec by name, e.g. ``example_spec("diamond")``.

    Args:
        name: One of :func:`example_names`.

    Returns:
        The validated spec.

    Raises:
        KeyError: An unknown name (the message lists the valid ones).
    """
    folder = resources.files("graphs").joinpath("specs")
    for suffix in (".xml", ".json"):
        path = folder.joinpath(name + suffix)
        if path.is_file():
            return GraphSpec.from_text(path.read_text(encoding="utf-8"))
    raise KeyError(f"no example spec {name!r}; valid: {', '.join(example_names())}")
