//! `[mcp]`: where the MCP servers file is, the timeouts its servers get, and the tools
//! `manus-rt mcp-server` offers and how its HTTP transport admits clients, checked.
//! `resolve` reads the servers file.

use std::time::Duration;

use manus_actors::mcp::Sampling;
use manus_actors::mcp::server::HttpSettings;

use super::error::{Lines, Problem};
use super::file::{McpToml, SamplingToml};
use super::values::{Bounds, Table, known_tools};

/// The tools offered when `[mcp] serve_tools` is unset.
const SERVE_TOOLS: [&str; 4] = ["bash", "python_execute", "str_replace_editor", "terminate"];

/// The default `call_timeout_secs`.
const CALL: Duration = Duration::from_secs(120);
/// The default `connect_timeout_secs`.
const CONNECT: Duration = Duration::from_secs(30);

/// Sessions `mcp-server --transport http` keeps open at once.
const SESSIONS: Bounds<i64> = Bounds::new(1, 10_000, " (sessions)");

/// The servers file as the text names it.
#[derive(Debug, Clone)]
pub(super) struct ServersFile {
    /// `[mcp] servers_file` as written (relative to the config's directory), and its line;
    /// `mcp.json` there, if it exists, when unset.
    pub(super) named: Option<(String, Option<usize>)>,
    pub(super) call_timeout: Duration,
    pub(super) connect_timeout: Duration,
    /// `[mcp] sampling`, which every server gets.
    pub(super) sampling: Sampling,
}

/// The servers file to read and the tools to serve.
pub(super) fn build(m: &McpToml, lines: Lines) -> Result<(ServersFile, Vec<String>), Problem> {
    let table = Table::new("[mcp]", lines);
    let file = ServersFile {
        named: match &m.servers_file {
            Some(f) => Some((
                table.filled(f, "servers_file", "a file's path")?,
                lines.of(f),
            )),
            None => None,
        },
        call_timeout: table.seconds(&m.call_timeout_secs, "call_timeout_secs", CALL)?,
        connect_timeout: table.seconds(&m.connect_timeout_secs, "connect_timeout_secs", CONNECT)?,
        sampling: match m.sampling.as_ref().map(|s| *s.get_ref()) {
            Some(SamplingToml::Allow) => Sampling::Allow,
            Some(SamplingToml::Approve) => Sampling::Approve,
            Some(SamplingToml::Deny) | None => Sampling::Deny,
        },
    };
    let serve_tools = match &m.serve_tools {
        Some(list) => known_tools(list, "[mcp] serve_tools", lines)?,
        None => SERVE_TOOLS.map(String::from).to_vec(),
    };
    Ok((file, serve_tools))
}

/// How `mcp-server --transport http` admits clients: each key in its range, or the default.
pub(super) fn http(m: &McpToml, lines: Lines) -> Result<HttpSettings, Problem> {
    let defaults = HttpSettings::default();
    let table = Table::new("[mcp]", lines);
    let allowed_origins = m.allowed_origins.as_ref().map_or(Ok(vec![]), |list| {
        let bad = list.get_ref().iter().find(|o| !origin(o));
        match bad {
            None => Ok(list.get_ref().clone()),
            Some(o) => Err(Problem::at(
                lines.of(list),
                "[mcp] allowed_origins",
                format!(
                    "[mcp] allowed_origins: \"{o}\" is not an origin: write scheme://host[:port] \
                     (http or https; :* for any port; no path, not even /), or \"null\""
                ),
            )),
        }
    })?;
    Ok(HttpSettings {
        max_sessions: table
            .number(&m.max_sessions, "max_sessions", SESSIONS)?
            .map_or(defaults.max_sessions, |n| n as usize),
        session_idle: table.seconds(
            &m.session_idle_secs,
            "session_idle_secs",
            defaults.session_idle,
        )?,
        allowed_origins,
    })
}

/// The OAuth 2.1 authorization server whose JWT access tokens `mcp-server --transport http`
/// accepts: signed by a key of the issuer's JWKS, issued by `issuer`, for `audience`, with
/// every scope of `scopes`.
#[derive(Debug, Clone, PartialEq)]
pub struct McpOAuth {
    /// The issuer's identifier (an https URL, or http on a loopback host), as tokens name it
    /// in `iss`; its RFC 8414 (or OpenID) metadata names the JWKS.
    pub issuer: String,
    /// What tokens must name in `aud`: this server's resource identifier.
    pub audience: String,
    /// Scopes every token must carry.
    pub scopes: Vec<String>,
}

/// `[mcp] oauth_issuer`, `oauth_audience` and `oauth_scopes`: all unset, or an issuer URL
/// and an audience (scopes optional).
pub(super) fn oauth(m: &McpToml, lines: Lines) -> Result<Option<McpOAuth>, Problem> {
    let table = Table::new("[mcp]", lines);
    let (issuer, audience) = match (&m.oauth_issuer, &m.oauth_audience) {
        (None, None) => {
            return match &m.oauth_scopes {
                None => Ok(None),
                Some(s) => Err(Problem::at(
                    lines.of(s),
                    "[mcp] oauth_scopes",
                    "[mcp] oauth_scopes needs oauth_issuer and oauth_audience: scopes are checked \
                     in tokens from an issuer"
                        .into(),
                )),
            };
        }
        (Some(i), None) => {
            return Err(Problem::at(
                lines.of(i),
                "[mcp] oauth_audience",
                "[mcp] oauth_issuer needs oauth_audience too: the resource identifier tokens \
                 must name in `aud` (such as https://tools.example/mcp)"
                    .into(),
            ));
        }
        (None, Some(a)) => {
            return Err(Problem::at(
                lines.of(a),
                "[mcp] oauth_issuer",
                "[mcp] oauth_audience needs oauth_issuer too: the authorization server's \
                 issuer URL"
                    .into(),
            ));
        }
        (Some(i), Some(a)) => (i, a),
    };
    let text = table.filled(
        issuer,
        "oauth_issuer",
        "the authorization server's issuer URL",
    )?;
    let url = reqwest::Url::parse(&text).ok();
    let loopback =
        |u: &reqwest::Url| matches!(u.host_str(), Some("localhost" | "127.0.0.1" | "[::1]"));
    let fits = url.as_ref().is_some_and(|u| {
        (u.scheme() == "https" || (u.scheme() == "http" && loopback(u)))
            && u.query().is_none()
            && u.fragment().is_none()
    });
    if !fits {
        return Err(Problem::at(
            lines.of(issuer),
            "[mcp] oauth_issuer",
            format!(
                "[mcp] oauth_issuer: \"{text}\" is not an issuer URL: write https://host[/path] \
                 (http only for localhost, 127.0.0.1 or [::1]; no query or fragment)"
            ),
        ));
    }
    Ok(Some(McpOAuth {
        issuer: text,
        audience: table.filled(
            audience,
            "oauth_audience",
            "this server's resource identifier",
        )?,
        scopes: table
            .texts(&m.oauth_scopes, "oauth_scopes", "a scope name")?
            .unwrap_or_default(),
    }))
}

/// An origin as a browser sends it: `http(s)://host[:port]` (`:*` for any port) and nothing
/// after it, or `null`.
fn origin(o: &str) -> bool {
    if o == "null" {
        return true;
    }
    let Some(("http" | "https", rest)) = o.split_once("://") else {
        return false;
    };
    let authority = rest.strip_suffix(":*").unwrap_or(rest);
    !rest.contains(['/', '?', '#', '@'])
        && authority
            .parse::<axum::http::uri::Authority>()
            .is_ok_and(|a| !a.host().is_empty())
}
