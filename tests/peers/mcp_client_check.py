"""Drives `manus-rt mcp-server` with the official Python SDK's client, for tests/mcp.rs.

    mcp_client_check.py stdio COMMAND [ARGS...]   # start the server and talk over its stdio
    mcp_client_check.py http URL                  # talk streamable HTTP to a running server

Lists the tools, runs a shell command, creates and views a file, and tries to view a file
outside the workspace; prints what came back as one JSON object on stdout.
"""

import asyncio
import json
import sys

from mcp import Client, StdioServerParameters


def text_of(result) -> str:
    return "\n".join(part.text for part in result.content if getattr(part, "text", None) is not None)


async def check(target) -> dict:
    async with Client(target) as client:
        tools = await client.list_tools()
        bash = await client.call_tool("bash", {"command": "echo hello from bash"})
        created = await client.call_tool(
            "str_replace_editor",
            {"command": "create", "path": "notes.txt", "file_text": "kept by MCP\n"},
        )
        viewed = await client.call_tool("str_replace_editor", {"command": "view", "path": "notes.txt"})
        escape = await client.call_tool("str_replace_editor", {"command": "view", "path": "../../etc/passwd"})
        return {
            "tools": [t.name for t in tools.tools],
            "bash": text_of(bash),
            "created": text_of(created),
            "viewed": text_of(viewed),
            "escape": text_of(escape),
            "escape_is_error": bool(escape.is_error),
        }


def main() -> None:
    kind, rest = sys.argv[1], sys.argv[2:]
    if kind == "stdio":
        target = StdioServerParameters(command=rest[0], args=rest[1:])
    else:
        target = rest[0]
    print(json.dumps(asyncio.run(check(target))))


if __name__ == "__main__":
    main()
