//! `parse`: config text → `Parsed`, a pure function of the text (and the file's name, for
//! messages). It reads neither the environment nor the disk; what the config asks of them
//! (API keys, a proxy password, the Docker host, service tokens, cassettes, the MCP servers
//! file) is recorded in `Parsed` for `resolve`. The sections are built in the order their
//! settings depend on each other.

use std::path::PathBuf;

use manus_actors::browser::BrowserSettings;
use manus_actors::mcp::server::HttpSettings;
use manus_actors::planner::FlowSettings;
use manus_actors::sandbox::SandboxSettings;
use manus_actors::tools::ToolSettings;

use crate::settings::ServerSettings;
use crate::store::{Retention, StoreUrl};
use crate::telemetry::TelemetrySettings;

use super::agents::{self, AgentDraft};
use super::approvals;
use super::error::{ConfigError, Lines, Problem};
use super::file::ConfigFile;
use super::llm::{self, LlmDraft};
use super::mcp::{self, ServersFile};
use super::values::Table;
use super::{browser, cluster, flow, memory, sandbox, service, telemetry, tools};

/// A config as its text says it, checked: everything but what the environment and the disk
/// supply. `Parsed::resolve` makes it a `Config`.
#[derive(Debug, Clone)]
pub struct Parsed {
    pub(super) source: String,
    /// The LLM profiles, `default` first.
    pub(super) llm: Vec<(String, LlmDraft)>,
    pub(super) planner_llm: String,
    pub(super) workspace: PathBuf,
    /// With no Brave key yet; `brave_key_env` names the variable that holds it.
    pub(super) tools: ToolSettings,
    pub(super) brave_key_env: String,
    pub(super) agents: Vec<AgentDraft>,
    pub(super) flow: FlowSettings,
    /// Before the `OTEL_*` environment.
    pub(super) telemetry: TelemetrySettings,
    /// The sandbox, and whether the file named its Docker engine.
    pub(super) sandbox: Option<(SandboxSettings, bool)>,
    /// `[sandbox] mode`, and whether the file spelt container mode `use_sandbox = true`.
    pub(super) sandbox_mode: sandbox::SandboxMode,
    pub(super) sandbox_old_spelling: bool,
    /// Process mode where the kernel cannot confine: run unconfined rather than refuse.
    pub(super) sandbox_fallback_to_none: bool,
    /// With the proxy password the file writes; `proxy_password_env` names the variable
    /// whose value wins over it.
    pub(super) browser: BrowserSettings,
    pub(super) proxy_password_env: Option<String>,
    pub(super) mcp_servers_file: ServersFile,
    pub(super) mcp_serve_tools: Vec<String>,
    pub(super) mcp_http: HttpSettings,
    pub(super) mcp_oauth: Option<mcp::McpOAuth>,
    pub(super) store: Option<StoreUrl>,
    pub(super) retention: Retention,
    /// With the file's tokens only.
    pub(super) server: ServerSettings,
    /// With the line of `[cluster] enabled`, for the store check `resolve` makes.
    pub(super) cluster: Option<(crate::settings::ClusterSettings, Option<usize>)>,
    /// With the line of `[memory]`, for the store check `resolve` makes.
    pub(super) memory: Option<(crate::store::memory::MemorySettings, Option<usize>)>,
}

/// Parse and check config text; `source` names it in errors.
pub fn parse(text: &str, source: &str) -> Result<Parsed, ConfigError> {
    let lines = Lines(text);
    let file: ConfigFile = toml::from_str(text).map_err(|e| {
        let line = e.span().and_then(|s| lines.of_span(s));
        let mut message = e.message().trim().to_string();
        if let Some(n) = line {
            message = format!("{message}\n  in {}", lines.quote(n));
        }
        Problem {
            line,
            key: line.and_then(|n| lines.key_on(n)),
            message,
        }
        .in_file(source)
    })?;
    sections(&file, source, lines).map_err(|p| p.in_file(source))
}

fn sections(file: &ConfigFile, source: &str, lines: Lines) -> Result<Parsed, Problem> {
    // Telemetry first: content capture reaches into the model and tool settings.
    let telemetry = telemetry::build(&file.telemetry, lines)?;
    let llm = llm::profiles(&file.llm, lines)?;
    let (mcp_servers_file, mcp_serve_tools) = mcp::build(&file.mcp, lines)?;
    let mcp_http = mcp::http(&file.mcp, lines)?;
    let mcp_oauth = mcp::oauth(&file.mcp, lines)?;
    let shared = approvals::rules(
        &file.approvals.tools,
        "[approvals.tools]",
        &Default::default(),
        lines,
    )?;
    let memory = memory::build(&file.memory, lines)?;
    let agents = agents::pool(&file.agents, &llm, &shared, memory.is_some(), lines)?;
    let memory = memory.map(|m| (m, lines.header("[memory]")));
    let (mut flow, planner_llm) = flow::build(&file.flow, &agents, &llm, lines)?;
    flow.approval_timeout = approvals::timeout(&file.approvals, lines)?;
    let (tools, brave_key_env) =
        tools::build(&file.tools, &file.search, telemetry.capture_content, lines)?;
    let (browser, proxy_password_env) = browser::build(&file.browser, lines)?;
    let workspace = PathBuf::from(
        Table::new("[runtime]", lines)
            .text(&file.runtime.workspace, "workspace", "a directory's path")?
            .unwrap_or_else(|| "workspace".into()),
    );
    let sandbox::Built {
        mode: sandbox_mode,
        old_spelling: sandbox_old_spelling,
        container: sandbox,
        confine,
        fallback_to_none: sandbox_fallback_to_none,
    } = sandbox::build(&file.sandbox, &workspace, lines)?;
    let tools = ToolSettings { confine, ..tools };
    let store = service::store(&file.store, lines)?;
    let retention = service::retention(&file.store, lines)?;
    let server = service::server(&file.server, lines)?;
    let cluster = cluster::build(&file.cluster, flow.planner_replicas, lines)?;
    Ok(Parsed {
        source: source.to_string(),
        llm,
        planner_llm,
        workspace,
        tools,
        brave_key_env,
        agents,
        flow,
        telemetry,
        sandbox,
        sandbox_mode,
        sandbox_old_spelling,
        sandbox_fallback_to_none,
        browser,
        proxy_password_env,
        mcp_servers_file,
        mcp_serve_tools,
        mcp_http,
        mcp_oauth,
        store,
        retention,
        server,
        cluster,
        memory,
    })
}
