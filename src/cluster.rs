//! Cluster mode (`[cluster]`): the `manus-rt serve` nodes of one PostgreSQL run store share
//! the flows. Any node queues a submitted flow in the store (durable before it answers);
//! each node claims queued runs while it has room (`max_flows`), and runs whose node fell
//! silent past its lease, which it resumes from their last completed step; a node that was
//! silent too long finds its runs fenced off and stops them without writing. The store
//! holds the queue, the leases and the fences (`store/cluster.rs`); this module holds the
//! settings and the claiming loop. It knows nothing of HTTP.

use std::time::Duration;

/// `[cluster]` as configured.
#[derive(Debug, Clone)]
pub struct ClusterSettings {
    /// The node's name (`node_id`, `MANUS_NODE_ID`); by default its host's name. The store
    /// adds the process id and start time, so a restarted node never renews an old lease.
    pub node_id: Option<String>,
    /// How long a node's runs stay its own without a renewal (its heartbeat renews them
    /// three times per lease).
    pub lease: Duration,
    /// Flows this node runs at once; it claims no more (by default 8, or fewer if its
    /// `[flow] planner_replicas` are fewer).
    pub max_flows: usize,
    /// On `SIGTERM`, how long the node's flows get to finish before it hands the rest to
    /// the other nodes.
    pub drain: Duration,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        ClusterSettings {
            node_id: None,
            lease: Duration::from_secs(10),
            max_flows: 8,
            drain: Duration::from_secs(30),
        }
    }
}
