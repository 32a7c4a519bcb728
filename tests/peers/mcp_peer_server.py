"""An MCP server for manus-rt's tests, written with the official Python SDK.

`unlock` adds a tool named `secret` while the session runs and announces it with an
unsolicited notifications/tools/list_changed; `trace` answers with the W3C traceparent the
request carried in its `_meta` ("none" without one); `crash` makes the server process exit
in the middle of the call. Logs go to stderr; stdout is the protocol.
"""

import os

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("manus-rt-test-peer")


def secret() -> str:
    """Tell the secret word."""
    return "the secret word is swordfish"


@server.tool()
async def unlock(ctx: Context) -> str:
    """Make the `secret` tool available."""
    server.add_tool(secret)
    await ctx.session.send_tool_list_changed()
    return "unlocked: a new tool is available"


@server.tool()
async def trace(ctx: Context) -> str:
    """Report the trace context this call arrived with."""
    meta = ctx.request_context.meta
    if meta is None:
        return "none"
    if hasattr(meta, "model_dump"):
        meta = meta.model_dump(by_alias=True)
    return str(dict(meta).get("traceparent") or "none")


@server.tool()
def crash() -> str:
    """Exit the server process without answering."""
    os._exit(3)


if __name__ == "__main__":
    server.run()
