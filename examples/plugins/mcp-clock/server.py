"""An MCP stdio server written with the official `mcp` SDK: any such server can be an agenthost plugin.

The host speaks MCP's initialize / tools/list / tools/call / ping over the same
newline-delimited JSON-RPC, so nothing here knows about agenthost.
"""
import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from mcp.server.fastmcp import FastMCP

mcp = FastMCP("clock")


@mcp.tool()
def now(zone: str = "UTC") -> str:
    """The current time in an IANA time zone, as ISO 8601."""
    try:
        tz = ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {zone!r}") from None
    return datetime.datetime.now(tz).isoformat(timespec="seconds")


@mcp.tool()
def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


if __name__ == "__main__":
    mcp.run("stdio")
