//! The SQLite backend (rusqlite, SQLite compiled in): a file next to the workspace by
//! default, in WAL mode so that `manus-rt runs` can read while a flow writes. WAL's index
//! (`-shm`) is a file every process maps, which is what lets other processes read; truncated
//! under a live process it ends that process with SIGBUS. Keeping the index in heap memory
//! (`locking_mode = EXCLUSIVE`, the `unix-excl` VFS) would lock every other process out
//! of the file, so it stays shared, and README.md says not to touch the file (issue 37).

use std::path::Path;

use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, ToSql, params_from_iter};

use super::{Backend, Stmt, Val};

pub struct Sqlite {
    conn: Connection,
}

impl Sqlite {
    /// Open (creating) the database file and its directory, or a private in-memory one.
    pub fn open(path: &Path) -> Result<Sqlite, String> {
        let mut conn = if path == Path::new(":memory:") {
            Connection::open_in_memory()
        } else {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            }
            Connection::open(path)
        }
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        // The wait for another process's lock comes first, so that switching the file to
        // WAL waits too. WAL with NORMAL sync survives a killed process (not a power cut)
        // without a sync per transaction.
        // Switching a new file to WAL upgrades a lock, which SQLite refuses at once, without
        // the busy wait, when another opener holds one (waiting could deadlock): try again,
        // for as long as the busy wait would have waited.
        let set_up =
            "PRAGMA busy_timeout = 10000; PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;";
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match conn.execute_batch(set_up) {
                Ok(()) => break,
                Err(rusqlite::Error::SqliteFailure(e, _))
                    if e.code == rusqlite::ErrorCode::DatabaseBusy
                        && std::time::Instant::now() < until =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => return Err(format!("cannot set up {}: {e}", path.display())),
            }
        }
        // A transaction takes the write lock when it begins, waiting for it. Begun deferred,
        // one that reads before it writes (the setup reads the schema, then registers this
        // process) is refused at once, SQLITE_BUSY without a wait, when another connection
        // writes meanwhile: `eval --parallel 64` lost runs to "database is locked".
        conn.set_transaction_behavior(rusqlite::TransactionBehavior::Immediate);
        Ok(Sqlite { conn })
    }
}

impl ToSql for Val {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self {
            Val::Null => ToSqlOutput::Borrowed(ValueRef::Null),
            Val::Int(i) => ToSqlOutput::Borrowed(ValueRef::Integer(*i)),
            Val::Text(s) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
        })
    }
}

impl Backend for Sqlite {
    fn transaction(&mut self, stmts: &[Stmt]) -> Result<(), String> {
        let tx = self.conn.transaction().map_err(|e| e.to_string())?;
        for s in stmts {
            tx.prepare_cached(s.sql)
                .and_then(|mut st| st.execute(params_from_iter(&s.params)))
                .map_err(|e| e.to_string())?;
        }
        tx.commit().map_err(|e| e.to_string())
    }

    fn execute(&mut self, sql: &str, params: &[Val]) -> Result<u64, String> {
        self.conn
            .execute(sql, params_from_iter(params))
            .map(|n| n as u64)
            .map_err(|e| e.to_string())
    }

    fn query(&mut self, sql: &str, params: &[Val]) -> Result<Vec<Vec<Val>>, String> {
        let mut st = self.conn.prepare(sql).map_err(|e| e.to_string())?;
        let width = st.column_count();
        let rows = st
            .query_map(params_from_iter(params), |row| {
                (0..width)
                    .map(|i| {
                        Ok(match row.get_ref(i)? {
                            ValueRef::Integer(n) => Val::Int(n),
                            ValueRef::Text(t) => Val::Text(String::from_utf8_lossy(t).into_owned()),
                            _ => Val::Null,
                        })
                    })
                    .collect::<rusqlite::Result<Vec<Val>>>()
            })
            .map_err(|e| e.to_string())?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::super::sql;
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("manus-sqlite-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Many stores opening one new file at once (`eval --parallel 64`): each creates the
    /// tables and registers its process in one transaction, again and again. Begun
    /// deferred, such a transaction reads the schema, then fails to take the write lock
    /// another connection holds, with no wait (SQLITE_BUSY).
    #[test]
    fn many_stores_open_one_new_file_at_once() {
        let dir = scratch("parallel");
        let path = dir.join("runs.db");
        let start = std::sync::Arc::new(std::sync::Barrier::new(48));
        let threads: Vec<_> = (0..48)
            .map(|i| {
                let (path, start) = (path.clone(), start.clone());
                std::thread::spawn(move || -> Result<(), String> {
                    start.wait();
                    let mut db = Sqlite::open(&path)?;
                    let owner = sql::Owner {
                        id: format!("owner-{i}"),
                        host: "here".into(),
                        pid: i,
                    };
                    let mut setup: Vec<Stmt> = sql::SCHEMA
                        .iter()
                        .map(|s| Stmt {
                            sql: s,
                            params: vec![],
                        })
                        .collect();
                    setup.push(sql::heartbeat(&owner, i64::from(i)));
                    for _ in 0..20 {
                        db.transaction(&setup)?;
                    }
                    Ok(())
                })
            })
            .collect();
        let failed: Vec<String> = threads
            .into_iter()
            .filter_map(|t| t.join().unwrap().err())
            .collect();
        assert!(
            failed.is_empty(),
            "{} of 48 failed: {failed:?}",
            failed.len()
        );
        let mut db = Sqlite::open(&path).unwrap();
        let rows = db.query("SELECT count(*) FROM manus_owners", &[]).unwrap();
        assert!(matches!(rows[0][0], Val::Int(48)), "{rows:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
