//! A small service that embeds manus-rt as a library: `POST /tasks {"task": "…"}` starts a
//! flow and answers with its id; `GET /tasks/{id}` says `running` or gives the outcome. The
//! flows run concurrently on one `Runtime`; the service logs their events as they happen.
//!
//! `cargo run --example service` (then, in another terminal, post the README's example task,
//! which the embedded example config replays offline):
//!
//! ```sh
//! curl -s localhost:3000/tasks -H 'content-type: application/json' \
//!   -d '{"task": "Find the prime numbers below 100, save them to primes.txt, and report how many there are and their sum."}'
//! curl -s localhost:3000/tasks/ID
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use manus_rt::{Config, FlowEvent, FlowOutcome, Runtime, SubmitOptions};
use serde_json::{Value, json};

/// Finished flows' outcomes by id; a flow that is missing here is still running.
#[derive(Default)]
struct Done(Mutex<HashMap<String, FlowOutcome>>);

struct Service {
    runtime: Runtime,
    done: Arc<Done>,
}

async fn start_task(
    State(svc): State<Arc<Service>>,
    Json(body): Json<Value>,
) -> Result<Json<Value>, (StatusCode, String)> {
    let task = body["task"].as_str().unwrap_or_default().trim().to_string();
    if task.is_empty() {
        return Err((StatusCode::BAD_REQUEST, "send {\"task\": \"…\"}".into()));
    }
    let mut flow = svc
        .runtime
        .submit(&task, SubmitOptions::default())
        .await
        .map_err(|e| (StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
    let id = flow.id.clone();
    let done = svc.done.clone();
    tokio::spawn(async move {
        while let Some(event) = flow.next_event().await {
            match event {
                FlowEvent::StepFinished { step, status, .. } => {
                    println!("[{}] step {step}: {}", flow.id, status.as_str());
                }
                // This service has no one to ask: agents are told so.
                FlowEvent::Question { id, .. } => {
                    flow.answer(id, "No one can answer here; decide yourself.")
                }
                FlowEvent::FlowFinished { outcome } => {
                    println!("[{}] {:?}: {}", flow.id, outcome.status, outcome.reason);
                    done.0.lock().unwrap().insert(flow.id.clone(), outcome);
                }
                _ => {}
            }
        }
    });
    Ok(Json(json!({ "id": id })))
}

async fn get_task(State(svc): State<Arc<Service>>, Path(id): Path<String>) -> Json<Value> {
    match svc.done.0.lock().unwrap().get(&id) {
        Some(o) => {
            Json(json!({"id": id, "status": o.status, "summary": o.summary, "usage": o.usage}))
        }
        None => Json(json!({"id": id, "status": "running"})),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runtime = Runtime::builder()
        .config(Config::locate(None)?)
        .start()
        .await?;
    let svc = Arc::new(Service {
        runtime,
        done: Arc::new(Done::default()),
    });
    let app = Router::new()
        .route("/tasks", post(start_task))
        .route("/tasks/{id}", get(get_task))
        .with_state(svc.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    println!("listening on http://127.0.0.1:3000 (Ctrl-C stops)");
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    if let Ok(svc) = Arc::try_unwrap(svc) {
        svc.runtime.shutdown().await;
    }
    Ok(())
}
