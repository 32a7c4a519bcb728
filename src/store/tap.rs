//! The tap between a flow's planner and its `FlowHandle`: each event is numbered, folded
//! into the run's state (the same `FlowView` the board reads) and queued for the store, then
//! passed on unchanged. It keeps going if the handle is dropped: the flow still runs, so
//! its record must still be written.

use std::time::Instant;

use manus_actors::protocol::FlowEvent;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use super::writer::{RunStore, Write};
use super::{StoredMemory, StoredRun, now_ms};
use crate::view::FlowView;

/// Follow a flow whose state so far is `row`, numbering its events from `seq`.
pub(crate) fn spawn(
    store: RunStore,
    mut row: StoredRun,
    mut seq: u64,
    mut events: UnboundedReceiver<FlowEvent>,
    handle: UnboundedSender<FlowEvent>,
) {
    tokio::spawn(async move {
        let started = Instant::now();
        let elapsed_before = row.elapsed_ms;
        let mut view = FlowView {
            flow_id: row.id.clone(),
            task: row.task.clone(),
            plan: row.plan.clone(),
            usage: row.usage,
            ..FlowView::default()
        };
        store.write(Write::Run(Box::new(row.clone())));
        while let Some(event) = events.recv().await {
            view.apply(&event);
            let changes_state = match &event {
                FlowEvent::StepMemory {
                    step,
                    agent,
                    messages,
                } => {
                    let attempt = view.step_mut(*step).map_or(0, |s| s.attempts);
                    let memory = StoredMemory {
                        step: *step,
                        attempt,
                        agent: agent.clone(),
                        messages: messages.clone(),
                    };
                    store.write(Write::Memory {
                        run_id: row.id.clone(),
                        memory,
                    });
                    false
                }
                other => {
                    store.write(Write::event(&row.id, seq, now_ms(), other));
                    seq += 1;
                    !matches!(
                        other,
                        FlowEvent::Thought { .. }
                            | FlowEvent::ToolCalled { .. }
                            | FlowEvent::ToolFinished { .. }
                            | FlowEvent::Question { .. }
                    )
                }
            };
            match &event {
                FlowEvent::LlmCalled { agent, usage, .. } => {
                    // A replica's label (`manus#2`) counts for its agent, as in the outcome.
                    let name = agent.split('#').next().unwrap_or(agent);
                    row.usage_by_agent
                        .entry(name.to_string())
                        .or_default()
                        .add(*usage);
                }
                FlowEvent::FlowFinished { outcome } => {
                    row.usage_by_agent = outcome.usage_by_agent.clone();
                    row.outcome = Some(outcome.clone());
                }
                _ => {}
            }
            if changes_state {
                row.plan = view.plan.clone();
                row.usage = view.usage;
                row.status = view.status();
                row.elapsed_ms = elapsed_before + started.elapsed().as_millis() as u64;
                store.write(Write::Run(Box::new(row.clone())));
            }
            let _ = handle.send(event);
        }
    });
}
