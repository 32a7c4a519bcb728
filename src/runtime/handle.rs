//! What a caller holds of a flow: `FlowHandle` (its events and how it ends) and
//! `FlowControl` (answers, decisions and cancels, cheap to clone).

use manus_actors::plan::Plan;
use manus_actors::protocol::{FlowEvent, FlowMsg, FlowOutcome, FlowStatus};
use ractor::ActorRef;
use tokio::sync::mpsc::UnboundedReceiver;

/// Answers and cancels a running flow; cheap to clone.
#[derive(Clone)]
pub struct FlowControl {
    planner: ActorRef<FlowMsg>,
}

impl FlowControl {
    pub(super) fn new(planner: ActorRef<FlowMsg>) -> FlowControl {
        FlowControl { planner }
    }

    /// Answer the question of a `FlowEvent::Question`.
    pub fn answer(&self, question_id: u64, text: impl Into<String>) {
        let _ = self.planner.send_message(FlowMsg::Answer {
            question_id,
            text: text.into(),
        });
    }

    /// Stop the flow; its outcome will say it was cancelled.
    pub fn cancel(&self) {
        let _ = self.planner.send_message(FlowMsg::Cancel);
    }

    /// Whether the flow's planner still runs.
    pub(super) fn is_running(&self) -> bool {
        !matches!(
            self.planner.get_status(),
            ractor::ActorStatus::Stopped | ractor::ActorStatus::Stopping
        )
    }

    /// Decide on the tool call of a `FlowEvent::ApprovalRequested`: approve it (with the
    /// model's arguments, or `decision.arguments`), or reject it (the reason goes back to
    /// the model as the call's result). The flow answers with `ApprovalDecided`.
    pub fn decide(&self, approval_id: u64, decision: manus_actors::protocol::Decision) {
        let _ = self.planner.send_message(FlowMsg::Decide {
            approval_id,
            decision,
        });
    }
}

/// A running flow: its events, its questions, and how it ends.
pub struct FlowHandle {
    pub id: String,
    task: String,
    planner: ActorRef<FlowMsg>,
    events: UnboundedReceiver<FlowEvent>,
    outcome: Option<FlowOutcome>,
}

impl FlowHandle {
    pub(super) fn new(
        id: String,
        task: String,
        planner: ActorRef<FlowMsg>,
        events: UnboundedReceiver<FlowEvent>,
    ) -> FlowHandle {
        FlowHandle {
            id,
            task,
            planner,
            events,
            outcome: None,
        }
    }

    /// The next event, or `None` once the flow has finished and every event was read.
    pub async fn next_event(&mut self) -> Option<FlowEvent> {
        if self.outcome.is_some() {
            return None;
        }
        match self.events.recv().await {
            Some(e) => {
                if let FlowEvent::FlowFinished { outcome } = &e {
                    self.outcome = Some(outcome.clone());
                }
                Some(e)
            }
            None => {
                // Every sender is gone without a FlowFinished: the planner died.
                let outcome = self.crashed();
                self.outcome = Some(outcome.clone());
                Some(FlowEvent::FlowFinished { outcome })
            }
        }
    }

    fn crashed(&self) -> FlowOutcome {
        FlowOutcome {
            flow_id: self.id.clone(),
            status: FlowStatus::Failed,
            reason: format!(
                "the flow's planner stopped unexpectedly (task: {})",
                self.task
            ),
            plan: Plan::default(),
            summary: String::new(),
            usage: Default::default(),
            usage_by_agent: Default::default(),
            elapsed_ms: 0,
        }
    }

    /// Answer the question of a `FlowEvent::Question`.
    pub fn answer(&self, question_id: u64, text: impl Into<String>) {
        self.control().answer(question_id, text)
    }

    /// Stop the flow; its outcome will say it was cancelled.
    pub fn cancel(&self) {
        self.control().cancel()
    }

    /// Decide on an approval request (see `FlowControl::decide`).
    pub fn decide(&self, approval_id: u64, decision: manus_actors::protocol::Decision) {
        self.control().decide(approval_id, decision)
    }

    /// A handle that answers and cancels, for code that does not read the events (the
    /// event stream stays with this `FlowHandle`).
    pub fn control(&self) -> FlowControl {
        FlowControl {
            planner: self.planner.clone(),
        }
    }

    /// Read the remaining events and return how the flow ended.
    pub async fn outcome(mut self) -> FlowOutcome {
        while self.next_event().await.is_some() {}
        self.outcome.take().unwrap_or_else(|| self.crashed())
    }
}
