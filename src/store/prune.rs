//! Retention: which runs the store may forget (`[store] keep_days`, `keep_runs`) and the
//! statements that forget them, a few at a time. Only runs that have ended are ever
//! pruned: a run whose status is still `running` (it runs, or it was interrupted and can be
//! resumed) is never touched, whatever its age.

use std::collections::BTreeSet;

use super::{Backend, Stmt, Val};

/// How long ended runs are kept; both bounds apply, and `None` means no bound.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    /// Ended runs not updated for this many days are pruned (`[store] keep_days`).
    pub keep_days: Option<u32>,
    /// Only the newest this many ended runs are kept (`[store] keep_runs`).
    pub keep_runs: Option<u64>,
}

impl Retention {
    /// Whether any bound is set (if none, nothing is ever pruned).
    pub fn bounded(&self) -> bool {
        self.keep_days.is_some() || self.keep_runs.is_some()
    }
}

/// At most this many runs are pruned in one transaction, so that the writes queued behind
/// a prune (a submission waiting for its commit) wait a moment, not a minute.
pub const CHUNK: usize = 100;

const DAY_MS: i64 = 86_400_000;

/// Up to `CHUNK` ended runs `retention` lets go as of `now` (ms since the epoch), oldest
/// first, leaving out those `open` says are still being written.
fn candidates(
    db: &mut dyn Backend,
    retention: &Retention,
    now: i64,
    open: impl Fn(&str) -> bool,
) -> Result<Vec<String>, String> {
    let mut ids = BTreeSet::new();
    if let Some(days) = retention.keep_days {
        let before = now.saturating_sub(i64::from(days).saturating_mul(DAY_MS));
        let rows = db.query(
            "SELECT id FROM manus_runs WHERE status <> 'running' AND updated_at < $1
             ORDER BY updated_at, id LIMIT $2",
            &[Val::Int(before), Val::Int(CHUNK as i64)],
        )?;
        ids.extend(rows.into_iter().filter_map(first_text));
    }
    if let Some(keep) = retention.keep_runs {
        // The ended runs after the newest `keep`: the oldest of them first.
        let rows = db.query(
            "SELECT id FROM manus_runs WHERE status <> 'running'
             ORDER BY created_at DESC, id DESC LIMIT $1 OFFSET $2",
            &[
                Val::Int(CHUNK as i64),
                Val::Int(i64::try_from(keep).unwrap_or(i64::MAX)),
            ],
        )?;
        ids.extend(rows.into_iter().filter_map(first_text));
    }
    Ok(ids.into_iter().filter(|id| !open(id)).take(CHUNK).collect())
}

fn first_text(row: Vec<Val>) -> Option<String> {
    row.into_iter().next().and_then(|v| match v {
        Val::Text(s) => Some(s),
        _ => None,
    })
}

/// The statements that forget run `id`: its events, memories, place in its thread and row.
/// An ended run never runs again (only a `running` run is resumed), so a candidate stays
/// one. The later turns of its thread keep their place.
fn forget(id: &str) -> [Stmt; 5] {
    let id = || vec![Val::Text(id.to_string())];
    [
        Stmt {
            sql: "DELETE FROM manus_decisions WHERE run_id = $1",
            params: id(),
        },
        Stmt {
            sql: "DELETE FROM manus_events WHERE run_id = $1",
            params: id(),
        },
        Stmt {
            sql: "DELETE FROM manus_memories WHERE run_id = $1",
            params: id(),
        },
        Stmt {
            sql: "DELETE FROM manus_threads WHERE run_id = $1",
            params: id(),
        },
        Stmt {
            sql: "DELETE FROM manus_runs WHERE id = $1 AND status <> 'running'",
            params: id(),
        },
    ]
}

/// Prune one chunk, in one transaction: the ids of the runs forgotten (a full `CHUNK` means
/// more may be left).
pub fn chunk(
    db: &mut dyn Backend,
    retention: &Retention,
    now: i64,
    open: impl Fn(&str) -> bool,
) -> Result<Vec<String>, String> {
    let ids = candidates(db, retention, now, open)?;
    if ids.is_empty() {
        return Ok(ids);
    }
    let stmts: Vec<Stmt> = ids.iter().flat_map(|id| forget(id)).collect();
    db.transaction(&stmts)?;
    Ok(ids)
}
