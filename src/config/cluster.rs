//! `[cluster]`: several `manus-rt serve` nodes sharing one PostgreSQL run store, each taking
//! queued flows as it has room, checked. `resolve` fills the node's name from
//! `MANUS_NODE_ID` and checks the store is PostgreSQL (which `MANUS_STORE_URL` may set).

use std::time::Duration;

use crate::settings::ClusterSettings;

use super::error::{Lines, Problem};
use super::file::ClusterToml;
use super::values::{Bounds, Table};

/// A node's lease on its runs, in seconds.
const LEASE: Bounds<i64> = Bounds::new(3, 300, " (seconds)");
/// Flows a node runs at once.
const FLOWS: Bounds<i64> = Bounds::new(1, 100_000, " (flows at once)");

/// The cluster settings, `None` unless `[cluster] enabled = true`; the line of `enabled`,
/// for the store check `resolve` makes. Every key is checked either way.
pub(super) fn build(
    c: &ClusterToml,
    planner_replicas: u32,
    lines: Lines,
) -> Result<Option<(ClusterSettings, Option<usize>)>, Problem> {
    let table = Table::new("[cluster]", lines);
    let defaults = ClusterSettings::default();
    let settings = ClusterSettings {
        node_id: table.text(&c.node_id, "node_id", "the node's name")?,
        lease: table
            .number(&c.lease_secs, "lease_secs", LEASE)?
            .map_or(defaults.lease, |s| Duration::from_secs(s as u64)),
        // By default no more than the flows its planners can take at once.
        max_flows: table
            .number(&c.max_flows, "max_flows", FLOWS)?
            .map_or(defaults.max_flows.min(planner_replicas as usize), |n| {
                n as usize
            }),
        drain: table.seconds(&c.drain_secs, "drain_secs", defaults.drain)?,
    };
    Ok(c.enabled
        .as_ref()
        .filter(|e| *e.get_ref())
        .map(|e| (settings, lines.of(e))))
}
