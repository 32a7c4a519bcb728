//! The runtime's own cost per agent step (one think/act round), measured two ways:
//! with the model answering in-process (a replayed cassette: no network, no model time),
//! and over loopback HTTP (the scripted OpenAI-compatible server answering at once), where
//! the bare HTTP round trip to that server is measured too and subtracted.
//!
//! `cargo bench --bench step_overhead` prints the figures; it asserts nothing.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use manus_rt::{Config, FlowStatus, Runtime, SubmitOptions};
use serde_json::json;
use support::llm_server::{Reply, ScriptedLlm};
use support::scenario::{Scratch, config_with};

const ROUNDS: usize = 20;
const FLOWS: usize = 30;
const TASK: &str = "Keep a few plans for the benchmark.";

/// One flow's script: ROUNDS-1 cheap in-process tool calls (distinct, so no loop
/// detection), then terminate.
fn script() -> Vec<Reply> {
    let mut r: Vec<Reply> = (0..ROUNDS - 1)
        .map(|i| Reply::tool("planning", json!({"command": "create", "plan_id": format!("p{i}"), "title": "t", "steps": ["a"]})))
        .collect();
    r.push(Reply::tool("terminate", json!({"status": "success"})));
    r
}

async fn run_flows(
    config: &Config,
    server: Option<&ScriptedLlm>,
    record: Option<&std::path::Path>,
) -> Vec<Duration> {
    let mut b = Runtime::builder().config(config.clone());
    if let Some(p) = record {
        b = b.record(p);
    }
    let rt = b.start().await.unwrap();
    let mut per_round = vec![];
    let flows = if record.is_some() { 1 } else { FLOWS };
    for _ in 0..flows {
        if let Some(s) = server {
            s.push_all(script());
        }
        let started = Instant::now();
        let flow = rt
            .submit(
                TASK,
                SubmitOptions {
                    mode: manus_rt::FlowMode::Single,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        let outcome = flow.outcome().await;
        assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
        per_round.push(started.elapsed() / ROUNDS as u32);
    }
    rt.shutdown().await;
    per_round
}

fn stats(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    (
        ms(v[v.len() / 2]),
        ms(v[(v.len() * 99 / 100).min(v.len() - 1)]),
    )
}

/// The bare cost of the same model requests: the bodies one flow sent, posted again to
/// the scripted server by a plain HTTP client, so what remains of a step is the runtime's.
async fn http_baseline(server: &ScriptedLlm) -> Duration {
    let bodies: Vec<Vec<u8>> = server
        .requests()
        .iter()
        .rev()
        .take(ROUNDS)
        .map(|r| r.body.to_string().into_bytes())
        .collect();
    let client = reqwest::Client::new();
    let url = format!("{}/chat/completions", server.base_url());
    server.set_fallback(Some(Reply::tool("terminate", json!({"status": "success"}))));
    let post = |body: &Vec<u8>| {
        client
            .post(&url)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
    };
    for body in &bodies {
        post(body).await.unwrap().bytes().await.unwrap();
    }
    let rounds = 10;
    let t = Instant::now();
    for _ in 0..rounds {
        for body in &bodies {
            post(body).await.unwrap().bytes().await.unwrap();
        }
    }
    server.set_fallback(None);
    t.elapsed() / (rounds * bodies.len()) as u32
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let server = ScriptedLlm::start().await;
    let dir = Scratch::new("bench-step");
    let text = config_with(
        &server,
        &dir.workspace(),
        &[
            ("agents.manus.max_steps", "30"),
            ("flow.max_step_retries", "0"),
        ],
    );
    let http_config = Config::from_text(&text, "bench", None).unwrap();

    // Loopback HTTP.
    run_flows(&http_config, Some(&server), None).await; // warm-up: token tables, connections
    let (http_p50, http_p99) = stats(run_flows(&http_config, Some(&server), None).await);
    let baseline = http_baseline(&server).await.as_secs_f64() * 1000.0;

    // In-process: record one flow, then replay it.
    let cassette = dir.path().join("bench.jsonl");
    server.push_all(script());
    run_flows(&http_config, None, Some(&cassette)).await;
    let replay_text = format!(
        "[llm]\napi_type = \"replay\"\ncassette = \"{}\"\n[runtime]\nworkspace = \"{}\"\n[agents.manus]\nmax_steps = 30\n",
        cassette.display(),
        dir.workspace().display()
    );
    let replay_config = Config::from_text(&replay_text, "bench-replay", None).unwrap();
    run_flows(&replay_config, None, None).await;
    let (mem_p50, mem_p99) = stats(run_flows(&replay_config, None, None).await);

    println!("step overhead ({FLOWS} flows x {ROUNDS} think/act rounds, 2 cores)");
    println!(
        "  in-process model (replay):  p50 {mem_p50:.3} ms/step   p99 {mem_p99:.3} ms/step   (target <= 0.5 ms)"
    );
    println!("  loopback HTTP model:        p50 {http_p50:.3} ms/step   p99 {http_p99:.3} ms/step");
    println!("  the same requests, bare:    {baseline:.3} ms/request");
    println!(
        "  runtime overhead over HTTP: p50 {:.3} ms/step   (target <= 0.5 ms)",
        (http_p50 - baseline).max(0.0)
    );
}
