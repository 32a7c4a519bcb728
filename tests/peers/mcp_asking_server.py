"""An MCP server for manus-rt's tests of what a server asks of its client, written with the
official Python SDK, for what the reference server does not show.

`slow` reports progress once a second for `seconds` seconds; when the client cancels the
call, it writes `cancelled <seconds>` to the file named by $MANUS_PEER_NOTES, so a test can
see the cancellation reached the server. `paint` needs a colour from the person, which the
SDK asks for the way the negotiated protocol says: on 2026-07-28, as an input-required
result the client answers by sending the call again (a multi-round-trip request); each
round writes `paint round <protocol version>` to the notes. Logs go to stderr; stdout is
the protocol.
"""

import os
from typing import Annotated

import anyio
from pydantic import BaseModel

from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve

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


class Colour(BaseModel):
    colour: str


def note(line: str) -> None:
    with open(os.environ["MANUS_PEER_NOTES"], "a") as notes:
        notes.write(line + "\n")


def which_colour(ctx: Context) -> Elicit[Colour]:
    note(f"paint round {ctx.protocol_version}")
    return Elicit("Which colour should the wall be?", Colour)


@server.tool()
async def paint(colour: Annotated[Colour, Resolve(which_colour)]) -> str:
    """Paint the wall, in a colour the person chooses."""
    return f"painted {colour.colour}"


if __name__ == "__main__":
    server.run()
