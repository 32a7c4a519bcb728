//! A cluster node's guard over the flows it runs: it stops a flow whose run another node
//! took over (the store found its writes fenced off), and every flow at once when the
//! node's leases lapse by its own clock (`store::lease`) — paused, or cut off from the
//! store — so that a node never acts for a run another node may already have taken.
//! Knows nothing of how flows run: it cancels them through their controls.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;

use crate::store::RunStore;
use crate::store::lease::LeaseClock;

use super::{AbortOnDrop, FlowControl};

type Controls = Arc<std::sync::Mutex<HashMap<String, FlowControl>>>;

/// Guard the flows of `controls` until dropped: `lost` names the runs other nodes took.
pub(super) fn guard(
    store: RunStore,
    clock: Arc<LeaseClock>,
    mut lost: UnboundedReceiver<String>,
    controls: Controls,
) -> AbortOnDrop {
    let cancel = move |run: Option<&str>| -> usize {
        let Ok(controls) = controls.lock() else {
            return 0;
        };
        let stopping: Vec<&FlowControl> = controls
            .iter()
            .filter(|(id, c)| run.is_none_or(|r| r == id.as_str()) && c.is_running())
            .map(|(_, c)| c)
            .collect();
        stopping.iter().for_each(|c| c.cancel());
        stopping.len()
    };
    AbortOnDrop(tokio::spawn(async move {
        let mut epoch = clock.epoch();
        loop {
            let deadline = tokio::time::Instant::from_std(clock.deadline());
            tokio::select! {
                Some(run) = lost.recv() => {
                    cancel(Some(&run));
                }
                _ = tokio::time::sleep_until(deadline) => {
                    // Still held, and no lapse seen meanwhile (a renewal after one ends
                    // the epoch too).
                    if clock.holds() && clock.epoch() == epoch {
                        continue;
                    }
                    // First the store (what the flows write from now on is dropped), then
                    // the flows, which also refuse any further tool or model call.
                    store.lapsed();
                    let n = cancel(None);
                    tracing::error!(
                        "this node's leases lapsed: not renewed for {:?} (paused, or cut off from the store); {n} flow(s) stopped here, for other nodes to take over",
                        clock.lease()
                    );
                    while !clock.holds() {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    epoch = clock.epoch();
                    tracing::warn!("this node's leases are renewed again; it takes runs again");
                }
            }
        }
    }))
}
