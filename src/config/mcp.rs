//! `[mcp]`: where the MCP servers file is, the timeouts its servers get, and the tools
//! `manus-rt mcp-server` offers, checked. `resolve` reads the servers file.

use std::time::Duration;

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
