//! manus-rt's tools served over MCP (stdio, or streamable HTTP under `/mcp`), for Claude
//! Desktop, an IDE or another agent. Each MCP session gets its own tool worker, so a shell
//! session or edit history belongs to one client, a panicking tool is restarted, and the
//! workspace confinement and sandbox settings are exactly the agents'. Over HTTP, the
//! `Host` and `Origin` checks, the 400 for a body that is not JSON-RPC and the session cap
//! are here (sessions.rs closes idle sessions); bearer tokens are the host's layer.
//!
//! Every protocol version rmcp knows is served: the `initialize` handshake up to
//! 2025-11-25, and the stateless 2026-07-28 core (`server/discover`, per-request metadata).
//! Each tool declares `OUTPUT_SCHEMA` and answers with that structured result besides its
//! text; a call whose request carries a progress token gets a progress notification every
//! `PROGRESS_EVERY` while it runs; the workspace's files are resources (served_files.rs)
//! when they are on this host.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ractor::{Actor, ActorRef};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientJsonRpcMessage, ClientRequest,
    ContentBlock, Implementation, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};

use super::served_files;
use super::sessions::Sessions;
use crate::llm::{FunctionCall, ToolCall, ToolSpec};
use crate::protocol::{SandboxMsg, ToolInvocation, ToolMsg, ToolResult};
use crate::sandbox::SandboxHandle;
use crate::tools::worker::{ToolWorker, WorkerArgs, specs_for};
use crate::tools::{ToolCtx, ToolSettings};

/// What the server offers and where the tools work.
#[derive(Debug, Clone)]
pub struct ServeSettings {
    /// Tool names, as in an agent profile.
    pub tools: Vec<String>,
    pub settings: ToolSettings,
    pub workspace: PathBuf,
    pub sandbox: Option<SandboxHandle>,
    /// The host directory whose files are offered as resources (the canonical workspace);
    /// `None` when the files live only in sandbox containers.
    pub files: Option<PathBuf>,
}

/// How often a call whose request carries a progress token reports that it is running.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// The structured result every served tool gives, as its `outputSchema`.
fn output_schema() -> serde_json::Map<String, serde_json::Value> {
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "ok": {"type": "boolean", "description": "whether the tool succeeded"},
            "output": {"type": "string", "description": "the tool's text, or what went wrong"},
            "elapsed_ms": {"type": "integer", "minimum": 0, "description": "how long the call ran"},
            "terminate": {"type": "string", "enum": ["success", "failure"],
                          "description": "present when the call ends the agent's work (`terminate`)"}
        },
        "required": ["ok", "output", "elapsed_ms"]
    });
    match schema {
        serde_json::Value::Object(m) => m,
        _ => unreachable!("the schema is an object"),
    }
}

/// Numbers sessions, for their sandbox and log lines.
static SESSIONS: AtomicU64 = AtomicU64::new(0);

/// One client's session: its tools' specs and, once a tool is called, its worker.
pub struct ToolServer {
    serve: Arc<ServeSettings>,
    specs: Vec<ToolSpec>,
    session: String,
    /// Numbers the session's calls, for their ids.
    calls: AtomicU64,
    worker: tokio::sync::Mutex<Option<ActorRef<ToolMsg>>>,
}

impl ToolServer {
    pub fn new(serve: Arc<ServeSettings>) -> Self {
        let specs = specs_for(&serve.tools, &serve.settings);
        ToolServer {
            serve,
            specs,
            session: format!("mcp-{}", SESSIONS.fetch_add(1, Ordering::Relaxed) + 1),
            calls: AtomicU64::new(0),
            worker: tokio::sync::Mutex::new(None),
        }
    }

    /// Run one call through the session's worker, starting (or restarting) it as needed.
    /// When `cancelled` completes first (the client cancelled the call), the worker is
    /// stopped, and with it what the tool was running; the next call starts a fresh one.
    async fn run(
        &self,
        name: &str,
        args: serde_json::Value,
        cancelled: impl std::future::Future<Output = ()>,
    ) -> Result<ToolResult, String> {
        let started = Instant::now();
        let mut slot = self.worker.lock().await;
        let worker = match &*slot {
            Some(w) => w.clone(),
            None => {
                let args = WorkerArgs {
                    tools: self.serve.tools.clone(),
                    settings: self.serve.settings.clone(),
                    ctx: ToolCtx {
                        flow_id: self.session.clone(),
                        agent: "mcp".into(),
                        workspace: self.serve.workspace.clone(),
                        flow: None,
                        sandbox: self.serve.sandbox.clone(),
                        browser: None,
                        llm: None,
                        memory: None,
                        step: None,
                    },
                };
                let (w, _) = Actor::spawn(None, ToolWorker, args)
                    .await
                    .map_err(|e| format!("the tool worker could not start: {e}"))?;
                slot.insert(w).clone()
            }
        };
        let inv = ToolInvocation {
            call: ToolCall {
                id: format!(
                    "{}-{}",
                    self.session,
                    self.calls.fetch_add(1, Ordering::Relaxed)
                ),
                kind: "function".into(),
                function: FunctionCall {
                    name: name.to_string(),
                    arguments: args.to_string(),
                },
            },
            args,
            mcp: None,
            span: tracing::Span::current(),
            step: None,
        };
        let s = &self.serve.settings;
        let limit = s
            .python_timeout
            .max(s.bash_timeout)
            .saturating_add(Duration::from_secs(30));
        let answer = tokio::select! {
            answer = worker.call(|reply| ToolMsg::Call(inv, reply), Some(limit)) => answer,
            () = cancelled => {
                worker.kill();
                *slot = None;
                tracing::info!(session = %self.session, "the client cancelled its call of `{name}`; stopped");
                return Err(format!("the call of `{name}` was cancelled by the client and stopped"));
            }
        };
        match answer {
            Ok(ractor::rpc::CallResult::Success(r)) => Ok(r),
            _ => {
                worker.kill();
                *slot = None;
                Ok(ToolResult {
                    ok: false,
                    output: format!(
                        "the tool `{name}` crashed or hung; it was restarted, so its state (such as the shell session) was reset"
                    ),
                    terminate: None,
                    elapsed: started.elapsed(),
                    images: vec![],
                })
            }
        }
    }
}

impl Drop for ToolServer {
    fn drop(&mut self) {
        if let Some(w) = self.worker.get_mut().take() {
            w.stop(Some("MCP session ended".into()));
        }
        if let Some(sb) = &self.serve.sandbox {
            let _ = sb.supervisor.cast(SandboxMsg::Release {
                flow_id: self.session.clone(),
            });
        }
    }
}

impl ServerHandler for ToolServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder().enable_tools();
        let capabilities = match self.serve.files {
            Some(_) => capabilities.enable_resources().build(),
            None => capabilities.build(),
        };
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("manus-rt", env!("CARGO_PKG_VERSION")))
            .with_instructions(format!(
                "manus-rt's agent tools. Files are confined to the workspace {}{}.",
                self.serve.workspace.display(),
                if self.serve.sandbox.is_some() {
                    "; code and files live in a sandbox container"
                } else {
                    ""
                }
            ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let output = Arc::new(output_schema());
        let tools = self
            .specs
            .iter()
            .map(|s| {
                let schema = match &s.parameters {
                    serde_json::Value::Object(m) => m.clone(),
                    _ => serde_json::Map::new(),
                };
                Tool::new(s.name.clone(), s.description.clone(), Arc::new(schema))
                    .with_raw_output_schema(output.clone())
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        if !self.specs.iter().any(|s| s.name == name) {
            return Err(ErrorData::invalid_params(
                format!(
                    "no tool named `{name}`; this server offers {}",
                    self.serve.tools.join(", ")
                ),
                None,
            ));
        }
        let args = serde_json::Value::Object(request.arguments.unwrap_or_default());
        let run = self.run(&name, args, context.ct.cancelled());
        let result = match context.meta.get_progress_token() {
            None => run.await,
            Some(token) => {
                tokio::pin!(run);
                let started = Instant::now();
                let mut ticks = tokio::time::interval_at(
                    tokio::time::Instant::now() + PROGRESS_EVERY,
                    PROGRESS_EVERY,
                );
                loop {
                    tokio::select! {
                        done = &mut run => break done,
                        _ = ticks.tick() => {
                            let secs = started.elapsed().as_secs_f64();
                            let note = ProgressNotificationParam::new(token.clone(), secs.floor())
                                .with_message(format!("`{name}` has run for {secs:.0} s"));
                            // A client that left is noticed by the call's own end.
                            let _ = context.peer.notify_progress(note).await;
                        }
                    }
                }
            }
        }
        .map_err(|e| ErrorData::internal_error(e, None))?;
        let mut structured = serde_json::json!({
            "ok": result.ok,
            "output": result.output,
            "elapsed_ms": u64::try_from(result.elapsed.as_millis()).unwrap_or(u64::MAX),
        });
        if let Some(t) = result.terminate {
            structured["terminate"] = serde_json::to_value(t).unwrap_or_default();
        }
        let mut answer = if result.ok {
            CallToolResult::success(vec![ContentBlock::text(result.output)])
        } else {
            CallToolResult::error(vec![ContentBlock::text(result.output)])
        };
        answer.structured_content = Some(structured);
        Ok(answer.into())
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let root = self.files_root()?;
        let cursor = request.and_then(|r| r.cursor);
        let (resources, next) =
            tokio::task::spawn_blocking(move || served_files::list(&root, cursor.as_deref()))
                .await
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?
                .map_err(|e| ErrorData::invalid_params(e, None))?;
        let mut page = ListResourcesResult::with_all_items(resources);
        page.next_cursor = next;
        Ok(page)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let root = self.files_root()?;
        let uri = request.uri;
        let contents = tokio::task::spawn_blocking(move || served_files::read(&root, &uri))
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?
            .map_err(|e| ErrorData::resource_not_found(e, None))?;
        Ok(ReadResourceResult::new(vec![contents]).into())
    }
}

impl ToolServer {
    /// The directory served as resources, or the error for a server that serves none.
    fn files_root(&self) -> Result<PathBuf, ErrorData> {
        self.serve
            .files
            .clone()
            .ok_or_else(ErrorData::method_not_found::<rmcp::model::ListResourcesRequestMethod>)
    }
}

/// Serve one session over this process's stdin and stdout until the client leaves.
pub async fn serve_stdio(serve: ServeSettings) -> Result<(), String> {
    let running = ToolServer::new(Arc::new(serve))
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| format!("the MCP session did not start: {e}"))?;
    running
        .waiting()
        .await
        .map(|_| ())
        .map_err(|e| format!("the MCP session failed: {e}"))
}

/// How the streamable HTTP transport admits clients and lets their sessions go.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpSettings {
    /// Most sessions open at once; an `initialize` beyond them is answered 503.
    pub max_sessions: usize,
    /// A session with no request running and none for this long is closed, and its tool
    /// worker (with its shell) stopped.
    pub session_idle: Duration,
    /// Browser origins answered besides this machine's loopback ones, as
    /// `scheme://host[:port]` (`:*` for any port).
    pub allowed_origins: Vec<String>,
}

impl Default for HttpSettings {
    fn default() -> Self {
        HttpSettings {
            max_sessions: 32,
            session_idle: Duration::from_secs(300),
            allowed_origins: vec![],
        }
    }
}

/// The browser origins always answered: pages served from this machine's loopback. A
/// request without `Origin` (not from a browser) passes; one with another is refused (403).
const LOOPBACK_ORIGINS: [&str; 6] = [
    "http://localhost:*",
    "http://127.0.0.1:*",
    "http://[::1]:*",
    "https://localhost:*",
    "https://127.0.0.1:*",
    "https://[::1]:*",
];

/// The streamable HTTP transport at `/mcp`, for a server listening on `local`. rmcp checks
/// `Host` (loopback names, and `local` itself when it is not loopback) and `Origin`
/// (`LOOPBACK_ORIGINS` and `http.allowed_origins`); `admit` answers a body that is not a
/// JSON-RPC message with 400 and an `initialize` beyond `http.max_sessions` with 503.
/// Authentication is the caller's layer to add.
pub fn http_router(serve: ServeSettings, http: &HttpSettings, local: SocketAddr) -> axum::Router {
    let serve = Arc::new(serve);
    let origins = LOOPBACK_ORIGINS.iter().map(|o| o.to_string());
    let mut config = StreamableHttpServerConfig::default()
        .with_allowed_origins(origins.chain(http.allowed_origins.iter().cloned()))
        .enforce_origin_validation();
    if !local.ip().is_loopback() {
        config.allowed_hosts.push(local.ip().to_string());
        config.allowed_hosts.push(local.to_string());
    }
    let sessions = Sessions::start(http.max_sessions, http.session_idle);
    let gate = Gate {
        sessions: sessions.clone(),
        max_body: config.max_request_body_bytes,
    };
    let service =
        StreamableHttpService::new(move || Ok(ToolServer::new(serve.clone())), sessions, config);
    axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(gate, admit))
}

/// What `admit` checks requests against.
#[derive(Clone)]
struct Gate {
    sessions: Arc<Sessions>,
    max_body: usize,
}

/// Answer a POST whose body is not one JSON-RPC message with 400 (rmcp says 415), and an
/// `initialize` while the sessions are at their cap with 503; let the rest through.
async fn admit(
    axum::extract::State(gate): axum::extract::State<Gate>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::StatusCode;
    if req.method() != axum::http::Method::POST {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, gate.max_body).await {
        Ok(b) => b,
        Err(e) => {
            let too_long = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            let (status, why) = if too_long {
                let limit = gate.max_body;
                let why = format!("the request body is larger than {limit} bytes");
                (StatusCode::PAYLOAD_TOO_LARGE, why)
            } else {
                let why = format!("the request body could not be read: {e}");
                (StatusCode::BAD_REQUEST, why)
            };
            return jsonrpc_error(status, serde_json::Value::Null, -32600, why);
        }
    };
    let message = match serde_json::from_slice::<ClientJsonRpcMessage>(&bytes) {
        Ok(m) => m,
        Err(e) => {
            // JSON-RPC's codes: not JSON at all, or JSON that is not a message.
            let (code, what) = match e.classify() {
                serde_json::error::Category::Data => (-32600, "Invalid Request"),
                _ => (-32700, "Parse error"),
            };
            let why = format!("{what}: the body is not one JSON-RPC message ({e})");
            return jsonrpc_error(StatusCode::BAD_REQUEST, serde_json::Value::Null, code, why);
        }
    };
    let req = axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes));
    let ClientJsonRpcMessage::Request(request) = &message else {
        return next.run(req).await;
    };
    if !matches!(request.request, ClientRequest::InitializeRequest(_)) {
        return next.run(req).await;
    }
    let _one_at_a_time = gate.sessions.opening.lock().await;
    if let Some(why) = gate.sessions.refusal() {
        let id = serde_json::to_value(&request.id).unwrap_or_default();
        return jsonrpc_error(StatusCode::SERVICE_UNAVAILABLE, id, -32000, why);
    }
    next.run(req).await
}

/// A JSON-RPC error answer with HTTP status `status`.
fn jsonrpc_error(
    status: axum::http::StatusCode,
    id: serde_json::Value,
    code: i64,
    message: String,
) -> axum::response::Response {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    axum::response::IntoResponse::into_response((status, axum::Json(body)))
}
