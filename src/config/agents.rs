//! `[agents.NAME]`: the agent pool. Each agent's profile (built-in, then the file's
//! overrides), tools, LLM profile and replicas, checked. Which MCP servers an agent gets
//! depends on the servers file, so the ids it names are checked when `resolve` has read it.

use std::collections::BTreeMap;

use manus_actors::agent::{Action, profile};
use manus_actors::plan::split_tag;
use manus_actors::tools::memory;
use toml::Spanned;

use super::AgentTemplate;
use super::error::{Lines, Problem};
use super::file::{ActionToml, AgentToml};
use super::llm::{LlmDraft, named_profile};
use super::values::{Bounds, Table, known_tools};

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
    approvals: &manus_actors::approvals::Approvals,
    memory: bool,
    lines: Lines,
) -> Result<Vec<AgentDraft>, Problem> {
    if agents.is_empty() {
        return Err(Problem::whole(
            "the agent pool is empty: add at least one [agents.NAME] table".into(),
        ));
    }
    for (name, spanned) in agents {
        // Plan steps name their agent as a tag (`[DATA_ANALYSIS] chart it`), case aside.
        let lower = name.to_ascii_lowercase();
        let at = lines
            .of(spanned)
            .or_else(|| lines.header(&format!("[agents.{name}]")));
        let key = format!("[agents.{name}]");
        if split_tag(&format!("[{name}] step")).0.as_deref() != Some(lower.as_str()) {
            return Err(Problem::at(
                at,
                &key,
                format!(
                    "{key}: `{name}` cannot name an agent: plan steps name their agent as [NAME], \
                     so use a letter, then letters, digits, _ or -"
                ),
            ));
        }
        if let Some(other) = agents
            .keys()
            .find(|o| *o != name && o.to_ascii_lowercase() == lower)
        {
            return Err(Problem::at(
                at,
                &key,
                format!(
                    "{key}: [agents.{other}] is the same agent (names are not case-sensitive); \
                     keep one of them"
                ),
            ));
        }
    }
    agents
        .iter()
        .map(|(name, spanned)| agent(name, spanned, llm, approvals, memory, lines))
        .collect()
}

/// Steps of one agent at once, across all flows.
const REPLICAS: Bounds<i64> = Bounds::new(1, 10_000, " steps at once");
/// Rounds (model call and tool calls) of one step.
const MAX_STEPS: Bounds<i64> = Bounds::new(1, 10_000, " rounds");
/// Characters of a tool's output the model reads.
const MAX_OBSERVE: Bounds<i64> = Bounds::new(1, 10_000_000, " characters");
/// Messages an agent's memory holds.
const MEMORY_MESSAGES: Bounds<i64> = Bounds::new(1, 100_000, " messages");
/// The share of its token limit past which an agent's memory is compacted.
const COMPACT_AT: Bounds<f64> = Bounds::new(0.05, 1.0, " of the memory's token limit");
/// Tokens an agent's memory holds.
const MEMORY_TOKENS: Bounds<i64> = Bounds::new(1, 10_000_000, " tokens");

fn agent(
    name: &str,
    spanned: &Spanned<AgentToml>,
    llm: &[(String, LlmDraft)],
    approvals: &manus_actors::approvals::Approvals,
    memory: bool,
    lines: Lines,
) -> Result<AgentDraft, Problem> {
    let a = spanned.get_ref();
    let table = Table::new(format!("[agents.{name}]"), lines);
    let key = |k: &str| table.key(k);
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
    let remembers = [memory::SAVE, memory::SEARCH];
    match &a.tools {
        Some(tools) => {
            prof.tools = known_tools(tools, &key("tools"), lines)?;
            if let Some(t) = prof.tools.iter().find(|t| remembers.contains(&t.as_str()))
                && !memory
            {
                let key = key("tools");
                return Err(Problem::at(
                    lines.of(tools),
                    &key,
                    format!("{key}: `{t}` needs [memory] enabled = true"),
                ));
            }
        }
        // With [memory], the built-in profiles keep notes too.
        None if memory => prof.tools.extend(remembers.map(String::from)),
        None => {}
    }
    let mcp_servers = a.mcp_servers.as_ref().map(|ids| Listed {
        names: ids.get_ref().clone(),
        line: lines.of(ids),
        key: key("mcp_servers"),
    });
    if !prof.tools.iter().any(|t| t == "terminate") {
        prof.tools.push("terminate".into());
    }
    let count = |v: &Option<Spanned<i64>>, k: &str, bounds: Bounds<i64>| {
        Ok::<_, Problem>(table.number(v, k, bounds)?.map(|n| n as usize))
    };
    prof.max_steps =
        count(&a.max_steps, "max_steps", MAX_STEPS)?.map_or(prof.max_steps, |n| n as u32);
    prof.max_observe =
        count(&a.max_observe, "max_observe", MAX_OBSERVE)?.unwrap_or(prof.max_observe);
    prof.memory_messages = count(&a.memory_messages, "memory_messages", MEMORY_MESSAGES)?
        .unwrap_or(prof.memory_messages);
    prof.memory_tokens =
        count(&a.memory_tokens, "memory_tokens", MEMORY_TOKENS)?.unwrap_or(prof.memory_tokens);
    if let Some(share) = table.number(&a.compact_at, "compact_at", COMPACT_AT)? {
        prof.compact_at = Some(share);
    }
    match a.action {
        None => {}
        Some(ActionToml::Tools) => prof.action = Action::Tools,
        Some(ActionToml::Code) => prof.action = Action::Code,
    }
    if let Some(s) = table.text(&a.system_prompt, "system_prompt", "the prompt")? {
        prof.system_prompt = s;
    }
    if let Some(s) = table.text(&a.next_step_prompt, "next_step_prompt", "the prompt")? {
        prof.next_step_prompt = s;
    }
    let replicas = count(&a.replicas, "replicas", REPLICAS)?.map_or(4, |n| n as u32);
    let compact_llm = match &a.compact_llm {
        Some(_) => Some(named_profile(
            &a.compact_llm,
            &key("compact_llm"),
            llm,
            lines,
        )?),
        None => None,
    };
    let llm = named_profile(&a.llm, &key("llm"), llm, lines)?;
    let description = table
        .text(
            &a.description,
            "description",
            "what the agent does, for the planner",
        )?
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
            replicas,
            mcp_servers: vec![],
            compact_llm,
            approvals: std::sync::Arc::new(super::approvals::rules(
                &a.approvals,
                &format!("[agents.{name}.approvals]"),
                approvals,
                lines,
            )?),
        },
        llm,
        mcp_servers,
    })
}
