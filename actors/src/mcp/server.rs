//! manus-rt's tools served over MCP (stdio, or streamable HTTP under `/mcp`), for Claude
//! Desktop, an IDE or another agent. Each MCP session gets its own tool worker, so a shell
//! session or edit history belongs to one client, a panicking tool is restarted, and the
//! workspace confinement and sandbox settings are exactly the agents'. Over HTTP, the
//! `Host` and `Origin` checks, the 400 for a body that is not JSON-RPC and the session cap
//! are here (sessions.rs closes idle sessions); bearer tokens are the host's layer.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ractor::{Actor, ActorRef};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientJsonRpcMessage, ClientRequest,
    ContentBlock, Implementation, ListToolsResult, PaginatedRequestParams, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};

use super::sessions::Sessions;
use crate::llm::{FunctionCall, ToolCall, ToolSpec};
use crate::protocol::{SandboxMsg, ToolInvocation, ToolMsg};
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
    async fn run(&self, name: &str, args: serde_json::Value) -> Result<(bool, String), String> {
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
        match worker
            .call(|reply| ToolMsg::Call(inv, reply), Some(limit))
            .await
        {
            Ok(ractor::rpc::CallResult::Success(r)) => Ok((r.ok, r.output)),
            _ => {
                worker.kill();
                *slot = None;
                Ok((
                    false,
                    format!(
                        "the tool `{name}` crashed or hung; it was restarted, so its state (such as the shell session) was reset"
                    ),
                ))
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
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
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
        let tools = self
            .specs
            .iter()
            .map(|s| {
                let schema = match &s.parameters {
                    serde_json::Value::Object(m) => m.clone(),
                    _ => serde_json::Map::new(),
                };
                Tool::new(s.name.clone(), s.description.clone(), Arc::new(schema))
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
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
        let (ok, text) = self
            .run(&name, args)
            .await
            .map_err(|e| ErrorData::internal_error(e, None))?;
        let content = vec![ContentBlock::text(text)];
        Ok(if ok {
            CallToolResult::success(content)
        } else {
            CallToolResult::error(content)
        }
        .into())
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
