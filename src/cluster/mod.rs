//! Cluster mode (`[cluster]`): the `manus-rt serve` nodes of one PostgreSQL run store share
//! the flows. Any node queues a submitted flow in the store (durable before it answers);
//! each node claims queued runs while it has room (`max_flows`), and runs whose node fell
//! silent past its lease, which it resumes from their last completed step; a node that was
//! silent too long finds its runs fenced off and stops them without writing.
//!
//! This module owns the node: `node.rs` the claiming loop, the drain on stop and the
//! following of a run's stored events; `queue.rs` the runtime's queue verbs (enqueue,
//! claim, hand back). The settings are a leaf (`crate::settings`), the SQL is the store's
//! (`store/cluster.rs`), and the service only starts the node. It knows nothing of HTTP.

mod node;
mod queue;

pub use crate::settings::ClusterSettings;
pub use node::{Node, SharedRuntime};
