//! Starting a runtime: the actor tree, the model clients and agent pool cut from the
//! config, the browser and sandbox engines, the MCP connections and the run store.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use manus_actors::background::PlanningThread;
use manus_actors::browser::{BrowserHandle, BrowserSupervisor};
use manus_actors::llm::{LazyHttp, LlmClient, Recorder};
use manus_actors::mcp::McpHandle;
use manus_actors::mcp::client::McpConnection;
use manus_actors::mcp::server::ServeSettings;
use manus_actors::protocol::SandboxMsg;
use manus_actors::root::Root;
use manus_actors::sandbox::{SandboxHandle, SandboxSettings, SandboxSupervisor};
use ractor::{Actor, ActorRef};

use crate::config::Config;
use crate::store::RunStore;

use super::decisions::{Waiting, hand_over_decisions};
use super::{Runtime, RuntimeError};

#[derive(Default)]
pub struct RuntimeBuilder {
    config: Option<Config>,
    record: Option<PathBuf>,
}

impl RuntimeBuilder {
    pub fn config(mut self, config: Config) -> Self {
        self.config = Some(config);
        self
    }

    /// Write every model exchange to this cassette file.
    pub fn record(mut self, path: impl Into<PathBuf>) -> Self {
        self.record = Some(path.into());
        self
    }

    pub async fn start(self) -> Result<Runtime, RuntimeError> {
        let config = match self.config {
            Some(c) => c,
            None => Config::locate(None)?,
        };
        std::fs::create_dir_all(&config.workspace).map_err(|source| RuntimeError::Workspace {
            path: config.workspace.clone(),
            source,
        })?;
        let workspace =
            std::fs::canonicalize(&config.workspace).map_err(|source| RuntimeError::Workspace {
                path: config.workspace.clone(),
                source,
            })?;
        let recorder = match &self.record {
            Some(path) => Some(
                Recorder::create(path).map_err(|source| RuntimeError::Record {
                    path: path.clone(),
                    source,
                })?,
            ),
            None => None,
        };
        // Built when a model is first called over HTTPS or a proxy.
        let http = LazyHttp::default();
        let client =
            |name: &str| LlmClient::new(config.llm[name].clone(), http.clone(), recorder.clone());
        // The planners' calls run on the planning thread, and a pooled connection is driven
        // by the runtime that opened it: they get an HTTPS client of their own, so that no
        // agent's call waits on a connection the planning thread drives.
        let planner_llm = LlmClient::new(
            config.llm[&config.planner_llm].clone(),
            LazyHttp::default(),
            recorder.clone(),
        );
        let sandbox = match &config.sandbox {
            Some(settings) => {
                // A mounted workspace is bound by its real path.
                let settings = SandboxSettings {
                    mount: settings.mount.as_ref().map(|_| workspace.clone()),
                    ..settings.clone()
                };
                Some(start_sandbox(&settings).await?)
            }
            None => None,
        };
        let handle = sandbox
            .as_ref()
            .map(|(supervisor, settings)| SandboxHandle {
                supervisor: supervisor.clone(),
                work_dir: settings.work_dir.clone(),
                memory_limit: settings.memory_limit,
            });
        // The browser supervisor is a small actor until a flow browses: chromedriver and
        // Chromium start on first use.
        let browser = if config.agents.iter().any(|(t, _)| t.uses_browser()) {
            let settings = Arc::new(config.browser.clone());
            let (supervisor, _) = Actor::spawn(None, BrowserSupervisor, settings.clone())
                .await
                .map_err(|e| RuntimeError::Spawn(format!("browser supervisor: {e}")))?;
            Some(BrowserHandle {
                supervisor,
                settings,
            })
        } else {
            None
        };
        // One connection per MCP server, shared by the flows; each connects on first use.
        let mut mcp = Vec::new();
        for server in &config.mcp_servers {
            let (conn, _) = Actor::spawn(None, McpConnection, server.clone())
                .await
                .map_err(|e| RuntimeError::Spawn(e.to_string()))?;
            mcp.push(McpHandle {
                server: server.id.clone(),
                conn,
                call_timeout: server.call_timeout,
                connect_timeout: server.connect_timeout,
            });
        }
        let pool: Vec<_> = config
            .agents
            .iter()
            .map(|(t, llm)| {
                let browser = browser.clone().filter(|_| t.uses_browser());
                let servers = mcp
                    .iter()
                    .filter(|h| t.mcp_servers.contains(&h.server))
                    .cloned()
                    .collect();
                t.bind(
                    crate::config::AgentModels {
                        llm: client(llm),
                        compact: t.compact_llm.as_deref().map(client),
                    },
                    &config.tools,
                    &workspace,
                    handle.clone(),
                    browser,
                    servers,
                )
            })
            .collect();
        let (store, lost) = match (&config.store, &config.cluster) {
            (Some(url), Some(node)) => {
                let (store, lost) = RunStore::open_node(url, node).await?;
                (Some(store), Some(lost))
            }
            (Some(url), None) => (Some(RunStore::open(url).await?), None),
            (None, _) => (None, None),
        };
        if let Some(store) = store.as_ref().filter(|_| config.retention.bounded()) {
            store.keep(config.retention);
        }
        let (root, _) = Actor::spawn(None, Root, ())
            .await
            .map_err(|e| RuntimeError::Spawn(e.to_string()))?;
        let planner_slots = Arc::new(tokio::sync::Semaphore::new(
            config.flow.planner_replicas as usize,
        ));
        let planning = PlanningThread::start()
            .map(Arc::new)
            .map_err(|e| RuntimeError::Spawn(format!("planning thread: {e}")))?;
        let controls = Arc::new(std::sync::Mutex::new(HashMap::new()));
        // Only a runtime whose flows can wait for a person looks for decisions.
        let approving = config.flow.plan_approval
            || config
                .agents
                .iter()
                .any(|(t, _)| !t.approvals.rules.is_empty());
        // Off a cluster, decisions are looked for only while a flow here waits for one.
        let waiting = (config.cluster.is_none()).then(|| Arc::new(Waiting::default()));
        let decisions = store
            .clone()
            .filter(|_| approving || config.cluster.is_some())
            .map(|s| hand_over_decisions(s, controls.clone(), waiting.clone()));
        let waiting = waiting.filter(|_| decisions.is_some());
        // A cluster node stops the flows another node took over, and all when its leases
        // lapse.
        let guard = lost
            .zip(
                store
                    .as_ref()
                    .and_then(|s| Some((s.clone(), s.lease_clock()?))),
            )
            .map(|(lost, (store, clock))| {
                super::guard::guard(store, clock, lost, controls.clone())
            });
        Ok(Runtime {
            guard,
            root,
            planning,
            controls,
            decisions,
            waiting,
            store,
            planner_llm,
            planner_slots,
            planning_opening: manus_actors::planner::planning_opening(&pool),
            pool,
            sandbox: sandbox.map(|(s, _)| s),
            browser: browser.map(|b| b.supervisor),
            tools_here: ServeSettings {
                tools: config.mcp_serve_tools.clone(),
                settings: config.tools.clone(),
                workspace,
                sandbox: handle,
                // Filled by `Runtime::serve_settings`, which knows where the files are.
                files: None,
            },
            config,
            mcp,
        })
    }
}

/// Reach the engines, check the image on each that answers (at least one must), and start
/// the supervisor that owns them; an engine that does not answer now is tried again when
/// a container is placed.
async fn start_sandbox(
    settings: &SandboxSettings,
) -> Result<(ActorRef<SandboxMsg>, SandboxSettings), RuntimeError> {
    let mut engines = vec![];
    let mut why = vec![];
    for host in &settings.hosts {
        let checked = match host.connect().await {
            Ok(docker) => settings.check_image(&docker).await.map(|()| docker),
            Err(e) => Err(e),
        };
        match checked {
            Ok(docker) => engines.push(Some(docker)),
            Err(e) => {
                if settings.hosts.len() > 1 {
                    tracing::warn!("sandbox engine {}: {e}", host.url);
                }
                why.push(e);
                engines.push(None);
            }
        }
    }
    if engines.iter().all(Option::is_none) {
        return Err(RuntimeError::Sandbox(why.join("; ")));
    }
    let (supervisor, _) = Actor::spawn(None, SandboxSupervisor, (engines, settings.clone()))
        .await
        .map_err(|e| RuntimeError::Sandbox(e.to_string()))?;
    Ok((supervisor, settings.clone()))
}
