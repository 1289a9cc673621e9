"""The tools a user offers, checked once: LangChain ``BaseTool``s (``@tool`` functions included) or plain
functions (wrapped with ``StructuredTool.from_function``), by unique, grammar-safe names."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool

from agents.errors import MasOrchestraError

__all__ = ["TOOL_NAME_RE", "ToolsetError", "as_toolset"]

#: What a tool name may be: it is written in orchestrations, grammars and provider tool schemas.
TOOL_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")


class ToolsetError(MasOrchestraError, ValueError):
    """The offered tools cannot be used as given (a duplicate or unusable name, not a tool); names the tool."""


def _as_tool(item: Any) -> BaseTool:
    if isinstance(item, BaseTool):
        return item
    if callable(item):
        try:
            return StructuredTool.from_function(item)
        except Exception as exc:  # e.g. no docstring, unsupported signature
            name = getattr(item, "__name__", repr(item))
            raise ToolsetError(f"function {name!r} cannot be made a tool: {exc}; decorate it with @tool") from exc
    raise ToolsetError(f"{item!r} is not a tool: offer LangChain tools (@tool, BaseTool) or plain functions")


def as_toolset(tools: Iterable[Any] | None) -> dict[str, BaseTool]:
    """The offered tools by name, in the order given; a bad or duplicate name raises :class:`ToolsetError`.

    Args:
        tools: LangChain tools, MCP tools or functions.

    Returns:
        Name → tool.

    Raises:
        ToolsetError: A bad or duplicate name.
    """
    toolset: dict[str, BaseTool] = {}
    for item in tools or ():
        tool = _as_tool(item)
        if not TOOL_NAME_RE.fullmatch(tool.name):
            raise ToolsetError(
                f"tool name {tool.name!r} cannot be offered: use 1-64 letters, digits, '_', '.' or '-', starting "
                "with a letter (rename it, e.g. @tool('my_tool'))"
            )
        if tool.name in toolset:
            raise ToolsetError(f"two tools are named {tool.name!r}; tool names must be unique (rename one)")
        toolset[tool.name] = tool
    return toolset
