//! What a caller holds of a flow: `FlowHandle` (its events and how it ends) and
//! `FlowControl` (answers, decisions and cancels, cheap to clone).

use manus_actors::plan::Plan;
use manus_actors::protocol::{FlowEvent, FlowMsg, FlowOutcome, FlowStatus};
use ractor::ActorRef;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::store::{RunStore, StoreError};

/// Answers and cancels a running flow; cheap to clone.
#[derive(Clone)]
pub struct FlowControl {
    planner: ActorRef<FlowMsg>,
    /// The flow's run id and the store that records its decisions, if any.
    id: String,
    store: Option<RunStore>,
}

impl FlowControl {
    pub(super) fn new(id: String, planner: ActorRef<FlowMsg>, store: Option<RunStore>) -> Self {
        FlowControl { planner, id, store }
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
    ///
    /// With a run store, the decision is first recorded in its decisions table, where the
    /// first decision on a request stands, whoever makes it (this process, `manus-rt
    /// approvals`, another node): false, and nothing handed to the flow, when another one
    /// was recorded first. Once this returns true the decision survives a crash.
    pub async fn decide(
        &self,
        approval_id: u64,
        decision: manus_actors::protocol::Decision,
    ) -> Result<bool, StoreError> {
        if let Some(store) = &self.store
            && !store
                .decide(&self.id, approval_id, decision.clone(), true)
                .await?
        {
            return Ok(false);
        }
        self.hand(approval_id, decision);
        Ok(true)
    }

    /// Give the flow a decision already recorded (or with no store to record it in).
    pub(super) fn hand(&self, approval_id: u64, decision: manus_actors::protocol::Decision) {
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
    /// Where its decisions are recorded first, if anywhere.
    store: Option<RunStore>,
}

impl FlowHandle {
    pub(super) fn new(
        id: String,
        task: String,
        planner: ActorRef<FlowMsg>,
        events: UnboundedReceiver<FlowEvent>,
        store: Option<RunStore>,
    ) -> FlowHandle {
        FlowHandle {
            id,
            task,
            planner,
            events,
            outcome: None,
            store,
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

    /// Decide on an approval request (see `FlowControl::decide`): false when another
    /// decision was recorded first.
    pub async fn decide(
        &self,
        approval_id: u64,
        decision: manus_actors::protocol::Decision,
    ) -> Result<bool, StoreError> {
        self.control().decide(approval_id, decision).await
    }

    /// A handle that answers and cancels, for code that does not read the events (the
    /// event stream stays with this `FlowHandle`).
    pub fn control(&self) -> FlowControl {
        FlowControl::new(self.id.clone(), self.planner.clone(), self.store.clone())
    }

    /// Read the remaining events and return how the flow ended.
    pub async fn outcome(mut self) -> FlowOutcome {
        while self.next_event().await.is_some() {}
        self.outcome.take().unwrap_or_else(|| self.crashed())
    }
}
