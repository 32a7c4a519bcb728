//! The service's flows, wherever they are: the table of flows held on this node (each
//! one's numbered event log, its `FlowView` and its control), and `Flow`, one flow found
//! here or (on a cluster) in the store, run by another node or by none yet. `Flow` offers
//! the verbs the routes need (its document, its view, answer, decide, cancel, follow, where
//! its files are) written once for both places, and `FlowDoc` is the one document a flow
//! is shown as. The HTTP routes, A2A, AG-UI and the console's routes are adapters over
//! this module; it knows nothing of their wire formats, only of `ApiError`'s statuses.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use axum::http::StatusCode;
use futures_util::Stream;
use manus_actors::llm::Usage;
use manus_actors::plan::Plan;
use manus_actors::protocol::{Decision, FlowEvent};
use serde::{Serialize, Serializer};
use tokio::sync::{OwnedSemaphorePermit, watch};

use super::{ApiError, App, now_ms};
use crate::cluster::Node;
use crate::runtime::{FlowControl, FlowHandle, SubmitOptions};
use crate::store::{RunStatus, StoreError, StoredRun};
use crate::view::{Approval, FlowView, Question};

/// A flow's events with their numbers (from 1), from wherever they are kept.
pub(super) type Numbered = std::pin::Pin<Box<dyn Stream<Item = (u64, FlowEvent)> + Send>>;

/// The flows this node holds: running ones, and the last `keep` finished ones.
pub(super) struct Held {
    flows: RwLock<HashMap<String, Arc<Entry>>>,
    /// Flow ids by submission number, for listing.
    order: Mutex<BTreeMap<u64, String>>,
    next_seq: AtomicU64,
    /// The flows held that have finished, by submission number, in the order they
    /// finished: the first is dropped when there are more than `keep`.
    finished: Mutex<VecDeque<(u64, String)>>,
    keep: usize,
}

/// One flow in the table.
pub(super) struct Entry {
    id: String,
    created_ms: u64,
    control: FlowControl,
    state: Mutex<EntryState>,
    /// The number of events logged so far; followers wait on it.
    logged: watch::Sender<usize>,
}

#[derive(Default)]
struct EntryState {
    view: FlowView,
    events: Vec<FlowEvent>,
}

impl Held {
    pub(super) fn new(keep: usize) -> Held {
        Held {
            flows: RwLock::new(HashMap::new()),
            order: Mutex::new(BTreeMap::new()),
            next_seq: AtomicU64::new(0),
            finished: Mutex::new(VecDeque::new()),
            keep,
        }
    }

    /// Put a started flow in the table and log its events as they come, each shown to
    /// `observe` first; `permit` (a cluster node's room) is held until the flow ends.
    pub(super) fn track(
        self: &Arc<Self>,
        mut handle: FlowHandle,
        permit: Option<OwnedSemaphorePermit>,
        observe: impl Fn(&FlowEvent) + Send + 'static,
    ) -> String {
        let id = handle.id.clone();
        let entry = Arc::new(Entry {
            id: id.clone(),
            created_ms: now_ms(),
            control: handle.control(),
            state: Mutex::new(EntryState::default()),
            logged: watch::channel(0).0,
        });
        if let Ok(mut flows) = self.flows.write() {
            flows.insert(id.clone(), entry.clone());
        }
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut order) = self.order.lock() {
            order.insert(seq, id.clone());
        }
        let held = self.clone();
        let flow_id = id.clone();
        tokio::spawn(async move {
            while let Some(e) = handle.next_event().await {
                observe(&e);
                let count = match entry.state.lock() {
                    Ok(mut st) => {
                        st.view.apply(&e);
                        st.events.push(e);
                        st.events.len()
                    }
                    Err(_) => break,
                };
                entry.logged.send_replace(count);
            }
            drop(permit);
            held.retire(seq, flow_id);
        });
        id
    }

    /// Flow `seq` has finished: hold it, and drop the one that finished first if more
    /// than `keep` are held.
    fn retire(&self, seq: u64, id: String) {
        let dropped = match self.finished.lock() {
            Ok(mut finished) => {
                finished.push_back((seq, id));
                if finished.len() > self.keep {
                    finished.pop_front()
                } else {
                    None
                }
            }
            Err(_) => None,
        };
        if let Some((seq, id)) = dropped {
            if let Ok(mut order) = self.order.lock() {
                order.remove(&seq);
            }
            if let Ok(mut flows) = self.flows.write() {
                flows.remove(&id);
            }
        }
    }

    fn get(&self, id: &str) -> Option<Arc<Entry>> {
        self.flows.read().ok().and_then(|f| f.get(id).cloned())
    }

    /// Every flow held, the newest first.
    pub(super) fn all(&self) -> Vec<Arc<Entry>> {
        let ids: Vec<String> = self
            .order
            .lock()
            .map(|o| o.values().cloned().collect())
            .unwrap_or_default();
        ids.iter().rev().filter_map(|id| self.get(id)).collect()
    }

    /// How many flows held have not finished.
    pub(super) fn running(&self) -> usize {
        self.flows
            .read()
            .map(|f| f.values().filter(|e| e.running()).count())
            .unwrap_or(0)
    }
}

impl Entry {
    fn running(&self) -> bool {
        self.state
            .lock()
            .map(|s| s.view.outcome.is_none())
            .unwrap_or(false)
    }

    /// Its state folded from its events, and how many there were.
    fn read(&self) -> Result<(FlowView, u64), ApiError> {
        let st = self.state.lock().map_err(|_| {
            ApiError(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("flow `{}` cannot be read", self.id),
            )
        })?;
        Ok((st.view.clone(), st.events.len() as u64))
    }

    /// Its document, with the plan and what waits when `full`.
    fn doc(&self, full: bool, node: Option<&Node>) -> Result<FlowDoc, ApiError> {
        let (v, events) = self.read()?;
        let mut doc = FlowDoc {
            id: self.id.clone(),
            task: v.task.clone(),
            status: Shown::of(&v),
            finished: v.outcome.is_some(),
            created_ms: self.created_ms,
            usage: v.usage,
            events: Some(events),
            node: node.map(|n| n.store.owner().to_string()),
            detail: None,
        };
        if full {
            doc.detail = Some(Detail {
                plan: v.plan.clone(),
                pending: Pending::of(&v),
                ended: v.outcome.as_ref().map(|o| Ended {
                    reason: o.reason.clone(),
                    result: o.summary.clone(),
                    usage_by_agent: o.usage_by_agent.clone(),
                    elapsed_ms: o.elapsed_ms,
                }),
            });
        }
        Ok(doc)
    }

    /// Every call of this flow waiting for approval, each with the flow's id.
    pub(super) fn approvals(&self) -> Vec<FlowApproval> {
        self.state
            .lock()
            .map(|st| {
                st.view
                    .approvals
                    .iter()
                    .map(|(id, a)| FlowApproval {
                        flow: self.id.clone(),
                        approval: ApprovalDoc::of(*id, a),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Close what `reply` answers in the view, so no one answers it twice; whether it was
    /// open.
    fn close(&self, reply: &Reply) -> bool {
        self.state.lock().is_ok_and(|mut st| match reply {
            Reply::Answer { question_id, .. } => st.view.questions.remove(question_id).is_some(),
            Reply::Decide { approval_id, .. } => st.view.approvals.remove(approval_id).is_some(),
        })
    }

    /// Its events after `after`, then each new one, to the last.
    fn follow(self: Arc<Self>, after: u64) -> impl Stream<Item = (u64, FlowEvent)> + Send {
        let logged = self.logged.subscribe();
        futures_util::stream::unfold(
            (self, after as usize, logged, false),
            |(entry, cursor, mut logged, done)| async move {
                if done {
                    return None;
                }
                loop {
                    let next = entry
                        .state
                        .lock()
                        .ok()
                        .and_then(|st| st.events.get(cursor).cloned());
                    if let Some(e) = next {
                        let finished = matches!(e, FlowEvent::FlowFinished { .. });
                        return Some((
                            ((cursor + 1) as u64, e),
                            (entry, cursor + 1, logged, finished),
                        ));
                    }
                    if !entry.running() || logged.changed().await.is_err() {
                        return None;
                    }
                }
            },
        )
    }
}

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
    /// Flow `id`: held here, or (on a cluster) read from the store; 404 when neither.
    pub(super) async fn flow(&self, id: &str) -> Result<Flow, ApiError> {
        if let Some(entry) = self.held.get(id) {
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
            ApiError(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
        };
        if self.node.is_some() {
            let id = runtime.enqueue(task, options.mode).await.map_err(refused)?;
            return Ok((id, true));
        }
        let handle = runtime.submit(task, options).await.map_err(refused)?;
        Ok((self.track_holding(handle, None), false))
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
            At::Here { entry, .. } => entry.read(),
            At::Stored { node, .. } => folded(node, &self.id).await,
        }
    }

    /// Its events after number `after`, then live, to the flow's end.
    pub(super) fn follow(&self, after: u64) -> Numbered {
        match &self.at {
            At::Here { entry, .. } => Box::pin(entry.clone().follow(after)),
            At::Stored { node, .. } => Box::pin(node.follow(self.id.clone(), after)),
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
                match reply {
                    Reply::Answer { question_id, text } => entry.control.answer(question_id, text),
                    Reply::Decide {
                        approval_id,
                        decision,
                    } => entry.control.decide(approval_id, decision),
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
                    } => node.store.decide(&self.id, approval_id, decision).await,
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

/// A flow as the service shows it (`Flow` and `FlowSummary` in docs/openapi.json).
#[derive(Debug, Serialize)]
pub(super) struct FlowDoc {
    pub(super) id: String,
    task: String,
    status: Shown,
    /// Whether it has ended: nothing more will happen to it.
    finished: bool,
    created_ms: u64,
    usage: Usage,
    /// Events logged, where known (a flow held here).
    #[serde(skip_serializing_if = "Option::is_none")]
    events: Option<u64>,
    /// On a cluster, the node that runs (or ran) it.
    #[serde(skip_serializing_if = "Option::is_none")]
    node: Option<String>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    detail: Option<Detail>,
}

/// What a full document adds: the plan, what waits for a person, and how it ended.
#[derive(Debug, Serialize)]
struct Detail {
    plan: Option<Plan>,
    #[serde(flatten)]
    pending: Pending,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    ended: Option<Ended>,
}

/// A flow's open questions and the calls waiting for approval.
#[derive(Debug, Default, Serialize)]
struct Pending {
    questions: Vec<QuestionDoc>,
    approvals: Vec<ApprovalDoc>,
}

#[derive(Debug, Serialize)]
struct QuestionDoc {
    id: u64,
    #[serde(flatten)]
    question: Question,
}

#[derive(Debug, Serialize)]
pub(super) struct ApprovalDoc {
    id: u64,
    #[serde(flatten)]
    approval: Approval,
}

/// A call waiting for approval, with its flow (`GET /v1/approvals`).
#[derive(Debug, Serialize)]
pub(super) struct FlowApproval {
    #[serde(flatten)]
    approval: ApprovalDoc,
    flow: String,
}

#[derive(Debug, Serialize)]
struct Ended {
    reason: String,
    result: String,
    usage_by_agent: BTreeMap<String, Usage>,
    elapsed_ms: u64,
}

/// A flow's status as the service shows it: `awaiting_approval` while a call waits for a
/// person, else the run's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shown {
    AwaitingApproval,
    Run(RunStatus),
}

impl Shown {
    fn of(v: &FlowView) -> Shown {
        match v.outcome {
            None if !v.approvals.is_empty() => Shown::AwaitingApproval,
            _ => Shown::Run(v.status()),
        }
    }

    pub(super) fn as_str(self) -> &'static str {
        match self {
            Shown::AwaitingApproval => "awaiting_approval",
            Shown::Run(s) => s.as_str(),
        }
    }
}

impl Serialize for Shown {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl Pending {
    fn of(v: &FlowView) -> Pending {
        Pending {
            questions: v
                .questions
                .iter()
                .map(|(id, q)| QuestionDoc {
                    id: *id,
                    question: q.clone(),
                })
                .collect(),
            approvals: v
                .approvals
                .iter()
                .map(|(id, a)| ApprovalDoc::of(*id, a))
                .collect(),
        }
    }
}

impl ApprovalDoc {
    fn of(id: u64, a: &Approval) -> ApprovalDoc {
        ApprovalDoc {
            id,
            approval: a.clone(),
        }
    }
}

impl FlowDoc {
    /// A run as the store holds it; what waits for a person from `folded`, its events
    /// folded, while it runs.
    fn stored(run: &StoredRun, folded: Option<&FlowView>, full: bool) -> FlowDoc {
        FlowDoc {
            id: run.id.clone(),
            task: run.task.clone(),
            status: folded.map_or(Shown::Run(run.status), Shown::of),
            finished: run.status.ended(),
            created_ms: run.created_at.max(0) as u64,
            usage: run.usage,
            events: None,
            node: run.owner.clone(),
            detail: full.then(|| Detail {
                plan: run.plan.clone(),
                pending: folded.map(Pending::of).unwrap_or_default(),
                ended: run.outcome.as_ref().map(|o| Ended {
                    reason: o.reason.clone(),
                    result: o.summary.clone(),
                    usage_by_agent: o.usage_by_agent.clone(),
                    elapsed_ms: run.elapsed_ms,
                }),
            }),
        }
    }
}
