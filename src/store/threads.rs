//! Conversations: a thread is a run and the runs that continued it, its turns. A run that
//! was never continued is turn 0 of a thread of its own, whose id is the run's; a follow-up
//! gets a row in `manus_threads` naming its thread and turn. The row also names the user a
//! run was started for (`SubmitOptions::user`), so a resumed or queued run is still theirs. Turns of a thread run one at a
//! time: a follow-up is refused while the thread's last turn has not ended, and two
//! follow-ups racing for the same turn number cannot both commit (the table's UNIQUE).

use serde::Serialize;

use super::sql::{runs_where, text};
use super::{Backend, RunStatus, Stmt, StoredRun, Val};

/// Where a run stands in its conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TurnOf {
    /// The thread's id: the id of its first run.
    pub thread: String,
    /// The run's turn (the first run is turn 0).
    pub turn: u32,
    /// Who the run was started for, if anyone was named.
    pub user: Option<String>,
}

/// Why a run cannot be continued now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// No such run in the store.
    Unknown,
    /// The thread's last turn, `run`, is still queued or running (or was interrupted and
    /// waits for `resume`).
    Busy { thread: String, run: String },
}

/// Where run `id` stands in its thread (a run with no row is its own thread's turn 0).
pub fn turn_of(db: &mut dyn Backend, id: &str) -> Result<TurnOf, String> {
    let rows = db.query(
        "SELECT thread_id, turn, user_name FROM manus_threads WHERE run_id = $1",
        &[text(id)],
    )?;
    Ok(match rows.first() {
        Some(row) => TurnOf {
            thread: row[0].text().unwrap_or(id).to_string(),
            turn: row[1].int().max(0) as u32,
            user: row[2].text().map(str::to_string),
        },
        None => TurnOf {
            thread: id.to_string(),
            turn: 0,
            user: None,
        },
    })
}

/// The row of run `run`, started for `user` and not continuing any thread (turn 0 of its
/// own); nothing if it has one (a follow-up's, written when it was linked).
pub fn own(run: &str, user: &str) -> Stmt {
    Stmt {
        sql: "INSERT INTO manus_threads (run_id, thread_id, turn, user_name) VALUES ($1, $1, 0, $2)
              ON CONFLICT (run_id) DO NOTHING",
        params: vec![text(run), text(user)],
    }
}

/// The runs of thread `thread`, turn by turn.
pub fn turns(db: &mut dyn Backend, thread: &str) -> Result<Vec<(u32, StoredRun)>, String> {
    let numbers: std::collections::HashMap<String, u32> = db
        .query(
            "SELECT run_id, turn FROM manus_threads WHERE thread_id = $1",
            &[text(thread)],
        )?
        .iter()
        .map(|r| {
            let run = r[0].text().unwrap_or_default().to_string();
            (run, r[1].int().max(0) as u32)
        })
        .collect();
    let runs = runs_where(
        db,
        "id = $1 OR id IN (SELECT run_id FROM manus_threads WHERE thread_id = $1)",
        &[text(thread)],
    )?;
    let mut turns: Vec<(u32, StoredRun)> = runs
        .into_iter()
        .map(|run| (numbers.get(&run.id).copied().unwrap_or(0), run))
        .collect();
    turns.sort_by_key(|(turn, _)| *turn);
    Ok(turns)
}

/// The next turn of the thread run `continues` belongs to, if its last turn has ended:
/// the place, and the statement that takes it for run `run`, started for `user` (run it in
/// the transaction that stores the run, or before the run starts).
pub fn next_turn(
    db: &mut dyn Backend,
    run: &str,
    continues: &str,
    user: Option<&str>,
) -> Result<Result<(TurnOf, Stmt), Refused>, String> {
    if super::sql::get(db, continues)?.is_none() {
        return Ok(Err(Refused::Unknown));
    }
    let TurnOf { thread, .. } = turn_of(db, continues)?;
    let turns = turns(db, &thread)?;
    if let Some((_, last)) = turns.last()
        && matches!(last.status, RunStatus::Running | RunStatus::Queued)
    {
        return Ok(Err(Refused::Busy {
            thread,
            run: last.id.clone(),
        }));
    }
    // Past every number taken, also by a link whose run never started (its flow failed to
    // start after the link was made), so such a gap never blocks the thread.
    let taken = db.query(
        "SELECT MAX(turn) FROM manus_threads WHERE thread_id = $1",
        &[text(&thread)],
    )?;
    let highest = match taken.first().map(|r| &r[0]) {
        Some(Val::Int(n)) => (*n).max(0) as u32,
        _ => 0,
    };
    let turn = turns.last().map_or(0, |(n, _)| *n).max(highest) + 1;
    let link = Stmt {
        sql: "INSERT INTO manus_threads (run_id, thread_id, turn, user_name) VALUES ($1, $2, $3, $4)",
        params: vec![
            text(run),
            text(&thread),
            Val::Int(i64::from(turn)),
            user.map_or(Val::Null, text),
        ],
    };
    let user = user.map(str::to_string);
    Ok(Ok((TurnOf { thread, turn, user }, link)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{RunStore, StoreUrl};

    fn run(id: &str, status: RunStatus) -> StoredRun {
        StoredRun {
            id: id.into(),
            task: format!("task {id}"),
            mode: manus_actors::protocol::FlowMode::Plan,
            status,
            plan: None,
            usage: Default::default(),
            usage_by_agent: Default::default(),
            outcome: None,
            owner: None,
            created_at: 0,
            updated_at: 0,
            elapsed_ms: 0,
        }
    }

    /// Turns are numbered on from the thread's last one, from any turn's id; a thread whose
    /// last turn runs takes none; a link whose run never started leaves a gap, not a block.
    #[tokio::test]
    async fn turns_are_taken_in_order_one_at_a_time() {
        let store = RunStore::open(&StoreUrl::Sqlite(":memory:".into()))
            .await
            .unwrap();
        let places = store
            .read(|db, _| {
                let put = |db: &mut dyn Backend, r: StoredRun| db.transaction(&[r.insert(0)]);
                put(db, run("a", RunStatus::Completed))?;
                let unknown = next_turn(db, "x", "nope", None)?.err();
                // b follows a, for bob.
                let (b, link) =
                    next_turn(db, "b", "a", Some("bob"))?.map_err(|e| format!("{e:?}"))?;
                db.transaction(&[link])?;
                put(db, run("b", RunStatus::Running))?;
                // While b runs, nothing follows it, asked through either turn.
                let busy = next_turn(db, "c", "a", None)?.err();
                db.transaction(&[Stmt {
                    sql: "UPDATE manus_runs SET status = 'completed' WHERE id = $1",
                    params: vec![text("b")],
                }])?;
                // A link made for a run that never started...
                let (_, dangling) =
                    next_turn(db, "lost", "b", None)?.map_err(|e| format!("{e:?}"))?;
                db.transaction(&[dangling])?;
                // ...is stepped over.
                let (d, link) = next_turn(db, "d", "b", None)?.map_err(|e| format!("{e:?}"))?;
                db.transaction(&[link])?;
                put(db, run("d", RunStatus::Completed))?;
                let numbered: Vec<(u32, String)> = turns(db, "a")?
                    .into_iter()
                    .map(|(n, r)| (n, r.id))
                    .collect();
                let of = (turn_of(db, "b")?, turn_of(db, "a")?);
                Ok((unknown, busy, b, d, numbered, of))
            })
            .await
            .unwrap();
        let (unknown, busy, b, d, numbered, (of_b, of_a)) = places;
        assert_eq!(unknown, Some(Refused::Unknown));
        let busy_with_b = Refused::Busy {
            thread: "a".into(),
            run: "b".into(),
        };
        assert_eq!(busy, Some(busy_with_b));
        assert_eq!(
            (b.thread.as_str(), b.turn, b.user.as_deref()),
            ("a", 1, Some("bob"))
        );
        assert_eq!((d.thread.as_str(), d.turn), ("a", 3));
        assert_eq!(
            numbered,
            [
                (0, "a".to_string()),
                (1, "b".to_string()),
                (3, "d".to_string())
            ]
        );
        assert_eq!(of_b, b);
        assert_eq!((of_a.thread.as_str(), of_a.turn, of_a.user), ("a", 0, None));
        store.close().await;
    }
}
