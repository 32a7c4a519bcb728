//! The service's flows, wherever they are: the table of flows held on this node (each
//! one's numbered event log, its `FlowView` and its control), and `Flow`, one flow found
//! here or (on a cluster) in the store, run by another node or by none yet. `Flow` offers
//! the verbs the routes need (start, fork, its document, its view, reply, cancel, follow, where
//! its files are) written once for both places. `held.rs` is the table, `doc.rs` the one
//! document a flow is shown as. The HTTP routes, A2A, AG-UI and the console's routes are
//! adapters over this module; it knows nothing of their wire formats, only of `ApiError`'s
//! statuses.

mod doc;
mod held;
mod thread;

use std::sync::Arc;

use axum::http::StatusCode;
use futures_util::Stream;
use manus_actors::protocol::{Decision, FlowEvent};

use super::{ApiError, App};
use crate::cluster::Node;
use crate::runtime::SubmitOptions;
use crate::store::{RunStatus, StoreError, StoredRun};
use crate::view::FlowView;
pub(super) use doc::{FlowApproval, FlowDoc};
use held::Entry;
pub(super) use held::Held;
pub(super) use thread::ThreadDoc;

/// A flow's events with their numbers (from 1), from wherever they are kept.
pub(super) type Numbered = std::pin::Pin<Box<dyn Stream<Item = (u64, FlowEvent)> + Send>>;

/// A flow, wherever it is.
pub(super) struct Flow {
    pub(super) id: String,
    at: At,
}

enum At {
    /// Held by this node; `node` on a cluster.
    Here {
        entry: Arc<Entry>,
        node: Option<Arc<Node>>,
    },
    /// Only in a cluster's store: run by another node, queued, or ended and not held.
    Stored {
        run: Box<StoredRun>,
        node: Arc<Node>,
    },
}

impl App {
    /// Flow `id`: held here, or (on a cluster) read from the store; 404 when neither. On
    /// a cluster the store is the truth about a run once its flow here has ended: a flow
    /// stopped here because this node lost the run (another node took it over, or the
    /// node's lease lapsed) ended here, but its run goes on elsewhere.
    pub(super) async fn flow(&self, id: &str) -> Result<Flow, ApiError> {
        if let Some(entry) = self
            .held
            .get(id)
            .filter(|e| self.node.is_none() || e.running())
        {
            let node = self.node.clone();
            return Ok(Flow {
                id: id.to_string(),
                at: At::Here { entry, node },
            });
        }
        let Some(node) = &self.node else {
            return Err(not_held(id, self.settings.keep_finished));
        };
        let run = match node.store.get(id).await {
            Ok(Some(run)) => run,
            Ok(None) => {
                return Err(ApiError(
                    StatusCode::NOT_FOUND,
                    format!("no flow `{id}` in the run store"),
                ));
            }
            Err(e) => return Err(unavailable(e)),
        };
        Ok(Flow {
            id: id.to_string(),
            at: At::Stored {
                run: Box::new(run),
                node: node.clone(),
            },
        })
    }

    /// Start a flow: here, or on a cluster queued in the store for whichever node has room
    /// (durable once this returns); its id, and whether it was queued.
    pub(super) async fn start(
        &self,
        task: &str,
        options: SubmitOptions,
    ) -> Result<(String, bool), ApiError> {
        let runtime = self.runtime.read().await;
        let Some(runtime) = runtime.as_ref() else {
            return Err(ApiError(
                StatusCode::SERVICE_UNAVAILABLE,
                "the service is shutting down".into(),
            ));
        };
        let refused = |e: crate::runtime::RuntimeError| {
            use crate::runtime::RuntimeError as E;
            let status = match e {
                E::UnknownRun(_) => StatusCode::NOT_FOUND,
                E::TurnRunning { .. } => StatusCode::CONFLICT,
                E::NoStore => StatusCode::BAD_REQUEST,
                _ => StatusCode::SERVICE_UNAVAILABLE,
            };
            ApiError(status, e.to_string())
        };
        if self.node.is_some() {
            let id = runtime.enqueue(task, &options).await.map_err(refused)?;
            return Ok((id, true));
        }
        let handle = runtime.submit(task, options).await.map_err(refused)?;
        Ok((self.track_holding(handle, None), false))
    }

    /// Fork stored run `id` at a step (`Runtime::fork`): started here, never queued, as
    /// its workspace is this node's; the fork's id.
    pub(super) async fn fork(
        &self,
        id: &str,
        options: crate::runtime::ForkOptions,
    ) -> Result<String, ApiError> {
        use crate::runtime::RuntimeError as E;
        let runtime = self.runtime.read().await;
        let Some(runtime) = runtime.as_ref() else {
            return Err(ApiError(
                StatusCode::SERVICE_UNAVAILABLE,
                "the service is shutting down".into(),
            ));
        };
        let handle = runtime.fork(id, options).await.map_err(|e| {
            let status = match &e {
                E::UnknownRun(_) => StatusCode::NOT_FOUND,
                E::NotEnded { .. } | E::NoStore | E::ForkRefused(_) => StatusCode::CONFLICT,
                E::StepOutOfRange { .. } | E::NoPlan(_) => StatusCode::UNPROCESSABLE_ENTITY,
                _ => StatusCode::SERVICE_UNAVAILABLE,
            };
            ApiError(status, e.to_string())
        })?;
        Ok(self.track_holding(handle, None))
    }

    /// Every flow's summary, the newest first: those held here, or on a cluster every
    /// node's, as the store has them.
    pub(super) async fn flow_docs(&self) -> Result<Vec<FlowDoc>, ApiError> {
        match &self.node {
            Some(node) => {
                let runs = node.store.list(100).await.map_err(unavailable)?;
                Ok(runs
                    .iter()
                    .map(|r| FlowDoc::stored(r, None, false))
                    .collect())
            }
            None => Ok(self
                .held
                .all()
                .iter()
                .filter_map(|e| e.doc(false, None).ok())
                .collect()),
        }
    }
}

/// The 404 for a flow this (single) node does not hold.
fn not_held(id: &str, kept: usize) -> ApiError {
    ApiError(
        StatusCode::NOT_FOUND,
        format!(
            "no flow with id `{id}` here; GET /v1/flows lists them. The service holds the \
             last {kept} finished flows ([server] keep_finished_flows); `manus-rt runs show \
             {id}` reads an older one from the run store"
        ),
    )
}

fn unavailable(e: StoreError) -> ApiError {
    ApiError(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
}

impl Flow {
    /// Queued in a cluster's store, not yet started by any node.
    pub(super) fn queued(&self) -> bool {
        matches!(&self.at, At::Stored { run, .. } if run.status == RunStatus::Queued)
    }

    /// Its document: the summary, plus the plan, what waits and the outcome when `full`.
    pub(super) async fn doc(&self, full: bool) -> Result<FlowDoc, ApiError> {
        match &self.at {
            At::Here { entry, node } => entry.doc(full, node.as_deref()),
            At::Stored { run, node } => {
                // What waits for a person, from its events, while it runs.
                let folded = match full && run.status == RunStatus::Running {
                    true => Some(folded(node, &self.id).await?.0),
                    false => None,
                };
                Ok(FlowDoc::stored(run, folded.as_ref(), full))
            }
        }
    }

    /// Its state folded from its events, and how many there were (numbered as `follow`
    /// numbers them).
    pub(super) async fn view(&self) -> Result<(FlowView, u64), ApiError> {
        match &self.at {
            At::Here { entry, node: None } => entry.read(),
            At::Here {
                node: Some(node), ..
            }
            | At::Stored { node, .. } => folded(node, &self.id).await,
        }
    }

    /// Its events after number `after`, then live, to the flow's end. On a cluster they
    /// are numbered as stored, also for a flow held here (its own log numbers from 1 after
    /// a takeover, and holds text deltas the store does not keep), so a stream resumes on
    /// any node with `Last-Event-ID`.
    pub(super) fn follow(&self, after: u64) -> Numbered {
        match &self.at {
            At::Here { entry, node: None } => Box::pin(entry.clone().follow(after)),
            At::Here {
                node: Some(node), ..
            }
            | At::Stored { node, .. } => Box::pin(node.follow(self.id.clone(), after)),
        }
    }

    /// Answer its open question or decide its open approval request: handed to the flow
    /// here, or recorded in the store for the node that runs it (the first one stands).
    pub(super) async fn reply(&self, reply: Reply) -> Result<(), ApiError> {
        match &self.at {
            At::Here { entry, .. } => {
                if !entry.close(&reply) {
                    return Err(reply.not_open(&self.id));
                }
                let taken = reply.taken(&self.id);
                match reply {
                    Reply::Answer { question_id, text } => entry.control.answer(question_id, text),
                    // Through the store's decisions table when there is one: one rule for
                    // every way of deciding, the first recorded stands.
                    Reply::Decide {
                        approval_id,
                        decision,
                    } => {
                        let first = entry.control.decide(approval_id, decision).await;
                        if !first.map_err(unavailable)? {
                            return Err(taken);
                        }
                    }
                }
            }
            At::Stored { run, node } => {
                if !reply.open_in(&running_view(node, run).await?) {
                    return Err(reply.not_open(&self.id));
                }
                let taken = reply.taken(&self.id);
                let recorded = match reply {
                    Reply::Answer { question_id, text } => {
                        let command = crate::store::cluster::Command::Answer { question_id, text };
                        node.store.send(&self.id, command).await
                    }
                    Reply::Decide {
                        approval_id,
                        decision,
                    } => {
                        node.store
                            .decide(&self.id, approval_id, decision, false)
                            .await
                    }
                };
                if !recorded.map_err(unavailable)? {
                    return Err(taken);
                }
            }
        }
        Ok(())
    }

    /// Cancel it: told to the flow here, or sent through the store to the node that runs
    /// it (a queued one is handed the cancel by the node that takes it, as it starts).
    pub(super) async fn cancel(&self) -> Result<(), ApiError> {
        let id = &self.id;
        match &self.at {
            At::Here { entry, .. } => {
                if !entry.running() {
                    return Err(ApiError(
                        StatusCode::CONFLICT,
                        format!("flow `{id}` has already finished"),
                    ));
                }
                entry.control.cancel();
            }
            At::Stored { run, node } => {
                if run.status.ended() {
                    return Err(ApiError(
                        StatusCode::CONFLICT,
                        format!("flow `{id}` is {}, not running", run.status),
                    ));
                }
                let command = crate::store::cluster::Command::Cancel;
                node.store.send(id, command).await.map_err(unavailable)?;
            }
        }
        Ok(())
    }

    /// Whether its files are in this node's workspace, or the 404 that says why not: each
    /// node has its own workspace, so a flow another node runs or ran has its files there
    /// (`kept`: how many finished flows a node holds).
    pub(super) fn files_here(&self, kept: usize) -> Result<(), ApiError> {
        match &self.at {
            At::Here { .. } => Ok(()),
            At::Stored { run, node } => Err(match &run.owner {
                // It ran here and is no longer held: as on a single node.
                Some(owner) if owner == node.store.owner() => not_held(&self.id, kept),
                owner => ApiError(
                    StatusCode::NOT_FOUND,
                    format!(
                        "flow `{}` is not run by this node: its files are in the workspace of \
                         the node that runs or ran it ({}), as each node has its own; ask that \
                         node",
                        self.id,
                        owner.as_deref().unwrap_or("none yet: it is queued")
                    ),
                ),
            }),
        }
    }
}

/// A person's reply to a flow: an answer to its question, or a decision on its approval
/// request.
pub(super) enum Reply {
    Answer {
        question_id: u64,
        text: String,
    },
    Decide {
        approval_id: u64,
        decision: Decision,
    },
}

impl Reply {
    /// Whether what it replies to is open in `v`.
    fn open_in(&self, v: &FlowView) -> bool {
        match self {
            Reply::Answer { question_id, .. } => v.questions.contains_key(question_id),
            Reply::Decide { approval_id, .. } => v.approvals.contains_key(approval_id),
        }
    }

    /// The 404 for flow `id` when what it replies to is not open.
    fn not_open(&self, id: &str) -> ApiError {
        let what = match self {
            Reply::Answer { question_id, .. } => format!("open question {question_id}"),
            Reply::Decide { approval_id, .. } => {
                format!("undecided approval request {approval_id}")
            }
        };
        ApiError(
            StatusCode::NOT_FOUND,
            format!("flow `{id}` has no {what}; GET /v1/flows/{id} lists them"),
        )
    }

    /// The 409 for flow `id` when someone replied first.
    fn taken(&self, id: &str) -> ApiError {
        let what = match self {
            Reply::Answer { question_id, .. } => {
                format!("question {question_id} of flow `{id}` has already been answered")
            }
            Reply::Decide { approval_id, .. } => {
                format!("approval request {approval_id} of flow `{id}` has already been decided")
            }
        };
        ApiError(StatusCode::CONFLICT, what)
    }
}

/// Run `id` folded from its stored events, whichever node runs it, and how many there were.
async fn folded(node: &Node, id: &str) -> Result<(FlowView, u64), ApiError> {
    let events = node.store.events(id).await.map_err(unavailable)?;
    let mut view = FlowView::default();
    for e in &events {
        view.apply(&e.event);
    }
    // Numbered as `Node::follow` numbers them (a lost batch leaves a gap).
    Ok((view, events.last().map_or(0, |e| e.seq + 1)))
}

/// Stored run `run` folded from its events; a 409 unless it is still running.
async fn running_view(node: &Node, run: &StoredRun) -> Result<FlowView, ApiError> {
    if run.status != RunStatus::Running {
        return Err(ApiError(
            StatusCode::CONFLICT,
            format!("flow `{}` is {}, not running", run.id, run.status),
        ));
    }
    Ok(folded(node, &run.id).await?.0)
}
