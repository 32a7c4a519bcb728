//! The run store: every flow's task, plan (step statuses, notes, attempts, tokens), events,
//! agent memories and usage, written as they happen, so that `manus-rt runs` can read them
//! and an interrupted flow can be resumed (`Runtime::resume`).
//!
//! One `Backend` trait runs the SQL of `sql.rs` on SQLite (`sqlite.rs`, the embedded
//! default) or PostgreSQL (`postgres.rs`, for shared deployments). `RunStore` owns the
//! backend on a thread of its own (`writer.rs`): flows hand it writes without waiting, it
//! batches them into one transaction, and a failed write is logged, never felt by a flow.
//! `tap.rs` sits between a flow's planner and its `FlowHandle` and turns events into writes.
//! `prune.rs` forgets ended runs past the retention (`[store] keep_days`, `keep_runs`).
//! `memory.rs` keeps the notes of `[memory]`, which outlive runs.

pub(crate) mod cluster;
pub mod lease;
pub mod memory;
mod postgres;
mod prune;
mod sql;
mod sqlite;
pub(crate) mod tap;
mod threads;
mod writer;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use manus_actors::llm::{Message, Usage};
use manus_actors::plan::Plan;
use manus_actors::protocol::{FlowEvent, FlowMode, FlowOutcome};
use serde::Serialize;

pub use crate::view::RunStatus;

pub use prune::Retention;
pub use threads::{Refused, TurnOf};
pub use writer::RunStore;

/// Where runs are stored: `[store] url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// A database file (created if missing), or `:memory:` for one that lives with the process.
    Sqlite(PathBuf),
    /// A `postgres://` connection string (no TLS: a local or private network).
    Postgres(String),
}

impl StoreUrl {
    /// `sqlite://runs.db` (relative to the working directory), `sqlite:///abs/runs.db`,
    /// `sqlite::memory:`, or `postgres://user:password@host:port/database`.
    pub fn parse(url: &str) -> Result<StoreUrl, String> {
        let url = url.trim();
        if url == "sqlite::memory:" {
            return Ok(StoreUrl::Sqlite(PathBuf::from(":memory:")));
        }
        if let Some(path) = url.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err("sqlite:// needs a file, e.g. sqlite://runs.db".into());
            }
            return Ok(StoreUrl::Sqlite(PathBuf::from(path)));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return url
                .parse::<::postgres::Config>()
                .map(|_| StoreUrl::Postgres(url.to_string()))
                .map_err(|e| format!("not a usable PostgreSQL URL: {e}"));
        }
        Err("use sqlite://FILE (e.g. sqlite://runs.db) or postgres://USER:PASSWORD@HOST:PORT/DATABASE".into())
    }

    /// The URL for messages, without a password.
    pub fn describe(&self) -> String {
        match self {
            StoreUrl::Sqlite(path) => format!("sqlite://{}", path.display()),
            StoreUrl::Postgres(url) => match url.parse::<::postgres::Config>() {
                Ok(c) => format!(
                    "postgres://{}@{}/{}",
                    c.get_user().unwrap_or(""),
                    c.get_hosts()
                        .iter()
                        .map(|h| match h {
                            ::postgres::config::Host::Tcp(h) => h.clone(),
                            ::postgres::config::Host::Unix(p) => p.display().to_string(),
                        })
                        .collect::<Vec<_>>()
                        .join(","),
                    c.get_dbname().unwrap_or("")
                ),
                Err(_) => "postgres://…".into(),
            },
        }
    }
}

/// A store problem, said plainly.
#[derive(Debug, Clone, thiserror::Error)]
#[error("run store {url}: {message}")]
pub struct StoreError {
    pub url: String,
    pub message: String,
}

/// A value crossing into or out of SQL: the two column types the schema uses, or NULL.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    /// NULL, in a text column.
    Null,
    Int(i64),
    Text(String),
}

impl Val {
    fn text(&self) -> Option<&str> {
        match self {
            Val::Text(s) => Some(s),
            _ => None,
        }
    }

    fn int(&self) -> i64 {
        match self {
            Val::Int(i) => *i,
            _ => 0,
        }
    }
}

/// One statement with its parameters (`$1`, `$2`, … numbered in order of first use, which
/// both SQLite and PostgreSQL read the same way).
pub struct Stmt {
    pub sql: &'static str,
    pub params: Vec<Val>,
}

/// A database the store can run on.
pub trait Backend: Send {
    /// Run the statements in one transaction: all or none.
    fn transaction(&mut self, stmts: &[Stmt]) -> Result<(), String>;
    /// Run one statement; how many rows it changed.
    fn execute(&mut self, sql: &str, params: &[Val]) -> Result<u64, String>;
    /// The rows of a query, each column an integer, a text or NULL.
    fn query(&mut self, sql: &str, params: &[Val]) -> Result<Vec<Vec<Val>>, String>;
    /// Whether this is PostgreSQL, for the SQL the backends write differently (`memory.rs`).
    fn postgres(&self) -> bool {
        false
    }
    /// As `transaction`, for a cluster node (`cluster.rs`): `fences` are the runs `node`
    /// holds, with the fence of its claim. Their leases are locked first; the statements of
    /// a run whose lease is now another's, or at another fence, are left out, and such runs
    /// returned. Every write statement's first parameter is its run's id.
    fn fenced(
        &mut self,
        node: &str,
        fences: &std::collections::HashMap<String, i64>,
        stmts: &[Stmt],
    ) -> Result<Vec<String>, String> {
        let _ = (node, fences);
        self.transaction(stmts).map(|()| vec![])
    }
}

/// A backend that counts the statements it sends the database (a transaction's own
/// BEGIN and COMMIT, and a fenced one's lease lock, included): what `RunStore::statements`
/// reports.
struct Counted {
    inner: Box<dyn Backend>,
    sent: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Counted {
    fn add(&self, n: usize) {
        self.sent
            .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Backend for Counted {
    fn transaction(&mut self, stmts: &[Stmt]) -> Result<(), String> {
        self.add(stmts.len() + 2);
        self.inner.transaction(stmts)
    }
    fn execute(&mut self, sql: &str, params: &[Val]) -> Result<u64, String> {
        self.add(1);
        self.inner.execute(sql, params)
    }
    fn query(&mut self, sql: &str, params: &[Val]) -> Result<Vec<Vec<Val>>, String> {
        self.add(1);
        self.inner.query(sql, params)
    }
    fn postgres(&self) -> bool {
        self.inner.postgres()
    }
    fn fenced(
        &mut self,
        node: &str,
        fences: &std::collections::HashMap<String, i64>,
        stmts: &[Stmt],
    ) -> Result<Vec<String>, String> {
        self.add(stmts.len() + 3);
        self.inner.fenced(node, fences, stmts)
    }
}

/// Open the backend a URL names (on the store's own thread: the PostgreSQL client runs a
/// runtime of its own and must not be called from async code).
fn connect(url: &StoreUrl) -> Result<Box<dyn Backend>, String> {
    match url {
        StoreUrl::Sqlite(path) => Ok(Box::new(sqlite::Sqlite::open(path)?)),
        StoreUrl::Postgres(url) => Ok(Box::new(postgres::Postgres::connect(url)?)),
    }
}

/// A run's state: as the tap folds it from the events and writes it, and as `runs show`
/// and `resume` read it.
#[derive(Debug, Clone, Serialize)]
pub struct StoredRun {
    pub id: String,
    pub task: String,
    pub mode: FlowMode,
    /// `running` (or interrupted, if its owner is gone), else how the flow ended.
    pub status: RunStatus,
    /// `None` while (or if interrupted while) planning.
    pub plan: Option<Plan>,
    pub usage: Usage,
    pub usage_by_agent: BTreeMap<String, Usage>,
    pub outcome: Option<FlowOutcome>,
    /// The runtime that runs (or ran) it.
    pub owner: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub created_at: i64,
    pub updated_at: i64,
    /// Time the flow has run, across resumptions.
    pub elapsed_ms: u64,
}

impl StoredRun {
    /// Steps completed and steps planned.
    pub fn progress(&self) -> (usize, usize) {
        self.plan.as_ref().map_or((0, 0), |p| {
            (
                p.count(manus_actors::plan::StepStatus::Completed),
                p.live().count(),
            )
        })
    }
}

/// One stored event.
#[derive(Debug, Clone, Serialize)]
pub struct StoredEvent {
    pub seq: u64,
    /// Milliseconds since the Unix epoch.
    pub at: i64,
    pub event: FlowEvent,
}

/// An agent's working memory at the end of one attempt at a step.
#[derive(Debug, Clone, Serialize)]
pub struct StoredMemory {
    pub step: usize,
    pub attempt: u32,
    pub agent: String,
    pub messages: Vec<Message>,
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_or_say_what_is_expected() {
        assert_eq!(
            StoreUrl::parse("sqlite://runs.db"),
            Ok(StoreUrl::Sqlite("runs.db".into()))
        );
        assert_eq!(
            StoreUrl::parse("sqlite:///var/lib/manus/runs.db"),
            Ok(StoreUrl::Sqlite("/var/lib/manus/runs.db".into()))
        );
        assert_eq!(
            StoreUrl::parse("sqlite::memory:"),
            Ok(StoreUrl::Sqlite(":memory:".into()))
        );
        let pg = StoreUrl::parse("postgres://manus:secret@127.0.0.1:5433/runs").unwrap();
        assert_eq!(pg.describe(), "postgres://manus@127.0.0.1/runs");
        assert!(
            StoreUrl::parse("sqlite://")
                .unwrap_err()
                .contains("needs a file")
        );
        assert!(
            StoreUrl::parse("mysql://x/y")
                .unwrap_err()
                .contains("sqlite://")
        );
        assert!(StoreUrl::parse("postgres://a:b@h:notaport/d").is_err());
    }
}
