//! Scripted Anthropic Messages server, for what llama-server's `/v1/messages` lacks:
//! extended thinking with signatures, and prompt-cache accounting. Owns `ScriptedAnthropic`.
//!
//! It keeps the rules of the real API that a client can get wrong, and answers as it does
//! (`{"type": "error", "error": {…}}` with its status) when one is broken:
//! - the server's key must come as `x-api-key` or as `Authorization: Bearer` (as the
//!   official SDKs send it) (401), and `anthropic-version` be present (400);
//! - a `thinking` block sent back must carry the very signature this server issued for its
//!   text (400 `Invalid signature`), and with thinking enabled the last assistant turn that
//!   calls a tool must start with its thinking block (400);
//! - every `tool_result` answers a `tool_use` of the assistant turn just before it (400);
//! - the prefix up to a `cache_control` mark (tools, then system) of at least 1024 tokens
//!   (counted here as 4 characters a token) is written to the cache on first sight and read
//!   from it after: `cache_creation_input_tokens` / `cache_read_input_tokens`, with
//!   `input_tokens` the rest, as Anthropic counts them.
//!
//! Answers are scripted (`push`), whole, or streamed as the API's event sequence when the
//! request asks (`message_start`, `content_block_start` / `_delta` / `_stop` with text,
//! thinking, signature and `input_json` deltas, `ping`, `message_delta`, `message_stop`).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

/// The key the server takes.
pub const KEY: &str = "sk-ant-test";

/// The running server; stops on drop.
pub struct ScriptedAnthropic {
    addr: std::net::SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct Shared {
    /// Each answer's content blocks and stop reason.
    script: Mutex<VecDeque<(Vec<Value>, &'static str)>>,
    /// The signature issued for each thinking text.
    signatures: Mutex<HashMap<String, String>>,
    /// The cached prefixes (their text).
    cached: Mutex<HashSet<String>>,
    requests: Mutex<Vec<Value>>,
}

impl Drop for ScriptedAnthropic {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ScriptedAnthropic {
    pub async fn start() -> ScriptedAnthropic {
        let shared = Arc::new(Shared::default());
        let app = Router::new()
            .route("/v1/messages", post(messages))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        ScriptedAnthropic { addr, shared, task }
    }

    /// The base URL, as Anthropic's SDKs take it (without `/v1`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queue one answer: its content blocks (a `thinking` block's signature is issued by the
    /// server) and its stop reason.
    pub fn push(&self, blocks: Vec<Value>, stop_reason: &'static str) {
        self.shared
            .script
            .lock()
            .unwrap()
            .push_back((blocks, stop_reason));
    }

    /// The request bodies received, in order (refused ones too).
    pub fn requests(&self) -> Vec<Value> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// The signature issued for `thinking`.
    pub fn signature_of(&self, thinking: &str) -> Option<String> {
        self.shared
            .signatures
            .lock()
            .unwrap()
            .get(thinking)
            .cloned()
    }
}

fn error(status: StatusCode, kind: &str, message: String) -> Response {
    let body = json!({"type": "error", "error": {"type": kind, "message": message}});
    (status, axum::Json(body)).into_response()
}

fn invalid(message: String) -> Response {
    error(StatusCode::BAD_REQUEST, "invalid_request_error", message)
}

async fn messages(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return invalid("the body is not JSON".into());
    };
    shared.requests.lock().unwrap().push(req.clone());
    let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
    let bearer = header("authorization").and_then(|v| v.strip_prefix("Bearer "));
    if header("x-api-key").or(bearer) != Some(KEY) {
        return error(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "invalid x-api-key (or Authorization: Bearer)".into(),
        );
    }
    if headers.get("anthropic-version").is_none() {
        return invalid("anthropic-version: header is required".into());
    }
    if let Err(why) = check(&shared, &req) {
        return invalid(why);
    }
    let Some((blocks, stop)) = shared.script.lock().unwrap().pop_front() else {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "api_error",
            "script exhausted".into(),
        );
    };
    let blocks: Vec<Value> = blocks
        .into_iter()
        .map(|mut b| {
            if b["type"] == "thinking" {
                let text = b["thinking"].as_str().unwrap_or_default().to_string();
                let mut signatures = shared.signatures.lock().unwrap();
                let n = signatures.len();
                let sig = signatures
                    .entry(text)
                    .or_insert_with(|| format!("EqQBCkgIARABGAIiQL{n}x/+=sig"));
                b["signature"] = sig.clone().into();
            }
            b
        })
        .collect();
    let usage = usage(&shared, &req, &blocks);
    let message = json!({"id": "msg_01Test", "type": "message", "role": "assistant",
        "model": req["model"], "content": blocks, "stop_reason": stop, "stop_sequence": null,
        "usage": usage});
    if req["stream"] == true {
        return (
            [(header::CONTENT_TYPE, "text/event-stream")],
            events(message),
        )
            .into_response();
    }
    axum::Json(message).into_response()
}

/// The rules of the real API a client can break.
fn check(shared: &Shared, req: &Value) -> Result<(), String> {
    for key in ["model", "max_tokens", "messages"] {
        if req.get(key).is_none() {
            return Err(format!("{key}: Field required"));
        }
    }
    let messages = req["messages"].as_array().ok_or("messages: not a list")?;
    let thinking_on = req["thinking"]["type"] == "enabled";
    let last_assistant = messages.iter().rposition(|m| m["role"] == "assistant");
    let mut offered: Vec<String> = vec![];
    for (i, m) in messages.iter().enumerate() {
        let blocks = m["content"].as_array().cloned().unwrap_or_default();
        let asked = std::mem::take(&mut offered);
        for (j, b) in blocks.iter().enumerate() {
            match b["type"].as_str() {
                Some("thinking") => {
                    let issued = shared
                        .signatures
                        .lock()
                        .unwrap()
                        .get(b["thinking"].as_str().unwrap_or_default())
                        .cloned();
                    if issued.is_none() || b["signature"].as_str() != issued.as_deref() {
                        return Err(format!(
                            "messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
                        ));
                    }
                }
                Some("tool_use") => offered.push(b["id"].as_str().unwrap_or_default().into()),
                Some("tool_result") => {
                    let id = b["tool_use_id"].as_str().unwrap_or_default();
                    if !asked.iter().any(|a| a == id) {
                        return Err(format!(
                            "messages.{i}.content.{j}: unexpected `tool_use_id` found in \
                             `tool_result` blocks: {id}. Each `tool_result` block must have a \
                             corresponding `tool_use` block in the previous message."
                        ));
                    }
                }
                _ => {}
            }
        }
        let calls = blocks.iter().any(|b| b["type"] == "tool_use");
        let first = blocks.first().and_then(|b| b["type"].as_str());
        if thinking_on
            && Some(i) == last_assistant
            && calls
            && !matches!(first, Some("thinking" | "redacted_thinking"))
        {
            return Err(format!(
                "messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but \
                 found `{}`. When `thinking` is enabled, a final `assistant` message must start \
                 with a thinking block",
                first.unwrap_or("nothing")
            ));
        }
    }
    Ok(())
}

/// Tokens of `text`, counted as 4 characters each.
fn tokens(text: &str) -> u64 {
    text.chars().count().div_ceil(4) as u64
}

/// The answer's usage: the cached prefix read or written, the rest as input.
fn usage(shared: &Shared, req: &Value, blocks: &[Value]) -> Value {
    // The prefix in cache order (tools, then system), up to the last mark.
    let mut prefix = String::new();
    let mut marked = String::new();
    let tools = req["tools"].as_array().cloned().unwrap_or_default();
    let system = req["system"].as_array().cloned().unwrap_or_default();
    for part in tools.iter().chain(system.iter()) {
        let mut unmarked = part.clone();
        unmarked.as_object_mut().unwrap().remove("cache_control");
        prefix.push_str(&unmarked.to_string());
        if part.get("cache_control").is_some() {
            marked = prefix.clone();
        }
    }
    let total = tokens(&req.to_string());
    let (mut read, mut written) = (0, 0);
    if tokens(&marked) >= 1024 {
        if shared.cached.lock().unwrap().insert(marked.clone()) {
            written = tokens(&marked);
        } else {
            read = tokens(&marked);
        }
    }
    let output: u64 = blocks.iter().map(|b| tokens(&b.to_string())).sum();
    json!({"input_tokens": total.saturating_sub(read + written),
        "cache_creation_input_tokens": written, "cache_read_input_tokens": read,
        "output_tokens": output})
}

/// A whole message as the event stream the API sends for it.
fn events(message: Value) -> String {
    let mut out = String::new();
    let mut send = |event: &str, data: Value| {
        out.push_str(&format!("event: {event}\ndata: {data}\n\n"));
    };
    let mut start = message.clone();
    start["content"] = json!([]);
    start["stop_reason"] = Value::Null;
    start["usage"]["output_tokens"] = 1.into();
    send(
        "message_start",
        json!({"type": "message_start", "message": start}),
    );
    send("ping", json!({"type": "ping"}));
    let pieces = |text: &str| -> Vec<String> {
        let chars: Vec<char> = text.chars().collect();
        chars.chunks(7).map(|c| c.iter().collect()).collect()
    };
    for (index, block) in message["content"].as_array().unwrap().iter().enumerate() {
        let (empty, deltas): (Value, Vec<Value>) = match block["type"].as_str().unwrap() {
            "text" => (
                json!({"type": "text", "text": ""}),
                pieces(block["text"].as_str().unwrap())
                    .into_iter()
                    .map(|t| json!({"type": "text_delta", "text": t}))
                    .collect(),
            ),
            "thinking" => {
                let mut d: Vec<Value> = pieces(block["thinking"].as_str().unwrap())
                    .into_iter()
                    .map(|t| json!({"type": "thinking_delta", "thinking": t}))
                    .collect();
                d.push(json!({"type": "signature_delta", "signature": block["signature"]}));
                (
                    json!({"type": "thinking", "thinking": "", "signature": ""}),
                    d,
                )
            }
            "tool_use" => (
                json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}),
                pieces(&block["input"].to_string())
                    .into_iter()
                    .map(|p| json!({"type": "input_json_delta", "partial_json": p}))
                    .collect(),
            ),
            _ => (block.clone(), vec![]),
        };
        send(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": empty}),
        );
        for delta in deltas {
            send(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": delta}),
            );
        }
        send(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        );
    }
    send(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": message["stop_reason"],
            "stop_sequence": null}, "usage": {"output_tokens": message["usage"]["output_tokens"]}}),
    );
    send("message_stop", json!({"type": "message_stop"}));
    out
}
