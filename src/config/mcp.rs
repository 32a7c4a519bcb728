//! `[mcp]`: where the MCP servers file is, the timeouts its servers get, and the tools
//! `manus-rt mcp-server` offers and how its HTTP transport admits clients, checked.
//! `resolve` reads the servers file.

use std::time::Duration;

use manus_actors::mcp::server::HttpSettings;
use toml::Spanned;

use super::error::{Lines, Problem};
use super::file::McpToml;
use super::values::{Table, known_tools};

/// The tools offered when `[mcp] serve_tools` is unset.
const SERVE_TOOLS: [&str; 4] = ["bash", "python_execute", "str_replace_editor", "terminate"];

/// The default `call_timeout_secs`.
const CALL: Duration = Duration::from_secs(120);
/// The default `connect_timeout_secs`.
const CONNECT: Duration = Duration::from_secs(30);

/// The servers file as the text names it.
#[derive(Debug, Clone)]
pub(super) struct ServersFile {
    /// `[mcp] servers_file` as written (relative to the config's directory), and its line;
    /// `mcp.json` there, if it exists, when unset.
    pub(super) named: Option<(String, Option<usize>)>,
    pub(super) call_timeout: Duration,
    pub(super) connect_timeout: Duration,
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
    let within = |key: &str, v: &Option<Spanned<i64>>, max: i64| match v {
        None => Ok(None),
        Some(n) if (1..=max).contains(n.get_ref()) => Ok(Some(*n.get_ref() as u64)),
        Some(n) => Err(Problem::at(
            lines.of(n),
            format!("[mcp] {key}"),
            format!(
                "[mcp] {key} = {} is out of range: use 1 to {max}",
                n.get_ref()
            ),
        )),
    };
    let allowed_origins = m.allowed_origins.as_ref().map_or(Ok(vec![]), |list| {
        let bad = list.get_ref().iter().find(|o| {
            !(o.starts_with("http://") || o.starts_with("https://") || o.as_str() == "null")
        });
        match bad {
            None => Ok(list.get_ref().clone()),
            Some(o) => Err(Problem::at(
                lines.of(list),
                "[mcp] allowed_origins",
                format!(
                    "[mcp] allowed_origins: \"{o}\" is not an origin: write scheme://host[:port] \
                     (http or https; :* for any port), or \"null\""
                ),
            )),
        }
    })?;
    Ok(HttpSettings {
        max_sessions: within("max_sessions", &m.max_sessions, 10_000)?
            .map_or(defaults.max_sessions, |n| n as usize),
        session_idle: within("session_idle_secs", &m.session_idle_secs, 604_800)?
            .map_or(defaults.session_idle, Duration::from_secs),
        allowed_origins,
    })
}
