//! A2A (protocol 1.0, JSON-RPC binding): other agents call ours. The agent card is served
//! at `/.well-known/agent-card.json`; `POST /a2a` takes `SendMessage`,
//! `SendStreamingMessage`, `GetTask` and `CancelTask`. A task is a flow of this node (its id
//! is the run id): a message without a `taskId` starts one with the message's text as the
//! task; a message to a task waiting for input answers its open question, or decides its
//! open approval (`yes`/`approve` approves, anything else rejects with that reason). States:
//! a flow that runs is `WORKING`, one that waits for a person `INPUT_REQUIRED` (the status
//! message says what it asks), and its end `COMPLETED` (the summary as the `result`
//! artifact), `CANCELED` or `FAILED`. A stream closes when the task ends or waits for input.
//! The route sits behind the service's bearer tokens; the card says so.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use manus_actors::protocol::{Decision, FlowMode, FlowStatus};
use serde_json::{Value, json};

use super::{App, Entry, now_ms};
use crate::runtime::SubmitOptions;

/// The protocol version the card announces and the methods follow.
const PROTOCOL_VERSION: &str = "1.0";

/// The agent card: what this service does and where to call it (`host` is the request's
/// `Host`, so the card names the address the caller used).
pub fn card(app: &App, host: &str) -> Value {
    let mut card = json!({
        "name": "manus-rt",
        "description": "Plans a task into steps and carries each out with tool-using agents \
            (Python, shell, files, a browser, data analysis), then reports what was done.",
        "version": env!("CARGO_PKG_VERSION"),
        "supportedInterfaces": [{
            "url": format!("http://{host}/a2a"),
            "protocolBinding": "JSONRPC",
            "protocolVersion": PROTOCOL_VERSION,
        }],
        "capabilities": {"streaming": true},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{
            "id": "run-flow",
            "name": "Carry out a task",
            "description": "Give the task in plain words; the reply is a summary of what was done, \
                and the run may ask for an answer or an approval on the way (input-required).",
            "tags": ["planning", "agents", "tools"],
        }],
    });
    if !app.settings.api_tokens.is_empty() {
        card["securitySchemes"] =
            json!({"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}});
        card["securityRequirements"] = json!([{"schemes": {"bearer": {"list": []}}}]);
    }
    card
}

/// A JSON-RPC error reply (HTTP 200, as the binding says).
fn error(id: &Value, code: i64, message: impl Into<String>) -> Response {
    Json(json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message.into()}}))
        .into_response()
}

fn result(id: &Value, result: Value) -> Response {
    Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
}

const TASK_NOT_FOUND: i64 = -32001;
const TASK_NOT_CANCELABLE: i64 = -32002;
const UNSUPPORTED: i64 = -32004;
const INVALID_PARAMS: i64 = -32602;

/// `POST /a2a`: one JSON-RPC request.
pub async fn rpc(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return error(&Value::Null, -32700, "the body is not JSON");
    };
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    let (Some(method), params) = (request["method"].as_str(), &request["params"]) else {
        return error(&id, -32600, "not a JSON-RPC request: it needs `method`");
    };
    match method {
        "SendMessage" | "SendStreamingMessage" => {
            let streaming = method == "SendStreamingMessage";
            let entry = match accept(&app, params, &headers).await {
                Ok(e) => e,
                Err((code, why)) => return error(&id, code, why),
            };
            if streaming {
                return stream(entry, id).into_response();
            }
            let quick = params["configuration"]["returnImmediately"]
                .as_bool()
                .unwrap_or(false);
            if !quick {
                settled(&entry).await;
            }
            result(&id, json!({"task": task(&entry)}))
        }
        "GetTask" => match task_of(&app, params) {
            Ok(entry) => result(&id, task(&entry)),
            Err(why) => error(&id, TASK_NOT_FOUND, why),
        },
        "CancelTask" => {
            let entry = match task_of(&app, params) {
                Ok(e) => e,
                Err(why) => return error(&id, TASK_NOT_FOUND, why),
            };
            if ended(&entry) {
                return error(
                    &id,
                    TASK_NOT_CANCELABLE,
                    format!("task `{}` has already ended", entry.id),
                );
            }
            entry.control.cancel();
            // The flow stops its steps first; answer once it has, or as it stands.
            let _ = tokio::time::timeout(Duration::from_secs(10), until(&entry, ended)).await;
            result(&id, task(&entry))
        }
        other => error(
            &id,
            -32601,
            format!(
                "no method `{other}`: this agent takes SendMessage, SendStreamingMessage, GetTask and CancelTask"
            ),
        ),
    }
}

/// The task a request's `params.id` names.
fn task_of(app: &App, params: &Value) -> Result<Arc<Entry>, String> {
    let id = params["id"].as_str().ok_or("`params.id` names the task")?;
    app.entry(id)
        .map_err(|_| format!("no task `{id}` on this agent"))
}

/// Start a flow for a new message, or hand a message to the task it names.
async fn accept(
    app: &Arc<App>,
    params: &Value,
    headers: &HeaderMap,
) -> Result<Arc<Entry>, (i64, String)> {
    let message = &params["message"];
    let text: String = message["parts"]
        .as_array()
        .map(|parts| {
            parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default();
    if text.trim().is_empty() {
        return Err((
            INVALID_PARAMS,
            "the message has no text part: say what to do".into(),
        ));
    }
    if let Some(task) = message["taskId"].as_str() {
        let entry = app
            .entry(task)
            .map_err(|_| (TASK_NOT_FOUND, format!("no task `{task}` on this agent")))?;
        return reply_to(&entry, text, headers).map(|()| entry);
    }
    if app.node.is_some() {
        return Err((
            UNSUPPORTED,
            "on a cluster node, A2A tasks are not taken yet: submit with POST /v1/flows".into(),
        ));
    }
    let runtime = app.runtime.read().await;
    let runtime = runtime
        .as_ref()
        .ok_or((-32603, "the service is shutting down".to_string()))?;
    let handle = runtime
        .submit(
            &text,
            SubmitOptions {
                mode: FlowMode::Plan,
                deltas: false,
            },
        )
        .await
        .map_err(|e| (-32603, e.to_string()))?;
    let id = app.track(handle);
    app.entry(&id)
        .map_err(|_| (-32603, "the flow ended before it could be followed".into()))
}

/// A person's words for a task waiting for input: the answer to its open question, or the
/// decision on its open approval.
fn reply_to(entry: &Entry, text: String, headers: &HeaderMap) -> Result<(), (i64, String)> {
    let (question, approval) = match entry.state.lock() {
        Ok(mut st) => {
            let q = st.view.questions.keys().next().copied();
            if let Some(q) = q {
                st.view.questions.remove(&q);
                (Some(q), None)
            } else {
                let a = st.view.approvals.keys().next().copied();
                if let Some(a) = a {
                    st.view.approvals.remove(&a);
                }
                (None, a)
            }
        }
        Err(_) => (None, None),
    };
    match (question, approval) {
        (Some(q), _) => entry.control.answer(q, text),
        (None, Some(a)) => {
            let word = text.trim().to_ascii_lowercase();
            let approve = matches!(word.as_str(), "yes" | "y" | "approve" | "approved" | "ok");
            entry.control.decide(
                a,
                Decision::now(
                    approve,
                    None,
                    (!approve).then_some(text),
                    super::decider(headers),
                ),
            );
        }
        (None, None) => {
            return Err((
                INVALID_PARAMS,
                format!("task `{}` is not waiting for input", entry.id),
            ));
        }
    }
    Ok(())
}

fn ended(entry: &Entry) -> bool {
    entry
        .state
        .lock()
        .map(|s| s.view.outcome.is_some())
        .unwrap_or(true)
}

fn waits(entry: &Entry) -> bool {
    entry
        .state
        .lock()
        .map(|s| {
            s.view.outcome.is_none()
                && (!s.view.questions.is_empty() || !s.view.approvals.is_empty())
        })
        .unwrap_or(false)
}

/// Until `done` holds for the task (checked at each of its events).
async fn until(entry: &Entry, done: fn(&Entry) -> bool) {
    let mut logged = entry.logged.subscribe();
    while !done(entry) {
        if logged.changed().await.is_err() {
            return;
        }
    }
}

/// Until the task ends or waits for input.
async fn settled(entry: &Entry) {
    until(entry, |e| ended(e) || waits(e)).await
}

fn agent_message(task: &str, text: &str) -> Value {
    json!({
        "messageId": format!("{task}-m{}", now_ms()),
        "role": "ROLE_AGENT",
        "parts": [{"text": text}],
        "taskId": task,
        "contextId": task,
    })
}

/// The task's state, and what its status message says.
fn status(entry: &Entry) -> Value {
    let Ok(st) = entry.state.lock() else {
        return json!({"state": "TASK_STATE_FAILED"});
    };
    let v = &st.view;
    let (state, said) = match &v.outcome {
        Some(o) => (
            match o.status {
                FlowStatus::Completed => "TASK_STATE_COMPLETED",
                FlowStatus::Cancelled => "TASK_STATE_CANCELED",
                _ => "TASK_STATE_FAILED",
            },
            Some(if o.summary.is_empty() {
                o.reason.clone()
            } else {
                o.summary.clone()
            }),
        ),
        None => {
            if let Some(q) = v.questions.values().next() {
                ("TASK_STATE_INPUT_REQUIRED", Some(q.inquire.clone()))
            } else if let Some(a) = v.approvals.values().next() {
                (
                    "TASK_STATE_INPUT_REQUIRED",
                    Some(format!(
                        "May {} call {} with {}? ({}) Answer yes to approve, or say why not.",
                        a.agent, a.tool, a.arguments, a.why
                    )),
                )
            } else {
                ("TASK_STATE_WORKING", None)
            }
        }
    };
    let mut status = json!({"state": state});
    if let Some(text) = said {
        status["message"] = agent_message(&entry.id, &text);
    }
    status
}

/// The task as A2A shows it.
fn task(entry: &Entry) -> Value {
    let mut task = json!({"id": entry.id, "contextId": entry.id, "status": status(entry)});
    let summary = entry.state.lock().ok().and_then(|st| {
        st.view
            .outcome
            .as_ref()
            .filter(|o| o.status == FlowStatus::Completed)
            .map(|o| o.summary.clone())
    });
    if let Some(summary) = summary {
        task["artifacts"] =
            json!([{"artifactId": "result", "name": "result", "parts": [{"text": summary}]}]);
    }
    task
}

/// `SendStreamingMessage`: the task, then a status update at each change of state (and
/// with each finished thought of an agent while it works), until it ends or waits for
/// input.
fn stream(entry: Arc<Entry>, id: Value) -> impl IntoResponse {
    let frame =
        move |id: &Value, result: Value| -> Result<Event, std::convert::Infallible> {
            Ok(Event::default()
                .data(json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string()))
        };
    let first = frame(&id, json!({"task": task(&entry)}));
    let logged = entry.logged.subscribe();
    let seen = entry.state.lock().map(|s| s.events.len()).unwrap_or(0);
    let updates = futures_util::stream::unfold(
        (entry, id, logged, seen, false),
        move |(entry, id, mut logged, mut seen, done)| async move {
            if done {
                return None;
            }
            loop {
                if ended(&entry) || waits(&entry) {
                    let mut out = vec![];
                    if let Some(artifacts) = task(&entry).get("artifacts").cloned() {
                        for artifact in artifacts.as_array().into_iter().flatten() {
                            out.push(frame(&id, json!({"artifactUpdate": {"taskId": entry.id, "contextId": entry.id, "artifact": artifact}})));
                        }
                    }
                    out.push(frame(&id, json!({"statusUpdate": {"taskId": entry.id, "contextId": entry.id, "status": status(&entry)}})));
                    return Some((
                        futures_util::stream::iter(out),
                        (entry, id, logged, seen, true),
                    ));
                }
                // What the agents said since, as working updates.
                let said: Vec<String> = entry
                    .state
                    .lock()
                    .map(|st| {
                        st.events[seen.min(st.events.len())..]
                            .iter()
                            .filter_map(|e| match e {
                                manus_actors::protocol::FlowEvent::Thought { text, .. }
                                    if !text.trim().is_empty() =>
                                {
                                    Some(text.clone())
                                }
                                _ => None,
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                seen = entry.state.lock().map(|st| st.events.len()).unwrap_or(seen);
                if !said.is_empty() {
                    let out: Vec<_> = said
                        .iter()
                        .map(|text| {
                            frame(&id, json!({"statusUpdate": {"taskId": entry.id, "contextId": entry.id,
                                "status": {"state": "TASK_STATE_WORKING", "message": agent_message(&entry.id, text)}}}))
                        })
                        .collect();
                    return Some((
                        futures_util::stream::iter(out),
                        (entry, id, logged, seen, false),
                    ));
                }
                if logged.changed().await.is_err() {
                    return None;
                }
            }
        },
    );
    use futures_util::StreamExt;
    let all = futures_util::stream::iter([first]).chain(updates.flatten());
    (
        StatusCode::OK,
        [(header::CACHE_CONTROL, "no-cache")],
        Sse::new(all).keep_alive(KeepAlive::default()),
    )
}
