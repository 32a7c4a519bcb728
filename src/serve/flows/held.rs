//! The flows this node holds: each submitted or claimed flow's numbered event log, its
//! `FlowView` and its control, for running flows and the last `keep` finished ones (the one
//! that finished first goes; the run store keeps its record).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use axum::http::StatusCode;
use futures_util::Stream;
use manus_actors::protocol::FlowEvent;
use tokio::sync::{OwnedSemaphorePermit, watch};

use super::Reply;
use super::doc::{FlowApproval, FlowDoc};
use crate::cluster::Node;
use crate::runtime::{FlowControl, FlowHandle};
use crate::serve::{ApiError, now_ms};
use crate::view::FlowView;

/// The flows this node holds: running ones, and the last `keep` finished ones.
pub(in crate::serve) struct Held {
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
pub(in crate::serve) struct Entry {
    id: String,
    created_ms: u64,
    pub(super) control: FlowControl,
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
    pub(in crate::serve) fn new(keep: usize) -> Held {
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
    pub(in crate::serve) fn track(
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

    pub(super) fn get(&self, id: &str) -> Option<Arc<Entry>> {
        self.flows.read().ok().and_then(|f| f.get(id).cloned())
    }

    /// Every flow held, the newest first.
    pub(in crate::serve) fn all(&self) -> Vec<Arc<Entry>> {
        let ids: Vec<String> = self
            .order
            .lock()
            .map(|o| o.values().cloned().collect())
            .unwrap_or_default();
        ids.iter().rev().filter_map(|id| self.get(id)).collect()
    }

    /// How many flows held have not finished.
    pub(in crate::serve) fn running(&self) -> usize {
        self.flows
            .read()
            .map(|f| f.values().filter(|e| e.running()).count())
            .unwrap_or(0)
    }
}

impl Entry {
    pub(super) fn running(&self) -> bool {
        self.state
            .lock()
            .map(|s| s.view.outcome.is_none())
            .unwrap_or(false)
    }

    /// Its state folded from its events, and how many there were.
    pub(super) fn read(&self) -> Result<(FlowView, u64), ApiError> {
        let st = self.state.lock().map_err(|_| {
            ApiError(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("flow `{}` cannot be read", self.id),
            )
        })?;
        Ok((st.view.clone(), st.events.len() as u64))
    }

    /// Its document, with the plan and what waits when `full`.
    pub(super) fn doc(&self, full: bool, node: Option<&Node>) -> Result<FlowDoc, ApiError> {
        let (view, events) = self.read()?;
        let node = node.map(|n| n.store.owner().to_string());
        Ok(FlowDoc::held(
            &self.id,
            &view,
            self.created_ms,
            events,
            node,
            full,
        ))
    }

    /// Every call of this flow waiting for approval, each with the flow's id.
    pub(in crate::serve) fn approvals(&self) -> Vec<FlowApproval> {
        self.state
            .lock()
            .map(|st| {
                st.view
                    .approvals
                    .iter()
                    .map(|(id, a)| FlowApproval::new(&self.id, *id, a))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Close what `reply` answers in the view, so no one answers it twice; whether it was
    /// open.
    pub(super) fn close(&self, reply: &Reply) -> bool {
        self.state.lock().is_ok_and(|mut st| match reply {
            Reply::Answer { question_id, .. } => st.view.questions.remove(question_id).is_some(),
            Reply::Decide { approval_id, .. } => st.view.approvals.remove(approval_id).is_some(),
        })
    }

    /// Its events after `after`, then each new one, to the last.
    pub(super) fn follow(
        self: Arc<Self>,
        after: u64,
    ) -> impl Stream<Item = (u64, FlowEvent)> + Send {
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
