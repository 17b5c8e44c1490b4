"""MCP server connections: definitions, live sessions over STDIO, SSE and streamable HTTP, and their tools."""
