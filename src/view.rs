//! A flow's state folded from its events: the plan (as last revised) with each step's
//! status, agent and tokens, the flow's tokens, the questions waiting for an answer, and the outcome once it
//! ends. The terminal board and the HTTP service read flows through it.

use std::collections::BTreeMap;

use manus_actors::llm::Usage;
use manus_actors::plan::{Plan, StepStatus};
use manus_actors::protocol::{FlowEvent, FlowOutcome};
use serde::Serialize;

#[derive(Debug, Clone, Default, Serialize)]
pub struct FlowView {
    pub flow_id: String,
    pub task: String,
    /// `None` while planning.
    pub plan: Option<Plan>,
    pub usage: Usage,
    /// Open questions by id: who asks, and what.
    pub questions: BTreeMap<u64, Question>,
    /// Tool calls waiting for a person's approval, by id.
    pub approvals: BTreeMap<u64, Approval>,
    pub outcome: Option<FlowOutcome>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Question {
    pub agent: String,
    /// The step whose agent asks.
    pub step: Option<usize>,
    pub inquire: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Approval {
    /// `None`: the plan waits for sign-off.
    pub step: Option<usize>,
    pub agent: String,
    pub tool: String,
    pub arguments: String,
    pub why: String,
}

impl FlowView {
    /// Fold one event in.
    pub fn apply(&mut self, e: &FlowEvent) {
        match e {
            FlowEvent::FlowStarted { flow_id, task } => {
                self.flow_id = flow_id.clone();
                self.task = task.clone();
            }
            FlowEvent::PlanCreated { plan } | FlowEvent::PlanRevised { plan, .. } => {
                self.plan = Some(plan.clone())
            }
            FlowEvent::ApprovalRequested {
                id,
                step,
                agent,
                tool,
                arguments,
                why,
                ..
            } => {
                if let Some(p) = step.and_then(|s| self.step_mut(s)) {
                    p.status = StepStatus::AwaitingApproval;
                }
                self.approvals.insert(
                    *id,
                    Approval {
                        step: *step,
                        agent: agent.clone(),
                        tool: tool.clone(),
                        arguments: arguments.clone(),
                        why: why.clone(),
                    },
                );
            }
            FlowEvent::ApprovalDecided { id, .. } => {
                self.approvals.remove(id);
            }
            FlowEvent::StepBlocked { step, notes, .. } => {
                if let Some(p) = self.step_mut(*step) {
                    p.status = StepStatus::Blocked;
                    p.notes = notes.clone();
                }
            }
            FlowEvent::Resumed { plan, usage, .. } => {
                self.plan = plan.clone();
                self.usage = *usage;
            }
            FlowEvent::StepStarted {
                step,
                agent,
                attempt,
                ..
            } => {
                if let Some(p) = self.step_mut(*step) {
                    p.status = StepStatus::InProgress;
                    p.agent = Some(agent.clone());
                    p.attempts = *attempt;
                }
            }
            FlowEvent::LlmCalled { usage, .. } => self.usage.add(*usage),
            FlowEvent::Question {
                id,
                agent,
                step,
                inquire,
            } => {
                self.questions.insert(
                    *id,
                    Question {
                        agent: agent.clone(),
                        step: *step,
                        inquire: inquire.clone(),
                    },
                );
            }
            FlowEvent::StepFinished {
                step,
                status,
                summary,
                usage,
                elapsed_ms,
                ..
            } => {
                if let Some(p) = self.step_mut(*step) {
                    p.status = *status;
                    p.usage.add(*usage);
                    p.notes = summary.clone();
                    p.elapsed_ms += elapsed_ms;
                }
            }
            FlowEvent::FlowFinished { outcome } => {
                self.plan = Some(outcome.plan.clone());
                self.usage = outcome.usage;
                self.questions.clear();
                self.approvals.clear();
                self.outcome = Some(outcome.clone());
            }
            FlowEvent::Thought { .. }
            | FlowEvent::Compacted { .. }
            | FlowEvent::TextDelta { .. }
            | FlowEvent::ToolCalled { .. }
            | FlowEvent::ToolFinished { .. }
            | FlowEvent::StepMemory { .. } => {}
        }
    }

    pub fn step_mut(&mut self, step: usize) -> Option<&mut manus_actors::plan::PlanStep> {
        self.plan.as_mut().and_then(|p| p.steps.get_mut(step))
    }

    /// `running`, or how the flow ended (`completed`, `failed`, …).
    pub fn status(&self) -> String {
        match &self.outcome {
            Some(o) => serde_json::to_value(o.status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
            None => "running".into(),
        }
    }
}
