"""An MCP server for manus-rt's tests of what a server asks of its client, written with the
official Python SDK, for what the reference server does not show.

`slow` reports progress once a second for `seconds` seconds; when the client cancels the
call, it writes `cancelled <seconds>` to the file named by $MANUS_PEER_NOTES, so a test can
see the cancellation reached the server. Logs go to stderr; stdout is the protocol.
"""

import os

import anyio

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("manus-rt-asking-peer")


@server.tool()
async def slow(seconds: int, ctx: Context) -> str:
    """Count to `seconds`, one a second, reporting progress as it goes."""
    try:
        for n in range(1, seconds + 1):
            await ctx.report_progress(n, seconds, f"second {n} of {seconds}")
            await anyio.sleep(1)
        return f"counted to {seconds}"
    except anyio.get_cancelled_exc_class():
        with open(os.environ["MANUS_PEER_NOTES"], "a") as notes:
            notes.write(f"cancelled {seconds}\n")
        raise


if __name__ == "__main__":
    server.run()
