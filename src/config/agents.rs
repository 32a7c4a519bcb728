//! `[agents.NAME]`: the agent pool. Each agent's profile (built-in, then the file's
//! overrides), tools, LLM profile and replicas, checked. Which MCP servers an agent gets
//! depends on the servers file, so the ids it names are checked when `resolve` has read it.

use std::collections::BTreeMap;

use manus_actors::agent::profile;
use toml::Spanned;

use super::AgentTemplate;
use super::error::{Lines, Problem};
use super::file::AgentToml;
use super::llm::{LlmDraft, named_profile};
use super::values::known_tools;

/// An agent as the file says it; `template.mcp_servers` is filled in by `resolve`.
#[derive(Debug, Clone)]
pub(super) struct AgentDraft {
    pub(super) template: AgentTemplate,
    /// Its LLM profile.
    pub(super) llm: String,
    /// `mcp_servers` as written; every server of the servers file when unset.
    pub(super) mcp_servers: Option<Listed>,
}

/// A list of names as written, with where it is.
#[derive(Debug, Clone)]
pub(super) struct Listed {
    pub(super) names: Vec<String>,
    pub(super) line: Option<usize>,
    pub(super) key: String,
}

/// The pool in name order; at least one agent.
pub(super) fn pool(
    agents: &BTreeMap<String, Spanned<AgentToml>>,
    llm: &[(String, LlmDraft)],
    lines: Lines,
) -> Result<Vec<AgentDraft>, Problem> {
    if agents.is_empty() {
        return Err(Problem::whole(
            "the agent pool is empty: add at least one [agents.NAME] table".into(),
        ));
    }
    agents
        .iter()
        .map(|(name, spanned)| agent(name, spanned, llm, lines))
        .collect()
}

fn agent(
    name: &str,
    spanned: &Spanned<AgentToml>,
    llm: &[(String, LlmDraft)],
    lines: Lines,
) -> Result<AgentDraft, Problem> {
    let a = spanned.get_ref();
    let key = |k: &str| format!("[agents.{name}] {k}");
    let profile_id = a
        .profile
        .as_ref()
        .map(|p| p.get_ref().clone())
        .unwrap_or_else(|| {
            if profile::builtin(name).is_some() {
                name.to_string()
            } else {
                "manus".into()
            }
        });
    let mut prof = profile::builtin(&profile_id).ok_or_else(|| {
        Problem::at(
            a.profile.as_ref().and_then(|p| lines.of(p)),
            key("profile"),
            format!(
                "{} = \"{profile_id}\": no such profile; built-in profiles: {}",
                key("profile"),
                profile::BUILTIN_PROFILES.join(", ")
            ),
        )
    })?;
    if let Some(tools) = &a.tools {
        prof.tools = known_tools(tools, &key("tools"), lines)?;
    }
    let mcp_servers = a.mcp_servers.as_ref().map(|ids| Listed {
        names: ids.get_ref().clone(),
        line: lines.of(ids),
        key: key("mcp_servers"),
    });
    if !prof.tools.iter().any(|t| t == "terminate") {
        prof.tools.push("terminate".into());
    }
    prof.max_steps = a.max_steps.unwrap_or(prof.max_steps);
    prof.max_observe = a.max_observe.unwrap_or(prof.max_observe);
    prof.memory_messages = a.memory_messages.unwrap_or(prof.memory_messages);
    prof.memory_tokens = a.memory_tokens.unwrap_or(prof.memory_tokens);
    if let Some(s) = &a.system_prompt {
        prof.system_prompt = s.clone();
    }
    if let Some(s) = &a.next_step_prompt {
        prof.next_step_prompt = s.clone();
    }
    if prof.max_steps == 0 {
        return Err(Problem::at(
            lines.of(spanned),
            key("max_steps"),
            format!("{} must be at least 1", key("max_steps")),
        ));
    }
    let llm = named_profile(&a.llm, &key("llm"), llm, lines)?;
    let description = a
        .description
        .clone()
        .unwrap_or_else(|| match profile_id.as_str() {
            "data_analysis" => {
                "Analyses data files with Python and reports findings with numbers.".into()
            }
            _ => "A general agent: runs Python and shell commands, edits files, asks the user."
                .into(),
        });
    Ok(AgentDraft {
        template: AgentTemplate {
            name: name.to_ascii_lowercase(),
            description,
            profile: prof,
            replicas: a.replicas.unwrap_or(4).max(1),
            mcp_servers: vec![],
        },
        llm,
        mcp_servers,
    })
}
