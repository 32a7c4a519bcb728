"""An MCP resource server behind OAuth 2.1 for manus-rt's tests, written with the official
Python SDK's server-side auth: it serves RFC 9728 protected-resource metadata naming the
authorization server, answers 401 with a WWW-Authenticate challenge without a good bearer
token, and checks each token by asking the authorization server (RFC 7662 introspection),
which says whether it is active (not expired) and for whom.

Usage: mcp_oauth_server.py PORT AUTHORIZATION_SERVER_URL
"""

import sys

import httpx
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer

port = int(sys.argv[1])
issuer = sys.argv[2]
resource = f"http://127.0.0.1:{port}/mcp"


class Introspecting:
    async def verify_token(self, token: str) -> AccessToken | None:
        async with httpx.AsyncClient() as client:
            answer = await client.post(f"{issuer}/introspect", data={"token": token})
        info = answer.json()
        if not info.get("active"):
            return None
        return AccessToken(
            token=token,
            client_id=info["client_id"],
            scopes=info.get("scope", "").split(),
            expires_at=info.get("exp"),
            resource=info.get("aud"),
        )


server = MCPServer(
    "manus-rt-oauth-peer",
    token_verifier=Introspecting(),
    auth=AuthSettings(
        issuer_url=issuer,
        resource_server_url=resource,
        required_scopes=["mcp"],
        validate_token_resource=True,
    ),
)


@server.tool()
def whoami(ctx: Context) -> str:
    """Say which OAuth client called."""
    from mcp.server.auth.middleware.auth_context import get_access_token

    token = get_access_token()
    return f"signed in as {token.client_id if token else 'nobody'}"


server.run("streamable-http", host="127.0.0.1", port=port)
