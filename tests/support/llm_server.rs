//! Scripted OpenAI-compatible chat-completions server: the stand-in for a paid LLM API
//! used by the integration tests and benchmarks. Owns `ScriptedLlm` (the running server),
//! `Reply` (one scripted answer) and `Recorded` (one request as received).
//!
//! It speaks the real wire protocol on `127.0.0.1` only:
//! - `POST /v1/chat/completions` (OpenAI shape, use [`ScriptedLlm::base_url`]);
//! - `POST /openai/deployments/{deployment}/chat/completions?api-version=...` (Azure shape,
//!   use [`ScriptedLlm::root_url`]).
//!
//! Every request is recorded (including ones answered with errors, and requests to unknown
//! paths, which get a 404) unless recording is off. Replies are served FIFO from a queue (or
//! from a queue kept for requests whose first user message holds a key, see `push_for`);
//! when the queues are empty a responder (if set) computes one from the request, else the
//! fallback reply is served, or, without one, HTTP 500 `script exhausted`.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

/// A reply computed from a request.
pub type Responder = Arc<dyn Fn(&Request) -> Option<Reply> + Send + Sync>;

/// Told, for each answered request, how long the server held it (its delay, as slept).
pub type HoldObserver = Arc<dyn Fn(&Request, Duration) + Send + Sync>;

/// A request's body as a responder or hold observer sees it: the bytes as they came, and
/// the JSON tree, built only if something asks for it. A benchmark's responder reads the
/// bytes, so the stand-in model does not spend more CPU per call than the runtime it
/// measures (a tree of every request's prompts costs more than handling the call).
pub struct Request<'a> {
    raw: &'a [u8],
    tree: std::sync::OnceLock<Value>,
}

impl<'a> Request<'a> {
    /// The body as received (checked to be JSON).
    pub fn raw(&self) -> &'a [u8] {
        self.raw
    }

    /// The body's JSON tree.
    pub fn json(&self) -> &Value {
        self.tree
            .get_or_init(|| serde_json::from_slice(self.raw).unwrap_or(Value::Null))
    }

    /// The names of the tools the request offers (none for a summary).
    pub fn tool_names(&self) -> Vec<&str> {
        self.json()["tools"]
            .as_array()
            .map(|t| {
                t.iter()
                    .filter_map(|t| t["function"]["name"].as_str())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// What the server itself must know of every request; reading it also checks the JSON.
#[derive(serde::Deserialize)]
struct Head {
    #[serde(default)]
    stream: Value,
    #[serde(default)]
    model: Value,
    #[serde(default)]
    stream_options: Value,
}

/// The running server. Stops (aborts its accept task) on drop.
pub struct ScriptedLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<VecDeque<Reply>>,
    /// Queues served to requests whose first user message contains the key.
    keyed: Mutex<Vec<(String, VecDeque<Reply>)>>,
    fallback: Mutex<Option<Reply>>,
    /// Computes a reply from the request when no queue has one (benchmarks).
    responder: Mutex<Option<Responder>>,
    /// Told how long each request was held (benchmarks).
    observer: Mutex<Option<HoldObserver>>,
    /// Off: requests are not kept (benchmarks with many flows).
    not_recording: std::sync::atomic::AtomicBool,
    /// Answer whole even when asked to stream, as servers that cannot stream do.
    whole_only: std::sync::atomic::AtomicBool,
    requests: Mutex<Vec<Recorded>>,
    next_call_id: AtomicU64,
    next_completion_id: AtomicU64,
}

impl Shared {
    fn recording(&self) -> bool {
        !self.not_recording.load(Ordering::Relaxed)
    }
}

impl ScriptedLlm {
    /// Binds `127.0.0.1:0` and starts serving on the current tokio runtime.
    pub async fn start() -> ScriptedLlm {
        let shared = Arc::new(Shared::default());
        let app = Router::new()
            .route("/v1/chat/completions", post(chat_completions))
            .route(
                "/openai/deployments/{deployment}/chat/completions",
                post(chat_completions),
            )
            .fallback(unknown_path)
            .layer(DefaultBodyLimit::disable())
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0 for the scripted LLM server");
        let addr = listener
            .local_addr()
            .expect("local_addr of scripted LLM server");
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .await
                .expect("scripted LLM server stopped with an error");
        });
        ScriptedLlm { addr, shared, task }
    }

    /// `http://127.0.0.1:PORT/v1` — the OpenAI-style base URL.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// `http://127.0.0.1:PORT` — the root, for Azure-style endpoints.
    pub fn root_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Queues one reply (FIFO).
    pub fn push(&self, reply: Reply) {
        self.shared.queue.lock().unwrap().push_back(reply);
    }

    /// Queues several replies, in order.
    pub fn push_all(&self, replies: impl IntoIterator<Item = Reply>) {
        self.shared.queue.lock().unwrap().extend(replies);
    }

    /// Queues replies for the requests whose first user message contains `needle` (the
    /// task, say), so concurrent flows each get their own script.
    pub fn push_for(&self, needle: &str, replies: impl IntoIterator<Item = Reply>) {
        self.shared
            .keyed
            .lock()
            .unwrap()
            .push((needle.to_owned(), replies.into_iter().collect()));
    }

    /// Every request received so far, in arrival order (including ones answered with errors).
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// The text of every tool result the model was sent, request by request (a result is
    /// in every later request of its conversation too).
    pub fn tool_results(&self) -> Vec<String> {
        self.requests()
            .iter()
            .flat_map(|r| r.messages().clone())
            .filter(|m| m["role"] == "tool")
            .filter_map(|m| m["content"].as_str().map(String::from))
            .collect()
    }

    /// Number of requests received so far.
    pub fn request_count(&self) -> usize {
        self.shared.requests.lock().unwrap().len()
    }

    /// Reply served whenever the queue is empty. `None` (the default) means HTTP 500
    /// with an OpenAI-style error body whose message is `script exhausted`.
    pub fn set_fallback(&self, reply: Option<Reply>) {
        *self.shared.fallback.lock().unwrap() = reply;
    }

    /// When no queue has a reply, ask `responder` (before the fallback).
    pub fn set_responder(&self, responder: Option<Responder>) {
        *self.shared.responder.lock().unwrap() = responder;
    }

    /// Tell `observer` how long each answered request was held, from its arrival to its
    /// answer (benchmarks subtract this "model time" from what they measure).
    pub fn set_hold_observer(&self, observer: Option<HoldObserver>) {
        *self.shared.observer.lock().unwrap() = observer;
    }

    /// Whether requests are kept for `requests()` (on by default).
    /// Answer every request whole, `stream: true` or not (a server that cannot stream).
    pub fn set_whole_only(&self, on: bool) {
        self.shared.whole_only.store(on, Ordering::Relaxed);
    }

    pub fn set_recording(&self, on: bool) {
        self.shared.not_recording.store(!on, Ordering::Relaxed);
    }

    /// Replies still queued (the fallback is not counted).
    pub fn remaining(&self) -> usize {
        self.shared.queue.lock().unwrap().len()
    }

    /// Replies still queued for keyed requests (`push_for`), over all keys.
    pub fn remaining_keyed(&self) -> usize {
        self.shared
            .keyed
            .lock()
            .unwrap()
            .iter()
            .map(|(_, q)| q.len())
            .sum()
    }
}

impl Drop for ScriptedLlm {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One request as the server received it.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// Request path, e.g. `/v1/chat/completions`.
    pub path: String,
    /// Raw query string without `?`, e.g. `api-version=2024-06-01`.
    pub query: Option<String>,
    /// Headers in arrival order; names are lower-case.
    pub headers: Vec<(String, String)>,
    /// The JSON body; `Value::String` of the raw text when it was not valid JSON.
    pub body: Value,
    /// When the request arrived.
    pub arrived: std::time::Instant,
    /// When its answer was sent (set once answered).
    pub answered: Arc<std::sync::OnceLock<std::time::Instant>>,
}

static NO_MESSAGES: Vec<Value> = Vec::new();

impl Recorded {
    /// First header with this name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// `body.messages`, or an empty list when absent.
    pub fn messages(&self) -> &Vec<Value> {
        match self.body.get("messages") {
            Some(Value::Array(messages)) => messages,
            _ => &NO_MESSAGES,
        }
    }

    /// Text of the last `user` message (string content, or the text parts joined).
    pub fn last_user_text(&self) -> Option<String> {
        self.messages()
            .iter()
            .rev()
            .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
            .and_then(content_text)
    }

    /// Text of the first `user` message: the task, or the step an agent works on.
    pub fn first_user_text(&self) -> String {
        self.messages()
            .iter()
            .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
            .and_then(content_text)
            .unwrap_or_default()
    }

    /// Which plan step the request works on, if it is an agent's (its prompt names the job).
    pub fn step(&self) -> Option<usize> {
        let text = self.first_user_text();
        let at = text.find("Your job now is step ")? + "Your job now is step ".len();
        text[at..].split(' ').next()?.parse().ok()
    }

    /// Names from `body.tools[].function.name`, in order.
    pub fn tool_names(&self) -> Vec<String> {
        self.body
            .get("tools")
            .and_then(Value::as_array)
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|t| t.pointer("/function/name").and_then(Value::as_str))
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Text of all `system` (and `developer`) messages, joined with a blank line;
    /// `None` when there are none.
    pub fn system_text(&self) -> Option<String> {
        let parts: Vec<String> = self
            .messages()
            .iter()
            .filter(|m| {
                matches!(
                    m.get("role").and_then(Value::as_str),
                    Some("system" | "developer")
                )
            })
            .filter_map(content_text)
            .collect();
        (!parts.is_empty()).then(|| parts.join("\n\n"))
    }

    /// Whether this request and `other` were both with the server at some moment: each
    /// arrived before the other was answered.
    pub fn overlaps(&self, other: &Recorded) -> bool {
        let end = |r: &Recorded| *r.answered.get().expect("the request was answered");
        self.arrived < end(other) && other.arrived < end(self)
    }

    /// When the answer was sent.
    pub fn answered_at(&self) -> std::time::Instant {
        *self.answered.get().expect("the request was answered")
    }

    /// `body.model`, if present.
    pub fn model(&self) -> Option<&str> {
        self.body.get("model").and_then(Value::as_str)
    }
}

/// A message's content as text: the string itself, or the `text` parts of an array joined.
fn content_text(message: &Value) -> Option<String> {
    match message.get("content")? {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(""),
        ),
        _ => None,
    }
}

/// One scripted answer.
#[derive(Clone, Debug)]
pub struct Reply {
    kind: Kind,
    retry_after: Option<u64>,
    delay_ms: u64,
    prompt_tokens: u64,
    completion_tokens: u64,
    /// Sent as `finish_reason: "length"`: the answer reached `max_tokens`.
    cut_off: bool,
    /// Asked to stream: the pause between two chunks.
    chunk_gap_ms: u64,
    /// Answered only once this is open (after any delay).
    gate: Option<Gate>,
}

/// A gate a test opens when it is ready for the replies held by it (`Reply::held_by`) to
/// go out: a step after which the test must look at something, whatever the timing.
#[derive(Clone, Debug)]
pub struct Gate(Arc<tokio::sync::watch::Sender<bool>>);

impl Gate {
    pub fn new() -> Gate {
        Gate(Arc::new(tokio::sync::watch::Sender::new(false)))
    }

    /// Let every reply held by this gate go, now and later.
    pub fn open(&self) {
        self.0.send_replace(true);
    }

    async fn passed(&self) {
        let _ = self.0.subscribe().wait_for(|open| *open).await;
    }
}

#[derive(Clone, Debug)]
enum Kind {
    /// An assistant message: optional content and `(name, raw arguments)` tool calls.
    Message {
        content: Option<String>,
        calls: Vec<(String, String)>,
    },
    /// An error status with an OpenAI-style error body; `message` overrides the default text.
    Status { code: u16, message: Option<String> },
}

impl Reply {
    fn message(content: Option<String>, calls: Vec<(String, String)>) -> Reply {
        Reply {
            kind: Kind::Message { content, calls },
            retry_after: None,
            delay_ms: 0,
            prompt_tokens: 10,
            completion_tokens: 5,
            cut_off: false,
            chunk_gap_ms: 0,
            gate: None,
        }
    }

    /// Asked to stream, pause this long between chunks (a slow model that is working).
    pub fn chunk_gap(mut self, ms: u64) -> Reply {
        self.chunk_gap_ms = ms;
        self
    }

    /// The answer as one cut off at `max_tokens` (`finish_reason: "length"`).
    pub fn cut_off(mut self) -> Reply {
        self.cut_off = true;
        self
    }

    /// Assistant text, `finish_reason: "stop"`.
    pub fn text(content: &str) -> Reply {
        Reply::message(Some(content.to_owned()), Vec::new())
    }

    /// One tool call with `arguments = args.to_string()`, `finish_reason: "tool_calls"`.
    pub fn tool(name: &str, args: Value) -> Reply {
        Reply::message(None, vec![(name.to_owned(), args.to_string())])
    }

    /// One tool call whose `arguments` string is sent verbatim (e.g. malformed JSON).
    pub fn tool_raw(name: &str, raw_args: &str) -> Reply {
        Reply::message(None, vec![(name.to_owned(), raw_args.to_owned())])
    }

    /// Several tool calls in one assistant message.
    pub fn tools(calls: Vec<(&str, Value)>) -> Reply {
        Reply::message(
            None,
            calls
                .into_iter()
                .map(|(name, args)| (name.to_owned(), args.to_string()))
                .collect(),
        )
    }

    /// Sets the assistant content (alongside any tool calls). On a `status` reply it
    /// replaces the error message instead.
    pub fn with_text(mut self, text: &str) -> Reply {
        match &mut self.kind {
            Kind::Message { content, .. } => *content = Some(text.to_owned()),
            Kind::Status { message, .. } => *message = Some(text.to_owned()),
        }
        self
    }

    /// An HTTP error with body `{"error":{"message","type","code"}}`.
    pub fn status(code: u16) -> Reply {
        Reply {
            kind: Kind::Status {
                code,
                message: None,
            },
            ..Reply::message(None, Vec::new())
        }
    }

    /// Adds a `Retry-After: <secs>` header to the response.
    pub fn retry_after(mut self, secs: u64) -> Reply {
        self.retry_after = Some(secs);
        self
    }

    /// Sleeps this long before answering (the request is recorded on arrival).
    pub fn delay(mut self, ms: u64) -> Reply {
        self.delay_ms = ms;
        self
    }

    /// Answered only once `gate` is open (the request is recorded on arrival).
    pub fn held_by(mut self, gate: &Gate) -> Reply {
        self.gate = Some(gate.clone());
        self
    }

    /// Usage figures reported; the default is prompt 10, completion 5.
    pub fn usage(mut self, prompt: u64, completion: u64) -> Reply {
        self.prompt_tokens = prompt;
        self.completion_tokens = completion;
        self
    }
}

/// Keep the request; the returned cell is set when it is answered.
fn record(
    shared: &Shared,
    uri: &Uri,
    headers: &HeaderMap,
    body: &Value,
) -> Arc<std::sync::OnceLock<std::time::Instant>> {
    let answered = Arc::new(std::sync::OnceLock::new());
    if !shared.recording() {
        return answered;
    }
    let headers = headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_ascii_lowercase(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    shared.requests.lock().unwrap().push(Recorded {
        path: uri.path().to_owned(),
        query: uri.query().map(str::to_owned),
        headers,
        body: body.clone(),
        arrived: std::time::Instant::now(),
        answered: answered.clone(),
    });
    answered
}

fn error_response(code: u16, message: &str, retry_after: Option<u64>) -> Response {
    let (kind, err_code) = match code {
        400 => ("invalid_request_error", "invalid_request"),
        401 => ("authentication_error", "invalid_api_key"),
        403 => ("permission_error", "permission_denied"),
        404 => ("not_found_error", "not_found"),
        408 => ("timeout_error", "timeout"),
        429 => ("rate_limit_error", "rate_limit_exceeded"),
        503 => ("server_error", "service_unavailable"),
        c if c >= 500 => ("server_error", "server_error"),
        _ => ("invalid_request_error", "error"),
    };
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = json!({
        "error": { "message": message, "type": kind, "param": null, "code": err_code }
    });
    with_retry_after((status, axum::Json(body)).into_response(), retry_after)
}

fn with_retry_after(mut response: Response, retry_after: Option<u64>) -> Response {
    if let Some(secs) = retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

async fn unknown_path(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body = serde_json::from_slice(&body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
    let _ = record(&shared, &uri, &headers, &body).set(std::time::Instant::now());
    error_response(
        404,
        &format!("scripted LLM server: no route for {}", uri.path()),
        None,
    )
}

async fn chat_completions(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let arrived = std::time::Instant::now();
    let head: Result<Head, _> = serde_json::from_slice(&body);
    let Ok(head) = head else {
        let raw = String::from_utf8_lossy(&body).into_owned();
        let _ = record(&shared, &uri, &headers, &Value::String(raw)).set(std::time::Instant::now());
        return error_response(400, "request body is not valid JSON", None);
    };
    let body = Request {
        raw: &body,
        tree: Default::default(),
    };
    let answered = if shared.recording() {
        Some(record(&shared, &uri, &headers, body.json()))
    } else {
        None
    };
    let keyed = {
        let mut keyed = shared.keyed.lock().unwrap();
        if keyed.is_empty() {
            None
        } else {
            let first_user = body.json()["messages"]
                .as_array()
                .and_then(|ms| ms.iter().find(|m| m["role"] == "user"))
                .and_then(content_text)
                .unwrap_or_default();
            keyed
                .iter_mut()
                .find(|(needle, _)| first_user.contains(needle.as_str()))
                .and_then(|(_, queue)| queue.pop_front())
        }
    };
    let reply = keyed.or_else(|| shared.queue.lock().unwrap().pop_front());
    let computed = || {
        let responder = shared.responder.lock().unwrap().clone();
        responder.and_then(|r| r(&body))
    };
    let reply = match reply
        .or_else(computed)
        .or_else(|| shared.fallback.lock().unwrap().clone())
    {
        Some(reply) => reply,
        None => {
            if let Some(a) = answered {
                let _ = a.set(std::time::Instant::now());
            }
            return error_response(500, "script exhausted", None);
        }
    };
    // The answer is made before the delay, so the time it takes is the model's and the
    // answer leaves as soon as it is due, as a model's finished answer would.
    let delay = Duration::from_millis(reply.delay_ms);
    let gate = reply.gate.clone();
    let response = answer(&shared, &uri, &head, reply);
    if !delay.is_zero() {
        // Tokio's timer wakes on whole milliseconds: answers due within one go out together.
        tokio::time::sleep_until((arrived + delay).into()).await;
    }
    if let Some(gate) = gate {
        gate.passed().await;
    }
    let observer = shared.observer.lock().unwrap().clone();
    if let Some(observe) = observer {
        observe(&body, arrived.elapsed());
    }
    if let Some(a) = answered {
        let _ = a.set(std::time::Instant::now());
    }
    response
}

/// The HTTP response for `reply`: a chat completion, or the scripted error.
fn answer(shared: &Shared, uri: &Uri, head: &Head, reply: Reply) -> Response {
    let (content, calls) = match reply.kind {
        Kind::Status { code, message } => {
            let message = message.unwrap_or_else(|| format!("scripted error {code}"));
            return error_response(code, &message, reply.retry_after);
        }
        Kind::Message { content, calls } => (content, calls),
    };

    let mut message = json!({ "role": "assistant", "content": content });
    let finish_reason = if reply.cut_off {
        "length"
    } else if calls.is_empty() {
        "stop"
    } else {
        let tool_calls: Vec<Value> = calls
            .into_iter()
            .map(|(name, arguments)| {
                let n = shared.next_call_id.fetch_add(1, Ordering::Relaxed) + 1;
                json!({
                    "id": format!("call_{n}"),
                    "type": "function",
                    "function": { "name": name, "arguments": arguments }
                })
            })
            .collect();
        message["tool_calls"] = Value::Array(tool_calls);
        "tool_calls"
    };

    let model = head
        .model
        .as_str()
        .map(str::to_owned)
        .or_else(|| {
            // Azure puts the deployment in the path and may omit `model`.
            uri.path()
                .strip_prefix("/openai/deployments/")
                .and_then(|rest| rest.split('/').next())
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "scripted".to_owned());
    let n = shared.next_completion_id.fetch_add(1, Ordering::Relaxed) + 1;
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let response = json!({
        "id": format!("chatcmpl-scripted-{n}"),
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": finish_reason
        }],
        "usage": {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens
        }
    });
    if head.stream == true && !shared.whole_only.load(Ordering::Relaxed) {
        let usage = head.stream_options["include_usage"] == true;
        return streamed(response, usage, Duration::from_millis(reply.chunk_gap_ms));
    }
    with_retry_after(axum::Json(response).into_response(), reply.retry_after)
}

/// `completion` as the event stream OpenAI-compatible servers send for `stream: true`: the
/// role, the text in pieces of a few characters, each tool call's id and name and then its
/// arguments in pieces, the finish reason, the usage in a chunk without choices when asked
/// (`stream_options.include_usage`, as OpenAI sends it only then), `[DONE]`; `gap` between
/// chunks.
fn streamed(completion: Value, with_usage: bool, gap: Duration) -> Response {
    let head = |delta: Value, finish: Value| {
        json!({"id": completion["id"], "object": "chat.completion.chunk",
            "created": completion["created"], "model": completion["model"],
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let pieces = |text: &str| -> Vec<String> {
        let chars: Vec<char> = text.chars().collect();
        chars.chunks(3).map(|c| c.iter().collect()).collect()
    };
    let choice = &completion["choices"][0];
    let message = &choice["message"];
    let mut chunks = vec![head(
        json!({"role": "assistant", "content": null}),
        Value::Null,
    )];
    if let Some(text) = message["content"].as_str() {
        for piece in pieces(text) {
            chunks.push(head(json!({"content": piece}), Value::Null));
        }
    }
    for (i, call) in message["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        chunks.push(head(
            json!({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                "function": {"name": call["function"]["name"], "arguments": ""}}]}),
            Value::Null,
        ));
        for piece in pieces(call["function"]["arguments"].as_str().unwrap_or("")) {
            chunks.push(head(
                json!({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}),
                Value::Null,
            ));
        }
    }
    chunks.push(head(json!({}), choice["finish_reason"].clone()));
    if with_usage {
        let mut usage = head(Value::Null, Value::Null);
        usage["choices"] = json!([]);
        usage["usage"] = completion["usage"].clone();
        chunks.push(usage);
    }
    let mut frames: Vec<String> = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    frames.push("data: [DONE]\n\n".into());
    let body = futures_util::stream::unfold(
        (frames.into_iter(), true),
        move |(mut rest, first)| async move {
            let frame = rest.next()?;
            if !first && !gap.is_zero() {
                tokio::time::sleep(gap).await;
            }
            Some((
                Ok::<_, std::convert::Infallible>(Bytes::from(frame)),
                (rest, false),
            ))
        },
    );
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(axum::body::Body::from_stream(body))
        .unwrap()
}
