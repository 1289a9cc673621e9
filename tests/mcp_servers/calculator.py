"""A calculator MCP server (the ``mcp`` package's FastMCP), with tools that misbehave on purpose.

Run: ``python tests/mcp_servers/calculator.py`` (stdio) or ``... --http PORT`` (streamable HTTP on 127.0.0.1).
Tools: ``add``, ``multiply``, ``calculate`` (an arithmetic expression, parsed with ``ast`` — never ``eval``),
``divide`` (raises on zero), ``hang`` (never answers), ``crash`` (the server process dies), ``garble`` (writes
non-protocol bytes onto the stdio channel).
"""

from __future__ import annotations

import ast
import asyncio
import operator
import os
import sys

from mcp.server.fastmcp import FastMCP

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.Pow: operator.pow, ast.Mod: operator.mod, ast.FloorDiv: operator.floordiv}


def _value(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return -_value(node.operand) if isinstance(node.op, ast.USub) else _value(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        right = _value(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 64:
            raise ValueError("exponent too large")
        return _OPS[type(node.op)](_value(node.left), right)
    raise ValueError(f"not arithmetic: {ast.dump(node)[:60]}")


def build(port: int | None = None) -> FastMCP:
    server = FastMCP("calculator", host="127.0.0.1", port=port or 8000)

    @server.tool()
    def add(a: float, b: float) -> float:
        """Add two numbers."""
        return a + b

    @server.tool()
    def multiply(a: float, b: float) -> float:
        """Multiply two numbers."""
        return a * b

    @server.tool()
    def calculate(expression: str) -> str:
        """Evaluate an arithmetic expression with + - * / // % ** and parentheses, e.g. '(3 + 4) * 12'."""
        result = _value(ast.parse(expression.strip(), mode="eval").body)
        return str(int(result)) if float(result).is_integer() else f"{result:.6g}"

    @server.tool()
    def divide(a: float, b: float) -> float:
        """Divide a by b."""
        if b == 0:
            raise ValueError("division by zero")
        return a / b

    @server.tool()
    async def hang(seconds: float = 3600) -> str:
        """Wait (a tool that does not answer in time)."""
        await asyncio.sleep(seconds)
        return "woke up"

    @server.tool()
    def pid() -> int:
        """The server's process id (tests check which process answered)."""
        return os.getpid()

    @server.tool()
    def crash() -> str:
        """End the server process abruptly."""
        os._exit(3)

    @server.tool()
    def garble() -> str:
        """Write bytes that are not the protocol onto stdout, then hang."""
        sys.stdout.write("this is not JSON-RPC\n{{{\n")
        sys.stdout.flush()
        import time

        time.sleep(3600)
        return "unreachable"

    return server


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        build(int(sys.argv[2])).run(transport="streamable-http")
    else:
        build().run()
