//! Start-up and memory: cold start of the binary to its first model request, peak memory
//! of a two-agent flow, and memory per idle agent actor.
//!
//! `cargo bench --bench flow_footprint` prints the figures; it asserts nothing.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use manus_rt::Config;
use manus_rt::engine::agent::ExecutorAgent;
use manus_rt::engine::llm::LlmClient;
use ractor::Actor;
use serde_json::json;
use support::llm_server::{Reply, ScriptedLlm};
use support::scenario::{Scratch, config_text};

const BIN: &str = env!("CARGO_BIN_EXE_manus-rt");

/// A two-agent flow that uses only in-process tools, so the peak is manus-rt's own.
fn two_agent_script() -> Vec<Reply> {
    vec![
        Reply::tool(
            "planning",
            json!({"command": "create", "plan_id": "p", "title": "t", "steps": ["[MANUS] write", "[DATA_ANALYSIS] check"]}),
        ),
        Reply::tool(
            "str_replace_editor",
            json!({"command": "create", "path": "a.txt", "file_text": "1\n2\n3\n"}),
        ),
        Reply::tool("terminate", json!({"status": "success"})).with_text("wrote a.txt"),
        Reply::tool(
            "str_replace_editor",
            json!({"command": "view", "path": "a.txt"}),
        ),
        Reply::tool("terminate", json!({"status": "success"})).with_text("three lines"),
        Reply::text("All done."),
    ]
}

fn children_max_rss_kb() -> i64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    ru.ru_maxrss
}

fn rss_kb() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let server = ScriptedLlm::start().await;
    let dir = Scratch::new("bench-footprint");
    let config_path = dir.write_config(&config_text(&server, &dir.workspace(), ""));

    // Cold start: spawn to first request at the server, over several runs.
    let mut starts = vec![];
    for _ in 0..10 {
        let before = server.request_count();
        server.push_all(two_agent_script());
        let t = Instant::now();
        let mut child = tokio::process::Command::new(BIN)
            .arg("--config")
            .arg(&config_path)
            .args(["run-flow", "bench task", "--json"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        while server.request_count() == before {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        starts.push(t.elapsed());
        let status = child.wait().await.unwrap();
        assert!(status.success(), "the bench flow failed");
    }
    starts.sort();
    let peak_kb = children_max_rss_kb();

    // Idle agents: spawn many with their tool workers and measure the growth.
    let config =
        Config::from_text(&config_text(&server, &dir.workspace(), ""), "bench", None).unwrap();
    let http = manus_rt::engine::llm::LazyHttp::default();
    let (template, llm) = &config.agents[0];
    let spec = std::sync::Arc::new(template.bind(
        manus_rt::config::AgentModels {
            llm: LlmClient::new(config.llm[llm].clone(), http, None),
            compact: None,
        },
        &config.tools,
        &dir.workspace(),
        None,
        None,
        vec![],
    ));
    let n = 2000u32;
    let mut agents = Vec::with_capacity(n as usize);
    // Warm the allocator and the actor machinery first.
    for _ in 0..50 {
        agents.push(
            Actor::spawn(None, ExecutorAgent, spec.clone())
                .await
                .unwrap(),
        );
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = rss_kb();
    for _ in 0..n {
        agents.push(
            Actor::spawn(None, ExecutorAgent, spec.clone())
                .await
                .unwrap(),
        );
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let per_agent = (rss_kb() - before) as f64 / n as f64;
    for (a, h) in agents {
        a.stop(None);
        let _ = h.await;
    }

    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!("footprint (release build, 2 cores)");
    println!(
        "  cold start to first model request: p50 {:.1} ms   min {:.1} ms   (target <= 20 ms)",
        ms(starts[starts.len() / 2]),
        ms(starts[0])
    );
    println!(
        "  peak RSS of a two-agent flow:      {:.1} MB   (target <= 25 MB)",
        peak_kb as f64 / 1024.0
    );
    println!("  memory per idle agent (+ worker):  {per_agent:.1} KB   (target <= 32 KB)");
}
