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
