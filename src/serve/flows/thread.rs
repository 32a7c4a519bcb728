//! Conversations as the service shows them: a thread's turns, oldest first, read from the
//! run store (this node's, or the cluster's), so every node shows the same thread.

use axum::http::StatusCode;
use serde::Serialize;

use super::{FlowDoc, unavailable};
use crate::serve::{ApiError, App};
use crate::store::RunStore;

/// A thread (`Thread` in docs/openapi.json): its id (its first run's) and its turns.
#[derive(Debug, Serialize)]
pub(in crate::serve) struct ThreadDoc {
    id: String,
    turns: Vec<TurnDoc>,
}

/// One turn: its number, the flow's summary and the answer it gave.
#[derive(Debug, Serialize)]
struct TurnDoc {
    turn: u32,
    #[serde(flatten)]
    flow: FlowDoc,
    #[serde(skip_serializing_if = "Option::is_none")]
    answer: Option<String>,
}

impl App {
    /// Where threads are read: the cluster's store, or this runtime's.
    async fn thread_store(&self) -> Result<RunStore, ApiError> {
        if let Some(node) = &self.node {
            return Ok(node.store.clone());
        }
        let runtime = self.runtime.read().await;
        runtime
            .as_ref()
            .and_then(|r| r.store().cloned())
            .ok_or_else(|| {
                ApiError(
                    StatusCode::NOT_FOUND,
                    "runs are not stored here ([store] enabled = false), so there are no threads"
                        .into(),
                )
            })
    }

    /// The id of the thread run `id` belongs to: its own when runs are not stored (or the
    /// store cannot say).
    pub(in crate::serve) async fn thread_id(&self, id: &str) -> String {
        match self.thread_store().await {
            Ok(store) => store.turn_of(id).await.map_or(id.to_string(), |t| t.thread),
            Err(_) => id.to_string(),
        }
    }

    /// Whether `id` is a run in the store, so a thread to continue.
    pub(in crate::serve) async fn knows_thread(&self, id: &str) -> bool {
        match self.thread_store().await {
            Ok(store) => store.get(id).await.is_ok_and(|r| r.is_some()),
            Err(_) => false,
        }
    }

    /// The thread run `id` belongs to (`id` may be the thread's or any of its turns').
    pub(in crate::serve) async fn thread(&self, id: &str) -> Result<ThreadDoc, ApiError> {
        let store = self.thread_store().await?;
        let place = store.turn_of(id).await.map_err(unavailable)?;
        let turns = store.turns(&place.thread).await.map_err(unavailable)?;
        if turns.is_empty() {
            return Err(ApiError(
                StatusCode::NOT_FOUND,
                format!("no run `{id}` in the run store; GET /v1/flows lists the flows"),
            ));
        }
        Ok(ThreadDoc {
            id: place.thread,
            turns: turns
                .iter()
                .map(|(turn, run)| TurnDoc {
                    turn: *turn,
                    flow: FlowDoc::stored(run, None, false),
                    answer: run
                        .outcome
                        .as_ref()
                        .map(|o| o.summary.clone())
                        .filter(|s| !s.is_empty()),
                })
                .collect(),
        })
    }
}
