//! Approval requests as the run store holds them: which of a run's requests still wait for
//! a decision (for `manus-rt approvals`), and the steps and plan sign-off a resumed run must
//! pick up. A request is an `ApprovalRequested` event; a decision is an `ApprovalDecided`
//! event made in the flow's own process, or a row `manus-rt approvals` recorded from
//! outside it (the first decision on a request stands). Knows nothing of the CLI or the
//! service.

use std::collections::BTreeMap;

use manus_actors::llm::{FunctionCall, ToolCall};
use manus_actors::plan::{Plan, StepStatus};
use manus_actors::planner::PausedStep;
use manus_actors::protocol::{Decision, FlowEvent, Pause};
use serde::Serialize;

use crate::store::{StoredEvent, StoredMemory};
use crate::view::Approval;

/// Who decides at this terminal: `$USER`, or `cli`.
pub fn local_user() -> String {
    std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "cli".into())
}

/// Edited arguments as a decision carries them: JSON text of an object, as tools take.
pub fn edited_arguments(text: &str) -> Result<String, String> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(v) if v.is_object() => Ok(v.to_string()),
        Ok(_) => Err("the arguments must be a JSON object, such as {\"command\": \"ls\"}".into()),
        Err(e) => Err(format!("the arguments are not JSON: {e}")),
    }
}

/// One approval request of a stored run: its number, the request, and when it was made.
#[derive(Debug, Clone, Serialize)]
pub struct PendingApproval {
    /// Its number in its run.
    pub id: u64,
    #[serde(flatten)]
    pub request: Approval,
    /// When it was asked, in milliseconds since the Unix epoch.
    pub requested_at: i64,
}

/// Every request of a run, in order, with its decision if there is one: from its events,
/// else from the decisions recorded outside its process (`outside`).
pub fn requests(
    events: &[StoredEvent],
    outside: &[(u64, Decision)],
) -> Vec<(PendingApproval, Option<Decision>)> {
    let mut all: BTreeMap<u64, (PendingApproval, Option<Decision>)> = BTreeMap::new();
    for e in events {
        if let Some((id, request)) = Approval::requested(&e.event) {
            // A resumed run asks again for what was pending: the first ask stands.
            let pending = PendingApproval {
                id,
                request,
                requested_at: e.at,
            };
            all.entry(id).or_insert((pending, None));
        } else if let FlowEvent::ApprovalDecided { id, decision, .. } = &e.event
            && let Some(entry) = all.get_mut(id)
        {
            entry.1.get_or_insert_with(|| decision.clone());
        }
    }
    for (id, decision) in outside {
        if let Some(entry) = all.get_mut(id) {
            entry.1.get_or_insert_with(|| decision.clone());
        }
    }
    all.into_values().collect()
}

/// The requests of a run that no one has decided.
pub fn pending(events: &[StoredEvent], outside: &[(u64, Decision)]) -> Vec<PendingApproval> {
    requests(events, outside)
        .into_iter()
        .filter(|(_, d)| d.is_none())
        .map(|(r, _)| r)
        .collect()
}

/// The plan's newest sign-off request, unless it was approved: undecided, or rejected
/// (with the decision). What a resumed flow waits for, or ends with.
pub fn plan_signoff(
    events: &[StoredEvent],
    outside: &[(u64, Decision)],
) -> Option<(u64, Option<Decision>)> {
    let (request, decision) = requests(events, outside)
        .into_iter()
        .rev()
        .find(|(r, _)| r.request.step.is_none())?;
    match decision {
        Some(d) if d.approve => None,
        d => Some((request.id, d)),
    }
}

/// Whether `paused_steps` may find a step of `plan` to go on from: a live step that asked
/// for an approval and is awaiting it, or is in progress (it went on from the approval
/// before the run was interrupted, and is stored so as soon as it began again). The run's
/// memories need reading only then. A step in progress counts too: a run killed after an
/// approval has none awaiting one, and gated on that alone its step started over and asked
/// for the same call again.
pub fn may_have_paused_steps(plan: &Plan, events: &[StoredEvent]) -> bool {
    plan.live().any(|(i, s)| {
        may_be_paused(s.status)
            && events.iter().any(|e| {
                matches!(&e.event, FlowEvent::ApprovalRequested { step: Some(step), .. } if *step == i)
            })
    })
}

/// A step's status that `paused_steps` looks at.
fn may_be_paused(status: StepStatus) -> bool {
    matches!(
        status,
        StepStatus::AwaitingApproval | StepStatus::InProgress
    )
}

/// The steps of `plan` that wait for approval, or that went on from an approval and were
/// interrupted before they ended, each with the memory it stopped with and the decision
/// made since, if any: what a resumed flow goes on from. A step whose memory was not kept
/// is left out (it starts over).
pub fn paused_steps(
    plan: &Plan,
    events: &[StoredEvent],
    outside: &[(u64, Decision)],
    memories: &[StoredMemory],
) -> Vec<PausedStep> {
    let all = requests(events, outside);
    plan.live()
        .filter(|(_, s)| may_be_paused(s.status))
        .filter_map(|(i, s)| {
            let (pending, decision) = all.iter().rev().find(|(r, _)| r.request.step == Some(i))?;
            let request = &pending.request;
            // A step in progress stopped at a call it had been let to run: it goes on from
            // there too (knowing the call may have run), not from its start, where it would
            // ask for the same call again.
            if s.status == StepStatus::InProgress
                && handed_on(events, pending.id, &request.call_id).is_none()
            {
                return None;
            }
            let memory = memories
                .iter()
                .find(|m| m.step == i && m.attempt == s.attempts)?
                .messages
                .clone();
            let calls = || memory.iter().rev().flat_map(|m| m.tool_calls.iter());
            let call = match calls().find(|c| c.id == request.call_id) {
                Some(call) => call.clone(),
                // A call a code-mode cell made: not in the memory itself, but its cell is
                // (`{cell}.{n}`), and the request says all of it.
                None => {
                    let (cell, _) = request.call_id.rsplit_once('.')?;
                    calls().find(|c| c.id == cell)?;
                    ToolCall {
                        id: request.call_id.clone(),
                        kind: "function".into(),
                        function: FunctionCall {
                            name: request.tool.clone(),
                            arguments: request.arguments.clone(),
                        },
                    }
                }
            };
            let interrupted = handed_on(events, pending.id, &request.call_id);
            Some(PausedStep {
                id: pending.id,
                step: i,
                agent: request.agent.clone(),
                rounds: request.round,
                pause: Pause {
                    call,
                    why: request.why.clone(),
                    memory,
                },
                decision: decision.clone(),
                interrupted,
                agent_ref: None,
            })
        })
        .collect()
}

/// Whether the call of approval request `id` was handed to its tool before the run was
/// interrupted, and if so what the model is told instead of running it again. A flow
/// records an approval before it lets the call run (`ApprovalDecided`, committed first),
/// so an approval in the run's own events means the call may have run; its result, if it
/// was recorded too, is given back.
fn handed_on(events: &[StoredEvent], id: u64, call_id: &str) -> Option<String> {
    let approved_at = events.iter().position(|e| {
        matches!(&e.event, FlowEvent::ApprovalDecided { id: i, decision, .. } if *i == id && decision.approve)
    })?;
    let finished = events[approved_at..].iter().find_map(|e| match &e.event {
        FlowEvent::ToolFinished {
            call_id: c,
            ok,
            output,
            ..
        } if c == call_id => Some((*ok, output.clone())),
        _ => None,
    });
    Some(match finished {
        Some((ok, output)) => format!(
            "Not run again: this call was approved and ran before the run was interrupted. It {}; its output was:\n{output}",
            if ok { "succeeded" } else { "failed" }
        ),
        None => "Not run again: this call was approved and handed to its tool just before the run was interrupted, so it may have run, in part or in full, but its result was not recorded. Check its effects before you run it again.".into(),
    })
}

/// The number a run's next approval request gets: above every one it made.
pub fn next_id(events: &[StoredEvent]) -> u64 {
    requests(events, &[]).last().map_or(1, |(r, _)| r.id + 1)
}
