//! The cluster's SQL (PostgreSQL only): the queue of runs no node has taken, the leases by
//! which a node holds the runs it executes, and their fences. A run is `queued` until a node
//! claims it (`FOR UPDATE SKIP LOCKED`: two nodes never take the same one); the claim writes
//! a lease (`manus_leases`: the node, a fence that grows with every claim, and when the
//! lease lapses) that the node renews with its heartbeat. A run whose lease lapsed is
//! claimed again like a queued one, by any node, with the next fence; every write of a run
//! checks, in its own transaction, that the lease is still the writer's at its fence
//! (`Backend::fenced`), so a node that lost a run never writes to it again.

use super::{Backend, Stmt, Val};

/// Made when a cluster node opens the store.
pub const SCHEMA: [&str; 3] = [
    "CREATE TABLE IF NOT EXISTS manus_leases (
        run_id TEXT PRIMARY KEY,
        node TEXT NOT NULL,
        fence BIGINT NOT NULL,
        expires_at BIGINT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS manus_runs_by_status ON manus_runs (status, created_at)",
    // Answers and cancels sent to a node that does not run the flow: the node that runs it
    // hands them over and marks them applied (approvals go to manus_decisions).
    "CREATE TABLE IF NOT EXISTS manus_commands (
        run_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        id BIGINT NOT NULL,
        payload TEXT NOT NULL,
        applied BIGINT NOT NULL,
        PRIMARY KEY (run_id, kind, id))",
];

/// Something a person asked of a flow through a node that does not run it.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    Answer { question_id: u64, text: String },
    Cancel,
}

impl Command {
    fn key(&self) -> (&'static str, i64, String) {
        match self {
            Command::Answer { question_id, text } => ("answer", *question_id as i64, text.clone()),
            Command::Cancel => ("cancel", 0, String::new()),
        }
    }
}

/// Record `command` for run `id`, unless the same one is recorded: true if this one was.
pub fn send(db: &mut dyn Backend, id: &str, command: &Command) -> Result<bool, String> {
    let (kind, n, payload) = command.key();
    let added = db.execute(
        "INSERT INTO manus_commands (run_id, kind, id, payload, applied) VALUES ($1, $2, $3, $4, 0)
         ON CONFLICT (run_id, kind, id) DO NOTHING",
        &[
            Val::Text(id.into()),
            Val::Text(kind.into()),
            Val::Int(n),
            Val::Text(payload),
        ],
    )?;
    Ok(added == 1)
}

/// The commands not yet handed to the runs `me` runs: (run, command).
pub fn undelivered(db: &mut dyn Backend, me: &str) -> Result<Vec<(String, Command)>, String> {
    let rows = db.query(
        "SELECT c.run_id, c.kind, c.id, c.payload FROM manus_commands c
         JOIN manus_runs r ON r.id = c.run_id
         WHERE c.applied = 0 AND r.owner = $1 AND r.status = 'running'",
        &[Val::Text(me.into())],
    )?;
    Ok(rows
        .iter()
        .filter_map(|r| {
            let run = r[0].text()?.to_string();
            let command = match r[1].text()? {
                "answer" => Command::Answer {
                    question_id: r[2].int() as u64,
                    text: r[3].text().unwrap_or_default().to_string(),
                },
                "cancel" => Command::Cancel,
                _ => return None,
            };
            Some((run, command))
        })
        .collect())
}

/// Mark `command` handed to run `id`'s flow.
pub fn delivered(db: &mut dyn Backend, id: &str, command: &Command) -> Result<(), String> {
    let (kind, n, _) = command.key();
    db.execute(
        "UPDATE manus_commands SET applied = 1 WHERE run_id = $1 AND kind = $2 AND id = $3",
        &[Val::Text(id.into()), Val::Text(kind.into()), Val::Int(n)],
    )?;
    Ok(())
}

/// The channel a queued run is announced on (its id is the payload).
pub const QUEUE_CHANNEL: &str = "manus_queue";
/// The channel a run's new events are announced on (its id is the payload), once committed.
pub const EVENTS_CHANNEL: &str = "manus_events";

/// Announce that run `id` has new events (sent on commit, with them).
pub fn written(id: &str) -> Stmt {
    Stmt {
        sql: "SELECT pg_notify('manus_events', $1)",
        params: vec![Val::Text(id.to_string())],
    }
}

/// Announce a run just queued, to the nodes that listen (sent on commit).
pub fn announce(id: &str) -> Stmt {
    Stmt {
        sql: "SELECT pg_notify('manus_queue', $1)",
        params: vec![Val::Text(id.to_string())],
    }
}

/// Take the oldest run that is queued, or whose lease lapsed before `now`, or that is
/// running with no lease at all and no live process owning it (an orphan: its lease row
/// lost, or left by a process that was not a node), for `node` until `until`: its id and
/// the lease's fence, or nothing when there is none. One statement, so the claim and the
/// lease commit together. (`$4`: `now` less the heartbeat age that means a process is gone.)
pub const CLAIM: &str = "WITH next AS (
        SELECT r.id FROM manus_runs r LEFT JOIN manus_leases l ON l.run_id = r.id
        WHERE r.status = 'queued' OR (r.status = 'running' AND l.expires_at < $2)
            OR (r.status = 'running' AND l.run_id IS NULL AND NOT EXISTS (
                SELECT 1 FROM manus_owners o WHERE o.id = r.owner AND o.heartbeat_at > $4))
        ORDER BY r.created_at LIMIT 1
        FOR UPDATE OF r SKIP LOCKED),
    took AS (
        UPDATE manus_runs SET status = 'running', owner = $1, updated_at = $2
        FROM next WHERE manus_runs.id = next.id RETURNING manus_runs.id)
    INSERT INTO manus_leases (run_id, node, fence, expires_at)
        SELECT id, $1, 1, $3 FROM took
    ON CONFLICT (run_id) DO UPDATE
        SET node = excluded.node, fence = manus_leases.fence + 1, expires_at = excluded.expires_at
    RETURNING run_id, fence";

/// Extend `node`'s lease on run `id` to `until`. A node renews only the runs whose flows
/// it still runs, or whose last writes it has yet to commit: a run it finished, whose end
/// it could not write, lapses and is taken over rather than held forever.
pub fn renew(node: &str, id: &str, until: i64) -> Stmt {
    Stmt {
        sql: "UPDATE manus_leases SET expires_at = $3 WHERE run_id = $2 AND node = $1",
        params: vec![
            Val::Text(node.to_string()),
            Val::Text(id.to_string()),
            Val::Int(until),
        ],
    }
}

/// Let go of run `id` (or of every run `node` holds, with `None`) at once: the lease
/// lapses, and another node takes the run over from its last completed step.
pub fn release(node: &str, id: Option<&str>) -> Stmt {
    match id {
        Some(id) => Stmt {
            sql: "UPDATE manus_leases SET expires_at = 0 WHERE node = $1 AND run_id = $2",
            params: vec![Val::Text(node.to_string()), Val::Text(id.to_string())],
        },
        None => Stmt {
            sql: "UPDATE manus_leases SET expires_at = 0 WHERE node = $1",
            params: vec![Val::Text(node.to_string())],
        },
    }
}

/// The leases of these runs, locked until the transaction ends: (run, node, fence).
pub const LOCK_LEASES: &str =
    "SELECT run_id, node, fence FROM manus_leases WHERE run_id = ANY($1) FOR UPDATE";

/// Wake `wake` whenever a run is queued, and tell `written` the id of each run with new
/// events (`LISTEN` on a connection of its own, on a thread of its own: the client
/// blocks), until `stop` is set; a lost connection is made again after a second.
pub fn listen(
    url: &str,
    wake: std::sync::Arc<tokio::sync::Notify>,
    written: tokio::sync::broadcast::Sender<String>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    use postgres::fallible_iterator::FallibleIterator;
    use std::sync::atomic::Ordering;
    use std::time::Duration;
    let url = url.to_string();
    std::thread::Builder::new()
        .name("run-queue".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let listening =
                    postgres::Client::connect(&url, postgres::NoTls).and_then(|mut c| {
                        c.batch_execute(&format!(
                            "LISTEN {QUEUE_CHANNEL}; LISTEN {EVENTS_CHANNEL}"
                        ))?;
                        Ok(c)
                    });
                let mut client = match listening {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!("cannot listen for queued runs: {e}; trying again");
                        std::thread::sleep(Duration::from_secs(1));
                        continue;
                    }
                };
                // A wake-up at the start: runs may have been queued while not listening.
                wake.notify_one();
                while !stop.load(Ordering::Relaxed) && !client.is_closed() {
                    let mut notes = client.notifications();
                    let mut heard = notes.timeout_iter(Duration::from_millis(500));
                    match heard.next() {
                        Ok(Some(n)) if n.channel() == EVENTS_CHANNEL => {
                            let _ = written.send(n.payload().to_string());
                        }
                        Ok(Some(_)) => wake.notify_one(),
                        Ok(None) => {}
                        Err(e) => {
                            tracing::warn!("lost the queue's notifications: {e}");
                            break;
                        }
                    }
                }
            }
        })
}
