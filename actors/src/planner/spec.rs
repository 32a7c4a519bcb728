//! The planner's arguments: what a flow is to do (`FlowSpec`), where an interrupted one
//! stood (`Resume`), and the flow settings. The host's runtime builds them; `root::start_flow`
//! hands them to a new planner.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ractor::ActorRef;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

use crate::agent::AgentSpec;
use crate::background::PlanningThread;
use crate::llm::{LlmClient, Message, Usage};
use crate::plan::Plan;
use crate::protocol::{BrowserMsg, EventSink, FlowMode, SandboxMsg};

/// What to do when a step has failed after its retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnStepFailure {
    /// Go on with the next step; the flow ends as failed.
    Continue,
    /// End the flow at once, as failed; steps running then are stopped.
    Stop,
    /// Ask the model to revise the steps that have not completed (up to `max_replans`
    /// times), then go on as `continue`.
    Replan,
}

/// How the planner runs every flow of a runtime: routing, timeouts, retries, budgets.
#[derive(Debug, Clone)]
pub struct FlowSettings {
    /// The agent for untagged steps and tags that name no agent.
    pub primary_agent: String,
    /// How many flows may be planning or summarising at once, across the runtime; the
    /// runtime holds the permits (`FlowSpec::planner_slots`) and the rest wait in order.
    pub planner_replicas: u32,
    pub step_timeout: Duration,
    pub flow_timeout: Duration,
    /// Further attempts after a step fails or is blocked.
    pub max_step_retries: u32,
    pub on_step_failure: OnStepFailure,
    /// How many revisions one flow's plan may have: asked for after a failure
    /// (`on_step_failure = "replan"`), or made by a review (`review_after_each_step`).
    pub max_replans: u32,
    /// How many of a flow's steps may run at once (a graph plan's independent steps).
    pub max_parallel_steps: u32,
    /// After every completed step, let the model revise the steps not yet started (within
    /// `max_replans` revisions), as Magentic-One's orchestrator does.
    pub review_after_each_step: bool,
    /// How long an approval request waits, and whether it is then approved (else rejected).
    pub approval_timeout: Option<(Duration, bool)>,
    /// A person signs off the plan, and every revision of it, before any of its steps run.
    pub plan_approval: bool,
    /// Stop the flow once its model calls have used more tokens than this.
    pub max_tokens: Option<u64>,
    /// Stop the flow once its model calls have cost more than this.
    pub max_cost: Option<f64>,
}

/// Everything a planner needs to run one flow.
pub struct FlowSpec {
    pub id: String,
    pub task: String,
    /// `Plan` runs the PlanningFlow; `Single` gives the whole task to the primary agent.
    pub mode: FlowMode,
    pub settings: FlowSettings,
    pub pool: Vec<AgentSpec>,
    /// The planning call's system message for this pool (`planner::planning_opening`),
    /// made once per runtime.
    pub planning_opening: Arc<Message>,
    pub planner_llm: LlmClient,
    /// The runtime's `planner_replicas` permits: a planning or summary call holds one.
    pub planner_slots: Arc<Semaphore>,
    /// The runtime's planning thread, where the planner makes its model calls. It stops
    /// when the runtime and every planner have let go of it.
    pub planning: Arc<PlanningThread>,
    pub events: EventSink,
    /// The sandbox supervisor, told to remove the flow's container when it ends.
    pub sandbox: Option<ActorRef<SandboxMsg>>,
    /// The browser supervisor, told to close the flow's browser when it ends.
    pub browser: Option<ActorRef<BrowserMsg>>,
    /// Set to continue an interrupted flow (same id) instead of starting it afresh.
    pub resume: Option<Resume>,
    /// Set when the flow is a follow-up turn of a conversation (a thread of runs).
    pub turn: Option<Turn>,
    /// Where the end-of-run pass keeps what the model says is worth keeping (`[memory]
    /// distill`); `None`, no such pass.
    pub distill: Option<Arc<dyn crate::tools::memory::MemoryBook>>,
}

/// A flow that continues a thread: which thread, which of its turns this is, and what its
/// earlier turns did, as text the planner and every step read before the task.
#[derive(Debug, Clone)]
pub struct Turn {
    /// The thread's id: the id of its first run.
    pub thread: String,
    /// This turn's number in its thread (the first run is turn 0).
    pub number: u32,
    /// The earlier turns: each one's task, plan with notes, and answer, the oldest cut down
    /// when they are long.
    pub earlier: Arc<str>,
}

/// Where an interrupted flow stood. The planner skips the planning call when there is a
/// plan, never re-runs a completed step, and runs a step that was in progress from its start.
#[derive(Debug, Clone, Default)]
pub struct Resume {
    /// The plan with each step's status, notes and attempts; `None` if it was still planning.
    pub plan: Option<Plan>,
    pub usage: Usage,
    pub usage_by_agent: BTreeMap<String, Usage>,
    /// How long the flow had run; it counts toward `flow_timeout` and the outcome's time.
    pub elapsed: Duration,
    /// Steps that were waiting for approval, with the decision if one was given since.
    pub paused: Vec<PausedStep>,
    /// The plan's sign-off request that was waiting, with the decision if one was given
    /// since (`[flow] plan_approval`).
    pub plan_signoff: Option<(u64, Option<crate::protocol::Decision>)>,
    /// The number the flow's next approval request gets: above every one it made before.
    pub next_approval: u64,
    /// The number the flow's next question gets: above every one it asked before, so an
    /// answer recorded for an earlier question is never taken for a new one.
    pub next_question: u64,
    /// Code-mode steps' rounds as recorded before the interruption, by step: such a step
    /// goes on after them instead of starting over.
    pub recorded: BTreeMap<usize, Vec<crate::protocol::RecordedRound>>,
    /// Steps that run on recorded answers instead of model calls (a fork's), by number.
    pub replay: BTreeMap<usize, crate::protocol::StepReplay>,
    /// Set when the flow is a new fork of another run (under a new id): where it came from,
    /// announced with `FlowEvent::Forked` instead of `Resumed`.
    pub fork: Option<Fork>,
}

/// Where a fork comes from.
#[derive(Debug, Clone, Default)]
pub struct Fork {
    /// The run it was forked from, and the step it goes live from.
    pub from: String,
    pub at_step: usize,
    /// Where its agents work.
    pub workspace: String,
}

/// A step stopped before a tool call that needs approval, as the planner keeps it until a
/// person decides (and as the run store gives it back to a resumed flow).
#[derive(Debug, Clone)]
pub struct PausedStep {
    /// The approval request's number in its flow.
    pub id: u64,
    pub step: usize,
    pub agent: String,
    pub rounds: u32,
    pub pause: crate::protocol::Pause,
    pub decision: Option<crate::protocol::Decision>,
    /// Set by a resume when the call was approved and handed to its tool before the
    /// interruption (the decision was recorded first): the call is not run again, and the
    /// model reads this instead of its result.
    pub interrupted: Option<String>,
    /// The agent that stopped, kept for the step to go on with (its shell and working
    /// directory); `None` once the process that ran it is gone.
    pub agent_ref: Option<ActorRef<crate::protocol::AgentMsg>>,
}
