//! `python_execute` with a kept interpreter, through the real runtime: state carries over
//! between an agent's calls, a crash is told to the model, and no interpreter outlives its
//! flow, whether the flow ends, is cancelled, or the runtime shuts down under it.

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use manus_rt::{Config, FlowStatus};
use serde_json::json;
use support::llm_server::{Reply, ScriptedLlm};
use support::scenario::{Scratch, config_with, done, observation, start_single};

fn python(code: &str) -> Reply {
    Reply::tool("python_execute", json!({ "code": code }))
}

fn config(server: &ScriptedLlm, dir: &Scratch, extra: &[(&str, &str)]) -> Config {
    let text = config_with(server, &dir.workspace(), extra);
    Config::from_text(&text, "python-test", None).unwrap()
}

/// The cell runners running with `workspace` as their working directory.
fn runners_in(workspace: &Path) -> Vec<u32> {
    let workspace = workspace.canonicalize().unwrap();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let runs_cells = std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|line| {
                String::from_utf8_lossy(&line).contains("manus-rt's cell runner")
            });
            runs_cells
                && std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == workspace)
        })
        .collect()
}

/// Wait up to `within` for the runners in `workspace` to number `count`; the ones seen last.
async fn runners_become(workspace: &Path, count: usize, within: Duration) -> Vec<u32> {
    let deadline = Instant::now() + within;
    loop {
        let seen = runners_in(workspace);
        if seen.len() == count || Instant::now() > deadline {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_interpreter_keeps_its_state_and_ends_with_the_flow() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        python("import json\nrows = [{'n': i} for i in range(10)]\nprint('loaded', len(rows))"),
        python("total = sum(r['n'] for r in rows)\ntotal"),
        python("import os\nos._exit(7)"),
        python("print('rows' in globals())"),
        done("summed"),
    ]);
    let dir = Scratch::new("python-kept");
    let (rt, flow) = start_single(config(&server, &dir, &[]), "sum the rows").await;
    let outcome = flow.outcome().await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    assert_eq!(observation(&server, 0), "loaded 10");
    assert_eq!(observation(&server, 1), "45");
    let crashed = observation(&server, 2);
    assert!(
        crashed.starts_with("Error:") && crashed.contains("exited with status 7"),
        "{crashed}"
    );
    assert!(
        crashed.contains("every variable, import and loaded data from earlier calls is gone"),
        "{crashed}"
    );
    assert_eq!(observation(&server, 3), "False");
    let left = runners_become(&dir.workspace(), 0, Duration::from_secs(5)).await;
    assert!(
        left.is_empty(),
        "interpreters outlived their flow: {left:?}"
    );
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_call_gets_a_fresh_interpreter_when_configured() {
    let server = ScriptedLlm::start().await;
    server.push_all([python("x = 1"), python("print(x)"), done("tried")]);
    let dir = Scratch::new("python-call");
    let config = config(&server, &dir, &[("tools.python_session", "\"call\"")]);
    let (rt, flow) = start_single(config, "try twice").await;
    let outcome = flow.outcome().await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    let second = observation(&server, 1);
    assert!(second.contains("NameError"), "{second}");
    rt.shutdown().await;
}

/// A flow whose only call is a cell that sleeps: the runner is up once the cell runs.
async fn sleeping_flow(
    name: &str,
) -> (
    Scratch,
    ScriptedLlm,
    manus_rt::Runtime,
    manus_rt::FlowHandle,
) {
    let server = ScriptedLlm::start().await;
    server.push_all([python("import time\ntime.sleep(120)"), done("slept")]);
    let dir = Scratch::new(name);
    let config = config(&server, &dir, &[("tools.python_timeout_secs", "300")]);
    let (rt, flow) = start_single(config, "sleep").await;
    let up = runners_become(&dir.workspace(), 1, Duration::from_secs(30)).await;
    assert_eq!(up.len(), 1, "one interpreter runs the cell: {up:?}");
    (dir, server, rt, flow)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_flow_ends_its_interpreter() {
    let (dir, _server, rt, flow) = sleeping_flow("python-cancel").await;
    flow.cancel();
    let outcome = flow.outcome().await;
    assert_eq!(outcome.status, FlowStatus::Cancelled, "{}", outcome.reason);
    let left = runners_become(&dir.workspace(), 0, Duration::from_secs(5)).await;
    assert!(
        left.is_empty(),
        "an interpreter outlived its cancelled flow: {left:?}"
    );
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutting_down_ends_running_interpreters() {
    let (dir, _server, rt, _flow) = sleeping_flow("python-shutdown").await;
    rt.shutdown().await;
    let left = runners_become(&dir.workspace(), 0, Duration::from_secs(5)).await;
    assert!(
        left.is_empty(),
        "an interpreter outlived the runtime's shutdown: {left:?}"
    );
}
