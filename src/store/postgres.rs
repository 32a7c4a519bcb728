//! The PostgreSQL backend (the synchronous `postgres` client, without TLS: for a server on
//! this machine or a private network). Statements are prepared once per connection; a
//! dropped connection is re-made on the next use.

use std::collections::HashMap;
use std::time::Duration;

use postgres::types::{ToSql, Type};
use postgres::{Client, Config, NoTls, Statement};

use super::{Backend, Stmt, Val};

pub struct Postgres {
    config: Config,
    client: Client,
    /// The write statements, prepared on this connection.
    prepared: HashMap<&'static str, Statement>,
}

impl Postgres {
    pub fn connect(url: &str) -> Result<Postgres, String> {
        let mut config: Config = url.parse().map_err(|e| format!("{e}"))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        // Bounds a server that answers slowly or holds locks (it enforces them itself),
        // and a peer that vanished from the network (TCP gives up on unacknowledged data).
        // A server that is frozen outright still acknowledges at the TCP level and never
        // answers: `RunStore`'s own wait bounds what callers see then.
        if config.get_options().is_none() {
            config.options(
                "-c statement_timeout=30000 -c lock_timeout=10000 -c idle_in_transaction_session_timeout=60000",
            );
        }
        config
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(15))
            .tcp_user_timeout(Duration::from_secs(30));
        let client = config
            .connect(NoTls)
            .map_err(|e| format!("cannot connect: {}", why(e)))?;
        Ok(Postgres {
            config,
            client,
            prepared: HashMap::new(),
        })
    }

    /// The client, connected again if the server dropped the connection.
    fn client(&mut self) -> Result<&mut Client, String> {
        if self.client.is_closed() {
            self.client = self
                .config
                .connect(NoTls)
                .map_err(|e| format!("cannot reconnect: {}", why(e)))?;
            self.prepared.clear();
        }
        Ok(&mut self.client)
    }
}

/// The server's own words for a failure, where it gave some.
fn why(e: postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => e.to_string(),
    }
}

/// The parameters as the client takes them; NULL is a NULL text.
fn bind(params: &[Val]) -> Vec<Box<dyn ToSql + Sync>> {
    params
        .iter()
        .map(|v| -> Box<dyn ToSql + Sync> {
            match v {
                Val::Null => Box::new(None::<String>),
                Val::Int(i) => Box::new(*i),
                Val::Text(s) => Box::new(s.clone()),
            }
        })
        .collect()
}

/// Run `stmts` in `tx`, each prepared once per connection, in order (a statement may use a
/// table the one before created).
fn execute_all<'s>(
    tx: &mut postgres::Transaction<'_>,
    prepared: &mut HashMap<&'static str, Statement>,
    stmts: impl Iterator<Item = &'s Stmt>,
) -> Result<(), String> {
    for s in stmts {
        let st = match prepared.get(s.sql) {
            Some(st) => st.clone(),
            None => {
                let st = tx.prepare(s.sql).map_err(why)?;
                prepared.insert(s.sql, st.clone());
                st
            }
        };
        let params = bind(&s.params);
        tx.execute(&st, &refs(&params)).map_err(why)?;
    }
    Ok(())
}

fn refs(boxed: &[Box<dyn ToSql + Sync>]) -> Vec<&(dyn ToSql + Sync)> {
    boxed.iter().map(|b| b.as_ref()).collect()
}

impl Backend for Postgres {
    fn postgres(&self) -> bool {
        true
    }

    fn transaction(&mut self, stmts: &[Stmt]) -> Result<(), String> {
        self.client()?;
        let mut tx = self.client.transaction().map_err(why)?;
        execute_all(&mut tx, &mut self.prepared, stmts.iter())?;
        tx.commit().map_err(why)
    }

    fn fenced(
        &mut self,
        node: &str,
        fences: &HashMap<String, i64>,
        stmts: &[Stmt],
    ) -> Result<Vec<String>, String> {
        let mine = |s: &Stmt| match s.params.first() {
            Some(Val::Text(run)) => fences.contains_key(run),
            _ => false,
        };
        let runs: Vec<String> = {
            let mut r: Vec<String> = stmts
                .iter()
                .filter(|s| mine(s))
                .filter_map(|s| s.params.first()?.text().map(String::from))
                .collect();
            r.sort();
            r.dedup();
            r
        };
        self.client()?;
        let mut tx = self.client.transaction().map_err(why)?;
        let held: Vec<String> = tx
            .query(super::cluster::LOCK_LEASES, &[&runs])
            .map_err(why)?
            .iter()
            .filter(|row| {
                let (run, holder, fence): (String, String, i64) =
                    (row.get(0), row.get(1), row.get(2));
                holder == node && fences.get(&run) == Some(&fence)
            })
            .map(|row| row.get(0))
            .collect();
        let lost: Vec<String> = runs.into_iter().filter(|r| !held.contains(r)).collect();
        let kept = stmts.iter().filter(|s| match s.params.first() {
            Some(Val::Text(run)) => !lost.contains(run),
            _ => true,
        });
        execute_all(&mut tx, &mut self.prepared, kept)?;
        tx.commit().map_err(why)?;
        Ok(lost)
    }

    fn execute(&mut self, sql: &str, params: &[Val]) -> Result<u64, String> {
        let params = bind(params);
        self.client()?.execute(sql, &refs(&params)).map_err(why)
    }

    fn query(&mut self, sql: &str, params: &[Val]) -> Result<Vec<Vec<Val>>, String> {
        let params = bind(params);
        let rows = self.client()?.query(sql, &refs(&params)).map_err(why)?;
        rows.iter()
            .map(|row| {
                (0..row.len())
                    .map(|i| {
                        let value = if *row.columns()[i].type_() == Type::INT8 {
                            row.try_get::<_, Option<i64>>(i).map(|v| v.map(Val::Int))
                        } else {
                            row.try_get::<_, Option<String>>(i)
                                .map(|v| v.map(Val::Text))
                        };
                        value
                            .map(|v| v.unwrap_or(Val::Null))
                            .map_err(|e| e.to_string())
                    })
                    .collect()
            })
            .collect()
    }
}
