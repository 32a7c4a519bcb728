//! A cluster node: the room it has (one permit per flow it may run at once), the claiming
//! loop that fills it (woken by the store's notifications, and every half lease, which
//! finds runs whose node fell silent), the drain on stop, and a run's stored events
//! followed as they are written, whichever node runs it. Knows nothing of HTTP: whoever
//! starts the node is handed each claimed flow.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::Stream;
use manus_actors::protocol::FlowEvent;
use tokio::sync::{Notify, OwnedSemaphorePermit, RwLock, Semaphore, broadcast};

use crate::runtime::{FlowHandle, Runtime};
use crate::settings::ClusterSettings;
use crate::store::{RunStore, StoreUrl, StoredEvent};

/// How long a follower of a run waits for word of its new events (`LISTEN manus_events`)
/// before it looks in the store anyway.
const FOLLOW_EVERY: Duration = Duration::from_secs(1);

/// The runtime a node claims runs for; `None` once it is shut down.
pub type SharedRuntime = Arc<RwLock<Option<Runtime>>>;

/// What a cluster node keeps: the store, the room it has, its wake-ups.
pub struct Node {
    pub store: RunStore,
    pub settings: ClusterSettings,
    /// One permit per flow this node may run at once.
    room: Arc<Semaphore>,
    wake: Arc<Notify>,
    /// The ids of runs with new events in the store, as the store announces them.
    written: broadcast::Sender<String>,
    stop: Arc<AtomicBool>,
}

impl Node {
    pub fn new(store: RunStore, settings: ClusterSettings) -> Node {
        Node {
            room: Arc::new(Semaphore::new(settings.max_flows)),
            store,
            settings,
            wake: Arc::new(Notify::new()),
            written: broadcast::channel(1024).0,
            stop: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Claim runs while there is room, until stopped: at once when a run is queued, and
    /// every half lease. Each claimed flow is given to `run` with the permit it holds
    /// until it ends.
    pub fn start(
        self: &Arc<Self>,
        url: &StoreUrl,
        runtime: SharedRuntime,
        run: impl Fn(FlowHandle, OwnedSemaphorePermit) + Send + 'static,
    ) {
        if let StoreUrl::Postgres(url) = url
            && let Err(e) = crate::store::cluster::listen(
                url,
                self.wake.clone(),
                self.written.clone(),
                self.stop.clone(),
            )
        {
            tracing::warn!("cannot listen for queued runs ({e}); polling instead");
        }
        let node = self.clone();
        tokio::spawn(async move {
            let poll = node.settings.lease / 2;
            while !node.stop.load(Ordering::Relaxed) {
                let Ok(permit) = node.room.clone().acquire_owned().await else {
                    return;
                };
                let claimed = match runtime.read().await.as_ref() {
                    Some(runtime) if !node.stop.load(Ordering::Relaxed) => {
                        runtime.claim(true).await
                    }
                    _ => return,
                };
                match claimed {
                    Ok(Some(handle)) => run(handle, permit),
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
    pub async fn drain(&self, runtime: &SharedRuntime, grace: Duration) {
        self.stop.store(true, Ordering::Relaxed);
        self.wake.notify_one();
        let all = self.settings.max_flows as u32;
        let finished = tokio::time::timeout(grace, self.room.acquire_many(all)).await;
        if finished.is_err() {
            let left = self.settings.max_flows - self.room.available_permits();
            eprintln!("manus-rt: handing {left} unfinished flow(s) back to the other nodes");
            if let Some(runtime) = runtime.read().await.as_ref()
                && let Err(e) = runtime.hand_back().await
            {
                eprintln!(
                    "manus-rt: cannot hand the flows back ({e}); they are taken over once the lease lapses"
                );
            }
        }
    }

    /// Run `id`'s events from the store after event number `after` (event `n` is the
    /// store's event `n - 1`), following new ones until the flow finishes; at once when it
    /// has ended and none is left after `after` (nor when it is not in the store).
    pub fn follow(
        &self,
        id: String,
        after: u64,
    ) -> impl Stream<Item = (u64, FlowEvent)> + Send + use<> {
        let pending: VecDeque<StoredEvent> = VecDeque::new();
        let (store, heard) = (self.store.clone(), self.written.subscribe());
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
                        return Some((
                            (next, e.event),
                            (store, id, next, pending, finished, heard),
                        ));
                    }
                    match store.events_from(&id, next).await {
                        Ok(events) if !events.is_empty() => pending.extend(events),
                        Ok(_) if ended(&store, &id).await => {
                            // Nothing is left to send once it has ended (its last events
                            // are written with its status, so one more look finds them):
                            // a stream resumed at or past its end ends at once.
                            match store.events_from(&id, next).await {
                                Ok(events) if !events.is_empty() => pending.extend(events),
                                _ => return None,
                            }
                        }
                        Ok(_) => {
                            // Until word that this run has new events, or a second passes.
                            let _ = tokio::time::timeout(FOLLOW_EVERY, async {
                                loop {
                                    match heard.recv().await {
                                        Ok(run) if run == id => return,
                                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
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
}

/// Whether run `id` has ended (or is not in the store, or cannot be read: there is nothing
/// to wait for).
async fn ended(store: &RunStore, id: &str) -> bool {
    match store.get(id).await {
        Ok(Some(run)) => run.status.ended(),
        Ok(None) => true,
        Err(e) => {
            tracing::warn!(run = %id, "cannot read the run: {e}");
            true
        }
    }
}
