//! `config.toml` → `Config`, the engine's typed settings; every error names the file, the
//! key and, where it can, the line.
//!
//! Two steps: `parse` (the text → `Parsed`, a pure function of the text) and
//! `Parsed::resolve` (reads the environment and the disk: API keys, cassettes, the MCP
//! servers file, …). `file` is the file's shape, one module per section builds and checks
//! its settings, `error` is the error type. Lookup: `--config FILE`, else
//! `config/config.toml`, else `config/config.example.toml`, else the example compiled into
//! the binary, so `manus-rt run-flow` works anywhere.

mod agents;
mod approvals;
mod browser;
mod cluster;
mod discover;
mod error;
mod file;
mod flow;
mod llm;
mod mcp;
pub mod mcp_servers;
mod memory;
mod parse;
mod resolve;
mod sandbox;
mod service;
mod telemetry;
#[cfg(test)]
mod tests;
mod tools;
mod values;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use manus_actors::agent::{AgentProfile, AgentSpec};
use manus_actors::browser::BrowserSettings;
use manus_actors::llm::LlmSettings;
use manus_actors::mcp::{McpHandle, McpServerSpec};
use manus_actors::planner::FlowSettings;
use manus_actors::sandbox::SandboxSettings;
use manus_actors::tools::ToolSettings;

use crate::store::StoreUrl;
use crate::telemetry::TelemetrySettings;

pub use error::ConfigError;
#[cfg(test)]
pub(crate) use error::Lines;
pub use mcp::McpOAuth;
pub use parse::{Parsed, parse};
pub use resolve::{Env, process_env};
pub use sandbox::SandboxMode;

/// The example config, as shipped; it runs with no API key (it replays a cassette).
pub const EMBEDDED_EXAMPLE: &str = include_str!("../../config/config.example.toml");
/// The cassette the example config replays, named `builtin:example-flow` there.
pub const EMBEDDED_CASSETTE: &str = include_str!("../../config/cassettes/example-flow.jsonl");
const BUILTIN_CASSETTE: &str = "builtin:example-flow";

/// A validated config, mapped onto the engine's types.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where it came from (a path, or "embedded example").
    pub source: String,
    /// LLM profiles by name; `default` is `[llm]`.
    pub llm: BTreeMap<String, Arc<LlmSettings>>,
    pub planner_llm: String,
    pub workspace: PathBuf,
    pub tools: ToolSettings,
    /// The pool, in name order; each agent names its LLM profile.
    pub agents: Vec<(AgentTemplate, String)>,
    pub flow: FlowSettings,
    /// `[telemetry]` with the `OTEL_*` environment applied.
    pub telemetry: TelemetrySettings,
    /// `[sandbox]` in container mode; code runs on the host otherwise.
    pub sandbox: Option<SandboxSettings>,
    /// `[sandbox] mode` (process mode's confinement is `tools.confine`).
    pub sandbox_mode: SandboxMode,
    /// The file spelt container mode `use_sandbox = true`, which `config check` notes.
    pub sandbox_old_spelling: bool,
    /// Set when process mode was asked for (or defaulted to) but this kernel cannot
    /// confine, and `[sandbox] fallback = "none"` let code run unconfined: the warning
    /// every run and `config check` give.
    pub unconfined: Option<String>,
    /// `[browser]`; a browser starts only when an agent first uses it.
    pub browser: BrowserSettings,
    /// The MCP servers of the servers file, in id order.
    pub mcp_servers: Vec<McpServerSpec>,
    /// `[mcp] sampling`: what MCP servers' sampling requests get (every server's spec
    /// carries it; `run-mcp` gives it to the server it starts).
    pub mcp_sampling: manus_actors::mcp::Sampling,
    /// The tools `manus-rt mcp-server` offers (`[mcp] serve_tools`).
    pub mcp_serve_tools: Vec<String>,
    /// How `mcp-server --transport http` admits clients and closes their sessions (`[mcp]
    /// max_sessions`, `session_idle_secs`, `allowed_origins`).
    pub mcp_http: manus_actors::mcp::server::HttpSettings,
    /// The authorization server whose access tokens `mcp-server --transport http` accepts
    /// besides the static tokens (`[mcp] oauth_issuer`, `oauth_audience`, `oauth_scopes`).
    pub mcp_oauth: Option<McpOAuth>,
    /// Where runs are recorded (`[store] url`); `None` with `[store] enabled = false`.
    pub store: Option<StoreUrl>,
    /// How long ended runs are kept (`[store] keep_days`, `keep_runs`); unbounded by default.
    pub retention: crate::store::Retention,
    /// `[server]`, for `manus-rt serve`; `MANUS_API_TOKENS` (comma-separated) adds tokens.
    pub server: crate::settings::ServerSettings,
    /// `[cluster]`: this node shares queued flows with the others of the store.
    pub cluster: Option<crate::settings::ClusterSettings>,
    /// `[memory]` when `enabled = true`: notes kept in the run store across runs.
    pub memory: Option<crate::store::memory::MemorySettings>,
    /// The shipped example is in use (no config file of the user's): its model may be
    /// one found on this machine (`discover`).
    pub example: bool,
    /// Which model the example's default profile found, and how to change it.
    pub model_source: Option<String>,
}

/// An agent of the pool before it is bound to a flow's LLM client.
#[derive(Debug, Clone)]
pub struct AgentTemplate {
    pub name: String,
    pub description: String,
    pub profile: AgentProfile,
    pub replicas: u32,
    /// Ids of the MCP servers whose tools this agent gets.
    pub mcp_servers: Vec<String>,
    /// Which of its tool calls wait for approval.
    pub approvals: Arc<manus_actors::approvals::Approvals>,
    /// The `[llm.NAME]` profile that writes its memory's summaries, if not its own.
    pub compact_llm: Option<String>,
}

/// The models an agent talks to: its own (`llm`), and the one that writes its memory's
/// summaries (`compact_llm`), if another.
pub struct AgentModels {
    pub llm: manus_actors::llm::LlmClient,
    pub compact: Option<manus_actors::llm::LlmClient>,
}

impl AgentTemplate {
    pub fn bind(
        &self,
        models: AgentModels,
        tools: &ToolSettings,
        workspace: &Path,
        sandbox: Option<manus_actors::sandbox::SandboxHandle>,
        browser: Option<manus_actors::browser::BrowserHandle>,
        mcp: Vec<McpHandle>,
    ) -> AgentSpec {
        AgentSpec {
            name: self.name.clone(),
            description: self.description.clone(),
            profile: self.profile.clone(),
            replicas: self.replicas,
            slots: Arc::new(tokio::sync::Semaphore::new(self.replicas as usize)),
            tool_specs: manus_actors::tools::worker::specs_for(&self.profile.tools, tools).into(),
            llm: models.llm,
            tool_settings: tools.clone(),
            workspace: workspace.to_path_buf(),
            sandbox,
            browser,
            mcp,
            approvals: self.approvals.clone(),
            compact_llm: models.compact,
            system: AgentSpec::opening(&self.profile, workspace, &self.name),
            memory: None,
        }
    }

    /// Whether this agent holds a tool that needs the browser.
    pub fn uses_browser(&self) -> bool {
        self.profile.tools.iter().any(|t| t == "browser_use")
    }
}

impl Config {
    /// Find and load the config: `explicit`, else the usual places, else the embedded example.
    pub fn locate(explicit: Option<&Path>) -> Result<Config, ConfigError> {
        if let Some(path) = explicit {
            return Config::load(path);
        }
        if Path::new("config/config.toml").exists() {
            return Config::load(Path::new("config/config.toml"));
        }
        let example = Path::new("config/config.example.toml");
        let mut config = if example.exists() {
            Config::load(example)?
        } else {
            Config::from_text(EMBEDDED_EXAMPLE, "embedded example config", None)?
        };
        config.example = true;
        Ok(config)
    }

    /// With the example in use, point the default profile at a model this machine has (an
    /// OpenAI key, a local Ollama or llama.cpp server), else keep the replay: `discover`.
    pub async fn find_model(&mut self) {
        discover::apply(self, &process_env).await
    }

    /// The config for one eval case (its directory `case`): replay profiles whose cassette
    /// path names `{case}` replay the case's own cassette.
    pub fn for_case(&self, case: &Path) -> Result<Config, String> {
        let mut config = self.clone();
        for settings in config.llm.values_mut() {
            let Some(own) = settings.cassette.as_ref().and_then(|c| c.for_case(case)) else {
                continue;
            };
            let cassette =
                Arc::new(own.map_err(|e| format!("[llm.{}] cassette: {e}", settings.profile))?);
            *settings = Arc::new(LlmSettings {
                model: cassette.model().unwrap_or("replay").to_string(),
                cassette: Some(cassette),
                ..(**settings).clone()
            });
        }
        Ok(config)
    }

    /// Read and load the config file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let bytes = std::fs::read(path).map_err(|e| ConfigError::unreadable(path, "it", e))?;
        let text = error::text_of(path, bytes)?;
        Config::from_text(&text, &path.display().to_string(), path.parent())
    }

    /// Parse config text and resolve it against the process's environment and the disk;
    /// `source` names it in errors, `dir` is its directory (see `Parsed::resolve`).
    pub fn from_text(text: &str, source: &str, dir: Option<&Path>) -> Result<Config, ConfigError> {
        parse(text, source)?.resolve(&process_env, dir)
    }
}
