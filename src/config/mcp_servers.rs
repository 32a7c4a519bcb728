//! The MCP servers file (`config/mcp.json`, or `[mcp] servers_file`) in the common
//! `{"mcpServers": {id: {...}}}` shape: a `command` (with `args`, `env`) for a stdio server,
//! or a `url` (with `type` "streamable-http" or legacy "sse", and `headers`) for a remote
//! one, which may sign in with OAuth 2.1 (`oauth`: `grant`, `client_id`, `client_secret_env`,
//! `scopes`). Errors name the file, the line and the server. A pure function of the text, like
//! `parse`: `resolve` finds and reads the file.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use manus_actors::mcp::{McpOAuth, McpServerSpec, McpTransport, OAuthGrant, Secret};
use serde::Deserialize;

use super::ConfigError;
use super::values::{WEEK, not_web_url};

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ServersFile {
    #[serde(default)]
    mcp_servers: BTreeMap<String, ServerJson>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ServerJson {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    url: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// Per-server override of `[mcp] call_timeout_secs`.
    timeout_secs: Option<u64>,
    /// Some clients' files mark servers off; such servers are skipped.
    #[serde(default)]
    disabled: bool,
    oauth: Option<OAuthJson>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OAuthJson {
    /// "client_credentials" or "authorization_code".
    grant: String,
    client_id: Option<String>,
    /// The environment variable holding the client secret.
    client_secret_env: Option<String>,
    /// The secret itself (a file that holds it must be kept private).
    client_secret: Option<String>,
    #[serde(default)]
    scopes: Vec<String>,
}

/// The servers of a servers file's `text`, read from `source` (its path, for errors).
/// `call_timeout` and `connect_timeout` apply unless a server sets its own `timeout_secs`;
/// the OAuth tokens of server ID are kept in `tokens_dir`/ID.json.
pub fn parse(
    text: &str,
    source: &str,
    call_timeout: Duration,
    connect_timeout: Duration,
    tokens_dir: &Path,
) -> Result<Vec<McpServerSpec>, ConfigError> {
    let file: ServersFile = serde_json::from_str(text).map_err(|e| ConfigError {
        source: source.to_string(),
        line: Some(e.line()),
        key: None,
        message: format!("not a valid MCP servers file ({e}); expected {{\"mcpServers\": {{\"ID\": {{\"command\": ..}} or {{\"url\": ..}}}}}}"),
    })?;
    let line_of = |id: &str| {
        text.find(&format!("\"{id}\""))
            .map(|at| text[..at].matches('\n').count() + 1)
    };
    let mut servers = vec![];
    for (id, s) in file.mcp_servers {
        if s.disabled {
            continue;
        }
        let fail = |message: String| ConfigError {
            source: source.to_string(),
            line: line_of(&id),
            key: Some(format!("mcpServers.{id}")),
            message: format!("mcpServers.{id}: {message}"),
        };
        let transport = match (&s.command, &s.url) {
            (Some(_), Some(_)) => {
                return Err(fail(
                    "has both `command` and `url`; a server is either a local command or a remote URL".into(),
                ));
            }
            (None, None) => {
                return Err(fail(
                    "needs a `command` (stdio server) or a `url` (remote server)".into(),
                ));
            }
            (Some(command), None) => {
                if command.trim().is_empty() {
                    return Err(fail(
                        "`command` is blank: give the program that starts the server".into(),
                    ));
                }
                if s.kind.as_deref().is_some_and(|k| k != "stdio") {
                    return Err(fail(format!(
                        "`type` = \"{}\" does not go with `command`; use \"stdio\" or leave it out",
                        s.kind.as_deref().unwrap_or_default()
                    )));
                }
                McpTransport::Stdio {
                    command: command.clone(),
                    args: s.args.clone(),
                    env: s.env.clone(),
                }
            }
            (None, Some(url)) => {
                if let Some(why) = not_web_url(url) {
                    return Err(fail(format!("`url` = \"{url}\" {why}")));
                }
                let (url, headers) = (url.clone(), s.headers.clone());
                match s.kind.as_deref() {
                    None | Some("streamable-http" | "streamableHttp" | "http") => {
                        McpTransport::StreamableHttp { url, headers }
                    }
                    Some("sse") => McpTransport::Sse { url, headers },
                    Some(other) => {
                        return Err(fail(format!(
                            "`type` = \"{other}\" is not a remote transport; use \"streamable-http\" or \"sse\""
                        )));
                    }
                }
            }
        };
        if let Some(secs) = s.timeout_secs
            && !(1..=WEEK as u64).contains(&secs)
        {
            return Err(fail(format!(
                "`timeout_secs` = {secs} is out of range: use 1 to {WEEK} seconds (a week)"
            )));
        }
        let oauth = match s.oauth {
            None => None,
            Some(_) if !matches!(transport, McpTransport::StreamableHttp { .. }) => {
                return Err(fail(
                    "`oauth` is for remote servers over streamable HTTP (a `url` without `type` = \"sse\")".into(),
                ));
            }
            Some(o) => Some(oauth(o, &id, tokens_dir).map_err(fail)?),
        };
        servers.push(McpServerSpec {
            id,
            transport,
            call_timeout: s
                .timeout_secs
                .map(Duration::from_secs)
                .unwrap_or(call_timeout),
            connect_timeout,
            sampling: Default::default(),
            oauth,
        });
    }
    Ok(servers)
}

/// A server's `oauth` entry, checked.
fn oauth(o: OAuthJson, id: &str, tokens_dir: &Path) -> Result<McpOAuth, String> {
    let grant = match o.grant.as_str() {
        "client_credentials" => OAuthGrant::ClientCredentials,
        "authorization_code" => OAuthGrant::AuthorizationCode,
        other => {
            return Err(format!(
                "`oauth.grant` = \"{other}\" is not known: use \"client_credentials\" (a node signs in \
                 with its client id and secret) or \"authorization_code\" (a person signs in with \
                 `manus-rt mcp-login {id}`)"
            ));
        }
    };
    let client_secret = match (o.client_secret_env, o.client_secret) {
        (Some(_), Some(_)) => {
            return Err(
                "`oauth` has both `client_secret_env` and `client_secret`; give one (the variable's name is better)".into(),
            );
        }
        (Some(name), None) if name.trim().is_empty() => {
            return Err("`oauth.client_secret_env` is blank: give the name of the environment variable that holds the secret".into());
        }
        (Some(name), None) => Some(Secret::Env(name)),
        (None, Some(value)) => Some(Secret::Value(value)),
        (None, None) => None,
    };
    if grant == OAuthGrant::ClientCredentials && (o.client_id.is_none() || client_secret.is_none())
    {
        return Err("`oauth.grant` = \"client_credentials\" needs `client_id` and `client_secret_env` (the environment variable holding the secret)".into());
    }
    Ok(McpOAuth {
        grant,
        client_id: o.client_id,
        client_secret,
        scopes: o.scopes,
        // The id names the file, so nothing in it may lead out of the folder.
        token_file: tokens_dir.join(format!(
            "{}.json",
            id.replace(|c: char| !c.is_ascii_alphanumeric() && c != '-', "_")
        )),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Vec<McpServerSpec>, ConfigError> {
        parse(
            text,
            "mcp.json",
            Duration::from_secs(60),
            Duration::from_secs(10),
            Path::new("tokens"),
        )
    }

    #[test]
    fn both_shapes_are_read() {
        let servers = read(
            r#"{"mcpServers": {
                "everything": {"command": "npx", "args": ["-y", "server"], "env": {"A": "1"}},
                "remote": {"url": "http://127.0.0.1:3001/mcp", "headers": {"Authorization": "Bearer x"}},
                "old": {"type": "sse", "url": "http://127.0.0.1:3002/sse", "timeout_secs": 5},
                "off": {"command": "nothing", "disabled": true}
            }}"#,
        )
        .unwrap();
        let ids: Vec<&str> = servers.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["everything", "old", "remote"]);
        assert!(
            matches!(&servers[0].transport, McpTransport::Stdio { command, args, env }
            if command == "npx" && args.len() == 2 && env["A"] == "1")
        );
        assert!(matches!(servers[1].transport, McpTransport::Sse { .. }));
        assert_eq!(servers[1].call_timeout, Duration::from_secs(5));
        assert!(
            matches!(&servers[2].transport, McpTransport::StreamableHttp { headers, .. }
            if headers.contains_key("Authorization"))
        );
    }

    #[test]
    fn errors_name_the_server_and_line() {
        let e =
            read("{\"mcpServers\": {\n \"a\": {\"command\": \"x\"},\n \"b\": {\"args\": []}\n}}")
                .unwrap_err();
        assert_eq!(e.line, Some(3));
        assert!(
            e.message.contains("mcpServers.b") && e.message.contains("`command`"),
            "{e}"
        );
        let e = read("{\"mcpServers\": {\"a\": {\"url\": \"ftp://x\"}}}").unwrap_err();
        assert!(e.message.contains("http://"), "{e}");
        let e = read("{\"mcpServers\": {\"a\": {\"url\": \"http://x\", \"type\": \"ws\"}}}")
            .unwrap_err();
        assert!(e.message.contains("\"ws\""), "{e}");
        let e = read("{\"mcpServers\": {\"a\": {\"comand\": \"x\"}}}").unwrap_err();
        assert!(e.message.contains("comand") && e.line == Some(1), "{e}");
    }

    #[test]
    fn oauth_entries_are_checked() {
        let servers = read(
            r#"{"mcpServers": {"r": {"url": "http://127.0.0.1:1/mcp", "oauth": {"grant": "client_credentials", "client_id": "c", "client_secret_env": "S", "scopes": ["mcp"]}}}}"#,
        )
        .unwrap();
        let oauth = servers[0].oauth.as_ref().unwrap();
        assert_eq!(oauth.grant, OAuthGrant::ClientCredentials);
        assert_eq!(oauth.client_secret, Some(Secret::Env("S".into())));
        assert_eq!(oauth.token_file, Path::new("tokens/r.json"));
        for (entry, says) in [
            (
                r#""url": "http://x/mcp", "oauth": {"grant": "implicit"}"#,
                "\"implicit\"",
            ),
            (
                r#""url": "http://x/mcp", "oauth": {"grant": "client_credentials", "client_id": "c"}"#,
                "client_secret_env",
            ),
            (
                r#""type": "sse", "url": "http://x/sse", "oauth": {"grant": "authorization_code"}"#,
                "streamable HTTP",
            ),
            (
                r#""url": "http://x/mcp", "oauth": {"grant": "authorization_code", "client_secret": "a", "client_secret_env": "B"}"#,
                "both",
            ),
        ] {
            let e = read(&format!("{{\"mcpServers\": {{\"r\": {{{entry}}}}}}}")).unwrap_err();
            assert!(
                e.message.contains("mcpServers.r") && e.message.contains(says),
                "{e}"
            );
        }
        // A server id cannot lead its token file out of the folder.
        let servers = read(r#"{"mcpServers": {"../x": {"url": "http://x/mcp", "oauth": {"grant": "authorization_code"}}}}"#).unwrap();
        assert_eq!(
            servers[0].oauth.as_ref().unwrap().token_file,
            Path::new("tokens/___x.json")
        );
    }
}
