//! `[flow]`: the primary agent, the planner's LLM profile and replicas, timeouts, retries,
//! what a failed step does (and how often the plan may be revised), how many steps run at
//! once, and the budgets; checked against the pool.

use std::time::Duration;

use manus_actors::planner::{FlowSettings, OnStepFailure};

use super::agents::AgentDraft;
use super::error::{Lines, Problem};
use super::file::FlowToml;
use super::llm::{LlmDraft, named_profile};
use super::values::{Bounds, Table};

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
    let table = Table::new("[flow]", lines);
    let planner_replicas = match table.number(&f.planner_replicas, "planner_replicas", REPLICAS)? {
        Some(n) => n as u32,
        // As many planner calls at once as agent steps can run.
        None => agents
            .iter()
            .fold(0u32, |sum, a| sum.saturating_add(a.template.replicas)),
    };
    let flow = FlowSettings {
        primary_agent,
        planner_replicas,
        step_timeout: table.seconds(&f.step_timeout_secs, "step_timeout_secs", STEP)?,
        flow_timeout: table.seconds(&f.flow_timeout_secs, "flow_timeout_secs", FLOW)?,
        max_step_retries: table
            .number(&f.max_step_retries, "max_step_retries", RETRIES)?
            .map_or(1, |n| n as u32),
        on_step_failure: f.on_step_failure.unwrap_or(OnStepFailure::Continue),
        max_replans: table
            .number(&f.max_replans, "max_replans", REPLANS)?
            .map_or(2, |n| n as u32),
        max_parallel_steps: table
            .number(&f.max_parallel_steps, "max_parallel_steps", PARALLEL)?
            .map_or(4, |n| n as u32),
        review_after_each_step: f.review_after_each_step.unwrap_or(false),
        approval_timeout: None,
        plan_approval: f.plan_approval.unwrap_or(false),
        max_tokens: table
            .number(&f.max_tokens, "max_tokens", TOKENS)?
            .map(|n| n as u64),
        max_cost: table.number(&f.max_cost, "max_cost", COST)?,
    };
    Ok((flow, planner_llm))
}

/// The default `step_timeout_secs`.
const STEP: Duration = Duration::from_secs(900);
/// The default `flow_timeout_secs`.
const FLOW: Duration = Duration::from_secs(3600);
/// Flows planning or summarising at once across the runtime.
const REPLICAS: Bounds<i64> = Bounds::new(1, 10_000, " planner calls at once");
/// Further attempts of a failed step.
const RETRIES: Bounds<i64> = Bounds::new(0, 100, " further attempts");
/// Revisions of one flow's plan.
const REPLANS: Bounds<i64> = Bounds::new(0, 100, " revisions");
/// A flow's steps running at once.
const PARALLEL: Bounds<i64> = Bounds::new(1, 1_000, " steps at once");
/// A flow's token budget.
const TOKENS: Bounds<i64> = Bounds::new(1, 1_000_000_000_000, " tokens");
/// A flow's cost budget, in the unit of the `[llm]` prices.
const COST: Bounds<f64> = Bounds::new(0.0, 1_000_000.0, "");
