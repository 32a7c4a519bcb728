//! manus-rt's tools served over MCP (stdio, or streamable HTTP under `/mcp`), for Claude
//! Desktop, an IDE or another agent. Each MCP session gets its own tool worker, so a shell
//! session or edit history belongs to one client, a panicking tool is restarted, and the
//! workspace confinement and sandbox settings are exactly the agents'.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ractor::{Actor, ActorRef};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};

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
        };
        let s = &self.serve.settings;
        let limit = s.python_timeout.max(s.bash_timeout) + Duration::from_secs(30);
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

/// Serve streamable HTTP at `/mcp` on `listener` until `shutdown` resolves.
pub async fn serve_http(
    serve: ServeSettings,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    let serve = Arc::new(serve);
    let mut config = StreamableHttpServerConfig::default();
    // The default allows only loopback host names; a server bound elsewhere accepts its own.
    if let Ok(addr) = listener.local_addr()
        && !addr.ip().is_loopback()
    {
        config.allowed_hosts.push(addr.ip().to_string());
        config.allowed_hosts.push(addr.to_string());
    }
    let service = StreamableHttpService::new(
        move || Ok(ToolServer::new(serve.clone())),
        LocalSessionManager::default().into(),
        config,
    );
    let app = axum::Router::new().nest_service("/mcp", service);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|e| format!("the MCP HTTP server failed: {e}"))
}
