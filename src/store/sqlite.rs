//! The SQLite backend (rusqlite, SQLite compiled in): a file next to the workspace by
//! default, in WAL mode so that `manus-rt runs` can read while a flow writes.

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
        let conn = if path == Path::new(":memory:") {
            Connection::open_in_memory()
        } else {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            }
            Connection::open(path)
        }
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        // Survives a killed process (not a power cut) without a sync per transaction.
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA busy_timeout = 10000;",
        )
        .map_err(|e| format!("cannot set up {}: {e}", path.display()))?;
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
