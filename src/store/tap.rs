//! A run's record as its events happen, in two halves. The tap is the flow's
//! `EventObserver`: on the emitting actor's thread, just before the handle gets an event, it
//! numbers the event and queues a copy for the store; that is all the work a flow's own
//! threads do for its record, and no task stands between the planner and its handle. The
//! fold runs on the store's thread: it folds each run's events into its state (the same
//! `FlowView` the board reads) and turns them into rows. The tap sees every event whether or
//! not the handle is still read: the flow still runs, so its record must still be written.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use manus_actors::protocol::{EventObserver, FlowEvent};

use super::lease::LeaseClock;
use super::writer::{RunStore, Write};
use super::{Stmt, StoreError, StoredMemory, StoredRun, now_ms, sql};
use crate::view::FlowView;

/// The store's observer of one flow.
pub(crate) struct Tap {
    store: RunStore,
    run_id: Arc<str>,
    /// The number the next event gets.
    seq: u64,
    opened: Instant,
    /// This tap among all the taps a run has had in this process: a run stopped here and
    /// taken up again has a new one, and what the old one still sends is not written.
    tap: u64,
    /// Cluster: the node's lease clock and the epoch the flow was licensed in. Past a
    /// lapse the flow's events are not written: they are its stopping, and its run is
    /// another node's to take up from what was written before.
    licence: Option<(Arc<LeaseClock>, u64)>,
}

/// The number the next tap gets.
static TAPS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Tap {
    /// Record a flow whose state so far is `row`, started for `user`, numbering its events
    /// from `seq`. Returns
    /// once the row is committed: a flow that was acknowledged is in the store even if the
    /// process is killed right after.
    pub(crate) async fn open(
        store: RunStore,
        row: StoredRun,
        seq: u64,
        licence: Option<(Arc<LeaseClock>, u64)>,
        user: Option<String>,
    ) -> Result<Tap, StoreError> {
        let run_id: Arc<str> = row.id.as_str().into();
        let tap = TAPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let row = Box::new(row);
        store.write_durably(Write::Open { row, tap, user }).await?;
        Ok(Tap {
            store,
            run_id,
            seq,
            opened: Instant::now(),
            tap,
            licence,
        })
    }
}

impl Tap {
    /// Whether the flow's events may still be written (always, off a cluster).
    fn licensed(&self) -> bool {
        self.licence
            .as_ref()
            .is_none_or(|(clock, epoch)| clock.licenses(*epoch))
    }

    /// The write of `event`, which takes the next number (memories take none).
    fn numbered(&mut self, event: &FlowEvent) -> Write {
        let write = Write::Event {
            run_id: self.run_id.clone(),
            tap: self.tap,
            seq: self.seq,
            at: now_ms(),
            ran_ms: self.opened.elapsed().as_millis() as u64,
            event: event.clone(),
        };
        if !matches!(event, FlowEvent::StepMemory { .. }) {
            self.seq += 1;
        }
        write
    }
}

impl EventObserver for Tap {
    fn observe(&mut self, event: &FlowEvent) {
        // Live text is for watchers; the finished text is stored as its `Thought`.
        if matches!(event, FlowEvent::TextDelta { .. }) || !self.licensed() {
            return;
        }
        let write = self.numbered(event);
        self.store.write(write);
    }

    fn observe_durably(&mut self, event: &FlowEvent) -> Option<manus_actors::protocol::Durable> {
        if !self.licensed() {
            let (told, heard) = tokio::sync::oneshot::channel();
            let _ = told.send(Err("this node's leases lapsed".into()));
            return Some(heard);
        }
        let write = self.numbered(event);
        Some(self.store.write_awaited(write))
    }
}

impl Drop for Tap {
    /// The flow's events have ended (every sender is gone).
    fn drop(&mut self) {
        self.store
            .write(Write::Closed(self.run_id.clone(), self.tap));
    }
}

/// The state of each run with a tap open, on the store's thread.
#[derive(Default)]
pub(crate) struct Folds {
    runs: HashMap<Arc<str>, Folding>,
}

struct Folding {
    /// The tap whose writes are folded (an older one's are not).
    tap: u64,
    row: StoredRun,
    view: FlowView,
    /// The run's elapsed time before this process took it up (a resumed run's).
    elapsed_before: u64,
    /// Its state changed since its row was last written.
    changed: bool,
    closed: bool,
}

impl Folds {
    /// Fold `w` into its run's state, adding the rows it makes to `stmts`. A run's state is
    /// written once per batch, by `snapshots`, however many events changed it.
    pub(crate) fn fold(&mut self, w: Write, stmts: &mut Vec<Stmt>) {
        match w {
            Write::Open { row, tap, user } => {
                if let Some(user) = &user {
                    stmts.push(super::threads::own(&row.id, user));
                }
                let view = FlowView {
                    flow_id: row.id.clone(),
                    task: row.task.clone(),
                    plan: row.plan.clone(),
                    usage: row.usage,
                    ..FlowView::default()
                };
                let folding = Folding {
                    tap,
                    elapsed_before: row.elapsed_ms,
                    row: *row,
                    view,
                    changed: true,
                    closed: false,
                };
                self.runs.insert(folding.row.id.as_str().into(), folding);
            }
            Write::Event {
                run_id,
                tap,
                seq,
                at,
                ran_ms,
                event,
            } => match self.runs.get_mut(&run_id) {
                Some(f) if f.tap == tap => f.fold(seq, at, ran_ms, event, stmts),
                // A flow stopped here whose run was taken up again: its last words are not
                // the run's.
                Some(_) => {}
                None => {
                    tracing::warn!(run = %run_id, "run store: an event of a run it never opened")
                }
            },
            Write::Closed(run_id, tap) => {
                if let Some(f) = self.runs.get_mut(&run_id).filter(|f| f.tap == tap) {
                    f.closed = true;
                }
            }
        }
    }

    /// Whether `tap` is run `id`'s current tap here (its writes are folded).
    pub(crate) fn is_current(&self, id: &str, tap: u64) -> bool {
        self.runs.get(id).is_some_and(|f| f.tap == tap)
    }

    /// Forget run `id`, whose opening was not written.
    pub(crate) fn forget(&mut self, id: &str) {
        self.runs.remove(id);
    }

    /// Whether run `id`'s tap is open here (its events may still come).
    pub(crate) fn is_open(&self, id: &str) -> bool {
        self.runs.contains_key(id)
    }

    /// The rows of the runs whose state changed, as of `now`; runs whose taps closed are
    /// then forgotten.
    pub(crate) fn snapshots(&mut self, now: i64, stmts: &mut Vec<Stmt>) {
        for f in self.runs.values_mut().filter(|f| f.changed) {
            f.changed = false;
            // The state as folded; usage by agent is kept on the row itself.
            let v = &f.view;
            f.row.plan.clone_from(&v.plan);
            f.row.usage = v.usage;
            f.row.status = v.status();
            f.row.outcome.clone_from(&v.outcome);
            stmts.push(f.row.upsert(now));
        }
        self.runs.retain(|_, f| !f.closed);
    }
}

impl Folding {
    fn fold(&mut self, seq: u64, at: i64, ran_ms: u64, event: FlowEvent, stmts: &mut Vec<Stmt>) {
        self.view.apply(&event);
        let id = &self.row.id;
        match event {
            FlowEvent::StepMemory {
                step,
                agent,
                messages,
            } => {
                let attempt = self.view.step_mut(step).map_or(0, |s| s.attempts);
                let memory = StoredMemory {
                    step,
                    attempt,
                    agent,
                    messages,
                };
                stmts.push(sql::upsert_memory(id, &memory));
                return;
            }
            FlowEvent::LlmCalled {
                ref agent, usage, ..
            } => {
                self.row
                    .usage_by_agent
                    .entry(agent.clone())
                    .or_default()
                    .add(usage);
            }
            FlowEvent::FlowFinished { ref outcome } => {
                self.row.usage_by_agent = outcome.usage_by_agent.clone();
            }
            _ => {}
        }
        stmts.push(sql::insert_event(id, seq, at, &event));
        if !matches!(
            event,
            FlowEvent::Thought { .. }
                | FlowEvent::ToolCalled { .. }
                | FlowEvent::ToolFinished { .. }
                | FlowEvent::Question { .. }
                | FlowEvent::ToolProgress { .. }
        ) {
            self.changed = true;
            self.row.elapsed_ms = self.elapsed_before + ran_ms;
        }
    }
}
