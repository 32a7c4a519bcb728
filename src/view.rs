//! A flow's state folded from its events: the plan (as last revised) with each step's
//! status, agent and tokens, the flow's tokens, the questions waiting for an answer (open
//! until the call that asked them finishes), the calls waiting for approval, and the outcome
//! once it ends; and `RunStatus`, where a run stands (the run store records it). The
//! terminal board, the run store and the HTTP service read flows through it.

use std::collections::BTreeMap;

use manus_actors::llm::Usage;
use manus_actors::plan::{Plan, StepStatus};
use manus_actors::protocol::{FlowEvent, FlowOutcome, FlowStatus, ToolDiff};
use serde::{Deserialize, Serialize};

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
    /// Set when the flow is a fork of another run: where from, and what its replay gave.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fork: Option<ForkView>,
}

/// A fork's origin and its replay so far: the answers its steps ran on instead of model
/// calls, and each tool result that differed from the record, by step.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ForkView {
    pub from: String,
    pub at_step: usize,
    pub workspace: String,
    pub replayed: u32,
    pub differed: Vec<(usize, ToolDiff)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Question {
    pub agent: String,
    /// The step whose agent asks.
    pub step: Option<usize>,
    pub inquire: String,
    /// The tool call that asks: the question is open until it finishes.
    #[serde(skip)]
    pub call_id: Option<String>,
    /// The JSON schema the answer must meet (an MCP server's elicitation).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub form: Option<serde_json::Value>,
}

/// A tool call (or the plan) waiting for a person's approval: the one type every fold of
/// `ApprovalRequested` makes (`Approval::requested`).
#[derive(Debug, Clone, Serialize)]
pub struct Approval {
    /// `None`: the plan waits for sign-off.
    pub step: Option<usize>,
    pub agent: String,
    pub tool: String,
    /// The arguments as the model gave them (JSON text).
    pub arguments: String,
    /// Which rule asked for approval.
    pub why: String,
    /// The call's id in the agent's memory, and the round it was asked for in: where a
    /// resumed step goes on from.
    #[serde(skip)]
    pub call_id: String,
    #[serde(skip)]
    pub round: u32,
}

impl Approval {
    /// The request `e` makes, with its number, if it is an `ApprovalRequested`.
    pub fn requested(e: &FlowEvent) -> Option<(u64, Approval)> {
        let FlowEvent::ApprovalRequested {
            id,
            step,
            agent,
            tool,
            arguments,
            why,
            call_id,
            round,
        } = e
        else {
            return None;
        };
        let approval = Approval {
            step: *step,
            agent: agent.clone(),
            tool: tool.clone(),
            arguments: arguments.clone(),
            why: why.clone(),
            call_id: call_id.clone(),
            round: *round,
        };
        Some((*id, approval))
    }
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
            FlowEvent::ApprovalRequested { .. } => {
                if let Some((id, approval)) = Approval::requested(e) {
                    if let Some(p) = approval.step.and_then(|s| self.step_mut(s)) {
                        p.status = StepStatus::AwaitingApproval;
                    }
                    self.approvals.insert(id, approval);
                }
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
                // An interrupted `ask_human` never finishes: its step starts over and asks
                // again, under a new number.
                self.questions.clear();
                // Every request still open is published again right after (a paused step's,
                // the plan's sign-off); one a call in flight made (an MCP server's sampling
                // under "approve") is not, as its step starts over and asks anew.
                self.approvals.clear();
            }
            FlowEvent::Forked {
                from,
                at_step,
                workspace,
                plan,
            } => {
                self.plan = Some(plan.clone());
                self.fork = Some(ForkView {
                    from: from.clone(),
                    at_step: *at_step,
                    workspace: workspace.clone(),
                    ..Default::default()
                });
            }
            FlowEvent::StepReplayed {
                step,
                answers,
                differed,
                ..
            } => {
                if let Some(f) = &mut self.fork {
                    f.replayed += answers;
                    f.differed
                        .extend(differed.iter().map(|d| (*step, d.clone())));
                }
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
                call_id,
                form,
            } => {
                self.questions.insert(
                    *id,
                    Question {
                        agent: agent.clone(),
                        step: *step,
                        inquire: inquire.clone(),
                        call_id: call_id.clone(),
                        form: form.clone(),
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
            // The call that asked was answered (or went unanswered past its time): its
            // question is no longer open, whoever folds the events.
            FlowEvent::ToolFinished { call_id, .. } if !call_id.is_empty() => {
                self.questions
                    .retain(|_, q| q.call_id.as_deref() != Some(call_id.as_str()));
            }
            FlowEvent::Thought { .. }
            | FlowEvent::Compacted { .. }
            | FlowEvent::TextDelta { .. }
            | FlowEvent::ToolCalled { .. }
            | FlowEvent::ToolFinished { .. }
            | FlowEvent::ToolProgress { .. }
            | FlowEvent::StepMemory { .. }
            | FlowEvent::Answered { .. }
            | FlowEvent::Cell { .. } => {}
        }
    }

    pub fn step_mut(&mut self, step: usize) -> Option<&mut manus_actors::plan::PlanStep> {
        self.plan.as_mut().and_then(|p| p.steps.get_mut(step))
    }

    /// `running`, or how the flow ended (`completed`, `failed`, …).
    pub fn status(&self) -> RunStatus {
        self.outcome
            .as_ref()
            .map_or(RunStatus::Running, |o| o.status.into())
    }
}

/// Where a run stands, as the store records it: queued (a cluster's, for the first node
/// with room), running (or interrupted, if its owner is gone), or how its flow ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Queued,
    Running,
    Completed,
    Failed,
    Cancelled,
    TimedOut,
    BudgetExceeded,
}

impl RunStatus {
    /// The word the store, the CLI and the service use.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::TimedOut => "timed_out",
            RunStatus::BudgetExceeded => "budget_exceeded",
        }
    }

    /// The status a word names, if any.
    pub fn parse(word: &str) -> Option<RunStatus> {
        serde_json::from_value(serde_json::Value::String(word.to_string())).ok()
    }

    /// Whether the run has ended (nothing more will happen to it).
    pub fn ended(self) -> bool {
        !matches!(self, RunStatus::Queued | RunStatus::Running)
    }
}

impl From<FlowStatus> for RunStatus {
    fn from(s: FlowStatus) -> RunStatus {
        match s {
            FlowStatus::Completed => RunStatus::Completed,
            FlowStatus::Failed => RunStatus::Failed,
            FlowStatus::Cancelled => RunStatus::Cancelled,
            FlowStatus::TimedOut => RunStatus::TimedOut,
            FlowStatus::BudgetExceeded => RunStatus::BudgetExceeded,
        }
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(id: u64, step: usize, call_id: &str) -> FlowEvent {
        FlowEvent::Question {
            id,
            agent: "manus".into(),
            step: Some(step),
            inquire: format!("question {id}?"),
            call_id: Some(call_id.into()),
            form: None,
        }
    }

    fn finished(step: usize, tool: &str, call_id: &str) -> FlowEvent {
        FlowEvent::ToolFinished {
            step,
            agent: "manus".into(),
            tool: tool.into(),
            ok: true,
            output: "teal".into(),
            call_id: call_id.into(),
        }
    }

    /// A question closes when the call that asked it finishes, whatever the tool is
    /// called, so a view folded from stored events (another node's flow) lists only the
    /// questions still waiting; another call of the same step closes nothing.
    #[test]
    fn a_question_closes_when_the_call_that_asked_it_finishes() {
        let mut v = FlowView::default();
        v.apply(&asked(1, 0, "call_a"));
        v.apply(&asked(2, 1, "call_b"));
        v.apply(&finished(0, "bash", "call_c"));
        v.apply(&finished(1, "ask_human", "call_d"));
        assert_eq!(v.questions.keys().collect::<Vec<_>>(), [&1, &2]);
        v.apply(&finished(0, "my_mcp_asker", "call_a"));
        assert_eq!(v.questions.keys().collect::<Vec<_>>(), [&2]);
    }

    /// A resumed flow publishes again every request still open; one made by a call in
    /// flight (its step starts over) is no longer open.
    #[test]
    fn a_resumed_flow_keeps_only_the_requests_it_asks_again() {
        let requested = |id: u64, tool: &str| FlowEvent::ApprovalRequested {
            id,
            step: Some(0),
            agent: "manus".into(),
            tool: tool.into(),
            arguments: "{}".into(),
            why: "a rule".into(),
            call_id: format!("call_{id}"),
            round: 1,
        };
        let mut v = FlowView::default();
        v.apply(&requested(1, "bash"));
        v.apply(&requested(2, "mcp_sampling"));
        v.apply(&FlowEvent::Resumed {
            plan: None,
            usage: Default::default(),
            rerun: vec![0],
            goes_on: vec![],
        });
        v.apply(&requested(1, "bash"));
        assert_eq!(v.approvals.keys().collect::<Vec<_>>(), [&1]);
    }
}
