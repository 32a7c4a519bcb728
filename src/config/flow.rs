//! `[flow]`: the primary agent, the planner's LLM profile and replicas, timeouts, retries,
//! what a failed step does, and the budgets; checked against the pool.

use std::time::Duration;

use manus_actors::planner::{FlowSettings, OnStepFailure};

use super::agents::AgentDraft;
use super::error::{Lines, Problem};
use super::file::FlowToml;
use super::llm::{LlmDraft, named_profile};

/// The flow's settings and the planner's LLM profile.
pub(super) fn build(
    f: &FlowToml,
    agents: &[AgentDraft],
    llm: &[(String, LlmDraft)],
    lines: Lines,
) -> Result<(FlowSettings, String), Problem> {
    let names = || agents.iter().map(|a| a.template.name.as_str());
    let primary_agent = match &f.primary_agent {
        Some(p) if names().any(|n| n.eq_ignore_ascii_case(p.get_ref())) => {
            p.get_ref().to_ascii_lowercase()
        }
        Some(p) => {
            return Err(Problem::at(
                lines.of(p),
                "[flow] primary_agent",
                format!(
                    "[flow] primary_agent = \"{}\": no such agent in the pool; agents: {}",
                    p.get_ref(),
                    names().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        None if names().any(|n| n == "manus") => "manus".into(),
        None => names().next().unwrap_or_default().to_string(),
    };
    let planner_llm = named_profile(&f.planner_llm, "[flow] planner_llm", llm, lines)?;
    let planner_replicas = match &f.planner_replicas {
        Some(n) if *n.get_ref() == 0 => {
            return Err(Problem::at(
                lines.of(n),
                "[flow] planner_replicas",
                "[flow] planner_replicas must be at least 1".into(),
            ));
        }
        Some(n) => *n.get_ref(),
        // As many planner calls at once as agent steps can run.
        None => agents.iter().map(|a| a.template.replicas).sum(),
    };
    let flow = FlowSettings {
        primary_agent,
        planner_replicas,
        step_timeout: Duration::from_secs(f.step_timeout_secs.unwrap_or(900)),
        flow_timeout: Duration::from_secs(f.flow_timeout_secs.unwrap_or(3600)),
        max_step_retries: f.max_step_retries.unwrap_or(1),
        on_step_failure: f.on_step_failure.unwrap_or(OnStepFailure::Continue),
        max_tokens: f.max_tokens,
        max_cost: f.max_cost,
    };
    Ok((flow, planner_llm))
}
