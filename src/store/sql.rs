//! The store's schema and statements, shared by both backends (the SQL is the common
//! subset of SQLite and PostgreSQL: TEXT and BIGINT columns, JSON kept as text, upserts with
//! `ON CONFLICT`), and the mapping of rows onto the store's types.

use manus_actors::llm::Message;
use manus_actors::protocol::{Decision, FlowEvent};
use serde::Serialize;

use super::{Backend, RunStatus, Stmt, StoredEvent, StoredMemory, StoredRun, Val};

pub const SCHEMA: [&str; 6] = [
    "CREATE TABLE IF NOT EXISTS manus_runs (
        id TEXT PRIMARY KEY,
        task TEXT NOT NULL,
        mode TEXT NOT NULL,
        status TEXT NOT NULL,
        plan TEXT,
        usage TEXT NOT NULL,
        usage_by_agent TEXT NOT NULL,
        outcome TEXT,
        owner TEXT,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        elapsed_ms BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS manus_events (
        run_id TEXT NOT NULL,
        seq BIGINT NOT NULL,
        at BIGINT NOT NULL,
        kind TEXT NOT NULL,
        event TEXT NOT NULL,
        PRIMARY KEY (run_id, seq))",
    "CREATE TABLE IF NOT EXISTS manus_memories (
        run_id TEXT NOT NULL,
        step BIGINT NOT NULL,
        attempt BIGINT NOT NULL,
        agent TEXT NOT NULL,
        messages TEXT NOT NULL,
        PRIMARY KEY (run_id, step, attempt))",
    // Decisions on approval requests made outside the run's process (`manus-rt
    // approvals`): the process that runs the run hands them to its flow and marks them
    // applied; a resumed run reads them.
    "CREATE TABLE IF NOT EXISTS manus_decisions (
        run_id TEXT NOT NULL,
        approval_id BIGINT NOT NULL,
        decision TEXT NOT NULL,
        applied BIGINT NOT NULL,
        PRIMARY KEY (run_id, approval_id))",
    // The turns of conversations, and who started each run (`threads.rs`): a run that
    // continues a thread, or that was started for a user, has a row; a run without one is
    // turn 0 of its own thread (whose id is the run's), started for no one in particular.
    "CREATE TABLE IF NOT EXISTS manus_threads (
        run_id TEXT PRIMARY KEY,
        thread_id TEXT NOT NULL,
        turn BIGINT NOT NULL,
        user_name TEXT,
        UNIQUE (thread_id, turn))",
    "CREATE TABLE IF NOT EXISTS manus_owners (
        id TEXT PRIMARY KEY,
        host TEXT NOT NULL,
        pid BIGINT NOT NULL,
        started_at BIGINT NOT NULL,
        heartbeat_at BIGINT NOT NULL)",
];

fn json(v: &impl Serialize) -> Val {
    Val::Text(serde_json::to_string(v).unwrap_or_default())
}

fn json_or_null(v: Option<&impl Serialize>) -> Val {
    v.map_or(Val::Null, json)
}

pub(super) fn text(s: &str) -> Val {
    Val::Text(s.to_string())
}

/// A run's row inserted; `StoredRun::upsert` adds what a conflict updates.
macro_rules! insert_run {
    () => {
        "INSERT INTO manus_runs (id, task, mode, status, plan, usage, usage_by_agent, outcome, owner,
             created_at, updated_at, elapsed_ms)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
    };
}

impl StoredRun {
    /// Insert the run, or bring its row up to date (its task and creation time stay;
    /// `updated_at` becomes `now`).
    pub fn upsert(&self, now: i64) -> Stmt {
        self.row(
            concat!(
                insert_run!(),
                " ON CONFLICT (id) DO UPDATE SET status = excluded.status, plan = excluded.plan,
                      usage = excluded.usage, usage_by_agent = excluded.usage_by_agent,
                      outcome = excluded.outcome, owner = excluded.owner,
                      updated_at = excluded.updated_at, elapsed_ms = excluded.elapsed_ms"
            ),
            now,
        )
    }

    /// Insert a new run: a run with its id already stored is an error, never merged into
    /// (two tasks under one id would leave one of them lost).
    pub fn insert(&self, now: i64) -> Stmt {
        self.row(insert_run!(), now)
    }

    fn row(&self, sql: &'static str, now: i64) -> Stmt {
        Stmt {
            sql,
            params: vec![
                text(&self.id),
                text(&self.task),
                json(&self.mode),
                text(self.status.as_str()),
                json_or_null(self.plan.as_ref()),
                json(&self.usage),
                json(&self.usage_by_agent),
                json_or_null(self.outcome.as_ref()),
                self.owner.as_deref().map_or(Val::Null, text),
                Val::Int(self.created_at),
                Val::Int(now),
                Val::Int(self.elapsed_ms as i64),
            ],
        }
    }
}

/// Event `seq` of a run, stored as JSON with its kind beside it.
pub fn insert_event(run_id: &str, seq: u64, at: i64, event: &FlowEvent) -> Stmt {
    let json = serde_json::to_string(event).unwrap_or_default();
    Stmt {
        sql: "INSERT INTO manus_events (run_id, seq, at, kind, event) VALUES ($1, $2, $3, $4, $5)
              ON CONFLICT (run_id, seq) DO NOTHING",
        params: vec![
            text(run_id),
            Val::Int(seq as i64),
            Val::Int(at),
            text(event_kind(&json)),
            Val::Text(json),
        ],
    }
}

/// An event's kind, read off its JSON without parsing it: serde writes an internally
/// tagged enum's tag (`"event"`) first.
fn event_kind(json: &str) -> &str {
    json.strip_prefix(r#"{"event":""#)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or("")
}

pub fn upsert_memory(run_id: &str, m: &StoredMemory) -> Stmt {
    Stmt {
        sql: "INSERT INTO manus_memories (run_id, step, attempt, agent, messages) VALUES ($1, $2, $3, $4, $5)
              ON CONFLICT (run_id, step, attempt) DO UPDATE SET agent = excluded.agent,
                  messages = excluded.messages",
        params: vec![
            text(run_id),
            Val::Int(m.step as i64),
            Val::Int(m.attempt as i64),
            text(&m.agent),
            json(&m.messages),
        ],
    }
}

/// This process is alive: refresh its heartbeat (registering it the first time).
pub fn heartbeat(owner: &Owner, now: i64) -> Stmt {
    Stmt {
        sql: "INSERT INTO manus_owners (id, host, pid, started_at, heartbeat_at) VALUES ($1, $2, $3, $4, $5)
              ON CONFLICT (id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at",
        params: vec![
            text(&owner.id),
            text(&owner.host),
            Val::Int(owner.pid as i64),
            Val::Int(now),
            Val::Int(now),
        ],
    }
}

/// This process stops: its running flows are interrupted from now on.
pub fn retire(owner: &Owner) -> Stmt {
    Stmt {
        sql: "DELETE FROM manus_owners WHERE id = $1",
        params: vec![text(&owner.id)],
    }
}

const RUN_COLUMNS: &str = "SELECT id, task, mode, status, plan, usage, usage_by_agent, outcome, owner, \
                           created_at, updated_at, elapsed_ms FROM manus_runs";

fn parse<T: serde::de::DeserializeOwned>(v: &Val, what: &str) -> Result<T, String> {
    serde_json::from_str(v.text().unwrap_or("null"))
        .map_err(|e| format!("a stored {what} is unreadable: {e}"))
}

fn run_of(row: &[Val]) -> Result<StoredRun, String> {
    Ok(StoredRun {
        id: row[0].text().unwrap_or_default().to_string(),
        task: row[1].text().unwrap_or_default().to_string(),
        mode: parse(&row[2], "mode")?,
        status: {
            let word = row[3].text().unwrap_or_default();
            RunStatus::parse(word).ok_or_else(|| format!("a stored status `{word}` is unknown"))?
        },
        plan: parse(&row[4], "plan")?,
        usage: parse(&row[5], "usage")?,
        usage_by_agent: parse(&row[6], "usage")?,
        outcome: parse(&row[7], "outcome")?,
        owner: row[8].text().map(str::to_string),
        created_at: row[9].int(),
        updated_at: row[10].int(),
        elapsed_ms: row[11].int().max(0) as u64,
    })
}

/// The newest runs first, at most `limit`.
pub fn list(db: &mut dyn Backend, limit: usize) -> Result<Vec<StoredRun>, String> {
    let sql = format!("{RUN_COLUMNS} ORDER BY created_at DESC, id DESC LIMIT $1");
    Ok(db
        .query(&sql, &[Val::Int(limit as i64)])?
        .iter()
        .filter_map(|r| readable(r[0].text().unwrap_or_default(), "run", run_of(r)))
        .collect())
}

/// `read` of one row of run `id`; one that cannot be read (written by a newer version, or
/// damaged) is reported and skipped, so it never hides the rows around it.
fn readable<T>(id: &str, what: &str, read: Result<T, String>) -> Option<T> {
    read.inspect_err(
        |e| tracing::warn!(run = %id, "run store: skipped a {what} that cannot be read: {e}"),
    )
    .ok()
}

pub fn get(db: &mut dyn Backend, id: &str) -> Result<Option<StoredRun>, String> {
    let sql = format!("{RUN_COLUMNS} WHERE id = $1");
    db.query(&sql, &[text(id)])?
        .first()
        .map(|r| run_of(r))
        .transpose()
}

/// The runs whose rows meet `condition` (SQL over the runs' columns), oldest first; a row
/// that cannot be read is reported and skipped.
pub(super) fn runs_where(
    db: &mut dyn Backend,
    condition: &str,
    params: &[Val],
) -> Result<Vec<StoredRun>, String> {
    let sql = format!("{RUN_COLUMNS} WHERE {condition} ORDER BY created_at, id");
    Ok(db
        .query(&sql, params)?
        .iter()
        .filter_map(|r| readable(r[0].text().unwrap_or_default(), "run", run_of(r)))
        .collect())
}

pub fn events(db: &mut dyn Backend, id: &str) -> Result<Vec<StoredEvent>, String> {
    events_from(db, id, 0)
}

/// A run's events numbered `from` and after, in order.
pub fn events_from(db: &mut dyn Backend, id: &str, from: u64) -> Result<Vec<StoredEvent>, String> {
    Ok(db
        .query(
            "SELECT seq, at, event FROM manus_events WHERE run_id = $1 AND seq >= $2 ORDER BY seq",
            &[text(id), Val::Int(from as i64)],
        )?
        .iter()
        .filter_map(|r| {
            let event = readable(id, "event", parse(&r[2], "event"))?;
            Some(StoredEvent {
                seq: r[0].int() as u64,
                at: r[1].int(),
                event,
            })
        })
        .collect::<Vec<_>>())
}

/// Record a decision on request `approval_id` of run `id`, unless one is recorded: true if
/// this one was. `applied`: it is handed to the run by whoever records it.
pub fn decide(
    db: &mut dyn Backend,
    id: &str,
    approval_id: u64,
    decision: &Decision,
    applied: bool,
) -> Result<bool, String> {
    let added = db.execute(
        "INSERT INTO manus_decisions (run_id, approval_id, decision, applied) VALUES ($1, $2, $3, $4)
         ON CONFLICT (run_id, approval_id) DO NOTHING",
        &[
            text(id),
            Val::Int(approval_id as i64),
            json(decision),
            Val::Int(applied as i64),
        ],
    )?;
    Ok(added == 1)
}

/// The decisions recorded for run `id`, by request; with `take`, marked handed to it.
pub fn decisions(
    db: &mut dyn Backend,
    id: &str,
    take: bool,
) -> Result<Vec<(u64, Decision)>, String> {
    if take {
        db.execute(
            "UPDATE manus_decisions SET applied = 1 WHERE run_id = $1",
            &[text(id)],
        )?;
    }
    db.query(
        "SELECT approval_id, decision FROM manus_decisions WHERE run_id = $1 ORDER BY approval_id",
        &[text(id)],
    )?
    .iter()
    .map(|r| Ok((r[0].int() as u64, parse(&r[1], "decision")?)))
    .collect()
}

/// The decisions not yet handed to the runs `me` runs: (run, request, decision).
pub fn undelivered(db: &mut dyn Backend, me: &str) -> Result<Vec<(String, u64, Decision)>, String> {
    db.query(
        "SELECT d.run_id, d.approval_id, d.decision FROM manus_decisions d
         JOIN manus_runs r ON r.id = d.run_id
         WHERE d.applied = 0 AND r.owner = $1 AND r.status = 'running'",
        &[text(me)],
    )?
    .iter()
    .map(|r| {
        let run = r[0].text().unwrap_or_default().to_string();
        Ok((run, r[1].int() as u64, parse(&r[2], "decision")?))
    })
    .collect()
}

/// Mark the decision on request `approval_id` of run `id` as handed to its flow.
pub fn delivered(db: &mut dyn Backend, id: &str, approval_id: u64) -> Result<(), String> {
    db.execute(
        "UPDATE manus_decisions SET applied = 1 WHERE run_id = $1 AND approval_id = $2",
        &[text(id), Val::Int(approval_id as i64)],
    )?;
    Ok(())
}

/// The sequence number a run's next event gets.
pub fn next_seq(db: &mut dyn Backend, id: &str) -> Result<u64, String> {
    let rows = db.query(
        "SELECT MAX(seq) FROM manus_events WHERE run_id = $1",
        &[text(id)],
    )?;
    Ok(match rows.first().map(|r| &r[0]) {
        Some(Val::Int(n)) => *n as u64 + 1,
        _ => 0,
    })
}

pub fn memories(db: &mut dyn Backend, id: &str) -> Result<Vec<StoredMemory>, String> {
    db.query(
        "SELECT step, attempt, agent, messages FROM manus_memories WHERE run_id = $1 ORDER BY step, attempt",
        &[text(id)],
    )?
    .iter()
    .map(|r| {
        Ok(StoredMemory {
            step: r[0].int() as usize,
            attempt: r[1].int() as u32,
            agent: r[2].text().unwrap_or_default().to_string(),
            messages: parse::<Vec<Message>>(&r[3], "memory")?,
        })
    })
    .collect()
}

/// Make `to` the owner of run `id` if `from` still is (and the run is still running): true
/// if this call took it, so two processes never resume the same run.
pub fn claim(db: &mut dyn Backend, id: &str, from: Option<&str>, to: &str) -> Result<bool, String> {
    let changed = match from {
        Some(from) => db.execute(
            "UPDATE manus_runs SET owner = $1 WHERE id = $2 AND owner = $3 AND status = 'running'",
            &[text(to), text(id), text(from)],
        )?,
        None => db.execute(
            "UPDATE manus_runs SET owner = $1 WHERE id = $2 AND owner IS NULL AND status = 'running'",
            &[text(to), text(id)],
        )?,
    };
    Ok(changed == 1)
}

/// The process that writes to the store: who runs which flow, and whether it still lives.
#[derive(Debug, Clone)]
pub struct Owner {
    pub id: String,
    pub host: String,
    pub pid: u32,
}

/// A heartbeat older than this means its process is gone.
pub const STALE_MS: i64 = 30_000;

impl Owner {
    pub fn this_process() -> Owner {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "localhost".into());
        let pid = std::process::id();
        Owner {
            id: format!("{host}:{pid}:{:x}", super::now_ms()),
            host,
            pid,
        }
    }

    /// Whether the owner `id` (with its `host`, `pid` and last heartbeat) is alive, as far
    /// as this process can tell. On this host a dead or reused pid settles it at once;
    /// elsewhere the heartbeat does.
    fn sees_alive(&self, id: &str, host: &str, pid: i64, heartbeat_at: i64, now: i64) -> bool {
        if id == self.id {
            return true;
        }
        if now - heartbeat_at > STALE_MS {
            return false;
        }
        if host != self.host || !std::path::Path::new("/proc/self").exists() {
            return true;
        }
        pid != self.pid as i64 && process_lives(pid)
    }
}

/// Whether a process of this host exists and is not a zombie.
fn process_lives(pid: i64) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

/// Runs marked running whose owner is gone (or is nobody), oldest first, with that owner.
pub fn interrupted(
    db: &mut dyn Backend,
    me: &Owner,
    now: i64,
) -> Result<Vec<(String, Option<String>)>, String> {
    let owners: Vec<Vec<Val>> =
        db.query("SELECT id, host, pid, heartbeat_at FROM manus_owners", &[])?;
    let alive = |owner: &str| {
        owners.iter().any(|o| {
            o[0].text() == Some(owner)
                && me.sees_alive(
                    owner,
                    o[1].text().unwrap_or(""),
                    o[2].int(),
                    o[3].int(),
                    now,
                )
        })
    };
    Ok(db
        .query(
            "SELECT id, owner FROM manus_runs WHERE status = 'running' ORDER BY created_at, id",
            &[],
        )?
        .into_iter()
        .map(|r| {
            (
                r[0].text().unwrap_or_default().to_string(),
                r[1].text().map(str::to_string),
            )
        })
        .filter(|(_, owner)| !owner.as_deref().is_some_and(alive))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn liveness_uses_pid_on_this_host_and_heartbeats_elsewhere() {
        let me = Owner::this_process();
        let now = 1_000_000;
        assert!(
            me.sees_alive(&me.id, &me.host, me.pid as i64, 0, now),
            "myself"
        );
        // An earlier process of this host with my pid (a restarted container) is gone.
        assert!(!me.sees_alive("old", &me.host, me.pid as i64, now, now));
        // The test's parent process lives; a pid above pid_max never does.
        let parent = std::os::unix::process::parent_id() as i64;
        assert!(me.sees_alive("p", &me.host, parent, now, now));
        assert!(!me.sees_alive("gone", &me.host, i32::MAX as i64, now, now));
        // Another host: alive while it beats.
        assert!(me.sees_alive("far", "elsewhere", 1, now - 1_000, now));
        assert!(!me.sees_alive("far", "elsewhere", 1, now - STALE_MS - 1, now));
    }

    #[test]
    fn an_events_kind_is_read_off_its_json() {
        let event = FlowEvent::FlowStarted {
            flow_id: "r1".into(),
            task: "t".into(),
        };
        let json = serde_json::to_string(&event).unwrap();
        assert_eq!(event_kind(&json), "flow_started");
        assert_eq!(event_kind("{}"), "");
    }
}
