"""Tools for agents: the :class:`ToolAgent` block, the offered toolset, and the tools of MCP servers."""

from agents.tools.agent import ToolAgent, ToolParams, parse_tool_request
from agents.tools.mcp import McpServerError, aload_mcp_tools, load_mcp_tools, mcp_connections, mcp_run_sessions
from agents.tools.toolset import ToolsetError, as_toolset

__all__ = [
    "McpServerError",
    "ToolAgent",
    "ToolParams",
    "ToolsetError",
    "aload_mcp_tools",
    "as_toolset",
    "load_mcp_tools",
    "mcp_connections",
    "mcp_run_sessions",
    "parse_tool_request",
]
