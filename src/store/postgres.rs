//! The PostgreSQL backend (the synchronous `postgres` client, without TLS: for a server on
//! this machine or a private network). A dropped connection is re-made on the next use.

use std::time::Duration;

use postgres::types::{ToSql, Type};
use postgres::{Client, Config, NoTls};

use super::{Backend, Stmt, Val};

pub struct Postgres {
    config: Config,
    client: Client,
}

impl Postgres {
    pub fn connect(url: &str) -> Result<Postgres, String> {
        let mut config: Config = url.parse().map_err(|e| format!("{e}"))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        let client = config
            .connect(NoTls)
            .map_err(|e| format!("cannot connect: {e}"))?;
        Ok(Postgres { config, client })
    }

    /// The client, connected again if the server dropped the connection.
    fn client(&mut self) -> Result<&mut Client, String> {
        if self.client.is_closed() {
            self.client = self
                .config
                .connect(NoTls)
                .map_err(|e| format!("cannot reconnect: {e}"))?;
        }
        Ok(&mut self.client)
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

fn refs(boxed: &[Box<dyn ToSql + Sync>]) -> Vec<&(dyn ToSql + Sync)> {
    boxed.iter().map(|b| b.as_ref()).collect()
}

impl Backend for Postgres {
    fn transaction(&mut self, stmts: &[Stmt]) -> Result<(), String> {
        let mut tx = self.client()?.transaction().map_err(|e| e.to_string())?;
        for s in stmts {
            let params = bind(&s.params);
            tx.execute(s.sql, &refs(&params))
                .map_err(|e| e.to_string())?;
        }
        tx.commit().map_err(|e| e.to_string())
    }

    fn execute(&mut self, sql: &str, params: &[Val]) -> Result<u64, String> {
        let params = bind(params);
        self.client()?
            .execute(sql, &refs(&params))
            .map_err(|e| e.to_string())
    }

    fn query(&mut self, sql: &str, params: &[Val]) -> Result<Vec<Vec<Val>>, String> {
        let params = bind(params);
        let rows = self
            .client()?
            .query(sql, &refs(&params))
            .map_err(|e| e.to_string())?;
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
