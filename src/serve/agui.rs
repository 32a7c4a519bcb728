//! A run's events as AG-UI events (`GET /v1/flows/{id}/events?protocol=ag-ui`), so AG-UI
//! front-ends follow a run without an adapter: the run's start and end, each plan step as a
//! step, the agents' words as text messages (streamed from the token stream where the flow
//! has one, whole otherwise), each tool call with its arguments and result, and the plan as
//! shared state (a snapshot, then JSON Patch deltas of statuses and notes). Questions,
//! approvals and compactions go as CUSTOM events. Owns the mapping and the bookkeeping it
//! needs (which messages and steps are open); knows nothing of HTTP or the store.

use std::collections::{BTreeMap, BTreeSet};

use manus_actors::protocol::{FlowEvent, FlowStatus};
use serde_json::{Value, json};

/// The AG-UI protocol version the events follow.
const PROTOCOL_VERSION: &str = "1.0";

/// The translation of one run, event by event.
#[derive(Default)]
pub struct AgUi {
    run: String,
    /// Each step's text message being written, by step.
    open_text: BTreeMap<usize, String>,
    /// Tool calls made and not yet answered, by step: (tool, call id), oldest first.
    calls: BTreeMap<usize, Vec<(String, String)>>,
    /// Steps started and not finished.
    open_steps: BTreeSet<usize>,
    /// Whether the plan's snapshot was sent (deltas need it).
    planned: bool,
    next: u64,
}

fn step_name(step: usize) -> String {
    format!("step {step}")
}

impl AgUi {
    fn id(&mut self, kind: &str) -> String {
        self.next += 1;
        format!("{}-{kind}-{}", self.run, self.next)
    }

    /// Close step `step`'s text message, if one is being written.
    fn end_text(&mut self, step: usize, out: &mut Vec<Value>) {
        if let Some(id) = self.open_text.remove(&step) {
            out.push(json!({"type": "TEXT_MESSAGE_END", "messageId": id}));
        }
    }

    fn delta(&self, ops: Vec<Value>, out: &mut Vec<Value>) {
        if self.planned {
            out.push(json!({"type": "STATE_DELTA", "delta": ops}));
        }
    }

    fn custom(name: &str, value: Value) -> Value {
        json!({"type": "CUSTOM", "name": name, "value": value})
    }

    /// The AG-UI events that say what `e` says (none for what AG-UI has no place for).
    pub fn translate(&mut self, e: &FlowEvent) -> Vec<Value> {
        let mut out = vec![];
        match e {
            // A run taken over by another node starts again in its history: AG-UI has
            // one run, started once.
            FlowEvent::FlowStarted { .. } if !self.run.is_empty() => {}
            FlowEvent::FlowStarted { flow_id, task } => {
                self.run = flow_id.clone();
                out.push(json!({
                    "type": "RUN_STARTED", "threadId": flow_id, "runId": flow_id,
                    "protocolVersion": PROTOCOL_VERSION,
                }));
                out.push(Self::custom("task", json!({"task": task})));
            }
            FlowEvent::Resumed { plan, .. } => {
                if let Some(plan) = plan {
                    self.planned = true;
                    out.push(json!({"type": "STATE_SNAPSHOT", "snapshot": {"plan": plan}}));
                }
            }
            FlowEvent::PlanCreated { plan } | FlowEvent::Forked { plan, .. } => {
                self.planned = true;
                out.push(json!({"type": "STATE_SNAPSHOT", "snapshot": {"plan": plan}}));
            }
            FlowEvent::PlanRevised { plan, reason, .. } => {
                if self.planned {
                    self.delta(vec![json!({"op": "replace", "path": "/plan", "value": plan})], &mut out);
                } else {
                    self.planned = true;
                    out.push(json!({"type": "STATE_SNAPSHOT", "snapshot": {"plan": plan}}));
                }
                out.push(Self::custom("plan_revised", json!({"reason": reason})));
            }
            FlowEvent::StepStarted { step, agent, attempt, .. } => {
                if self.open_steps.insert(*step) {
                    out.push(json!({"type": "STEP_STARTED", "stepName": step_name(*step)}));
                }
                let path = format!("/plan/steps/{step}");
                self.delta(
                    vec![
                        json!({"op": "replace", "path": format!("{path}/status"), "value": "in_progress"}),
                        json!({"op": "replace", "path": format!("{path}/agent"), "value": agent}),
                        json!({"op": "replace", "path": format!("{path}/attempts"), "value": attempt}),
                    ],
                    &mut out,
                );
            }
            FlowEvent::TextDelta { step, text, .. } if !text.is_empty() => {
                let id = match self.open_text.get(step) {
                    Some(id) => id.clone(),
                    None => {
                        let id = self.id("text");
                        self.open_text.insert(*step, id.clone());
                        out.push(json!({"type": "TEXT_MESSAGE_START", "messageId": id, "role": "assistant"}));
                        id
                    }
                };
                out.push(json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": id, "delta": text}));
            }
            FlowEvent::Thought { step, text, .. } => {
                // The finished text: it closes a streamed message, or is sent whole.
                if self.open_text.contains_key(step) {
                    self.end_text(*step, &mut out);
                } else if !text.is_empty() {
                    let id = self.id("text");
                    out.push(json!({"type": "TEXT_MESSAGE_START", "messageId": id, "role": "assistant"}));
                    out.push(json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": id, "delta": text}));
                    out.push(json!({"type": "TEXT_MESSAGE_END", "messageId": id}));
                }
            }
            FlowEvent::ToolCalled { step, tool, arguments, .. } => {
                self.end_text(*step, &mut out);
                let id = self.id("call");
                out.push(json!({"type": "TOOL_CALL_START", "toolCallId": id, "toolCallName": tool}));
                out.push(json!({"type": "TOOL_CALL_ARGS", "toolCallId": id, "delta": arguments}));
                out.push(json!({"type": "TOOL_CALL_END", "toolCallId": id}));
                self.calls.entry(*step).or_default().push((tool.clone(), id));
            }
            FlowEvent::ToolFinished { step, tool, output, .. } => {
                let waiting = self.calls.entry(*step).or_default();
                if let Some(at) = waiting.iter().position(|(t, _)| t == tool) {
                    let (_, call) = waiting.remove(at);
                    let message = self.id("result");
                    out.push(json!({
                        "type": "TOOL_CALL_RESULT", "messageId": message, "toolCallId": call,
                        "content": output, "role": "tool",
                    }));
                }
            }
            FlowEvent::StepFinished { step, status, summary, .. } => {
                self.end_text(*step, &mut out);
                self.calls.remove(step);
                let path = format!("/plan/steps/{step}");
                self.delta(
                    vec![
                        json!({"op": "replace", "path": format!("{path}/status"), "value": status}),
                        json!({"op": "replace", "path": format!("{path}/notes"), "value": summary}),
                    ],
                    &mut out,
                );
                if self.open_steps.remove(step) {
                    out.push(json!({"type": "STEP_FINISHED", "stepName": step_name(*step)}));
                }
            }
            FlowEvent::StepBlocked { step, notes, .. } => {
                let path = format!("/plan/steps/{step}");
                self.delta(
                    vec![
                        json!({"op": "replace", "path": format!("{path}/status"), "value": "blocked"}),
                        json!({"op": "replace", "path": format!("{path}/notes"), "value": notes}),
                    ],
                    &mut out,
                );
            }
            FlowEvent::Question { id, step, inquire, agent, form, .. } => out.push(Self::custom(
                "question",
                json!({"id": id, "step": step, "agent": agent, "inquire": inquire, "form": form}),
            )),
            FlowEvent::ToolProgress { step, agent, call_id, progress, total, message } => out.push(Self::custom(
                "tool_progress",
                json!({"step": step, "agent": agent, "call_id": call_id, "progress": progress, "total": total, "message": message}),
            )),
            FlowEvent::ApprovalRequested { id, step, agent, tool, arguments, why, .. } => out.push(Self::custom(
                "approval_requested",
                json!({"id": id, "step": step, "agent": agent, "tool": tool, "arguments": arguments, "why": why}),
            )),
            FlowEvent::ApprovalDecided { id, step, decision } => out.push(Self::custom(
                "approval_decided",
                json!({"id": id, "step": step, "approve": decision.approve, "by": decision.by}),
            )),
            FlowEvent::Compacted { step, agent, tokens_before, tokens_after, notes, .. } => out.push(Self::custom(
                "compacted",
                json!({"step": step, "agent": agent, "tokens_before": tokens_before, "tokens_after": tokens_after, "notes": notes}),
            )),
            FlowEvent::FlowFinished { outcome } => {
                // Nothing may stay open at the run's end.
                let steps: Vec<usize> = self.open_text.keys().copied().collect();
                for step in steps {
                    self.end_text(step, &mut out);
                }
                for step in std::mem::take(&mut self.open_steps) {
                    out.push(json!({"type": "STEP_FINISHED", "stepName": step_name(step)}));
                }
                let status = serde_json::to_value(outcome.status).unwrap_or(Value::Null);
                let result = json!({
                    "status": status, "reason": outcome.reason, "summary": outcome.summary,
                    "usage": outcome.usage,
                });
                out.push(match outcome.status {
                    FlowStatus::Completed => json!({
                        "type": "RUN_FINISHED", "threadId": self.run, "runId": self.run,
                        "result": result, "outcome": {"type": "success"},
                    }),
                    FlowStatus::Cancelled => json!({
                        "type": "RUN_FINISHED", "threadId": self.run, "runId": self.run,
                        "result": result, "outcome": {"type": "cancelled"},
                    }),
                    _ => json!({
                        "type": "RUN_ERROR", "message": outcome.reason,
                        "code": status.as_str().unwrap_or("failed"),
                    }),
                });
            }
            FlowEvent::TextDelta { .. }
            | FlowEvent::LlmCalled { .. }
            | FlowEvent::StepMemory { .. }
            | FlowEvent::Answered { .. }
            | FlowEvent::StepReplayed { .. }
            | FlowEvent::Cell { .. } => {}
        }
        out
    }
}
