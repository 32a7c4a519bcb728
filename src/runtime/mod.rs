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

//!
//! `builder.rs` starts a runtime from its config (the actor tree, the engines, the store);
//! `decisions.rs` hands decisions and commands recorded in the store to the flows here;
//! `handle.rs` is what a caller holds of a flow. The cluster's queue verbs are
//! `cluster/queue.rs`.

mod builder;
mod decisions;
mod fork;
mod guard;
mod handle;

pub use builder::RuntimeBuilder;
use decisions::{Awaits, Waiting};
pub use fork::ForkOptions;
pub use handle::{FlowControl, FlowHandle};

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use manus_actors::background::PlanningThread;
use manus_actors::llm::{self, LlmClient, ReplayFrom};
use manus_actors::mcp::McpHandle;
use manus_actors::mcp::server::ServeSettings;
use manus_actors::planner::{FlowSpec, Resume, Turn};
use manus_actors::protocol::{BrowserMsg, EventObserver, EventSink, SandboxMsg};
use manus_actors::protocol::{FlowEvent, FlowMode, RootMsg};
use ractor::ActorRef;
use tokio::sync::mpsc::unbounded_channel;

use crate::config::{Config, ConfigError};
use crate::store::memory::{Owners, StoreBook};
use crate::store::tap::Tap;
use crate::store::{Refused, RunStatus, RunStore, StoreError, StoredRun};
use manus_actors::tools::memory::MemoryBook;

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
    #[error(
        "the conversation {thread} has a turn that has not ended (run {run}): wait for it, cancel it, or `manus-rt resume {run}` it if it was interrupted, then send the follow-up"
    )]
    TurnRunning { thread: String, run: String },
    #[error(
        "run {id} is {status}: only a finished run (completed, failed or cancelled) can be forked"
    )]
    NotEnded { id: String, status: RunStatus },
    #[error("run {0} has no plan (it ended while planning): there are no steps to fork at")]
    NoPlan(String),
    #[error("cannot fork here: {0}")]
    ForkRefused(String),
    #[error("run {id} has no step {at} to fork at; its steps are {steps}")]
    StepOutOfRange {
        id: String,
        at: usize,
        steps: String,
    },
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
    /// Cluster: stops the flows here whose runs other nodes took over, and all of them
    /// when this node's leases lapse.
    guard: Option<AbortOnDrop>,
}

/// A task stopped when its holder is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A flow id unique without coordination: a UUIDv7 (the time in milliseconds, then 74
/// random bits), so nodes that share a store never mint the same one, not even processes
/// with the same pid (every container's PID 1), and ids sort by creation time.
pub(crate) fn new_flow_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// A flow about to start: a new one, or an interrupted one to continue.
pub(crate) struct Run {
    pub(crate) id: String,
    pub(crate) task: String,
    pub(crate) mode: FlowMode,
    pub(crate) resume: Option<Resume>,
    /// Set when the flow is a follow-up turn of a conversation.
    pub(crate) turn: Option<Turn>,
    /// Whether its events include `TextDelta`s.
    pub(crate) deltas: bool,
    /// The number of its next event.
    pub(crate) seq: u64,
    pub(crate) created_at: i64,
    /// Who started it (`SubmitOptions::user`), for its memory's `user` namespace.
    pub(crate) user: Option<String>,
    /// Where its agents work, when not the runtime's workspace (a fork's own).
    pub(crate) workspace: Option<PathBuf>,
}

/// How to run a submitted task.
#[derive(Debug, Clone)]
pub struct SubmitOptions {
    pub mode: FlowMode,
    /// Send `FlowEvent::TextDelta`s: the model's text as it streams, for a live view.
    /// Off, none are made.
    pub deltas: bool,
    /// Continue a conversation: the task is a follow-up to this run (any turn of its
    /// thread), and the flow is the thread's next turn. It sees what the earlier turns did
    /// (tasks, plans, notes, answers) and works in the same workspace. Refused while the
    /// thread's last turn has not ended; needs the run store.
    pub continues: Option<String>,
    /// Who asks: the service's token, the CLI's local user. With `[memory]`, the flow saves
    /// and searches the notes of `user:NAME` (`local` when unset).
    pub user: Option<String>,
}

impl Default for SubmitOptions {
    fn default() -> Self {
        SubmitOptions {
            mode: FlowMode::Plan,
            deltas: false,
            continues: None,
            user: None,
        }
    }
}

/// What refusing a follow-up to `continues` says.
pub(crate) fn refused(continues: &str, why: Refused) -> RuntimeError {
    match why {
        Refused::Unknown => RuntimeError::UnknownRun(continues.to_string()),
        Refused::Busy { thread, run } => RuntimeError::TurnRunning { thread, run },
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
        ServeSettings {
            files: self.workspace().map(std::path::Path::to_path_buf),
            ..self.tools_here.clone()
        }
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
        let id = new_flow_id();
        let turn = match &options.continues {
            Some(continues) => {
                let store = self.store.as_ref().ok_or(RuntimeError::NoStore)?;
                let place = store
                    .link_turn(&id, continues, options.user.clone())
                    .await?
                    .map_err(|why| refused(continues, why))?;
                Self::turn_at(store, place).await?.0
            }
            None => None,
        };
        let run = Run {
            id,
            task: task.to_string(),
            mode: options.mode,
            resume: None,
            turn,
            deltas: options.deltas,
            seq: 0,
            created_at: crate::store::now_ms(),
            user: options.user,
            workspace: None,
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
            Some(plan) if crate::approvals::may_have_paused_steps(plan, &events) => {
                let memories = store.memories(&run.id).await?;
                crate::approvals::paused_steps(plan, &events, &outside, &memories)
            }
            _ => vec![],
        };
        let plan_signoff = crate::approvals::plan_signoff(&events, &outside);
        let recorded = match &run.plan {
            Some(plan) => crate::cells::recorded_rounds(plan, &events),
            None => Default::default(),
        };
        // A fork goes on in its own workspace, replaying what it had not yet.
        let (workspace, replay) = match self.fork_left(run.plan.as_ref(), &events).await? {
            Some((workspace, replay)) => (Some(workspace), replay),
            None => (None, Default::default()),
        };
        tracing::info!(run = %run.id, "resuming an interrupted run");
        let (mut turn, user) = self.place(&run.id).await?;
        // A fork of a follow-up turn reads the earlier turns of the run it came from.
        let forked_from = events.iter().find_map(|e| match &e.event {
            FlowEvent::Forked { from, .. } => Some(from.clone()),
            _ => None,
        });
        if let (None, Some(from)) = (&turn, forked_from) {
            turn = self.place(&from).await?.0;
        }
        self.start_flow(Run {
            turn,
            user,
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
                recorded,
                replay,
                fork: None,
            }),
            deltas: false,
            seq,
            created_at: run.created_at,
            workspace,
        })
        .await
    }

    /// Where stored run `id` stands: its thread's earlier turns when it is a follow-up turn
    /// of a conversation, and who it was started for.
    pub(crate) async fn place(
        &self,
        id: &str,
    ) -> Result<(Option<Turn>, Option<String>), RuntimeError> {
        let Some(store) = &self.store else {
            return Ok((None, None));
        };
        let place = store.turn_of(id).await?;
        Self::turn_at(store, place).await
    }

    /// What a run at `place` reads of its thread's earlier turns (none for turn 0), and
    /// who it was started for.
    async fn turn_at(
        store: &RunStore,
        place: crate::store::TurnOf,
    ) -> Result<(Option<Turn>, Option<String>), RuntimeError> {
        if place.turn == 0 {
            return Ok((None, place.user));
        }
        let mut turns = store.turns(&place.thread).await?;
        turns.retain(|(n, _)| *n < place.turn);
        let turn = Turn {
            earlier: crate::threads::earlier(&turns).into(),
            thread: place.thread,
            number: place.turn,
        };
        Ok((Some(turn), place.user))
    }

    /// Start the planner of `run`, recording it when there is a store.
    pub(crate) async fn start_flow(&self, run: Run) -> Result<FlowHandle, RuntimeError> {
        let mut pool = self.pool.clone();
        if let Some(dir) = &run.workspace {
            fork::work_in(&mut pool, dir);
        }
        let mut planner_llm = self.planner_llm.clone();
        let clients = pool
            .iter_mut()
            .flat_map(|a| std::iter::once(&mut a.llm).chain(a.compact_llm.as_mut()))
            .chain(std::iter::once(&mut planner_llm));
        // A resumed run, or a later turn of a conversation, picks its cassette up at its
        // own first request (a turn's opens with its history, so it is found).
        let from = match (&run.resume, &run.turn) {
            (None, None) => ReplayFrom::Start,
            _ => ReplayFrom::FirstMatch,
        };
        llm::rewind(clients, from);
        let mut distill = None;
        if let (Some(store), Some(memory)) = (&self.store, &self.config.memory) {
            let owners = Owners {
                thread: run.turn.as_ref().map_or(&run.id, |t| &t.thread).clone(),
                user: run.user.clone().unwrap_or_else(|| "local".into()),
            };
            let book: Arc<dyn MemoryBook> =
                Arc::new(StoreBook::new(store.clone(), memory, &owners));
            for agent in &mut pool {
                agent.memory = Some(book.clone());
            }
            distill = memory.distill.then_some(book);
        }
        let (tx, events) = unbounded_channel();
        // Cluster: the flow acts, and is recorded, only while the node's leases hold
        // without a lapse from now on (`store::lease`).
        let licence = self
            .store
            .as_ref()
            .and_then(RunStore::lease_clock)
            .map(|clock| {
                let epoch = clock.epoch();
                (clock, epoch)
            });
        // A flow licensed while the leases do not hold would be licensed in an epoch that
        // a lapse already ended, and come alive once they are renewed.
        if let Some((clock, _)) = &licence
            && !clock.holds()
        {
            return Err(RuntimeError::Submit(
                "this node's leases lapsed; it starts flows again once they are renewed".into(),
            ));
        }
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
                let tap: Box<dyn EventObserver> = Box::new(
                    Tap::open(
                        store.clone(),
                        row,
                        run.seq,
                        licence.clone(),
                        run.user.clone(),
                    )
                    .await?,
                );
                Some(match &self.waiting {
                    Some(waiting) => Box::new(Awaits::new(tap, waiting.clone())),
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
            events: match &licence {
                Some((clock, epoch)) => {
                    let (clock, epoch) = (clock.clone(), *epoch);
                    let licence = Arc::new(move || clock.licenses(epoch));
                    EventSink::new(tx, tap, run.deltas).licensed(licence)
                }
                None => EventSink::new(tx, tap, run.deltas),
            },
            sandbox: self.sandbox.clone(),
            browser: self.browser.clone(),
            resume: run.resume,
            turn: run.turn,
            distill,
        };
        let planner = manus_actors::root::start_flow(&self.root, spec)
            .await
            .map_err(RuntimeError::Submit)?;
        if (self.decisions.is_some() || self.guard.is_some())
            && let Ok(mut controls) = self.controls.lock()
        {
            // The poller forgets ended flows when it looks, which it may not do for long.
            controls.retain(|_, c| c.is_running());
            let control = FlowControl::new(run.id.clone(), planner.clone(), self.store.clone());
            controls.insert(run.id.clone(), control);
        }
        Ok(FlowHandle::new(
            run.id,
            run.task,
            planner,
            events,
            self.store.clone(),
        ))
    }

    /// Stop every flow and the actor tree.
    pub async fn shutdown(self) {
        stop(self.root.get_cell(), 5).await;
        // After the flows' Release messages: the browser closes what is left.
        if let Some(browser) = self.browser {
            stop(browser.get_cell(), 30).await;
        }
        // MCP servers are stopped with their connections (a stdio server's process too).
        for handle in self.mcp {
            stop(handle.conn.get_cell(), 10).await;
        }
        // Last, so the flows' Release messages are handled; it removes what is left.
        if let Some(sandbox) = self.sandbox {
            stop(sandbox.get_cell(), 60).await;
        }
        // Flows stopped mid-way stay `running` in the store, and count as interrupted once
        // this process has retired: the next start can resume them.
        if let Some(store) = self.store {
            store.close().await;
        }
    }
}

/// Stop `actor` and wait up to `secs` seconds for it (and its children) to end.
async fn stop(actor: ractor::ActorCell, secs: u64) {
    let wait = std::time::Duration::from_secs(secs);
    let _ = actor
        .stop_and_wait(Some("shutdown".into()), Some(wait))
        .await;
}

#[cfg(test)]
mod tests {
    use super::new_flow_id;

    /// Ids are UUIDv7s: distinct, and in the order they were made.
    #[test]
    fn flow_ids_are_time_ordered_uuids() {
        let ids: Vec<String> = (0..1000).map(|_| new_flow_id()).collect();
        for id in &ids {
            let uuid = uuid::Uuid::parse_str(id).unwrap();
            assert_eq!(uuid.get_version_num(), 7, "{id}");
        }
        let mut sorted = ids.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted, ids);
    }
}
