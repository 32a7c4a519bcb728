//! Graph plans: how close a plan of independent steps comes to its critical path.
//!
//! The plan is one setup step, four independent steps that need it, and a join step that
//! needs all four. Every step's model call is answered after `STEP_MS`; the planner's calls
//! at once. The figure is the steps' wall time (first `StepStarted` to last `StepFinished`,
//! read from the flow's events) against the critical path (setup + one branch + join =
//! 3 × `STEP_MS`) and against the same plan run one step at a time
//! (`[flow] max_parallel_steps = 1`). Target: within 10 % of the critical path.
//!
//! `cargo bench --bench graph_plan` prints the figures; it asserts nothing. `REPS` (default
//! 5) sets the runs per mode, `STEP_MS` (default 300) the model's time per step.

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use manus_rt::{Config, FlowEvent, FlowStatus, Runtime, SubmitOptions};
use serde_json::json;
use support::llm_server::{Reply, Request, ScriptedLlm};
use support::scenario::{Scratch, config_with, done, env_or};

fn plan() -> Reply {
    Reply::tool(
        "planning",
        json!({"command": "create", "plan_id": "bench", "title": "Fan out and join", "steps": [
            "[MANUS] set up",
            {"text": "[MANUS] branch one", "depends_on": [0]},
            {"text": "[MANUS] branch two", "depends_on": [0]},
            {"text": "[MANUS] branch three", "depends_on": [0]},
            {"text": "[MANUS] branch four", "depends_on": [0]},
            {"text": "[MANUS] join", "depends_on": [1, 2, 3, 4]},
        ]}),
    )
}

/// One flow's steps' wall time: first StepStarted to last StepFinished.
async fn one_run(rt: &Runtime) -> Duration {
    let mut flow = rt
        .submit("fan out and join", SubmitOptions::default())
        .await
        .expect("submit");
    let (mut first, mut last) = (None, None);
    while let Some(e) = flow.next_event().await {
        match e {
            FlowEvent::StepStarted { .. } => {
                first.get_or_insert_with(Instant::now);
            }
            FlowEvent::StepFinished { .. } => last = Some(Instant::now()),
            _ => {}
        }
    }
    let outcome = flow.outcome().await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    last.unwrap() - first.unwrap()
}

async fn runtime(server: &ScriptedLlm, dir: &Scratch, max_parallel: &str) -> Runtime {
    let text = config_with(
        server,
        &dir.workspace(),
        &[("flow.max_parallel_steps", max_parallel)],
    );
    let config = Config::from_text(&text, "bench", None).expect("bench config");
    Runtime::builder()
        .config(config)
        .start()
        .await
        .expect("runtime")
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let reps = env_or("REPS", 5) as usize;
    let step_ms = env_or("STEP_MS", 300);
    let server = ScriptedLlm::start().await;
    server.set_recording(false);
    let responder = move |r: &Request| -> Option<Reply> {
        let body = r.json();
        let tools: Vec<&str> = body["tools"]
            .as_array()
            .map(|ts| {
                ts.iter()
                    .filter_map(|t| t["function"]["name"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        Some(if tools.contains(&"planning") {
            plan()
        } else if tools.is_empty() {
            Reply::text("joined")
        } else {
            done("step done").delay(step_ms)
        })
    };
    server.set_responder(Some(Arc::new(responder)));
    let dir = Scratch::new("bench-graph");
    let critical = Duration::from_millis(3 * step_ms);
    let mut figures = vec![];
    for (mode, max_parallel) in [
        ("graph (max_parallel_steps = 4)", "4"),
        ("one at a time (max_parallel_steps = 1)", "1"),
    ] {
        let rt = runtime(&server, &dir, max_parallel).await;
        one_run(&rt).await; // warm-up
        let mut walls = vec![];
        for _ in 0..reps {
            walls.push(one_run(&rt).await);
        }
        rt.shutdown().await;
        figures.push((mode, median(walls)));
    }
    println!(
        "graph_plan: setup → 4 independent steps → join; each step's model call {step_ms} ms; \
         median of {reps} runs"
    );
    println!(
        "  critical path (setup + one branch + join): {:>8.1} ms",
        ms(critical)
    );
    let graph = figures[0].1;
    for (mode, wall) in &figures {
        println!(
            "  {mode:<40} {:>8.1} ms  = {:.3} × critical path",
            ms(*wall),
            wall.as_secs_f64() / critical.as_secs_f64()
        );
    }
    println!(
        "  graph over critical path: +{:.1} %; one at a time over graph: {:.2} ×",
        (graph.as_secs_f64() / critical.as_secs_f64() - 1.0) * 100.0,
        figures[1].1.as_secs_f64() / graph.as_secs_f64()
    );
}
