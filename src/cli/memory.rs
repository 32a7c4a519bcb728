//! `memory list`, `memory search QUERY` and `memory forget ID...`: the notes agents saved
//! across runs ([memory]), read or deleted in the run store without starting any flow.

use std::process::ExitCode;

use manus_rt::Config;
use manus_rt::engine::tools::memory::Note;
use manus_rt::store::{RunStore, StoreError};

use super::args::MemoryAction;
use super::exit;

pub async fn run(config: &Config, action: MemoryAction) -> ExitCode {
    let Some(url) = &config.store else {
        return exit::not_started_because(format!(
            "notes live in the run store, which is off ([store] enabled = false in {})",
            config.source
        ));
    };
    let store = match RunStore::open(url).await {
        Ok(s) => s,
        Err(e) => return exit::not_started_because(e),
    };
    let done = act(&store, action).await;
    store.close().await;
    match done {
        Ok(code) => code,
        Err(e) => exit::not_started_because(e),
    }
}

async fn act(store: &RunStore, action: MemoryAction) -> Result<ExitCode, StoreError> {
    match action {
        MemoryAction::List {
            namespace,
            limit,
            json,
        } => {
            let notes = store.memory_list(namespace.as_deref(), limit).await?;
            show(&notes, json, || match &namespace {
                Some(ns) => format!("no notes in {ns}"),
                None => format!("no notes in {}", store.url()),
            });
        }
        MemoryAction::Search {
            query,
            namespace,
            limit,
            json,
        } => {
            let notes = store.memory_search(&namespace, &query, limit).await?;
            show(&notes, json, || format!("no note matches \"{query}\""));
        }
        MemoryAction::Forget { ids, json } => {
            let gone = store.memory_forget(&ids).await?;
            let missing: Vec<&String> = ids.iter().filter(|id| !gone.contains(id)).collect();
            if json {
                println!(
                    "{}",
                    serde_json::json!({ "forgotten": gone, "unknown": missing })
                );
            } else {
                println!("forgot {} note(s)", gone.len());
            }
            if !missing.is_empty() {
                let list: Vec<&str> = missing.iter().map(|s| s.as_str()).collect();
                eprintln!(
                    "manus-rt: no note with id {} (`manus-rt memory list` shows them)",
                    list.join(", ")
                );
                return Ok(exit::failed());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Notes as a table (id, namespace, run, step, the text on one line), or as JSON.
fn show(notes: &[Note], json: bool, none: impl FnOnce() -> String) {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(notes).unwrap_or_default()
        );
        return;
    }
    if notes.is_empty() {
        println!("{}", none());
        return;
    }
    println!(
        "{:<36} {:<20} {:<36} {:>4}  TEXT",
        "ID", "NAMESPACE", "RUN", "STEP"
    );
    for n in notes {
        let step = n.from.step.map_or("end".to_string(), |s| s.to_string());
        println!(
            "{:<36} {:<20} {:<36} {:>4}  {}",
            n.id,
            n.namespace,
            n.from.run_id,
            step,
            n.text.replace('\n', " ")
        );
    }
}
