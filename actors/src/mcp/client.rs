//! The connection actor: owns one MCP server's session (rmcp), connects on first use, keeps
//! the server's tool list until the server says it changed, and runs each tool call in a
//! task of its own so a slow call never blocks the mailbox; what the server asks back
//! during a call goes to the calling flow (`asks.rs`), and a call whose caller is gone (its
//! step cancelled) is cancelled at the server. A session that breaks (the server exits,
//! or a call hangs past its timeout) is dropped and reported; the next use reconnects, no
//! sooner than an exponential backoff allows.

// Sampling and roots are deprecated by the 2026-07-28 revision (SEP-2577), but servers that
// speak 2025-11-25 still send them.
#![expect(deprecated)]

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef};
use rmcp::ErrorData as McpError;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, CreateMessageRequestParams,
    CreateMessageResult, ElicitRequestParams, ElicitResult, Implementation, ListRootsResult,
    ProgressNotificationParam, ProtocolVersion, RequestMetaObject, SubscriptionFilterBuilder,
};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt, NotificationContext, RequestContext, RunningService,
    ServiceError,
};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient};
use tokio::io::AsyncBufReadExt;

use super::asks::{self, Calls, Sampling};
use super::{McpServerSpec, McpTransport, output, resources, sse};
use crate::protocol::{McpMsg, McpToolInfo};

/// First wait after a failure; it doubles with each further failure.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

pub struct McpConnection;

pub struct ConnState {
    spec: McpServerSpec,
    session: Option<RunningService<RoleClient, Listener>>,
    /// Counts sessions, so news from an old one is ignored.
    generation: u64,
    tools: Option<Arc<Vec<McpToolInfo>>>,
    /// The calls in flight, whose flows answer what the server asks.
    calls: Arc<Calls>,
    /// Failures since the last good session, the last one's reason, and when to try again.
    failures: u32,
    last_error: String,
    retry_at: Option<Instant>,
    /// When the session's OAuth token (client credentials, which cannot be refreshed)
    /// expires: the session is opened again, with a new token, before.
    renew_at: Option<Instant>,
}

/// Receives the server's notifications and requests for one session.
pub struct Listener {
    conn: ActorRef<McpMsg>,
    generation: u64,
    server: String,
    calls: Arc<Calls>,
    sampling: Sampling,
}

impl ClientHandler for Listener {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.conn.cast(McpMsg::ToolsChanged {
            generation: self.generation,
        });
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        Ok(asks::elicit(&self.calls, &self.server, request).await)
    }

    async fn create_message(
        &self,
        request: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, McpError> {
        asks::sample(&self.calls, &self.server, self.sampling, request).await
    }

    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, McpError> {
        Ok(self.calls.roots())
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.calls.progress(params);
    }

    fn get_info(&self) -> ClientConfig {
        // Elicitation (forms and URLs), sampling (answered by `[mcp] sampling`, refused by
        // default) and roots (the calling flow's workspace).
        let capabilities: ClientCapabilities = serde_json::from_value(serde_json::json!({
            "elicitation": {"form": {}, "url": {}},
            "sampling": {},
            "roots": {"listChanged": true},
        }))
        .expect("the client's capabilities");
        ClientConfig::new(
            capabilities,
            Implementation::new("manus-rt", env!("CARGO_PKG_VERSION")),
        )
    }
}

impl Actor for McpConnection {
    type Msg = McpMsg;
    type State = ConnState;
    type Arguments = McpServerSpec;

    async fn pre_start(
        &self,
        _myself: ActorRef<McpMsg>,
        spec: McpServerSpec,
    ) -> Result<ConnState, ActorProcessingErr> {
        Ok(ConnState {
            spec,
            session: None,
            generation: 0,
            tools: None,
            calls: Arc::default(),
            failures: 0,
            last_error: String::new(),
            retry_at: None,
            renew_at: None,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<McpMsg>,
        msg: McpMsg,
        st: &mut ConnState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            McpMsg::Tools(reply) => {
                let _ = reply.send(st.tools(&myself).await);
            }
            McpMsg::Call {
                tool,
                args,
                traceparent,
                caller,
                reply,
            } => {
                if let Err(e) = st.connect(&myself).await {
                    let _ = reply.send(Err(e));
                    return Ok(());
                }
                let Some(session) = &st.session else {
                    return Ok(());
                };
                let peer = session.peer().clone();
                let (generation, server, calls, sampling) = (
                    st.generation,
                    st.spec.id.clone(),
                    st.calls.clone(),
                    st.spec.sampling,
                );
                // A question to the person may hold the call as long as one may wait.
                let asking = caller.as_ref().map_or(Duration::ZERO, |c| c.ask_timeout);
                let limit = st.spec.call_timeout.saturating_add(asking);
                let params = CallToolRequestParams::new(tool.clone()).with_arguments(args);
                let mut meta = RequestMetaObject::new();
                if let Some(tp) = traceparent {
                    meta.set_traceparent(tp);
                }
                // A call may change the server's tools, and its announcement may arrive after
                // the result: list them again before the next round.
                st.tools = None;
                tokio::spawn(async move {
                    let asked = asks::Asked {
                        server: &server,
                        sampling,
                    };
                    let called =
                        asks::call(&peer, &calls, params, meta, caller, limit, &reply, asked).await;
                    let result = match called {
                        Some(Ok(result)) => Ok(output::text(&result)),
                        None => Err(format!("the call to `{tool}` was cancelled")),
                        Some(Err(Ok(ServiceError::McpError(e)))) => Err(format!(
                            "the MCP server `{server}` refused the call to `{tool}`: {}",
                            e.message
                        )),
                        Some(Err(Ok(ServiceError::InputRequiredRoundsExceeded { max_rounds }))) => {
                            Err(format!(
                                "the MCP server `{server}` asked for input {max_rounds} times over \
                                 the call to `{tool}` without finishing it; the call was given up"
                            ))
                        }
                        Some(Err(Ok(e))) => {
                            let why = format!("the connection broke during the call ({e})");
                            let _ = myself.cast(McpMsg::Lost {
                                generation,
                                why: why.clone(),
                            });
                            Err(format!(
                                "the MCP server `{server}` failed: {why}; its tools are unavailable until it reconnects"
                            ))
                        }
                        Some(Err(Err(_))) => {
                            let why = format!("a call to `{tool}` hung for {}s", limit.as_secs());
                            let _ = myself.cast(McpMsg::Lost {
                                generation,
                                why: why.clone(),
                            });
                            Err(format!(
                                "the MCP server `{server}` did not answer `{tool}` within {}s; the connection was reset",
                                limit.as_secs()
                            ))
                        }
                    };
                    let _ = reply.send(result);
                });
            }
            McpMsg::Resources { uri, reply } => {
                if let Err(e) = st.connect(&myself).await {
                    let _ = reply.send(Err(e));
                    return Ok(());
                }
                let Some(session) = &st.session else {
                    return Ok(());
                };
                let (peer, limit, server) = (
                    session.peer().clone(),
                    st.spec.call_timeout,
                    st.spec.id.clone(),
                );
                tokio::spawn(async move {
                    let result = tokio::time::timeout(limit, resources::run(&peer, uri))
                        .await
                        .unwrap_or_else(|_| Err(format!("no answer within {}s", limit.as_secs())))
                        .map_err(|e| format!("the MCP server `{server}`'s resources: {e}"));
                    let _ = reply.send(result);
                });
            }
            McpMsg::ToolsChanged { generation } if generation == st.generation => {
                tracing::info!(server = %st.spec.id, "the MCP server's tool list changed");
                st.tools = None;
            }
            McpMsg::Lost { generation, why } if generation == st.generation => {
                tracing::warn!(server = %st.spec.id, "MCP session lost: {why}");
                st.fail(why);
            }
            McpMsg::ToolsChanged { .. } | McpMsg::Lost { .. } => {}
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<McpMsg>,
        st: &mut ConnState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(mut session) = st.session.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), session.close()).await;
        }
        Ok(())
    }
}

impl ConnState {
    /// The tool list, connecting and listing if needed.
    async fn tools(&mut self, myself: &ActorRef<McpMsg>) -> Result<Arc<Vec<McpToolInfo>>, String> {
        self.connect(myself).await?;
        if let Some(tools) = &self.tools {
            return Ok(tools.clone());
        }
        let Some(session) = &self.session else {
            return Err(self.unavailable());
        };
        // A server with resources gets our tool that lists and reads them.
        let has_resources = session
            .peer()
            .peer_info()
            .is_some_and(|info| info.capabilities.resources.is_some());
        let listed =
            tokio::time::timeout(self.spec.connect_timeout, session.peer().list_all_tools()).await;
        match listed {
            Ok(Ok(list)) => {
                let tools: Vec<McpToolInfo> = list
                    .into_iter()
                    .map(|t| McpToolInfo {
                        name: t.name.to_string(),
                        description: t
                            .description
                            .as_deref()
                            .or(t.title.as_deref())
                            .unwrap_or("")
                            .to_string(),
                        schema: serde_json::Value::Object((*t.input_schema).clone()),
                        resources: false,
                    })
                    .chain(has_resources.then(|| resources::tool(&self.spec.id)))
                    .collect();
                let tools = Arc::new(tools);
                self.tools = Some(tools.clone());
                Ok(tools)
            }
            Ok(Err(e)) => {
                self.fail(format!("listing its tools failed ({e})"));
                Err(self.unavailable())
            }
            Err(_) => {
                self.fail(format!(
                    "listing its tools took longer than {}s",
                    self.spec.connect_timeout.as_secs()
                ));
                Err(self.unavailable())
            }
        }
    }

    /// Make sure there is a live session, unless the backoff after a failure still runs.
    async fn connect(&mut self, myself: &ActorRef<McpMsg>) -> Result<(), String> {
        if self.session.as_ref().is_some_and(|s| s.is_closed()) {
            self.fail("the server closed the connection".into());
        }
        if self.session.is_some() && self.renew_at.is_some_and(|at| Instant::now() >= at) {
            tracing::info!(server = %self.spec.id, "the OAuth access token is about to expire: opening a new session with a new token");
            self.close();
        }
        if self.session.is_some() {
            return Ok(());
        }
        if self.retry_at.is_some_and(|at| Instant::now() < at) {
            return Err(self.unavailable());
        }
        self.generation += 1;
        let listener = Listener {
            conn: myself.clone(),
            generation: self.generation,
            server: self.spec.id.clone(),
            calls: self.calls.clone(),
            sampling: self.spec.sampling,
        };
        let started =
            tokio::time::timeout(self.spec.connect_timeout, start(&self.spec, listener)).await;
        match started {
            Ok(Ok((session, renew_at))) => {
                self.renew_at = renew_at;
                tracing::info!(server = %self.spec.id, via = %self.spec.transport.describe(), "MCP server connected");
                self.follow_tool_changes(&session, myself).await;
                self.session = Some(session);
                self.tools = None;
                self.failures = 0;
                self.retry_at = None;
                Ok(())
            }
            Ok(Err(e)) => {
                self.fail(e);
                Err(self.unavailable())
            }
            Err(_) => {
                self.fail(format!(
                    "connecting took longer than {}s",
                    self.spec.connect_timeout.as_secs()
                ));
                Err(self.unavailable())
            }
        }
    }

    /// On connections of the 2026 protocol, tool-list changes arrive on a subscription the
    /// client opens (`subscriptions/listen`); older servers send them unasked, to the
    /// `Listener`. A server that refuses the subscription is one of those.
    async fn follow_tool_changes(
        &self,
        session: &RunningService<RoleClient, Listener>,
        myself: &ActorRef<McpMsg>,
    ) {
        let filter = SubscriptionFilterBuilder::default()
            .tools_list_changed()
            .build();
        let listened =
            tokio::time::timeout(self.spec.connect_timeout, session.peer().listen(filter)).await;
        let Ok(Ok(mut subscription)) = listened else {
            return;
        };
        let (conn, generation) = (myself.clone(), self.generation);
        tokio::spawn(async move {
            while let Ok(Some(_)) = subscription.next().await {
                let _ = conn.cast(McpMsg::ToolsChanged { generation });
            }
        });
    }

    /// Close the session (in the background) and forget its tools.
    fn close(&mut self) {
        if let Some(mut session) = self.session.take() {
            tokio::spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(5), session.close()).await;
            });
        }
        self.tools = None;
    }

    /// Drop the session and set the time of the next attempt.
    fn fail(&mut self, why: String) {
        self.close();
        self.failures += 1;
        let backoff = FIRST_BACKOFF
            .saturating_mul(1 << (self.failures - 1).min(16))
            .min(MAX_BACKOFF);
        self.retry_at = Some(Instant::now() + backoff);
        self.last_error = why;
    }

    /// Why there is no session, and when the next attempt will be.
    fn unavailable(&self) -> String {
        let wait = self
            .retry_at
            .map(|at| at.saturating_duration_since(Instant::now()))
            .unwrap_or_default();
        format!(
            "the MCP server `{}` ({}) is unavailable: {}; next connection attempt in {:.1}s",
            self.spec.id,
            self.spec.transport.describe(),
            self.last_error,
            wait.as_secs_f64()
        )
    }
}

/// How a session starts: by `server/discover` and the 2026-07-28 protocol (stateless
/// requests, multi-round-trip calls), falling back to `initialize` and 2025-11-25 for a
/// server that does not know it.
fn lifecycle() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28, ProtocolVersion::V_2025_11_25],
        legacy_version: Some(ProtocolVersion::V_2025_11_25),
    }
}

/// Open a session over the server's transport; with an OAuth token that cannot be
/// refreshed, the time by which to open a new one.
async fn start(
    spec: &McpServerSpec,
    listener: Listener,
) -> Result<(RunningService<RoleClient, Listener>, Option<Instant>), String> {
    let failed = |e: &dyn std::fmt::Display| format!("could not connect ({e})");
    match &spec.transport {
        McpTransport::Stdio { command, args, env } => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args).envs(env);
            let (child, stderr) = TokioChildProcess::builder(cmd)
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| format!("could not start `{command}` ({e})"))?;
            // The server's own log lines go to ours, not to the terminal.
            if let Some(stderr) = stderr {
                let id = spec.id.clone();
                tokio::spawn(async move {
                    let mut lines = tokio::io::BufReader::new(stderr).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        tracing::debug!(server = %id, "{line}");
                    }
                });
            }
            let session = listener
                .serve_with_lifecycle(child, lifecycle())
                .await
                .map_err(|e| failed(&e))?;
            Ok((session, None))
        }
        McpTransport::StreamableHttp { url, headers } => {
            let mut custom = std::collections::HashMap::new();
            for (k, v) in headers {
                let name = reqwest::header::HeaderName::try_from(k.as_str())
                    .map_err(|e| format!("header `{k}` is not valid ({e})"))?;
                let value = reqwest::header::HeaderValue::try_from(v.as_str())
                    .map_err(|e| format!("the value of header `{k}` is not valid ({e})"))?;
                custom.insert(name, value);
            }
            let config =
                StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(custom);
            match &spec.oauth {
                Some(oauth) => {
                    let (client, renew) = super::oauth::client(&spec.id, url, oauth).await?;
                    let transport = StreamableHttpClientTransport::with_client(client, config);
                    let session = listener
                        .serve_with_lifecycle(transport, lifecycle())
                        .await
                        .map_err(|e| failed(&e))?;
                    Ok((session, renew))
                }
                None => {
                    let transport =
                        StreamableHttpClientTransport::with_client(crate::tls::client(), config);
                    let session = listener
                        .serve_with_lifecycle(transport, lifecycle())
                        .await
                        .map_err(|e| failed(&e))?;
                    Ok((session, None))
                }
            }
        }
        McpTransport::Sse { url, headers } => {
            let transport = sse::connect(url, headers).await?;
            let session = listener
                .serve_with_lifecycle(transport, lifecycle())
                .await
                .map_err(|e| failed(&e))?;
            Ok((session, None))
        }
    }
}
