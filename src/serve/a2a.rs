//! A2A (protocol 1.0, JSON-RPC binding): other agents call ours. The agent card is served
//! at `/.well-known/agent-card.json`; `POST /a2a` takes `SendMessage`,
//! `SendStreamingMessage`, `GetTask` and `CancelTask`. A task is a flow (its id is the run
//! id): a message without a `taskId` starts one with the message's text as the task (on a
//! cluster node it is queued, `SUBMITTED`, and any node may run it); on a cluster any node
//! answers about any task, from the store; a message to a task waiting for input answers
//! its open question, or decides its open approval (a word of assent such as `yes`, `Yes.`
//! or `approved` approves, anything else rejects with that reason). States:
//! a flow that runs is `WORKING`, one that waits for a person `INPUT_REQUIRED` (the status
//! message says what it asks), and its end `COMPLETED` (the summary as the `result`
//! artifact), `CANCELED` or `FAILED`. A stream closes when the task ends or waits for input.
//! A `SendMessage` without `returnImmediately` waits for that too, but at most `[server]
//! blocking_wait_secs`: then it answers with the task as it stands, as A2A allows (the
//! caller polls `GetTask`). Streams and blocking waits hold their connection, so each
//! takes one of the service's places for long answers (`App::hold_long`).
//! The route sits behind the service's bearer tokens; the card says so.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use manus_actors::protocol::{Decision, FlowEvent, FlowMode, FlowStatus};
use serde_json::{Value, json};

use super::flows::{Flow, Numbered, Reply};
use super::{ApiError, App, now_ms};
use crate::runtime::SubmitOptions;
use crate::view::FlowView;

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
const INVALID_PARAMS: i64 = -32602;
const INTERNAL: i64 = -32603;

/// A failed request: its JSON-RPC code and why.
type Refusal = (i64, String);

/// `POST /a2a`: one JSON-RPC request.
pub async fn rpc(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    // A web page can post `text/plain` to any address without asking first: only JSON is
    // taken, so a page the user visits cannot start a flow on a service without tokens.
    let json_body = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"));
    if !json_body {
        return ApiError(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "A2A requests are JSON-RPC: send them as `Content-Type: application/json`".into(),
        )
        .into_response();
    }
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return error(&Value::Null, -32700, "the body is not JSON");
    };
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    let (Some(method), params) = (request["method"].as_str(), &request["params"]) else {
        return error(&id, -32600, "not a JSON-RPC request: it needs `method`");
    };
    let answered = match method {
        "SendMessage" | "SendStreamingMessage" => {
            let streaming = method == "SendStreamingMessage";
            let quick = !streaming
                && params["configuration"]["returnImmediately"]
                    .as_bool()
                    .unwrap_or(false);
            // A stream or a blocking wait holds its connection: it needs a place for that
            // (a stream is refused without one; a blocking send answers at once).
            let place = if quick { None } else { app.hold_long() };
            if streaming && place.is_none() {
                return app.no_room_to_stream().into_response();
            }
            match accept(&app, params, &headers).await {
                Ok(task) if streaming => return stream(task, id, place).into_response(),
                Ok(mut task) => {
                    if place.is_some() {
                        // Until the task ends or needs input, or `blocking_wait` has
                        // passed: then it is answered as it stands.
                        let mut events = follow(&task);
                        let until = |v: &FlowView| ended(v) || waits(v);
                        let waited = task.advance(&mut events, until);
                        let _ = tokio::time::timeout(app.settings.blocking_wait, waited).await;
                    }
                    Ok(json!({"task": task.json()}))
                }
                Err(refused) => Err(refused),
            }
        }
        "GetTask" => match named(params) {
            Ok(name) => find(&app, name).await.map(|task| task.json()),
            Err(refused) => Err(refused),
        },
        "CancelTask" => match named(params) {
            Ok(name) => cancel(&app, name).await,
            Err(refused) => Err(refused),
        },
        other => Err((
            -32601,
            format!(
                "no method `{other}`: this agent takes SendMessage, SendStreamingMessage, GetTask and CancelTask"
            ),
        )),
    };
    match answered {
        Ok(value) => result(&id, value),
        Err((code, why)) => error(&id, code, why),
    }
}

/// The task id a request's `params.id` names.
fn named(params: &Value) -> Result<&str, Refusal> {
    params["id"]
        .as_str()
        .ok_or((INVALID_PARAMS, "`params.id` names the task".into()))
}

/// A task as this node sees it now: its flow folded from the first `seen` events, and
/// the flow, wherever it is kept.
struct Task {
    id: String,
    /// Its conversation: the thread of runs its flow belongs to (`contextId`).
    context: String,
    view: FlowView,
    seen: u64,
    /// Queued in a cluster's store, not yet started by any node.
    queued: bool,
    flow: Flow,
}

/// Task `id`: held by this node, or (on a cluster) read from the store.
async fn find(app: &App, id: &str) -> Result<Task, Refusal> {
    let flow = app
        .flow(id)
        .await
        .map_err(|ApiError(status, why)| match status {
            StatusCode::NOT_FOUND => (TASK_NOT_FOUND, format!("no task `{id}` on this agent")),
            _ => (INTERNAL, why),
        })?;
    let (view, seen) = flow
        .view()
        .await
        .map_err(|ApiError(_, why)| (INTERNAL, why))?;
    Ok(Task {
        id: id.to_string(),
        context: app.thread_id(id).await,
        view,
        seen,
        queued: flow.queued(),
        flow,
    })
}

/// The task's events after those it has seen, then live, to the flow's end.
fn follow(task: &Task) -> Numbered {
    task.flow.follow(task.seen)
}

impl Task {
    /// Fold one more event in.
    fn apply(&mut self, n: u64, e: &FlowEvent) {
        self.view.apply(e);
        self.seen = n;
        self.queued = false;
    }

    /// Fold `events` in until `done` holds (or they end).
    async fn advance(&mut self, events: &mut Numbered, done: fn(&FlowView) -> bool) {
        while !done(&self.view) {
            let Some((n, e)) = events.next().await else {
                return;
            };
            self.apply(n, &e);
        }
    }

    /// The task's state, and what its status message says.
    fn status(&self) -> Value {
        let v = &self.view;
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
            None if self.queued => ("TASK_STATE_SUBMITTED", None),
            None => {
                if let Some(q) = v.questions.values().next() {
                    // An MCP server's form: its schema goes with the question.
                    let text = match &q.form {
                        Some(form) => format!(
                            "{}\nThe answer must meet this JSON schema: {form}",
                            q.inquire
                        ),
                        None => q.inquire.clone(),
                    };
                    ("TASK_STATE_INPUT_REQUIRED", Some(text))
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
            status["message"] = agent_message(&self.id, &self.context, &text);
        }
        status
    }

    /// The result artifacts: the summary of a completed flow.
    fn artifacts(&self) -> Option<Value> {
        let o = self.view.outcome.as_ref()?;
        (o.status == FlowStatus::Completed).then(
            || json!([{"artifactId": "result", "name": "result", "parts": [{"text": o.summary}]}]),
        )
    }

    /// The task as A2A shows it.
    fn json(&self) -> Value {
        let mut task = json!({"id": self.id, "contextId": self.context, "status": self.status()});
        if let Some(artifacts) = self.artifacts() {
            task["artifacts"] = artifacts;
        }
        task
    }
}

fn ended(v: &FlowView) -> bool {
    v.outcome.is_some()
}

fn waits(v: &FlowView) -> bool {
    v.outcome.is_none() && (!v.questions.is_empty() || !v.approvals.is_empty())
}

/// `CancelTask`: the flow stops its steps first; the answer comes once it has (or, after
/// ten seconds, as it stands).
async fn cancel(app: &App, id: &str) -> Result<Value, Refusal> {
    let mut task = find(app, id).await?;
    if ended(&task.view) {
        return Err((
            TASK_NOT_CANCELABLE,
            format!("task `{id}` has already ended"),
        ));
    }
    task.flow
        .cancel()
        .await
        .map_err(|ApiError(_, why)| (TASK_NOT_CANCELABLE, why))?;
    let mut events = follow(&task);
    let _ = tokio::time::timeout(Duration::from_secs(10), task.advance(&mut events, ended)).await;
    Ok(task.json())
}

/// Start a flow for a new message, or hand a message to the task it names.
async fn accept(app: &App, params: &Value, headers: &HeaderMap) -> Result<Task, Refusal> {
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
    if let Some(id) = message["taskId"].as_str() {
        let mut task = find(app, id).await?;
        reply_to(&mut task, text, headers).await?;
        return Ok(task);
    }
    // A message in a known context with no task starts the context's next turn; an
    // unknown context starts a new one (whose id is then the context's).
    let continues = match message["contextId"].as_str() {
        Some(context) if app.knows_thread(context).await => Some(context.to_string()),
        _ => None,
    };
    let options = SubmitOptions {
        mode: FlowMode::Plan,
        deltas: false,
        continues,
        user: super::caller(&app.settings.api_tokens, headers),
    };
    let (id, _) =
        app.start(&text, options)
            .await
            .map_err(|ApiError(status, why)| match status {
                StatusCode::CONFLICT => (INVALID_PARAMS, why),
                _ => (INTERNAL, why),
            })?;
    find(app, &id).await
}

/// A person's words for a task waiting for input: the answer to its open question, or the
/// decision on its open approval. Either is closed in `task`'s view at once.
async fn reply_to(task: &mut Task, text: String, headers: &HeaderMap) -> Result<(), Refusal> {
    let not_waiting = || {
        (
            INVALID_PARAMS,
            format!("task `{}` is not waiting for input", task.id),
        )
    };
    if ended(&task.view) {
        return Err(not_waiting());
    }
    let question = task.view.questions.keys().next().copied();
    let approval = task.view.approvals.keys().next().copied();
    let decision = || {
        let approve = approves(&text);
        Decision::now(
            approve,
            None,
            (!approve).then(|| text.clone()),
            super::decider(headers),
        )
    };
    let replied = match (question, approval) {
        (None, None) => return Err(not_waiting()),
        (Some(question_id), _) => {
            let text = text.clone();
            task.flow.reply(Reply::Answer { question_id, text }).await
        }
        (None, Some(approval_id)) => {
            let decision = decision();
            task.flow
                .reply(Reply::Decide {
                    approval_id,
                    decision,
                })
                .await
        }
    };
    replied.map_err(|ApiError(_, why)| (INVALID_PARAMS, why))?;
    if let Some(q) = question {
        task.view.questions.remove(&q);
    } else if let Some(a) = approval {
        task.view.approvals.remove(&a);
    }
    Ok(())
}

/// Whether a person's reply to an approval request says yes: one word of assent, in any
/// case, with the punctuation and spaces people add ("Yes.", "OK!", " approved "); anything
/// else rejects, with the reply as the reason.
fn approves(reply: &str) -> bool {
    let word = reply
        .trim()
        .trim_end_matches(|c: char| c.is_ascii_punctuation() || c.is_whitespace())
        .to_lowercase();
    matches!(
        word.as_str(),
        "yes" | "y" | "approve" | "approved" | "ok" | "okay" | "sure" | "go ahead"
    )
}

/// A stream's frame saying task `task`'s status is now `status`.
fn status_update(task: &Task, status: Value) -> Value {
    json!({"statusUpdate": {"taskId": task.id, "contextId": task.context, "status": status}})
}

fn agent_message(task: &str, context: &str, text: &str) -> Value {
    json!({
        "messageId": format!("{task}-m{}", now_ms()),
        "role": "ROLE_AGENT",
        "parts": [{"text": text}],
        "taskId": task,
        "contextId": context,
    })
}

/// `SendStreamingMessage`: the task, then a status update with each finished thought of an
/// agent while it works, until it ends (its artifacts and last status) or waits for input;
/// `place` (its connection's, see `App::hold_long`) is held until the stream ends.
fn stream(
    task: Task,
    id: Value,
    place: Option<tokio::sync::OwnedSemaphorePermit>,
) -> impl IntoResponse + use<> {
    let frame =
        |id: &Value, result: Value| -> Result<Event, std::convert::Infallible> {
            Ok(Event::default()
                .data(json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string()))
        };
    let first = frame(&id, json!({"task": task.json()}));
    let events = follow(&task);
    let updates = futures_util::stream::unfold(
        (task, events, id, false),
        move |(mut task, mut events, id, done)| async move {
            if done {
                return None;
            }
            if ended(&task.view) || waits(&task.view) {
                let mut out = vec![];
                for artifact in task.artifacts().iter().flat_map(|a| a.as_array()).flatten() {
                    out.push(frame(&id, json!({"artifactUpdate": {"taskId": task.id, "contextId": task.context, "artifact": artifact}})));
                }
                out.push(frame(&id, status_update(&task, task.status())));
                return Some((out, (task, events, id, true)));
            }
            let Some((n, e)) = events.next().await else {
                // The events could not be followed further (the store failed): the task
                // as it stands is the last word.
                let last = frame(&id, status_update(&task, task.status()));
                return Some((vec![last], (task, events, id, true)));
            };
            task.apply(n, &e);
            let mut out = vec![];
            if let FlowEvent::Thought { text, .. } = &e
                && !text.trim().is_empty()
            {
                let message = agent_message(&task.id, &task.context, text);
                let working = json!({"state": "TASK_STATE_WORKING", "message": message});
                out.push(frame(&id, status_update(&task, working)));
            }
            Some((out, (task, events, id, false)))
        },
    );
    let all = futures_util::stream::iter([first])
        .chain(updates.flat_map(futures_util::stream::iter))
        .inspect(move |_| {
            let _place = &place;
        });
    (
        StatusCode::OK,
        [(header::CACHE_CONTROL, "no-cache")],
        Sse::new(all).keep_alive(KeepAlive::default()),
    )
}

#[cfg(test)]
mod tests {
    use super::approves;

    #[test]
    fn a_yes_with_punctuation_or_capitals_approves_and_anything_else_rejects() {
        for yes in [
            "yes",
            "Yes.",
            " YES! ",
            "ok",
            "OK.",
            "Approved.",
            "y",
            "Sure!",
            "go ahead.",
        ] {
            assert!(approves(yes), "{yes:?}");
        }
        for no in [
            "no",
            "No.",
            "yes, but not rm",
            "not yet",
            "",
            "...",
            "yesterday",
        ] {
            assert!(!approves(no), "{no:?}");
        }
    }
}
