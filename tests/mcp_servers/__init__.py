"""Small MCP servers the tests start (over stdio or streamable HTTP)."""
