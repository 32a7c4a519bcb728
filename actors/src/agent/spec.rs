//! The agent's arguments: one member of a flow's agent pool (`AgentSpec`), as data, and the
//! system message every step of its kind opens with. The host's config builds them; the
//! planner hands one to each agent it starts. Knows nothing of how a step runs.

use std::path::PathBuf;
use std::sync::Arc;

use super::AgentProfile;
use crate::llm::{LlmClient, Message, ToolSet};
use crate::mcp::McpHandle;
use crate::tools::ToolSettings;

/// One member of a flow's agent pool, as data.
#[derive(Debug, Clone)]
pub struct AgentSpec {
    /// The pool key, matched against `[TAG]`s case-insensitively (`manus`, `data_analysis`).
    pub name: String,
    /// What the planner is told this agent is good at.
    pub description: String,
    pub profile: AgentProfile,
    /// How many of this agent may run steps at once, across all flows of the runtime.
    pub replicas: u32,
    /// The `replicas` permits, shared by every flow's copy of this spec; a step waits for
    /// one, in arrival order (tokio's semaphore is fair), so extra work queues fairly.
    pub slots: std::sync::Arc<tokio::sync::Semaphore>,
    /// The profile's built-in tools as the model sees them, made once (`specs_for`).
    pub tool_specs: ToolSet,
    pub llm: LlmClient,
    pub tool_settings: ToolSettings,
    pub workspace: PathBuf,
    /// Where code runs when `[sandbox] use_sandbox` is on; the host otherwise.
    pub sandbox: Option<crate::sandbox::SandboxHandle>,
    /// The runtime's browser; each flow gets its own session in it.
    pub browser: Option<crate::browser::BrowserHandle>,
    /// MCP servers whose tools join this agent's (`[agents.NAME] mcp_servers`).
    pub mcp: Vec<McpHandle>,
    /// Which tool calls wait for a person's approval (`[approvals]`).
    pub approvals: Arc<crate::approvals::Approvals>,
    /// Who writes memory compaction's summaries (`compact_llm`), if not the agent's model.
    pub compact_llm: Option<LlmClient>,
    /// The system message every step opens with, made once (`AgentSpec::opening`).
    pub system: Message,
    /// With `[memory]`, the flow's notes (set per flow by the host).
    pub memory: Option<Arc<dyn crate::tools::memory::MemoryBook>>,
}

impl AgentSpec {
    /// The system message of agent `name` with `profile` in `workspace`: the profile's
    /// prompt with `{workspace}` and `{agent}` filled in, and in code mode how to act by code. It is frozen, and every step's
    /// memory holds a clone, so its JSON is made once for all steps of all flows.
    pub fn opening(profile: &AgentProfile, workspace: &std::path::Path, name: &str) -> Message {
        let mut text = profile
            .system_prompt
            .replace("{workspace}", &workspace.display().to_string())
            .replace("{agent}", name);
        if profile.action == super::Action::Code {
            text.push_str(crate::tools::python::code::PROMPT);
        }
        let mut system = Message::system(text);
        system.freeze();
        system
    }
}
