//! `[mcp]`: where the MCP servers file is, the timeouts its servers get, and the tools
//! `manus-rt mcp-server` offers, checked. `resolve` reads the servers file.

use std::time::Duration;

use super::error::{Lines, Problem};
use super::file::McpToml;
use super::values::known_tools;

/// The tools offered when `[mcp] serve_tools` is unset.
const SERVE_TOOLS: [&str; 4] = ["bash", "python_execute", "str_replace_editor", "terminate"];

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
    let file = ServersFile {
        named: m
            .servers_file
            .as_ref()
            .map(|f| (f.get_ref().clone(), lines.of(f))),
        call_timeout: Duration::from_secs(m.call_timeout_secs.unwrap_or(120).max(1)),
        connect_timeout: Duration::from_secs(m.connect_timeout_secs.unwrap_or(30).max(1)),
    };
    let serve_tools = match &m.serve_tools {
        Some(list) => known_tools(list, "[mcp] serve_tools", lines)?,
        None => SERVE_TOOLS.map(String::from).to_vec(),
    };
    Ok((file, serve_tools))
}
