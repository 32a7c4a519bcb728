//! The service on a cluster node (`[cluster]`): a submitted flow is queued in the store for
//! whichever node has room; this node claims queued runs (and runs whose node fell silent)
//! while it has fewer than `max_flows`, woken by the store's notifications; any run is shown
//! and streamed from the store, whichever node runs it, with events numbered as stored, so a
//! stream resumes on any node (`Last-Event-ID`). On stop the node claims no more, lets its
//! flows finish for a while, then hands the rest back.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::http::StatusCode;
use futures_util::Stream;
use manus_actors::protocol::FlowEvent;
use serde_json::{Value, json};
use tokio::sync::{Notify, Semaphore};

use super::{ApiError, App};
use crate::cluster::ClusterSettings;
use crate::store::{RunStore, StoreUrl, StoredRun};

/// How long a stream of a run waits for word of its new events (`LISTEN manus_events`)
/// before it looks in the store anyway.
const FOLLOW_EVERY: Duration = Duration::from_secs(1);

/// What a cluster node's service keeps: the store, the room it has, its wake-ups.
pub struct Node {
    pub store: RunStore,
    pub settings: ClusterSettings,
    /// One permit per flow this node may run at once.
    room: Arc<Semaphore>,
    wake: Arc<Notify>,
    /// The ids of runs with new events in the store, as the store announces them.
    written: tokio::sync::broadcast::Sender<String>,
    stop: Arc<AtomicBool>,
}

impl Node {
    pub fn new(store: RunStore, settings: ClusterSettings) -> Node {
        Node {
            room: Arc::new(Semaphore::new(settings.max_flows)),
            store,
            settings,
            wake: Arc::new(Notify::new()),
            written: tokio::sync::broadcast::channel(1024).0,
            stop: Arc::new(AtomicBool::new(false)),
        }
    }
}

impl App {
    /// Claim runs while there is room, until stopped: at once when a run is queued, and
    /// every half lease (which finds runs whose node fell silent).
    pub fn start_claiming(self: &Arc<Self>, url: &StoreUrl) {
        let Some(node) = &self.node else { return };
        if let StoreUrl::Postgres(url) = url
            && let Err(e) = crate::store::cluster::listen(
                url,
                node.wake.clone(),
                node.written.clone(),
                node.stop.clone(),
            )
        {
            tracing::warn!("cannot listen for queued runs ({e}); polling instead");
        }
        let app = self.clone();
        tokio::spawn(async move {
            let Some(node) = &app.node else { return };
            let poll = node.settings.lease / 2;
            while !node.stop.load(Ordering::Relaxed) {
                let Ok(permit) = node.room.clone().acquire_owned().await else {
                    return;
                };
                let claimed = match app.runtime.read().await.as_ref() {
                    Some(runtime) if !node.stop.load(Ordering::Relaxed) => {
                        runtime.claim(true).await
                    }
                    _ => return,
                };
                match claimed {
                    Ok(Some(handle)) => {
                        app.track_holding(handle, Some(permit));
                    }
                    Ok(None) => {
                        drop(permit);
                        let _ = tokio::time::timeout(poll, node.wake.notified()).await;
                    }
                    Err(e) => {
                        drop(permit);
                        tracing::warn!("cannot claim a queued run: {e}");
                        tokio::time::sleep(poll).await;
                    }
                }
            }
        });
    }

    /// Stop claiming; give this node's flows up to `grace` to finish, then hand the rest
    /// back to the other nodes (they go on from their last completed step).
    pub async fn drain(&self, grace: Duration) {
        let Some(node) = &self.node else { return };
        node.stop.store(true, Ordering::Relaxed);
        node.wake.notify_one();
        let all = node.settings.max_flows as u32;
        let finished = tokio::time::timeout(grace, node.room.acquire_many(all)).await;
        if finished.is_err() {
            let left = node.settings.max_flows - node.room.available_permits();
            eprintln!("manus-rt: handing {left} unfinished flow(s) back to the other nodes");
            if let Some(runtime) = self.runtime.read().await.as_ref()
                && let Err(e) = runtime.hand_back().await
            {
                eprintln!(
                    "manus-rt: cannot hand the flows back ({e}); they are taken over once the lease lapses"
                );
            }
        }
    }
}

/// A run as the store holds it, as JSON: the fields `GET /v1/flows/{id}` gives.
pub fn describe_stored(run: &StoredRun, full: bool) -> Value {
    let mut out = json!({
        "id": run.id,
        "task": run.task,
        "status": run.status,
        "created_ms": run.created_at,
        "usage": run.usage,
        "node": run.owner,
    });
    if full {
        out["plan"] = serde_json::to_value(&run.plan).unwrap_or(Value::Null);
        if let Some(o) = &run.outcome {
            out["reason"] = json!(o.reason);
            out["result"] = json!(o.summary);
            out["usage_by_agent"] = serde_json::to_value(&o.usage_by_agent).unwrap_or_default();
            out["elapsed_ms"] = json!(run.elapsed_ms);
        }
    }
    out
}

/// Run `id` from the store, or 404.
pub async fn stored(store: &RunStore, id: &str) -> Result<StoredRun, ApiError> {
    match store.get(id).await {
        Ok(Some(run)) => Ok(run),
        Ok(None) => Err(ApiError(
            StatusCode::NOT_FOUND,
            format!("no flow `{id}` in the run store"),
        )),
        Err(e) => Err(ApiError(StatusCode::SERVICE_UNAVAILABLE, e.to_string())),
    }
}

/// Run `id`'s events from the store after event number `after` (event `n` is the store's
/// event `n - 1`), following new ones until the flow finishes.
pub fn follow_stored(
    node: &Node,
    id: String,
    after: u64,
) -> impl Stream<Item = (u64, FlowEvent)> + Send + use<> {
    let pending: std::collections::VecDeque<crate::store::StoredEvent> = Default::default();
    let (store, heard) = (node.store.clone(), node.written.subscribe());
    futures_util::stream::unfold(
        (store, id, after, pending, false, heard),
        |(store, id, next, mut pending, done, mut heard)| async move {
            if done {
                return None;
            }
            loop {
                if let Some(e) = pending.pop_front() {
                    let finished = matches!(e.event, FlowEvent::FlowFinished { .. });
                    let next = e.seq + 1;
                    return Some(((next, e.event), (store, id, next, pending, finished, heard)));
                }
                match store.events_from(&id, next).await {
                    Ok(events) if !events.is_empty() => pending.extend(events),
                    Ok(_) => {
                        // Until word that this run has new events, or a second passes.
                        let _ = tokio::time::timeout(FOLLOW_EVERY, async {
                            loop {
                                match heard.recv().await {
                                    Ok(run) if run == id => return,
                                    Ok(_)
                                    | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                                    Err(_) => std::future::pending::<()>().await,
                                }
                            }
                        })
                        .await;
                    }
                    Err(e) => {
                        tracing::warn!(run = %id, "cannot read the run's events: {e}");
                        return None;
                    }
                }
            }
        },
    )
}

/// Run `id` folded from its stored events: its open questions and approvals, whichever node
/// runs it; an error unless it is still running.
async fn running_view(store: &RunStore, id: &str) -> Result<crate::view::FlowView, ApiError> {
    let run = stored(store, id).await?;
    if run.status != "running" {
        return Err(ApiError(
            StatusCode::CONFLICT,
            format!("flow `{id}` is {}, not running", run.status),
        ));
    }
    Ok(folded(store, id).await?.0)
}

/// Run `id` folded from its stored events, whichever node runs it, and how many there were.
pub async fn folded(store: &RunStore, id: &str) -> Result<(crate::view::FlowView, u64), ApiError> {
    let events = store.events(id).await.map_err(unavailable)?;
    let mut view = crate::view::FlowView::default();
    for e in &events {
        view.apply(&e.event);
    }
    // Numbered as `follow_stored` numbers them (a lost batch leaves a gap).
    Ok((view, events.last().map_or(0, |e| e.seq + 1)))
}

fn unavailable(e: crate::store::StoreError) -> ApiError {
    ApiError(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
}

/// An answer to a flow another node runs: recorded in the store, handed over by that node.
pub async fn answer_elsewhere(
    store: &RunStore,
    id: &str,
    question_id: u64,
    text: String,
) -> Result<(), ApiError> {
    if !running_view(store, id)
        .await?
        .questions
        .contains_key(&question_id)
    {
        return Err(ApiError(
            StatusCode::NOT_FOUND,
            format!(
                "flow `{id}` has no open question {question_id}; GET /v1/flows/{id}/events shows them"
            ),
        ));
    }
    let command = crate::store::cluster::Command::Answer { question_id, text };
    if !store.send(id, command).await.map_err(unavailable)? {
        return Err(ApiError(
            StatusCode::CONFLICT,
            format!("question {question_id} of flow `{id}` has already been answered"),
        ));
    }
    Ok(())
}

/// A cancel of a flow another node runs, or of one still queued (the node that takes it
/// is handed the cancel as it starts), through the store.
pub async fn cancel_elsewhere(store: &RunStore, id: &str) -> Result<(), ApiError> {
    let run = stored(store, id).await?;
    if run.status != "running" && run.status != "queued" {
        return Err(ApiError(
            StatusCode::CONFLICT,
            format!("flow `{id}` is {}, not running", run.status),
        ));
    }
    let command = crate::store::cluster::Command::Cancel;
    store.send(id, command).await.map_err(unavailable)?;
    Ok(())
}

/// A decision on an approval request of a flow another node runs, through the store.
pub async fn decide_elsewhere(
    store: &RunStore,
    id: &str,
    approval_id: u64,
    decision: manus_actors::protocol::Decision,
) -> Result<(), ApiError> {
    if !running_view(store, id)
        .await?
        .approvals
        .contains_key(&approval_id)
    {
        return Err(ApiError(
            StatusCode::NOT_FOUND,
            format!("flow `{id}` has no undecided approval request {approval_id}"),
        ));
    }
    if !store
        .decide(id, approval_id, decision)
        .await
        .map_err(unavailable)?
    {
        return Err(ApiError(
            StatusCode::CONFLICT,
            format!("approval request {approval_id} of flow `{id}` has already been decided"),
        ));
    }
    Ok(())
}
