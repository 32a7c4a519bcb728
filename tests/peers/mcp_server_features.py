"""Checks what `manus-rt mcp-server` offers besides plain tools, with the official Python
SDK's client, for tests/it/mcp.rs:

    mcp_server_features.py MODE stdio COMMAND [ARGS...]
    mcp_server_features.py MODE http URL

MODE is the SDK's connect mode: `legacy` (the initialize handshake) or `2026-07-28` (the
stateless core, found with server/discover). Reports as one JSON object on stdout: the
protocol version agreed, the tools' output schemas, a call's structured result (which the
SDK checks against the schema), the resources listed and read (and reads of /etc/passwd, of `../x` and of
the workspace's link `link` refused), and the progress
notifications of a call that runs a few seconds.
"""

import asyncio
import json
import sys

from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError


async def check(mode: str, target) -> dict:
    async with Client(target, mode=mode) as client:
        session = client.session
        if session.initialize_result is not None:
            version = session.initialize_result.protocol_version
        else:
            version = session.discover_result.supported_versions
        tools = await client.list_tools()
        call = await client.call_tool("bash", {"command": "echo structured"})
        progress = []

        async def on_progress(done, total, message):
            progress.append({"progress": done, "total": total, "message": message})

        await client.call_tool("bash", {"command": "sleep 3; echo slept"}, progress_callback=on_progress)
        listed = await client.list_resources()
        read = {}
        for resource in listed.resources:
            try:
                result = await client.read_resource(resource.uri)
                part = result.contents[0]
                read[resource.name] = {
                    "text": getattr(part, "text", None),
                    "blob": getattr(part, "blob", None),
                    "mime": part.mime_type,
                }
            except MCPError as e:
                read[resource.name] = {"error": e.error.message}
        outside = {}
        first = listed.resources[0]
        base = first.uri[: -len(first.name)]
        tries = [("passwd", "file:///etc/passwd"), ("dotdot", base + "../x"), ("link", base + "link")]
        for label, uri in tries:
            try:
                await client.read_resource(uri)
                outside[label] = "read"
            except MCPError as e:
                outside[label] = e.error.message
        return {
            "version": version,
            "output_schemas": {t.name: t.output_schema for t in tools.tools},
            "structured": call.structured_content,
            "text": call.content[0].text,
            "progress": progress,
            "resources": [
                {"uri": r.uri, "name": r.name, "size": r.size, "mime": r.mime_type} for r in listed.resources
            ],
            "read": read,
            "outside": outside,
        }


def main() -> None:
    mode, kind, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    if kind == "stdio":
        target = StdioServerParameters(command=rest[0], args=rest[1:])
    else:
        target = rest[0]
    print(json.dumps(asyncio.run(check(mode, target))))


if __name__ == "__main__":
    main()
