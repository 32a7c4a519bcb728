//! `manus-rt serve`: a Runtime behind HTTP (axum). This module owns the flow table: each
//! submitted flow's numbered event log (ids from 1), its `FlowView` and its control. Event
//! streams are Server-Sent Events that replay the log after `Last-Event-ID` and then follow
//! it live. Bearer-token auth, the `Host` check (DNS rebinding), the refusal to listen
//! beyond loopback without tokens, body limits, JSON errors, Prometheus metrics and the
//! OpenAPI document are here too; docs/openapi.json describes every route. `conns.rs` is
//! the accept loop (header-read time and open connections bounded); `console.rs` the web
//! console's files and the workspace files it shows.

mod a2a;
mod agui;
pub mod conns;
mod console;
mod flows;
pub mod oauth;

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::{Stream, StreamExt};
use manus_actors::protocol::{FlowEvent, FlowMode};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::cluster::{Node, SharedRuntime};
use crate::runtime::{FlowHandle, Runtime, SubmitOptions};
use crate::settings::{LOOPBACK_HOSTS, ServerSettings};
use crate::store::StoreUrl;
use flows::{FlowApproval, Held, Numbered, Reply};

/// The OpenAPI 3.1 description of this service.
pub const OPENAPI: &str = include_str!("../docs/openapi.json");

/// The service's state: the runtime, its flows, and counters.
pub struct App {
    /// Taken out at shutdown; requests after that get 503.
    runtime: SharedRuntime,
    settings: ServerSettings,
    /// The flows this node holds.
    held: Arc<Held>,
    metrics: Arc<Metrics>,
    /// Cluster mode: the store flows are queued in and read from, and this node's room.
    node: Option<Arc<Node>>,
    /// Where the flows' files are on this host (`Runtime::workspace`), for GET
    /// /v1/flows/{id}/files; kept here so reading one needs no lock on the runtime.
    workspace: Option<std::path::PathBuf>,
    /// One permit per connection an answer that takes long (an event stream, a blocking
    /// A2A wait) may hold (`conns::long_held`).
    long_held: Arc<tokio::sync::Semaphore>,
}

#[derive(Default)]
struct Metrics {
    submitted: AtomicU64,
    llm_calls: AtomicU64,
    prompt_tokens: AtomicU64,
    completion_tokens: AtomicU64,
    /// Of the prompt tokens, those read from and written to a provider's prompt cache.
    cache_read_tokens: AtomicU64,
    cache_write_tokens: AtomicU64,
    tool_ok: AtomicU64,
    tool_error: AtomicU64,
    questions: AtomicU64,
    /// Finished flows by status; cost in millionths, to stay an integer.
    finished: Mutex<BTreeMap<String, u64>>,
    cost_micros: AtomicU64,
}

impl Metrics {
    fn observe(&self, e: &FlowEvent) {
        match e {
            FlowEvent::LlmCalled { usage, .. } => {
                self.llm_calls.fetch_add(1, Ordering::Relaxed);
                self.prompt_tokens
                    .fetch_add(usage.prompt_tokens, Ordering::Relaxed);
                self.completion_tokens
                    .fetch_add(usage.completion_tokens, Ordering::Relaxed);
                self.cache_read_tokens
                    .fetch_add(usage.cache_read_tokens, Ordering::Relaxed);
                self.cache_write_tokens
                    .fetch_add(usage.cache_write_tokens, Ordering::Relaxed);
                self.cost_micros
                    .fetch_add((usage.cost * 1e6).round() as u64, Ordering::Relaxed);
            }
            FlowEvent::ToolFinished { ok: true, .. } => {
                self.tool_ok.fetch_add(1, Ordering::Relaxed);
            }
            FlowEvent::ToolFinished { ok: false, .. } => {
                self.tool_error.fetch_add(1, Ordering::Relaxed);
            }
            FlowEvent::Question { .. } => {
                self.questions.fetch_add(1, Ordering::Relaxed);
            }
            FlowEvent::FlowFinished { outcome } => {
                let status = serde_json::to_value(outcome.status)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
                if let Ok(mut f) = self.finished.lock() {
                    *f.entry(status).or_default() += 1;
                }
            }
            _ => {}
        }
    }
}

/// An error answer: a status and a sentence, sent as `{"error": {"status", "message"}}`.
#[derive(Debug)]
pub struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"status": self.0.as_u16(), "message": self.1}});
        (self.0, Json(body)).into_response()
    }
}

/// A JSON body, or a 4xx that says what is wrong with it.
fn body<T>(parsed: Result<Json<T>, JsonRejection>) -> Result<T, ApiError> {
    parsed.map(|Json(v)| v).map_err(|rejection| {
        let status = match &rejection {
            JsonRejection::MissingJsonContentType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            JsonRejection::JsonDataError(_) => StatusCode::UNPROCESSABLE_ENTITY,
            JsonRejection::BytesRejection(_) => StatusCode::PAYLOAD_TOO_LARGE,
            _ => StatusCode::BAD_REQUEST,
        };
        ApiError(status, rejection.body_text())
    })
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl App {
    pub fn new(runtime: Runtime, settings: ServerSettings) -> Arc<App> {
        let node = match (&runtime.config().cluster, runtime.store()) {
            (Some(c), Some(store)) => Some(Arc::new(Node::new(store.clone(), c.clone()))),
            _ => None,
        };
        Arc::new(App {
            node,
            workspace: runtime.workspace().map(|w| w.to_path_buf()),
            runtime: Arc::new(tokio::sync::RwLock::new(Some(runtime))),
            held: Arc::new(Held::new(settings.keep_finished)),
            long_held: Arc::new(tokio::sync::Semaphore::new(conns::long_held(
                settings.max_connections,
            ))),
            settings,
            metrics: Arc::new(Metrics::default()),
        })
    }

    /// Put a started flow in the table and log its events as they come.
    pub fn track(self: &Arc<Self>, handle: FlowHandle) -> String {
        self.track_holding(handle, None)
    }

    /// `track`, holding `permit` (a cluster node's room) until the flow ends.
    fn track_holding(
        &self,
        handle: FlowHandle,
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> String {
        self.metrics.submitted.fetch_add(1, Ordering::Relaxed);
        let metrics = self.metrics.clone();
        self.held.track(handle, permit, move |e| metrics.observe(e))
    }

    /// Cluster mode: start the node claiming queued runs, each tracked here while it runs.
    pub fn start_claiming(self: &Arc<Self>, url: &StoreUrl) {
        let Some(node) = &self.node else { return };
        let app = self.clone();
        node.start(url, self.runtime.clone(), move |handle, permit| {
            app.track_holding(handle, Some(permit));
        });
    }

    /// Cluster mode: stop claiming, and give this node's flows up to `grace` to finish
    /// before the rest are handed back to the other nodes.
    pub async fn drain(&self, grace: std::time::Duration) {
        if let Some(node) = &self.node {
            node.drain(&self.runtime, grace).await;
        }
    }

    /// A connection's place for an answer that takes long (an event stream, a blocking
    /// wait), held until dropped; `None` when every place is taken.
    fn hold_long(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.long_held.clone().try_acquire_owned().ok()
    }

    /// The 503 for a stream that finds every place for long answers taken.
    fn no_room_to_stream(&self) -> ApiError {
        let max = self.settings.max_connections;
        ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "every place for an event stream or a blocking wait is taken ({} of the \
                 [server] max_connections = {max} connections; the rest are kept for short \
                 requests such as /healthz and cancels): try again later, or raise \
                 max_connections",
                conns::long_held(max)
            ),
        )
    }

    /// Shut the runtime down; flows still running stop where they are, and later requests
    /// to start one are refused.
    pub async fn shutdown(&self) {
        if let Some(runtime) = self.runtime.write().await.take() {
            runtime.shutdown().await;
        }
    }
}

/// The router: every route of docs/openapi.json.
pub fn router(app: Arc<App>) -> Router {
    let limit = app.settings.max_body_bytes;
    let guarded = Router::new()
        .route("/v1/flows", post(submit).get(list))
        .route("/v1/flows/{id}", get(show).delete(cancel))
        .route("/v1/flows/{id}/events", get(events))
        .route("/v1/flows/{id}/answers", post(answer))
        .route("/v1/flows/{id}/follow-up", post(follow_up))
        .route("/v1/threads/{id}", get(thread))
        .route("/v1/flows/{id}/fork", post(fork))
        .route("/v1/flows/{id}/approvals/{aid}", post(decide))
        .route("/v1/flows/{id}/files/{*path}", get(console::file))
        .route("/v1/approvals", get(approvals))
        .route("/a2a", post(a2a::rpc))
        .route("/metrics", get(metrics))
        .route_layer(middleware::from_fn_with_state(app.clone(), auth));
    Router::new()
        .merge(guarded)
        .route("/healthz", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/readyz", get(ready))
        // The console's files hold no data: public, but behind the Host check.
        .route("/", get(console::page))
        .route("/console/{name}", get(console::asset))
        .route("/.well-known/agent-card.json", get(agent_card))
        .route(
            "/openapi.json",
            get(|| async { ([(header::CONTENT_TYPE, "application/json")], OPENAPI) }),
        )
        .fallback(|| async {
            ApiError(
                StatusCode::NOT_FOUND,
                "no such route; GET /openapi.json describes the API".into(),
            )
        })
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn_with_state(app.clone(), host_check))
        .with_state(app)
}

/// The A2A agent card (public: it says where to call and that a token is needed).
async fn agent_card(State(app): State<Arc<App>>, headers: HeaderMap) -> Json<Value> {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1");
    Json(a2a::card(&app, host))
}

/// Refuse requests whose `Host` is not one this service answers (see `host_allowed`).
async fn host_check(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| req.uri().authority().map(|a| a.as_str()));
    if app.settings.host_allowed(host) {
        return next.run(req).await;
    }
    ApiError(
        StatusCode::FORBIDDEN,
        format!(
            "Host `{}` is not served here: this service answers only loopback hosts ({}) and \
             those of [server] allowed_hosts, so that a web page cannot reach it through a \
             name of its own (DNS rebinding); add the name to allowed_hosts to serve it",
            host.unwrap_or(""),
            LOOPBACK_HOSTS.join(", ")
        ),
    )
    .into_response()
}

/// Bind `bind` for the service, unless `settings` forbid listening there.
pub async fn listen(
    bind: &str,
    settings: &ServerSettings,
) -> Result<tokio::net::TcpListener, String> {
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .map_err(|e| format!("cannot listen on {bind}: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("cannot listen on {bind}: {e}"))?;
    match settings.refuse_to_listen(addr) {
        Some(why) => Err(why),
        None => Ok(listener),
    }
}

/// Serve `app` on `listener` until `shutdown` resolves, then let open requests finish
/// (the caller bounds how long it waits): header-read time and open connections bounded
/// (see `conns`).
pub async fn run(
    listener: tokio::net::TcpListener,
    app: Arc<App>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let max = app.settings.max_connections;
    conns::serve(listener, router(app), max, shutdown).await;
}

/// Bearer-token check, when tokens are configured.
async fn auth(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    match bearer_refusal(&app.settings.api_tokens, req.headers()) {
        Some(refused) => refused,
        None => next.run(req).await,
    }
}

/// Who asks, by the bearer token of a request let in: `token-` and the first 12 hex digits
/// of the token's SHA-256 (so the run store never holds a token). It names the `user`
/// namespace of the notes the flows it starts keep ([memory]); `None` without tokens, and
/// such flows are the `local` user's.
pub fn caller(tokens: &[String], headers: &HeaderMap) -> Option<String> {
    use sha2::{Digest, Sha256};
    let token = headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")?;
    if !tokens.iter().any(|t| t == token) {
        return None;
    }
    let digest = Sha256::digest(token.as_bytes());
    let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
    Some(format!("token-{hex}"))
}

/// The 401 for a request whose `headers` do not carry one of `tokens` as `Authorization:
/// Bearer`, when there are tokens; `None` lets it through. `serve` and `mcp-server
/// --transport http` check their requests with this.
pub fn bearer_refusal(tokens: &[String], headers: &HeaderMap) -> Option<Response> {
    if tokens.is_empty() {
        return None;
    }
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(token) if tokens.iter().any(|t| t == token) => None,
        Some(_) => Some(
            ApiError(
                StatusCode::UNAUTHORIZED,
                "the bearer token is not valid".into(),
            )
            .into_response(),
        ),
        None => {
            let mut r = ApiError(
                StatusCode::UNAUTHORIZED,
                "this server needs `Authorization: Bearer <token>` ([server] api_tokens)".into(),
            )
            .into_response();
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                "Bearer".parse().expect("a header value"),
            );
            Some(r)
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SubmitBody {
    task: String,
    /// `plan` (default) or `single`.
    #[serde(default)]
    mode: Option<String>,
}

async fn submit(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    parsed: Result<Json<SubmitBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    start(&app, &headers, body(parsed)?, None).await
}

/// A follow-up to flow `id`: the next turn of its conversation (`SubmitOptions::continues`).
async fn follow_up(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    parsed: Result<Json<SubmitBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    start(&app, &headers, body(parsed)?, Some(id)).await
}

/// The thread flow `id` belongs to, turn by turn.
async fn thread(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<Json<flows::ThreadDoc>, ApiError> {
    Ok(Json(app.thread(&id).await?))
}

/// Start the flow `b` asks for, continuing `continues`'s conversation if given.
async fn start(
    app: &App,
    headers: &HeaderMap,
    b: SubmitBody,
    continues: Option<String>,
) -> Result<Response, ApiError> {
    if b.task.trim().is_empty() {
        return Err(ApiError(
            StatusCode::UNPROCESSABLE_ENTITY,
            "`task` is empty; say what to do".into(),
        ));
    }
    let mode = match b.mode.as_deref() {
        None | Some("plan") => FlowMode::Plan,
        Some("single") => FlowMode::Single,
        Some(other) => {
            return Err(ApiError(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("`mode` is \"{other}\"; use \"plan\" or \"single\""),
            ));
        }
    };
    let options = SubmitOptions {
        mode,
        deltas: true,
        continues,
        user: caller(&app.settings.api_tokens, headers),
    };
    let (id, queued) = app.start(&b.task, options).await?;
    Ok(created(&id, if queued { "queued" } else { "running" }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ForkBody {
    at_step: usize,
    #[serde(default)]
    task: Option<String>,
    #[serde(default)]
    step_text: Option<String>,
}

/// Fork finished run `id` at a step: a new flow, run here, in a fresh workspace beside
/// this node's.
async fn fork(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    parsed: Result<Json<ForkBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let b = body(parsed)?;
    for (name, text) in [("task", &b.task), ("step_text", &b.step_text)] {
        if text.as_deref().is_some_and(|t| t.trim().is_empty()) {
            return Err(ApiError(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("`{name}` is empty; leave it out to keep the run's own"),
            ));
        }
    }
    let options = crate::runtime::ForkOptions {
        at_step: b.at_step,
        task: b.task,
        step_text: b.step_text,
        workspace: None,
    };
    let forked = app.fork(&id, options).await?;
    Ok(created(&forked, "running"))
}

/// 202 with `body`: the request is taken and will be carried out.
fn accepted(body: Value) -> Response {
    (StatusCode::ACCEPTED, Json(body)).into_response()
}

/// The answer to a flow submitted: 201, where it is, and its status.
fn created(id: &str, status: &str) -> Response {
    let location = format!("/v1/flows/{id}");
    let reply = json!({
        "id": id,
        "status": status,
        "links": {"self": location, "events": format!("{location}/events")},
    });
    (
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(reply),
    )
        .into_response()
}

async fn list(State(app): State<Arc<App>>) -> Result<Json<Value>, ApiError> {
    Ok(Json(json!({ "flows": app.flow_docs().await? })))
}

async fn show(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<Json<flows::FlowDoc>, ApiError> {
    Ok(Json(app.flow(&id).await?.doc(true).await?))
}

/// Readiness: 200 while this process can take work, which needs its run store (if it
/// has one) to answer; 503 saying why otherwise (`/healthz` is liveness: the process
/// answers at all).
async fn ready(State(app): State<Arc<App>>) -> Response {
    let store = app
        .runtime
        .read()
        .await
        .as_ref()
        .map(|r| r.store().cloned());
    let Some(store) = store else {
        return ApiError(StatusCode::SERVICE_UNAVAILABLE, "shutting down".into()).into_response();
    };
    match store {
        None => Json(json!({"status": "ready"})).into_response(),
        Some(store) => match store.ping(READY_WITHIN).await {
            Ok(()) => Json(json!({"status": "ready", "store": "ok"})).into_response(),
            Err(e) => {
                ApiError(StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {e}")).into_response()
            }
        },
    }
}

/// How long readiness waits for the run store's answer.
const READY_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

async fn cancel(State(app): State<Arc<App>>, Path(id): Path<String>) -> Result<Response, ApiError> {
    app.flow(&id).await?.cancel().await?;
    Ok(accepted(json!({"id": id, "status": "cancelling"})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AnswerBody {
    question_id: u64,
    text: String,
}

async fn answer(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    parsed: Result<Json<AnswerBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let b = body(parsed)?;
    let reply = Reply::Answer {
        question_id: b.question_id,
        text: b.text,
    };
    app.flow(&id).await?.reply(reply).await?;
    Ok(accepted(
        json!({"id": id, "question_id": b.question_id, "status": "answered"}),
    ))
}

/// Every tool call waiting for approval, in every flow held.
async fn approvals(State(app): State<Arc<App>>) -> Json<Value> {
    let all: Vec<FlowApproval> = app.held.all().iter().flat_map(|e| e.approvals()).collect();
    Json(json!({ "approvals": all }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DecideBody {
    approve: bool,
    /// Run the call with these arguments instead (an object, or its JSON text).
    #[serde(default)]
    arguments: Option<Value>,
    /// Why not: the model reads it as the call's result.
    #[serde(default)]
    reason: Option<String>,
}

/// Who decides, as the log and the flow's events name them: the bearer token's last four
/// characters (never the token), or `loopback` on a service without tokens.
fn decider(headers: &HeaderMap) -> String {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|t| {
            let tail: String = t
                .chars()
                .rev()
                .take(4)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            format!("token …{tail}")
        })
        .unwrap_or_else(|| "loopback".into())
}

async fn decide(
    State(app): State<Arc<App>>,
    Path((id, aid)): Path<(String, u64)>,
    headers: HeaderMap,
    parsed: Result<Json<DecideBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let b = body(parsed)?;
    let arguments = match b.arguments {
        None => None,
        Some(Value::String(text)) => Some(text),
        Some(v) => Some(v.to_string()),
    }
    .map(|text| crate::approvals::edited_arguments(&text))
    .transpose()
    .map_err(|why| {
        ApiError(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("`arguments`: {why}"),
        )
    })?;
    let decision =
        manus_actors::protocol::Decision::now(b.approve, arguments, b.reason, decider(&headers));
    let status = if decision.approve {
        "approved"
    } else {
        "rejected"
    };
    let reply = Reply::Decide {
        approval_id: aid,
        decision,
    };
    app.flow(&id).await?.reply(reply).await?;
    Ok(accepted(
        json!({"id": id, "approval_id": aid, "status": status}),
    ))
}

/// A flow's events as the service streams them.
type EventStream = std::pin::Pin<Box<dyn Stream<Item = Result<Event, Infallible>> + Send>>;

/// The event log from after `Last-Event-ID` (or `?after=N`), then live, ending after
/// `flow_finished`; as AG-UI events with `?protocol=ag-ui`.
async fn events(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    axum::extract::Query(q): axum::extract::Query<HashMap<String, String>>,
) -> Result<Sse<axum::response::sse::KeepAliveStream<EventStream>>, ApiError> {
    let given = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .or(q.get("after").map(String::as_str));
    // Event numbers are stored signed: one past i64::MAX names no event anywhere.
    let after = match given {
        None => 0,
        Some(s) => s
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|n| i64::try_from(*n).is_ok())
            .ok_or_else(|| {
                ApiError(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "Last-Event-ID must be an event number from 0 to {}, got `{s}`",
                        i64::MAX
                    ),
                )
            })?,
    };
    let ag_ui = match q.get("protocol").map(String::as_str) {
        None | Some("manus") => false,
        Some("ag-ui") if after == 0 => true,
        Some("ag-ui") => {
            return Err(ApiError(
                StatusCode::BAD_REQUEST,
                "an AG-UI stream starts at the run's beginning (its state and open messages need \
                 it): leave out Last-Event-ID"
                    .into(),
            ));
        }
        Some(other) => {
            return Err(ApiError(
                StatusCode::BAD_REQUEST,
                format!("protocol=\"{other}\": use \"manus\" (the default) or \"ag-ui\""),
            ));
        }
    };
    let flow = app.flow(&id).await?;
    let place = app.hold_long().ok_or_else(|| app.no_room_to_stream())?;
    let numbered: Numbered = flow.follow(after);
    let stream: EventStream = if ag_ui {
        let mut run = agui::AgUi::default();
        Box::pin(numbered.flat_map(move |(_, e)| {
            let events: Vec<Result<Event, Infallible>> = run
                .translate(&e)
                .into_iter()
                .map(|v| Ok(Event::default().data(v.to_string())))
                .collect();
            futures_util::stream::iter(events)
        }))
    } else {
        Box::pin(numbered.map(|(n, e)| {
            let data = serde_json::to_value(&e).unwrap_or_default();
            let kind = data["event"].as_str().unwrap_or("event").to_string();
            Ok(Event::default()
                .id(n.to_string())
                .event(kind)
                .data(data.to_string()))
        }))
    };
    // The place is given back when the stream ends or its client leaves.
    let stream: EventStream = Box::pin(stream.inspect(move |_| {
        let _place = &place;
    }));
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    let m = &app.metrics;
    let running = app.held.running();
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, samples: &[(&str, String)]| {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
        for (labels, value) in samples {
            out.push_str(&format!("{name}{labels} {value}\n"));
        }
    };
    let n = |a: &AtomicU64| a.load(Ordering::Relaxed).to_string();
    metric(
        "manus_flows_submitted_total",
        "counter",
        "Flows submitted.",
        &[("", n(&m.submitted))],
    );
    metric(
        "manus_flows_running",
        "gauge",
        "Flows not yet finished.",
        &[("", running.to_string())],
    );
    let finished: Vec<(String, String)> = m
        .finished
        .lock()
        .map(|f| {
            f.iter()
                .map(|(s, c)| (format!("{{status=\"{s}\"}}"), c.to_string()))
                .collect()
        })
        .unwrap_or_default();
    let finished: Vec<(&str, String)> = finished
        .iter()
        .map(|(l, v)| (l.as_str(), v.clone()))
        .collect();
    metric(
        "manus_flows_finished_total",
        "counter",
        "Flows finished, by status.",
        &finished,
    );
    if let Some(store) = app.runtime.read().await.as_ref().and_then(|r| r.store()) {
        metric(
            "manus_store_statements_total",
            "counter",
            "Statements sent to the run store's database (with each transaction's BEGIN and COMMIT).",
            &[("", store.statements().to_string())],
        );
    }
    if let Some(runtime) = app.runtime.read().await.as_ref() {
        let profiles: Vec<(String, String)> = runtime
            .config()
            .llm
            .iter()
            .map(|(name, l)| {
                let provider = match l.api_type {
                    manus_actors::llm::ApiType::Http(p) => p.provider_name(),
                    manus_actors::llm::ApiType::Replay => "manus.replay",
                };
                let labels = format!(
                    "{{profile={name:?},provider=\"{provider}\",api_type=\"{}\",model={:?}}}",
                    l.api_type.name(),
                    l.model
                );
                (labels, "1".to_string())
            })
            .collect();
        let profiles: Vec<(&str, String)> = profiles
            .iter()
            .map(|(l, v)| (l.as_str(), v.clone()))
            .collect();
        metric(
            "manus_llm_profile_info",
            "gauge",
            "The LLM profiles: each one's provider (gen_ai.provider.name), wire API and model.",
            &profiles,
        );
    }
    metric(
        "manus_llm_calls_total",
        "counter",
        "Model calls.",
        &[("", n(&m.llm_calls))],
    );
    metric(
        "manus_llm_tokens_total",
        "counter",
        "Tokens reported by the models.",
        &[
            ("{kind=\"prompt\"}", n(&m.prompt_tokens)),
            ("{kind=\"completion\"}", n(&m.completion_tokens)),
            ("{kind=\"cache_read\"}", n(&m.cache_read_tokens)),
            ("{kind=\"cache_write\"}", n(&m.cache_write_tokens)),
        ],
    );
    metric(
        "manus_llm_cost_total",
        "counter",
        "Cost of the model calls, from the price table.",
        &[(
            "",
            format!("{:.6}", m.cost_micros.load(Ordering::Relaxed) as f64 / 1e6),
        )],
    );
    metric(
        "manus_tool_calls_total",
        "counter",
        "Tool calls, by outcome.",
        &[
            ("{outcome=\"ok\"}", n(&m.tool_ok)),
            ("{outcome=\"error\"}", n(&m.tool_error)),
        ],
    );
    metric(
        "manus_questions_total",
        "counter",
        "Questions agents asked.",
        &[("", n(&m.questions))],
    );
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

#[cfg(test)]
mod fuzz;
