"""An MCP server for manus-rt's tests, written with the official Python SDK.

`unlock_later` answers at once and, a moment later, adds a tool named `secret` and announces
it with an unsolicited notifications/tools/list_changed; `trace` answers with the W3C traceparent the
request carried in its `_meta` ("none" without one); `crash` makes the server process exit
in the middle of the call. Logs go to stderr; stdout is the protocol.
"""

import asyncio
import os

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.subscriptions import ToolsListChanged

server = MCPServer("manus-rt-test-peer")


def secret() -> str:
    """Tell the secret word."""
    return "the secret word is swordfish"


# Tasks started by tools, kept so they are not collected while they run.
pending = set()


@server.tool()
async def unlock_later(ctx: Context) -> str:
    """Make the `secret` tool available in a moment."""
    session = ctx.session
    # Subscribers of the 2026 protocol hear it on `subscriptions/listen`; older sessions get
    # the plain notification.
    bus = ctx._subscriptions

    async def later():
        await asyncio.sleep(0.3)
        server.add_tool(secret)
        if bus is not None:
            await bus.publish(ToolsListChanged())
        await session.send_tool_list_changed()

    task = asyncio.get_running_loop().create_task(later())
    pending.add(task)
    task.add_done_callback(pending.discard)
    return "the secret tool will appear shortly"


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
