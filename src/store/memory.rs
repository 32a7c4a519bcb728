//! Memory across runs (`[memory]`): notes kept in the run store, in namespaces (a thread's,
//! a user's, the global one), found again by full-text search, ranked. The table is
//! `manus_memory`; SQLite searches it through an FTS5 table beside it (FTS5 is compiled into
//! the bundled SQLite), PostgreSQL through a generated `tsvector` column with a GIN index.
//! Notes outlive runs: retention (`prune.rs`) never touches them; `manus-rt memory forget`
//! does. `StoreBook` is the engine's `MemoryBook` over this store, bound to one flow.

use manus_actors::tools::memory::{BookFuture, MAX_RESULTS, MemoryBook, Note, Provenance};
use serde::Serialize;

use super::{Backend, RunStore, Stmt, StoreError, Val, now_ms};

/// A namespace kind, as `[memory] save_to` and `search` name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// The flow's thread: follow-up turns of one conversation.
    Thread,
    /// Whoever started the flow: a service token, or the local user of the CLI.
    User,
    /// Every flow of every user.
    Global,
}

impl Scope {
    pub const NAMES: [&str; 3] = ["thread", "user", "global"];

    pub fn parse(name: &str) -> Option<Scope> {
        match name {
            "thread" => Some(Scope::Thread),
            "user" => Some(Scope::User),
            "global" => Some(Scope::Global),
            _ => None,
        }
    }
}

/// `[memory]`, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct MemorySettings {
    /// Where `memory_save` puts a note.
    pub save_to: Scope,
    /// Which namespaces `memory_search` reads, in this order of preference on equal rank.
    pub search: Vec<Scope>,
    /// Notes a search returns when the model does not say.
    pub max_results: usize,
    /// At the end of each run, ask the model what of it is worth keeping, and keep that.
    pub distill: bool,
}

impl Default for MemorySettings {
    fn default() -> Self {
        MemorySettings {
            save_to: Scope::User,
            search: vec![Scope::Thread, Scope::User, Scope::Global],
            max_results: 5,
            distill: false,
        }
    }
}

/// Who a flow is for: the keys its namespaces are made of.
#[derive(Debug, Clone)]
pub struct Owners {
    pub thread: String,
    pub user: String,
}

impl Owners {
    /// The namespace `scope` names for these owners: `thread:ID`, `user:NAME`, `global`.
    pub fn namespace(&self, scope: Scope) -> String {
        match scope {
            Scope::Thread => format!("thread:{}", self.thread),
            Scope::User => format!("user:{}", self.user),
            Scope::Global => "global".into(),
        }
    }
}

/// The tables, per backend. `embedding` stays NULL: the place for a vector search later.
pub(super) fn schema(postgres: bool) -> &'static [&'static str] {
    if postgres {
        &[
            "CREATE TABLE IF NOT EXISTS manus_memory (
                id TEXT PRIMARY KEY,
                namespace TEXT NOT NULL,
                text TEXT NOT NULL,
                run_id TEXT NOT NULL,
                step BIGINT,
                agent TEXT NOT NULL,
                created_at BIGINT NOT NULL,
                embedding TEXT,
                tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED)",
            "CREATE INDEX IF NOT EXISTS manus_memory_tsv ON manus_memory USING GIN (tsv)",
            "CREATE INDEX IF NOT EXISTS manus_memory_ns ON manus_memory (namespace, created_at)",
        ]
    } else {
        &[
            "CREATE TABLE IF NOT EXISTS manus_memory (
                id TEXT PRIMARY KEY,
                namespace TEXT NOT NULL,
                text TEXT NOT NULL,
                run_id TEXT NOT NULL,
                step BIGINT,
                agent TEXT NOT NULL,
                created_at BIGINT NOT NULL,
                embedding TEXT)",
            "CREATE INDEX IF NOT EXISTS manus_memory_ns ON manus_memory (namespace, created_at)",
            // The words of each note, for MATCH and bm25(); kept in step by `save`/`forget`.
            "CREATE VIRTUAL TABLE IF NOT EXISTS manus_memory_fts USING fts5(
                text, id UNINDEXED, tokenize = 'porter unicode61')",
        ]
    }
}

const COLUMNS: &str = "m.id, m.namespace, m.text, m.run_id, m.step, m.agent, m.created_at";

/// The words of a query, each kept to letters and digits: what both backends search for,
/// any of them matching, the notes with more (and rarer) ones first. Quoting each word
/// keeps a query's punctuation from being read as search syntax.
pub fn words(query: &str) -> Vec<String> {
    query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .take(32)
        .map(str::to_lowercase)
        .collect()
}

fn note(row: &[Val]) -> Option<Note> {
    Some(Note {
        id: row.first()?.text()?.to_string(),
        namespace: row.get(1)?.text()?.to_string(),
        text: row.get(2)?.text()?.to_string(),
        from: Provenance {
            run_id: row.get(3)?.text()?.to_string(),
            step: match row.get(4)? {
                Val::Int(n) => Some(*n as usize),
                _ => None,
            },
            agent: row.get(5)?.text()?.to_string(),
        },
        created_at: row.get(6)?.int(),
    })
}

/// `IN ($first, …)` over `n` namespaces; every namespace when `n` is 0.
fn among(first: usize, n: usize) -> String {
    if n == 0 {
        return "TRUE".into();
    }
    let marks: Vec<String> = (first..first + n).map(|i| format!("${i}")).collect();
    format!("m.namespace IN ({})", marks.join(", "))
}

fn save(db: &mut dyn Backend, ns: &str, text: &str, from: &Provenance) -> Result<Note, String> {
    let note = Note {
        id: uuid::Uuid::now_v7().to_string(),
        namespace: ns.to_string(),
        text: text.to_string(),
        from: from.clone(),
        created_at: now_ms(),
    };
    let mut stmts = vec![Stmt {
        sql: "INSERT INTO manus_memory (id, namespace, text, run_id, step, agent, created_at)
              VALUES ($1, $2, $3, $4, $5, $6, $7)",
        params: vec![
            Val::Text(note.id.clone()),
            Val::Text(note.namespace.clone()),
            Val::Text(note.text.clone()),
            Val::Text(from.run_id.clone()),
            from.step.map_or(Val::Null, |s| Val::Int(s as i64)),
            Val::Text(from.agent.clone()),
            Val::Int(note.created_at),
        ],
    }];
    if !db.postgres() {
        stmts.push(Stmt {
            sql: "INSERT INTO manus_memory_fts (id, text) VALUES ($1, $2)",
            params: vec![Val::Text(note.id.clone()), Val::Text(note.text.clone())],
        });
    }
    db.transaction(&stmts)?;
    Ok(note)
}

fn search(
    db: &mut dyn Backend,
    namespaces: &[String],
    query: &str,
    limit: usize,
) -> Result<Vec<Note>, String> {
    let words = words(query);
    if words.is_empty() {
        return Ok(vec![]);
    }
    // Parameters are numbered in order of first use (SQLite reads them so): the pattern,
    // the namespaces, the limit.
    let last = format!("${}", namespaces.len() + 2);
    let (sql, pattern) = if db.postgres() {
        (
            format!(
                "SELECT {COLUMNS} FROM manus_memory m, to_tsquery('english', $1) q
                 WHERE m.tsv @@ q AND {}
                 ORDER BY ts_rank(m.tsv, q) DESC, m.created_at DESC LIMIT {}",
                among(2, namespaces.len()),
                last
            ),
            // Each word through plainto_tsquery's rules would need a call per word; quoted
            // lexemes OR-ed are the same query for words of letters and digits.
            words
                .iter()
                .map(|w| format!("'{w}'"))
                .collect::<Vec<_>>()
                .join(" | "),
        )
    } else {
        (
            format!(
                "SELECT {COLUMNS} FROM manus_memory_fts f JOIN manus_memory m ON m.id = f.id
                 WHERE manus_memory_fts MATCH $1 AND {}
                 ORDER BY bm25(manus_memory_fts), m.created_at DESC LIMIT {}",
                among(2, namespaces.len()),
                last
            ),
            words
                .iter()
                .map(|w| format!("\"{w}\""))
                .collect::<Vec<_>>()
                .join(" OR "),
        )
    };
    let mut params = vec![Val::Text(pattern)];
    params.extend(namespaces.iter().cloned().map(Val::Text));
    params.push(Val::Int(limit as i64));
    let rows = db.query(&sql, &params)?;
    Ok(rows.iter().filter_map(|r| note(r)).collect())
}

fn list(db: &mut dyn Backend, namespace: Option<&str>, limit: usize) -> Result<Vec<Note>, String> {
    let rows = match namespace {
        Some(ns) => db.query(
            &format!(
                "SELECT {COLUMNS} FROM manus_memory m WHERE m.namespace = $1
                 ORDER BY m.created_at DESC LIMIT $2"
            ),
            &[Val::Text(ns.to_string()), Val::Int(limit as i64)],
        )?,
        None => db.query(
            &format!("SELECT {COLUMNS} FROM manus_memory m ORDER BY m.created_at DESC LIMIT $1"),
            &[Val::Int(limit as i64)],
        )?,
    };
    Ok(rows.iter().filter_map(|r| note(r)).collect())
}

fn forget(db: &mut dyn Backend, ids: &[String]) -> Result<Vec<String>, String> {
    let mut gone = vec![];
    for id in ids {
        let found = db.query(
            "SELECT id FROM manus_memory WHERE id = $1",
            &[Val::Text(id.clone())],
        )?;
        if found.is_empty() {
            continue;
        }
        let mut stmts = vec![Stmt {
            sql: "DELETE FROM manus_memory WHERE id = $1",
            params: vec![Val::Text(id.clone())],
        }];
        if !db.postgres() {
            stmts.push(Stmt {
                sql: "DELETE FROM manus_memory_fts WHERE id = $1",
                params: vec![Val::Text(id.clone())],
            });
        }
        db.transaction(&stmts)?;
        gone.push(id.clone());
    }
    Ok(gone)
}

impl RunStore {
    /// Keep `text` in namespace `ns`, with where it came from.
    pub async fn memory_save(
        &self,
        ns: &str,
        text: &str,
        from: Provenance,
    ) -> Result<Note, StoreError> {
        let (ns, text) = (ns.to_string(), text.to_string());
        self.read(move |db, _| save(db, &ns, &text, &from)).await
    }

    /// The notes of `namespaces` (of every one, if none is given) that match any word of
    /// `query`, best first.
    pub async fn memory_search(
        &self,
        namespaces: &[String],
        query: &str,
        limit: usize,
    ) -> Result<Vec<Note>, StoreError> {
        let (namespaces, query) = (namespaces.to_vec(), query.to_string());
        self.read(move |db, _| search(db, &namespaces, &query, limit))
            .await
    }

    /// The newest notes, of one namespace or all, at most `limit`.
    pub async fn memory_list(
        &self,
        namespace: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Note>, StoreError> {
        let namespace = namespace.map(String::from);
        self.read(move |db, _| list(db, namespace.as_deref(), limit))
            .await
    }

    /// Delete the notes `ids`; those that were there.
    pub async fn memory_forget(&self, ids: &[String]) -> Result<Vec<String>, StoreError> {
        let ids = ids.to_vec();
        self.read(move |db, _| forget(db, &ids)).await
    }
}

/// One flow's `MemoryBook`: saves into its `save_to` namespace, searches its `search` ones.
pub struct StoreBook {
    store: RunStore,
    save_to: String,
    search: Vec<String>,
    max_results: usize,
}

impl StoreBook {
    pub fn new(store: RunStore, settings: &MemorySettings, owners: &Owners) -> StoreBook {
        StoreBook {
            store,
            save_to: owners.namespace(settings.save_to),
            search: settings
                .search
                .iter()
                .map(|s| owners.namespace(*s))
                .collect(),
            max_results: settings.max_results,
        }
    }
}

impl std::fmt::Debug for StoreBook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreBook")
            .field("store", &self.store.url())
            .field("save_to", &self.save_to)
            .field("search", &self.search)
            .finish()
    }
}

impl MemoryBook for StoreBook {
    fn save(&self, text: String, from: Provenance) -> BookFuture<'_, Note> {
        Box::pin(async move {
            self.store
                .memory_save(&self.save_to, &text, from)
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn search(&self, query: String, limit: Option<usize>) -> BookFuture<'_, Vec<Note>> {
        let limit = limit.unwrap_or(self.max_results).min(MAX_RESULTS);
        Box::pin(async move {
            self.store
                .memory_search(&self.search, &query, limit)
                .await
                .map_err(|e| e.to_string())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreUrl;

    fn from(run: &str) -> Provenance {
        Provenance {
            run_id: run.into(),
            step: Some(1),
            agent: "manus".into(),
        }
    }

    #[test]
    fn query_words_are_letters_and_digits_only() {
        assert_eq!(
            words("Where's the \"deploy\" key? (vault-7) OR NOT *"),
            [
                "where", "s", "the", "deploy", "key", "vault", "7", "or", "not"
            ]
        );
        assert!(words("  ?!* ").is_empty());
    }

    /// On SQLite (FTS5): notes are found by any word, ranked, only in the namespaces asked,
    /// and gone once forgotten; punctuation in a query is no syntax error.
    #[tokio::test]
    async fn sqlite_search_is_ranked_and_kept_to_its_namespaces() {
        let store = RunStore::open(&StoreUrl::Sqlite(":memory:".into()))
            .await
            .unwrap();
        let alice = ["user:alice".to_string()];
        let a = store
            .memory_save(
                &alice[0],
                "The deploy key lives in vault slot 7.",
                from("r1"),
            )
            .await
            .unwrap();
        store
            .memory_save(&alice[0], "Charts should be blue.", from("r1"))
            .await
            .unwrap();
        store
            .memory_save("user:bob", "Bob's deploy key is elsewhere.", from("r2"))
            .await
            .unwrap();
        let found = store
            .memory_search(&alice, "deploy key? (vault)", 5)
            .await
            .unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0], a);
        let found = store
            .memory_search(&alice, "deploying blue charts", 5)
            .await
            .unwrap();
        assert_eq!(found[0].text, "Charts should be blue.", "{found:?}");
        assert_eq!(found.len(), 2, "porter stems deploying → deploy: {found:?}");
        assert_eq!(store.memory_list(None, 10).await.unwrap().len(), 3);
        assert_eq!(
            store
                .memory_forget(&[a.id.clone(), "nope".into()])
                .await
                .unwrap(),
            std::slice::from_ref(&a.id)
        );
        assert!(
            store
                .memory_search(&alice, "vault", 5)
                .await
                .unwrap()
                .is_empty()
        );
    }
}
