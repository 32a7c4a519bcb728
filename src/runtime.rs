//! The embeddable `Runtime`: starts the actor tree, binds each flow to its own LLM clients
//! and agent pool, and hands back a `FlowHandle` to follow, answer and cancel the flow.
//!
//! ```
//! # #[tokio::main(flavor = "multi_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use manus_rt::{Config, FlowEvent, FlowStatus, Runtime, SubmitOptions};
//!
//! // The example config replays a recorded model for this task, so this runs offline.
//! let mut config = Config::from_text(manus_rt::config::EMBEDDED_EXAMPLE, "example", None)?;
//! config.workspace = std::env::temp_dir().join(format!("manus-doc-{}", std::process::id()));
//! let runtime = Runtime::builder().config(config.clone()).start().await?;
//!
//! let task = "Find the prime numbers below 100, save them to primes.txt, and report how many there are and their sum.";
//! let mut flow = runtime.submit(task, SubmitOptions::default()).await?;
//! let control = flow.control(); // answers and cancels, from any task
//! while let Some(event) = flow.next_event().await {
//!     match event {
//!         FlowEvent::Question { id, .. } => control.answer(id, "yes"),
//!         FlowEvent::StepFinished { step, status, .. } => println!("step {step}: {}", status.as_str()),
//!         _ => {}
//!     }
//! }
//! let outcome = flow.outcome().await; // status, plan, summary, token usage
//! assert_eq!(outcome.status, FlowStatus::Completed);
//! assert!(config.workspace.join("primes.txt").exists());
//! runtime.shutdown().await;
//! # std::fs::remove_dir_all(&config.workspace)?;
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use manus_actors::background::PlanningThread;
use manus_actors::browser::{BrowserHandle, BrowserSupervisor};
use manus_actors::llm::{self, LazyHttp, LlmClient, Recorder, ReplayFrom};
use manus_actors::mcp::McpHandle;
use manus_actors::mcp::client::McpConnection;
use manus_actors::mcp::server::ServeSettings;
use manus_actors::plan::{Plan, StepStatus};
use manus_actors::planner::{FlowSpec, Resume};
use manus_actors::protocol::{BrowserMsg, EventObserver, EventSink, SandboxMsg};
use manus_actors::protocol::{FlowEvent, FlowMode, FlowMsg, FlowOutcome, FlowStatus, RootMsg};
use manus_actors::root::Root;
use manus_actors::sandbox::{SandboxHandle, SandboxSettings, SandboxSupervisor};
use ractor::{Actor, ActorRef};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use crate::config::{Config, ConfigError};
use crate::store::tap::Tap;
use crate::store::{RunStatus, RunStore, StoreError, StoredRun};

/// Why the runtime or a flow could not start.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The config (found by `Config::locate` when none was given) is invalid.
    #[error("invalid config: {0}")]
    Config(#[from] ConfigError),
    #[error("cannot prepare the workspace {path}: {source}")]
    Workspace {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot open the record file {path}: {source}")]
    Record {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start the actor tree: {0}")]
    Spawn(String),
    #[error("cannot start the flow: {0}")]
    Submit(String),
    #[error("the sandbox is not usable: {0}")]
    Sandbox(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("runs are not stored ([store] enabled = false), so there is nothing to resume")]
    NoStore,
    #[error("no run `{0}` in the run store (`manus-rt runs list` shows the runs)")]
    UnknownRun(String),
    #[error("run {id} already ended ({status}): there is nothing to resume")]
    RunEnded { id: String, status: RunStatus },
    #[error(
        "run {id} is running in another process ({owner}); it can be resumed only once that process is gone"
    )]
    RunBusy { id: String, owner: String },
}

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
        // A cluster node stops the flows another node took over (its writes are fenced off).
        let fenced_off = lost.map(|mut lost| {
            let controls = controls.clone();
            AbortOnDrop(tokio::spawn(async move {
                while let Some(run) = lost.recv().await {
                    let control = controls.lock().ok().and_then(|c| c.get(&run).cloned());
                    if let Some(control) = control {
                        control.cancel();
                    }
                }
            }))
        });
        Ok(Runtime {
            fenced_off,
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
            },
            config,
            mcp,
        })
    }
}

/// A running manus-rt: the root supervisor and the pool every flow is cut from.
pub struct Runtime {
    root: ActorRef<RootMsg>,
    config: Config,
    planner_llm: LlmClient,
    /// The planning call's system message, made once for the pool.
    planning_opening: Arc<manus_actors::llm::Message>,
    /// `[flow] planner_replicas` permits, shared by every flow's planner.
    planner_slots: Arc<tokio::sync::Semaphore>,
    /// Where planners make their model calls, in the idle scheduling class.
    planning: Arc<PlanningThread>,
    pool: Vec<manus_actors::agent::AgentSpec>,
    sandbox: Option<ActorRef<SandboxMsg>>,
    browser: Option<ActorRef<BrowserMsg>>,
    /// Where tools work in this runtime, and which ones `mcp-server` offers.
    tools_here: ServeSettings,
    mcp: Vec<McpHandle>,
    /// Where every flow is recorded (`[store]`), unless that is off.
    store: Option<RunStore>,
    /// The flows this runtime started, by run id, for decisions made outside the process.
    controls: Arc<std::sync::Mutex<HashMap<String, FlowControl>>>,
    /// Hands decisions recorded in the store (`manus-rt approvals`) to the flows here.
    decisions: Option<AbortOnDrop>,
    /// The approval requests open in the flows here, when `decisions` looks only while
    /// there are some.
    waiting: Option<Arc<Waiting>>,
    /// Cluster: stops the flows here whose runs other nodes took over.
    fenced_off: Option<AbortOnDrop>,
}

/// A task stopped when its holder is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How often decisions recorded in the store are looked for.
const DECISIONS_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Every `DECISIONS_EVERY`, hand the decisions recorded for this process's runs to their
/// flows, forgetting flows that have ended. With `waiting`, only while a flow here waits
/// for a decision (a decision for any other is handed to no one); without it (a cluster
/// node, where answers and cancels come this way too), always.
fn hand_over_decisions(
    store: RunStore,
    controls: Arc<std::sync::Mutex<HashMap<String, FlowControl>>>,
    waiting: Option<Arc<Waiting>>,
) -> AbortOnDrop {
    use crate::store::cluster::Command;
    let cluster = waiting.is_none();
    AbortOnDrop(tokio::spawn(async move {
        let mut every = tokio::time::interval(DECISIONS_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if let Some(waiting) = &waiting
                && waiting.open.load(Ordering::Acquire) == 0
            {
                while waiting.open.load(Ordering::Acquire) == 0 {
                    waiting.opened.notified().await;
                }
                // The first look a period after the request, as when looking all along.
                every.reset();
            }
            every.tick().await;
            // Cluster: the answers and cancels sent through other nodes.
            let commands = match cluster {
                true => store.undelivered_commands().await,
                false => Ok(vec![]),
            };
            match commands {
                Ok(found) => {
                    let handed = hand_to_flows(&controls, found, |c, command| match command {
                        Command::Answer { question_id, text } => {
                            c.answer(*question_id, text.clone())
                        }
                        Command::Cancel => c.cancel(),
                    });
                    for (run, command) in handed {
                        if let Err(e) = store.command_delivered(&run, command).await {
                            tracing::warn!(run = %run, "cannot mark a command handed: {e}");
                        }
                    }
                }
                Err(e) => tracing::warn!("cannot read the commands recorded in the store: {e}"),
            }
            match store.undelivered().await {
                Ok(found) => {
                    let found = found
                        .into_iter()
                        .map(|(run, id, d)| (run, (id, d)))
                        .collect();
                    let handed = hand_to_flows(&controls, found, |c, (id, decision)| {
                        c.decide(*id, decision.clone())
                    });
                    for (run, (id, _)) in handed {
                        if let Err(e) = store.delivered(&run, id).await {
                            tracing::warn!(run = %run, "cannot mark decision {id} handed: {e}");
                        }
                    }
                }
                Err(e) => tracing::warn!("cannot read the decisions recorded in the store: {e}"),
            }
        }
    }))
}

/// How many approval requests are open in a runtime's flows, and a wake-up for the
/// decisions poller when the first one opens.
#[derive(Default)]
struct Waiting {
    open: AtomicUsize,
    opened: tokio::sync::Notify,
}

impl Waiting {
    fn add(&self, n: usize) {
        if n > 0 && self.open.fetch_add(n, Ordering::AcqRel) == 0 {
            // Kept as a permit if the poller is not waiting yet.
            self.opened.notify_one();
        }
    }

    fn sub(&self, n: usize) {
        self.open.fetch_sub(n, Ordering::AcqRel);
    }
}

/// In front of a flow's store tap: counts its open approval requests into `Waiting`, and
/// takes back those still open when the flow's events end.
struct Awaits {
    tap: Box<dyn EventObserver>,
    open: std::collections::HashSet<u64>,
    waiting: Arc<Waiting>,
}

impl EventObserver for Awaits {
    fn observe(&mut self, event: &FlowEvent) {
        self.tap.observe(event);
        match event {
            FlowEvent::ApprovalRequested { id, .. } if self.open.insert(*id) => self.waiting.add(1),
            FlowEvent::ApprovalDecided { id, .. } if self.open.remove(id) => self.waiting.sub(1),
            _ => {}
        }
    }
}

impl Drop for Awaits {
    fn drop(&mut self) {
        self.waiting.sub(self.open.len());
    }
}

/// Give each of `found` (a run, and what was asked of it) to its flow with `give`, if the
/// flow runs here; what was given. One whose flow is not (yet) here waits for the next
/// look: a resume may be starting it.
fn hand_to_flows<T>(
    controls: &std::sync::Mutex<HashMap<String, FlowControl>>,
    found: Vec<(String, T)>,
    give: impl Fn(&FlowControl, &T),
) -> Vec<(String, T)> {
    let Ok(mut controls) = controls.lock() else {
        return vec![];
    };
    controls.retain(|_, c| c.is_running());
    found
        .into_iter()
        .filter(|(run, asked)| controls.get(run).map(|c| give(c, asked)).is_some())
        .collect()
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

/// A flow id unique in this process and unlikely to repeat across processes: the start
/// time in milliseconds, the process id and a counter.
pub(crate) fn new_flow_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    format!("{ms:x}-{:x}-{n}", std::process::id())
}

/// A flow about to start: a new one, or an interrupted one to continue.
pub(crate) struct Run {
    pub(crate) id: String,
    pub(crate) task: String,
    pub(crate) mode: FlowMode,
    pub(crate) resume: Option<Resume>,
    /// Whether its events include `TextDelta`s.
    pub(crate) deltas: bool,
    /// The number of its next event.
    pub(crate) seq: u64,
    pub(crate) created_at: i64,
}

/// How to run a submitted task.
#[derive(Debug, Clone, Copy)]
pub struct SubmitOptions {
    pub mode: FlowMode,
    /// Send `FlowEvent::TextDelta`s: the model's text as it streams, for a live view.
    /// Off, none are made.
    pub deltas: bool,
}

impl Default for SubmitOptions {
    fn default() -> Self {
        SubmitOptions {
            mode: FlowMode::Plan,
            deltas: false,
        }
    }
}

impl Runtime {
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The tools `manus-rt mcp-server` offers, working where this runtime's agents do
    /// (the workspace, or the sandbox).
    pub fn serve_settings(&self) -> ServeSettings {
        self.tools_here.clone()
    }

    /// The host directory (canonical) where this runtime's agents keep their files: the
    /// workspace, or `None` when they work in a sandbox that does not mount it (`[sandbox]
    /// mount_workspace = false`: their files are in each flow's container, not here).
    pub fn workspace(&self) -> Option<&std::path::Path> {
        let on_host = self
            .config
            .sandbox
            .as_ref()
            .is_none_or(|s| s.mount.is_some());
        on_host.then_some(self.tools_here.workspace.as_path())
    }

    /// The run store flows are recorded in, unless `[store] enabled = false`.
    pub fn store(&self) -> Option<&RunStore> {
        self.store.as_ref()
    }

    /// Start a flow. Each flow gets its own agents, memories and replay position. With a
    /// run store, the run is recorded (committed) before this returns.
    pub async fn submit(
        &self,
        task: &str,
        options: SubmitOptions,
    ) -> Result<FlowHandle, RuntimeError> {
        let run = Run {
            id: new_flow_id(),
            task: task.to_string(),
            mode: options.mode,
            resume: None,
            deltas: options.deltas,
            seq: 0,
            created_at: crate::store::now_ms(),
        };
        self.start_flow(run).await
    }

    /// The ids of runs that were running in a process that has gone (killed, crashed, or
    /// shut down mid-flow), oldest first: what `resume` can continue.
    pub async fn interrupted_runs(&self) -> Result<Vec<String>, RuntimeError> {
        let store = self.store.as_ref().ok_or(RuntimeError::NoStore)?;
        Ok(store
            .interrupted()
            .await?
            .into_iter()
            .map(|(id, _)| id)
            .collect())
    }

    /// Continue an interrupted run from its stored plan: steps that completed are not run
    /// again, a step that was running starts over, and the usage so far is kept. With a
    /// replay profile, the cassette is picked up where the run stood.
    pub async fn resume(&self, run_id: &str) -> Result<FlowHandle, RuntimeError> {
        let store = self.store.as_ref().ok_or(RuntimeError::NoStore)?;
        let run = store
            .get(run_id)
            .await?
            .ok_or_else(|| RuntimeError::UnknownRun(run_id.to_string()))?;
        if run.status != RunStatus::Running {
            return Err(RuntimeError::RunEnded {
                id: run.id,
                status: run.status,
            });
        }
        let busy = || RuntimeError::RunBusy {
            id: run.id.clone(),
            owner: run.owner.clone().unwrap_or_default(),
        };
        let interrupted = store.interrupted().await?;
        if !interrupted.iter().any(|(id, _)| id == &run.id) {
            return Err(busy());
        }
        if !store.claim(&run.id, run.owner.clone()).await? {
            return Err(busy());
        }
        let seq = store.next_seq(&run.id).await?;
        self.continue_run(run, seq).await
    }

    /// Go on with a stored run this runtime now owns, whose next event is `seq`.
    pub(crate) async fn continue_run(
        &self,
        run: StoredRun,
        seq: u64,
    ) -> Result<FlowHandle, RuntimeError> {
        let store = self.store.as_ref().ok_or(RuntimeError::NoStore)?;
        let events = store.events(&run.id).await?;
        let outside = store.take_run_decisions(&run.id).await?;
        let paused = match &run.plan {
            Some(plan) if plan.count(StepStatus::AwaitingApproval) > 0 => {
                let memories = store.memories(&run.id).await?;
                crate::approvals::paused_steps(plan, &events, &outside, &memories)
            }
            _ => vec![],
        };
        let plan_signoff = crate::approvals::plan_signoff(&events, &outside);
        tracing::info!(run = %run.id, "resuming an interrupted run");
        self.start_flow(Run {
            id: run.id,
            task: run.task,
            mode: run.mode,
            resume: Some(Resume {
                plan: run.plan,
                usage: run.usage,
                usage_by_agent: run.usage_by_agent,
                elapsed: std::time::Duration::from_millis(run.elapsed_ms),
                paused,
                plan_signoff,
                next_approval: crate::approvals::next_id(&events),
                next_question: events
                    .iter()
                    .filter_map(|e| match e.event {
                        FlowEvent::Question { id, .. } => Some(id + 1),
                        _ => None,
                    })
                    .max()
                    .unwrap_or(1),
            }),
            deltas: false,
            seq,
            created_at: run.created_at,
        })
        .await
    }

    /// Start the planner of `run`, recording it when there is a store.
    pub(crate) async fn start_flow(&self, run: Run) -> Result<FlowHandle, RuntimeError> {
        let mut pool = self.pool.clone();
        let mut planner_llm = self.planner_llm.clone();
        let clients = pool
            .iter_mut()
            .flat_map(|a| std::iter::once(&mut a.llm).chain(a.compact_llm.as_mut()))
            .chain(std::iter::once(&mut planner_llm));
        let from = match run.resume {
            Some(_) => ReplayFrom::FirstMatch,
            None => ReplayFrom::Start,
        };
        llm::rewind(clients, from);
        let (tx, events) = unbounded_channel();
        // The run's row is committed before the flow starts: once `submit` returns, the
        // run is in the store even if this process is killed the next moment.
        let tap = match &self.store {
            Some(store) => {
                let before = run.resume.clone().unwrap_or_default();
                let row = StoredRun {
                    id: run.id.clone(),
                    task: run.task.clone(),
                    mode: run.mode,
                    status: RunStatus::Running,
                    plan: before.plan,
                    usage: before.usage,
                    usage_by_agent: before.usage_by_agent,
                    outcome: None,
                    owner: Some(store.owner().to_string()),
                    created_at: run.created_at,
                    updated_at: run.created_at,
                    elapsed_ms: before.elapsed.as_millis() as u64,
                };
                let tap: Box<dyn EventObserver> =
                    Box::new(Tap::open(store.clone(), row, run.seq).await?);
                Some(match &self.waiting {
                    Some(waiting) => Box::new(Awaits {
                        tap,
                        open: Default::default(),
                        waiting: waiting.clone(),
                    }),
                    None => tap,
                })
            }
            None => None,
        };
        let spec = FlowSpec {
            id: run.id.clone(),
            task: run.task.clone(),
            mode: run.mode,
            settings: self.config.flow.clone(),
            pool,
            planning_opening: self.planning_opening.clone(),
            planner_llm,
            planner_slots: self.planner_slots.clone(),
            planning: self.planning.clone(),
            events: EventSink::new(tx, tap, run.deltas),
            sandbox: self.sandbox.clone(),
            browser: self.browser.clone(),
            resume: run.resume,
        };
        let planner = manus_actors::root::start_flow(&self.root, spec)
            .await
            .map_err(RuntimeError::Submit)?;
        if (self.decisions.is_some() || self.fenced_off.is_some())
            && let Ok(mut controls) = self.controls.lock()
        {
            // The poller forgets ended flows when it looks, which it may not do for long.
            controls.retain(|_, c| c.is_running());
            controls.insert(
                run.id.clone(),
                FlowControl {
                    planner: planner.clone(),
                },
            );
        }
        Ok(FlowHandle {
            id: run.id,
            task: run.task,
            planner,
            events,
            outcome: None,
        })
    }

    /// Stop every flow and the actor tree.
    pub async fn shutdown(self) {
        let _ = self
            .root
            .stop_and_wait(
                Some("shutdown".into()),
                Some(std::time::Duration::from_secs(5)),
            )
            .await;
        // After the flows' Release messages: the browser closes what is left.
        if let Some(browser) = self.browser {
            let _ = browser
                .stop_and_wait(
                    Some("shutdown".into()),
                    Some(std::time::Duration::from_secs(30)),
                )
                .await;
        }
        // MCP servers are stopped with their connections (a stdio server's process too).
        for handle in self.mcp {
            let _ = handle
                .conn
                .stop_and_wait(
                    Some("shutdown".into()),
                    Some(std::time::Duration::from_secs(10)),
                )
                .await;
        }
        // Last, so the flows' Release messages are handled; it removes what is left.
        if let Some(sandbox) = self.sandbox {
            let _ = sandbox
                .stop_and_wait(
                    Some("shutdown".into()),
                    Some(std::time::Duration::from_secs(60)),
                )
                .await;
        }
        // Flows stopped mid-way stay `running` in the store, and count as interrupted once
        // this process has retired: the next start can resume them.
        if let Some(store) = self.store {
            store.close().await;
        }
    }
}

/// Answers and cancels a running flow; cheap to clone.
#[derive(Clone)]
pub struct FlowControl {
    planner: ActorRef<FlowMsg>,
}

impl FlowControl {
    /// Answer the question of a `FlowEvent::Question`.
    pub fn answer(&self, question_id: u64, text: impl Into<String>) {
        let _ = self.planner.send_message(FlowMsg::Answer {
            question_id,
            text: text.into(),
        });
    }

    /// Stop the flow; its outcome will say it was cancelled.
    pub fn cancel(&self) {
        let _ = self.planner.send_message(FlowMsg::Cancel);
    }

    /// Whether the flow's planner still runs.
    fn is_running(&self) -> bool {
        !matches!(
            self.planner.get_status(),
            ractor::ActorStatus::Stopped | ractor::ActorStatus::Stopping
        )
    }

    /// Decide on the tool call of a `FlowEvent::ApprovalRequested`: approve it (with the
    /// model's arguments, or `decision.arguments`), or reject it (the reason goes back to
    /// the model as the call's result). The flow answers with `ApprovalDecided`.
    pub fn decide(&self, approval_id: u64, decision: manus_actors::protocol::Decision) {
        let _ = self.planner.send_message(FlowMsg::Decide {
            approval_id,
            decision,
        });
    }
}

/// A running flow: its events, its questions, and how it ends.
pub struct FlowHandle {
    pub id: String,
    task: String,
    planner: ActorRef<FlowMsg>,
    events: UnboundedReceiver<FlowEvent>,
    outcome: Option<FlowOutcome>,
}

impl FlowHandle {
    /// The next event, or `None` once the flow has finished and every event was read.
    pub async fn next_event(&mut self) -> Option<FlowEvent> {
        if self.outcome.is_some() {
            return None;
        }
        match self.events.recv().await {
            Some(e) => {
                if let FlowEvent::FlowFinished { outcome } = &e {
                    self.outcome = Some(outcome.clone());
                }
                Some(e)
            }
            None => {
                // Every sender is gone without a FlowFinished: the planner died.
                let outcome = self.crashed();
                self.outcome = Some(outcome.clone());
                Some(FlowEvent::FlowFinished { outcome })
            }
        }
    }

    fn crashed(&self) -> FlowOutcome {
        FlowOutcome {
            flow_id: self.id.clone(),
            status: FlowStatus::Failed,
            reason: format!(
                "the flow's planner stopped unexpectedly (task: {})",
                self.task
            ),
            plan: Plan::default(),
            summary: String::new(),
            usage: Default::default(),
            usage_by_agent: Default::default(),
            elapsed_ms: 0,
        }
    }

    /// Answer the question of a `FlowEvent::Question`.
    pub fn answer(&self, question_id: u64, text: impl Into<String>) {
        self.control().answer(question_id, text)
    }

    /// Stop the flow; its outcome will say it was cancelled.
    pub fn cancel(&self) {
        self.control().cancel()
    }

    /// Decide on an approval request (see `FlowControl::decide`).
    pub fn decide(&self, approval_id: u64, decision: manus_actors::protocol::Decision) {
        self.control().decide(approval_id, decision)
    }

    /// A handle that answers and cancels, for code that does not read the events (the
    /// event stream stays with this `FlowHandle`).
    pub fn control(&self) -> FlowControl {
        FlowControl {
            planner: self.planner.clone(),
        }
    }

    /// Read the remaining events and return how the flow ended.
    pub async fn outcome(mut self) -> FlowOutcome {
        while self.next_event().await.is_some() {}
        self.outcome.take().unwrap_or_else(|| self.crashed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Nowhere;

    impl EventObserver for Nowhere {
        fn observe(&mut self, _: &FlowEvent) {}
    }

    fn requested(id: u64) -> FlowEvent {
        FlowEvent::ApprovalRequested {
            id,
            step: Some(0),
            agent: "manus".into(),
            tool: "bash".into(),
            arguments: "{}".into(),
            why: "a rule".into(),
            call_id: format!("call_{id}"),
            round: 1,
        }
    }

    fn decided(id: u64) -> FlowEvent {
        FlowEvent::ApprovalDecided {
            id,
            step: Some(0),
            decision: manus_actors::protocol::Decision::now(true, None, None, "test"),
        }
    }

    /// The poller's gate: a request opens once however often it is published (a resumed
    /// flow publishes it again), closes when decided, and what a flow leaves open closes
    /// when its events end.
    #[tokio::test]
    async fn open_requests_are_counted_and_wake_the_poller_once() {
        let waiting = Arc::new(Waiting::default());
        let mut a = Awaits {
            tap: Box::new(Nowhere),
            open: Default::default(),
            waiting: waiting.clone(),
        };
        let mut b = Awaits {
            tap: Box::new(Nowhere),
            open: Default::default(),
            waiting: waiting.clone(),
        };
        a.observe(&requested(1));
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting.opened.notified())
            .await
            .expect("the first request wakes the poller");
        for event in [requested(1), requested(2), decided(7)] {
            a.observe(&event);
        }
        b.observe(&requested(1));
        assert_eq!(waiting.open.load(Ordering::Acquire), 3);
        a.observe(&decided(1));
        a.observe(&decided(1));
        assert_eq!(waiting.open.load(Ordering::Acquire), 2);
        drop(b);
        assert_eq!(waiting.open.load(Ordering::Acquire), 1);
        a.observe(&decided(2));
        drop(a);
        assert_eq!(waiting.open.load(Ordering::Acquire), 0);
    }
}
