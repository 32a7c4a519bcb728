//! Many flows at once on one runtime: FLOWS planned flows are submitted together, the
//! scripted OpenAI-compatible server answering every model call after MODEL_MS over
//! loopback HTTP. Each flow is a plan of two [MANUS] steps of two think/act rounds (a cheap
//! in-process tool, then terminate) and a summary. Prints flows/s, agent steps/s, the
//! runtime's own time per model call (a flow's wall time minus its model time, per call;
//! p50 and p99 over flows) and the process's peak RSS.
//!
//! `cargo bench --bench many_flows` (FLOWS and MODEL_MS can be set in the environment);
//! it asserts nothing but that every flow completed.

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::Instant;

use manus_rt::{Config, FlowMode, FlowStatus, Runtime, SubmitOptions};
use serde_json::{Value, json};
use support::llm_server::{Reply, ScriptedLlm};
use support::scenario::{Scratch, config_with, plan_reply};

/// Think/act rounds per step, and steps per flow.
const ROUNDS: u64 = 2;
const STEPS: u64 = 2;

fn env_or(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The model's answer, from the request alone: the planner gets a plan, an agent a tool
/// call (planning, then terminate once it has seen a tool result), the summary a sentence.
fn answer(body: &Value, delay: u64) -> Reply {
    let tools: Vec<&str> = body["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| t["function"]["name"].as_str())
                .collect()
        })
        .unwrap_or_default();
    let reply = if tools.contains(&"terminate") {
        let seen = body["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count());
        if seen == 0 {
            Reply::tool(
                "planning",
                json!({"command": "create", "plan_id": "p", "title": "t", "steps": ["a"]}),
            )
        } else {
            Reply::tool("terminate", json!({"status": "success"})).with_text("done")
        }
    } else if tools.contains(&"planning") {
        plan_reply(&["[MANUS] first half", "[MANUS] second half"])
    } else {
        Reply::text("Both halves are done.")
    };
    reply.delay(delay)
}

fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

fn percentile(sorted: &[f64], p: usize) -> f64 {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let flows = env_or("FLOWS", 1000);
    let model_ms = env_or("MODEL_MS", 50);
    let server = ScriptedLlm::start().await;
    server.set_recording(false);
    server.set_responder(Some(Arc::new(move |body: &Value| {
        Some(answer(body, model_ms))
    })));
    let dir = Scratch::new("bench-many");
    let replicas = flows.to_string();
    let text = config_with(
        &server,
        &dir.workspace(),
        &[
            ("agents.manus.replicas", &replicas),
            ("agents.manus.tools", "[\"planning\", \"terminate\"]"),
            ("flow.max_step_retries", "0"),
        ],
    );
    let config = Config::parse(&text, "bench-many", None).unwrap();
    let rt = Runtime::builder().config(config).start().await.unwrap();

    // Warm-up: connections, token tables, allocator.
    let warm = rt
        .submit("warm up", SubmitOptions::default())
        .await
        .unwrap();
    assert_eq!(warm.outcome().await.status, FlowStatus::Completed);

    let started = Instant::now();
    let mut handles = Vec::with_capacity(flows as usize);
    for i in 0..flows {
        let task = format!("Flow {i}: split the work in two halves.");
        let options = SubmitOptions {
            mode: FlowMode::Plan,
        };
        handles.push(rt.submit(&task, options).await.unwrap());
    }
    let outcomes = futures_util::future::join_all(handles.into_iter().map(|h| h.outcome())).await;
    let wall = started.elapsed().as_secs_f64();

    let mut overhead: Vec<f64> = vec![];
    for o in &outcomes {
        assert_eq!(o.status, FlowStatus::Completed, "{}", o.reason);
        let calls = o.usage.calls.max(1);
        let own = o.elapsed_ms as f64 - (calls * model_ms) as f64;
        overhead.push(own.max(0.0) / calls as f64);
    }
    overhead.sort_by(f64::total_cmp);
    let steps = flows * STEPS * ROUNDS;
    let calls_per_flow = outcomes[0].usage.calls;
    println!("many_flows: {flows} planned flows at once, model answers after {model_ms} ms");
    println!(
        "  each flow: {STEPS} steps x {ROUNDS} rounds, {calls_per_flow} model calls; wall {wall:.2} s"
    );
    println!("  flows/s            {:.0}", flows as f64 / wall);
    println!("  agent steps/s      {:.0}", steps as f64 / wall);
    println!(
        "  runtime time per model call, over flows: p50 {:.2} ms, p99 {:.2} ms",
        percentile(&overhead, 50),
        percentile(&overhead, 99)
    );
    println!("  peak RSS           {:.1} MB", peak_rss_mb());
    rt.shutdown().await;
}
