//! Decisions (and, on a cluster, answers and cancels) recorded in the run store from
//! outside a flow's process, handed to the flows this runtime runs.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use manus_actors::protocol::{EventObserver, FlowEvent};

use crate::store::RunStore;

use super::{AbortOnDrop, FlowControl};

/// How often decisions recorded in the store are looked for.
const DECISIONS_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Every `DECISIONS_EVERY`, hand the decisions recorded for this process's runs to their
/// flows, forgetting flows that have ended. With `waiting`, only while a flow here waits
/// for a decision (a decision for any other is handed to no one); without it (a cluster
/// node, where answers and cancels come this way too), always.
pub(super) fn hand_over_decisions(
    store: RunStore,
    controls: Arc<std::sync::Mutex<HashMap<String, FlowControl>>>,
    waiting: Option<Arc<Waiting>>,
) -> AbortOnDrop {
    use crate::store::cluster::Command;
    let cluster = waiting.is_none();
    AbortOnDrop(tokio::spawn(async move {
        let mut every = tokio::time::interval(DECISIONS_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if let Some(waiting) = &waiting
                && waiting.open.load(Ordering::Acquire) == 0
            {
                while waiting.open.load(Ordering::Acquire) == 0 {
                    waiting.opened.notified().await;
                }
                // The first look a period after the request, as when looking all along.
                every.reset();
            }
            every.tick().await;
            // Cluster: the answers and cancels sent through other nodes.
            let commands = match cluster {
                true => store.undelivered_commands().await,
                false => Ok(vec![]),
            };
            match commands {
                Ok(found) => {
                    let handed = hand_to_flows(&controls, found, |c, command| match command {
                        Command::Answer { question_id, text } => {
                            c.answer(*question_id, text.clone())
                        }
                        Command::Cancel => c.cancel(),
                    });
                    for (run, command) in handed {
                        if let Err(e) = store.command_delivered(&run, command).await {
                            tracing::warn!(run = %run, "cannot mark a command handed: {e}");
                        }
                    }
                }
                Err(e) => tracing::warn!("cannot read the commands recorded in the store: {e}"),
            }
            match store.undelivered().await {
                Ok(found) => {
                    let found = found
                        .into_iter()
                        .map(|(run, id, d)| (run, (id, d)))
                        .collect();
                    let handed = hand_to_flows(&controls, found, |c, (id, decision)| {
                        c.hand(*id, decision.clone())
                    });
                    for (run, (id, _)) in handed {
                        if let Err(e) = store.delivered(&run, id).await {
                            tracing::warn!(run = %run, "cannot mark decision {id} handed: {e}");
                        }
                    }
                }
                Err(e) => tracing::warn!("cannot read the decisions recorded in the store: {e}"),
            }
        }
    }))
}

/// How many approval requests are open in a runtime's flows, and a wake-up for the
/// decisions poller when the first one opens.
#[derive(Default)]
pub(super) struct Waiting {
    open: AtomicUsize,
    opened: tokio::sync::Notify,
}

impl Waiting {
    fn add_one(&self) {
        if self.open.fetch_add(1, Ordering::AcqRel) == 0 {
            // Kept as a permit if the poller is not waiting yet.
            self.opened.notify_one();
        }
    }

    fn sub(&self, n: usize) {
        self.open.fetch_sub(n, Ordering::AcqRel);
    }
}

/// In front of a flow's store tap: counts its open approval requests into `Waiting`, and
/// takes back those still open when the flow's events end.
pub(super) struct Awaits {
    tap: Box<dyn EventObserver>,
    open: std::collections::HashSet<u64>,
    waiting: Arc<Waiting>,
}

impl Awaits {
    /// `tap`, with the requests it sees counted into `waiting`.
    pub(super) fn new(tap: Box<dyn EventObserver>, waiting: Arc<Waiting>) -> Awaits {
        Awaits {
            tap,
            open: Default::default(),
            waiting,
        }
    }
}

impl EventObserver for Awaits {
    fn observe(&mut self, event: &FlowEvent) {
        self.tap.observe(event);
        self.count(event);
    }

    fn observe_durably(&mut self, event: &FlowEvent) -> Option<manus_actors::protocol::Durable> {
        let durable = self.tap.observe_durably(event);
        self.count(event);
        durable
    }
}

impl Awaits {
    fn count(&mut self, event: &FlowEvent) {
        match event {
            FlowEvent::ApprovalRequested { id, .. } if self.open.insert(*id) => {
                self.waiting.add_one()
            }
            FlowEvent::ApprovalDecided { id, .. } if self.open.remove(id) => self.waiting.sub(1),
            _ => {}
        }
    }
}

impl Drop for Awaits {
    fn drop(&mut self) {
        self.waiting.sub(self.open.len());
    }
}

/// Give each of `found` (a run, and what was asked of it) to its flow with `give`, if the
/// flow runs here; what was given. One whose flow is not (yet) here waits for the next
/// look: a resume may be starting it.
fn hand_to_flows<T>(
    controls: &std::sync::Mutex<HashMap<String, FlowControl>>,
    found: Vec<(String, T)>,
    give: impl Fn(&FlowControl, &T),
) -> Vec<(String, T)> {
    let Ok(mut controls) = controls.lock() else {
        return vec![];
    };
    controls.retain(|_, c| c.is_running());
    found
        .into_iter()
        .filter(|(run, asked)| controls.get(run).map(|c| give(c, asked)).is_some())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Nowhere;

    impl EventObserver for Nowhere {
        fn observe(&mut self, _: &FlowEvent) {}
    }

    fn requested(id: u64) -> FlowEvent {
        FlowEvent::ApprovalRequested {
            id,
            step: Some(0),
            agent: "manus".into(),
            tool: "bash".into(),
            arguments: "{}".into(),
            why: "a rule".into(),
            call_id: format!("call_{id}"),
            round: 1,
        }
    }

    fn decided(id: u64) -> FlowEvent {
        FlowEvent::ApprovalDecided {
            id,
            step: Some(0),
            decision: manus_actors::protocol::Decision::now(true, None, None, "test"),
        }
    }

    /// The poller's gate: a request opens once however often it is published (a resumed
    /// flow publishes it again), closes when decided, and what a flow leaves open closes
    /// when its events end.
    #[tokio::test]
    async fn open_requests_are_counted_and_wake_the_poller_once() {
        let waiting = Arc::new(Waiting::default());
        let mut a = Awaits {
            tap: Box::new(Nowhere),
            open: Default::default(),
            waiting: waiting.clone(),
        };
        let mut b = Awaits {
            tap: Box::new(Nowhere),
            open: Default::default(),
            waiting: waiting.clone(),
        };
        a.observe(&requested(1));
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting.opened.notified())
            .await
            .expect("the first request wakes the poller");
        for event in [requested(1), requested(2), decided(7)] {
            a.observe(&event);
        }
        b.observe(&requested(1));
        assert_eq!(waiting.open.load(Ordering::Acquire), 3);
        a.observe(&decided(1));
        a.observe(&decided(1));
        assert_eq!(waiting.open.load(Ordering::Acquire), 2);
        drop(b);
        assert_eq!(waiting.open.load(Ordering::Acquire), 1);
        a.observe(&decided(2));
        drop(a);
        assert_eq!(waiting.open.load(Ordering::Acquire), 0);
    }
}
