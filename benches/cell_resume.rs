//! A code-mode step killed mid-step and resumed: what the resume repeats and what it costs.
//!
//! `run-flow` (the release binary, with a SQLite run store) runs one code-mode step whose
//! model writes `CELLS` cells (default 6), each making `CALLS` bash calls (default 5) that
//! append a line to a log. The process is SIGKILLed while the model writes the cell after
//! the first half, and `resume` finishes the run. The bench prints the cells the resume ran
//! again from the record, the tool calls and model calls done twice (the log's lines and
//! the scripted server's requests against what one clean run makes; both must be 0), and
//! the time from the resume's start to its first new model request (making the interpreter
//! again included).
//!
//! `cargo bench --bench cell_resume` prints the figures; it asserts nothing.

#[path = "../tests/support/mod.rs"]
mod support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use manus_rt::engine::protocol::{CellRecord, FlowEvent};
use manus_rt::store::{RunStore, StoreUrl};
use serde_json::json;
use support::llm_server::{Reply, ScriptedLlm};
use support::scenario::{Scratch, config_with, plan_reply};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

fn cell(n: usize, calls: usize) -> Reply {
    let code = format!(
        "for i in range({calls}):\n    bash(f'echo cell{n}-{{i}} >> effects.log')\nstate{n} = {n}\nprint('cell {n} done')"
    );
    Reply::tool("python", json!({ "code": code }))
}

/// The release binary in `dir`, its output dropped.
fn manus(dir: &Scratch, config: &std::path::Path, args: &[&str]) -> tokio::process::Command {
    let mut cmd = support::scenario::manus_cli(dir, config, args);
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    cmd
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let (cells, calls) = (env("CELLS", 6), env("CALLS", 5));
    let half = cells / 2;
    let server = ScriptedLlm::start().await;
    let dir = Scratch::new("bench-cell-resume");
    let db = dir.path().join("runs.db");
    let config = dir.write_config(&config_with(
        &server,
        &dir.workspace(),
        &[
            ("store.url", &format!("\"sqlite://{}\"", db.display())),
            ("agents.manus.action", "\"code\""),
            ("agents.manus.max_steps", "40"),
        ],
    ));
    let mut first = vec![plan_reply(&["[MANUS] Log in cells"])];
    first.extend((0..half).map(|n| cell(n, calls)));
    // The model is slow to write the next cell: the process is killed meanwhile.
    first.push(cell(half, calls).delay(600_000));
    server.push_all(first);
    let mut child = manus(&dir, &config, &["run-flow", "Log in cells"])
        .spawn()
        .unwrap();
    while server.request_count() < half + 2 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    let asked_before = server.request_count();

    let mut rest: Vec<Reply> = (half..cells).map(|n| cell(n, calls)).collect();
    rest.push(Reply::tool(
        "python",
        json!({"code": "terminate(status='success')"}),
    ));
    rest.push(Reply::text("Logged."));
    server.push_all(rest);
    let store = RunStore::open(&StoreUrl::Sqlite(db.clone())).await.unwrap();
    let id = store.list(1).await.unwrap()[0].id.clone();
    let started = Instant::now();
    let mut child = manus(&dir, &config, &["resume", &id]).spawn().unwrap();
    while server.request_count() == asked_before {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let to_first_request = started.elapsed();
    let status = child.wait().await.unwrap();
    let total = started.elapsed();

    let log = std::fs::read_to_string(dir.workspace().join("effects.log")).unwrap_or_default();
    let replayed: u32 = store
        .events(&id)
        .await
        .unwrap()
        .iter()
        .filter_map(|e| match &e.event {
            FlowEvent::Cell {
                record: CellRecord::Replayed { cells, .. },
                ..
            } => Some(*cells),
            _ => None,
        })
        .sum();
    // One clean run asks the model for the plan, each cell, terminate and the summary; the
    // call cut by the kill is asked again by design (it was never answered).
    let clean_requests = 1 + cells + 2;
    println!(
        "code-mode step killed after {half} of {cells} cells ({calls} bash calls each), then resumed ({status}):"
    );
    println!("  cells run again from the record: {replayed}");
    println!(
        "  tool calls done twice: {}",
        log.lines().count() as i64 - (cells * calls) as i64
    );
    println!(
        "  model calls asked twice: {}",
        server.request_count() as i64 - 1 - clean_requests as i64
    );
    println!(
        "  resume to its first new model request: {:.0} ms (interpreter made again from {replayed} cell(s)); whole resume {:.2} s",
        to_first_request.as_secs_f64() * 1000.0,
        total.as_secs_f64()
    );
    store.close().await;
}
