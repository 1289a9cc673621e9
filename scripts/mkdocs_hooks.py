"""MkDocs hooks of the documentation site (``mkdocs.yml`` names this file).

* The example notebooks stay in ``examples/`` (where ``tests/test_notebooks.py`` executes them); they are added to
  the site as ``examples/<name>.ipynb`` before mkdocs-jupyter renders them (without executing them).
* ``docs/reference/cli.md`` holds markers that are replaced by the help of ``mas-orchestra`` (and of each of its
  subcommands) and of ``python -m training.grpo``, rendered from the argparse parsers themselves, so the
  reference cannot drift from the code. A parser that moves must be renamed in ``PARSERS`` (the strict build
  fails until it is).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import re
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
# marker in a page → (the command as typed, "module:function returning the argparse parser", heading level)
PARSERS = {
    "<!-- cli-reference -->": ("mas-orchestra", "mas_orchestra.cli:build_parser", 2),
    "<!-- training-cli-reference -->": ("python -m training.grpo", "training.config:build_parser", 3),
}


@event_priority(100)  # before mkdocs-jupyter's on_files, which turns .ipynb files into pages
def on_files(files: Files, config) -> Files:
    for notebook in sorted(EXAMPLES.glob("*.ipynb")):
        files.append(File(f"examples/{notebook.name}", src_dir=str(REPO), dest_dir=config["site_dir"],
                          use_directory_urls=config["use_directory_urls"]))
    return files


def _help(parser: argparse.ArgumentParser) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        parser.print_help()
    return out.getvalue().rstrip()


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _command_sections(parser: argparse.ArgumentParser, path: list[str], level: int) -> list[str]:
    sections = [f"{'#' * level} `{' '.join(path)}`", "", "```text", _help(parser), "```", ""]
    for name, sub in _subparsers(parser).items():
        sections += _command_sections(sub, [*path, name], min(level + 1, 4))
    return sections


def render_cli_reference(marker: str = "<!-- cli-reference -->") -> str:
    """The help of a command and every subcommand (recursively), as Markdown sections.

    Args:
        marker: A key of :data:`PARSERS`.

    Returns:
        Markdown: one section per (sub)command with its ``--help`` text.
    """
    if str(REPO) not in sys.path:  # this checkout's code, not whichever copy the environment installed
        sys.path.insert(0, str(REPO))
    command, target, level = PARSERS[marker]
    module_name, function = target.split(":")
    build_parser = getattr(importlib.import_module(module_name), function)

    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "88"  # argparse wraps to $COLUMNS; a fixed width keeps the page the same everywhere
    try:
        return "\n".join(_command_sections(build_parser(), [command], level))
    finally:
        if previous is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = previous


def on_page_markdown(markdown: str, page, config, files) -> str:
    for marker in PARSERS:
        if marker in markdown:
            markdown = markdown.replace(marker, render_cli_reference(marker))
    return markdown


# nbconvert's page template loads Mermaid from cdnjs when a notebook output is a Mermaid diagram, and writes an
# empty MathJax <script src="">. Our notebooks print Mermaid as text, so neither is needed; both are removed so
# that a rendered notebook fetches nothing. A notebook that does render a Mermaid output fails the build
# instead of silently reaching for the network.
_MATHJAX_LOADER = '<script src=""> </script>'
_MERMAID_LOADER = re.compile(r'<script type="module">\s*document\.addEventListener\("DOMContentLoaded".*?</script>',
                             re.DOTALL)


def on_post_page(output: str, page, config) -> str:
    if not page.file.src_uri.endswith(".ipynb"):
        return output
    if 'class="jp-Mermaid' in output:
        raise PluginError(f"{page.file.src_uri}: a Mermaid output would load mermaid.js from a CDN; "
                          "print the diagram as text instead")
    output = output.replace(_MATHJAX_LOADER, "")
    return _MERMAID_LOADER.sub("", output)
