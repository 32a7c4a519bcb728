//! Every message that crosses an actor boundary, and the `FlowEvent` stream.
//!
//! The actor tree (see ARCHITECTURE.md):
//!
//! ```text
//! Root supervisor ──► Planner (one per flow) ──► executor-agent × replicas ──► tool-worker
//! Browser supervisor ──► browser owner (one per flow that browses)
//! Sandbox supervisor ──► container (one per flow that runs code in the sandbox)
//! ```
//!
//! Requests that need an answer carry an `RpcReplyPort`, except a plan step, whose outcome
//! comes back as a message of its own (`StepReport`); everything else is a cast.
//! Nothing is shared between actors but these messages and clones of the flow's
//! `EventSink`.
//!
//! This file is a leaf: it names no actor's module, only the model's data types (`llm`)
//! and the plan (`plan`), so every actor can depend on it and it on none of them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ractor::{ActorRef, RpcReplyPort};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;

use crate::llm::{Message, ToolCall, Usage};
use crate::plan::{Plan, StepStatus};

// ─── A flow's events ────────────────────────────────────────────────────────────────────

/// Sees each of a flow's events just before its handle does, in the handle's order, on the
/// emitting actor's own thread: how the host's run store keeps its record with no task in
/// between. It must be quick and must not block.
pub trait EventObserver: Send {
    fn observe(&mut self, event: &FlowEvent);

    /// As `observe`, for an event the flow must not act past until it is recorded (a
    /// decision that lets a tool call run): the answer comes once it is, or why it is not.
    /// An observer that keeps no record has nothing to wait for.
    fn observe_durably(&mut self, event: &FlowEvent) -> Option<Durable> {
        self.observe(event);
        None
    }
}

/// Told once an event given to `EventObserver::observe_durably` is recorded, or why not.
pub type Durable = tokio::sync::oneshot::Receiver<Result<(), String>>;

/// Where a flow's events go: the channel its handle reads, after the host's observer, if
/// any. Cheap to clone: the planner and its agents each hold one. When the last clone is
/// dropped the handle's stream ends and the observer is dropped.
#[derive(Clone)]
pub struct EventSink(Arc<SinkInner>);

/// Whether the process running a flow may still act for it: a cluster node holds a flow
/// only while its lease does, and a node that was paused past it must not act again (the
/// flow is another node's now). Cheap: asked before every tool and model call.
pub type Licence = Arc<dyn Fn() -> bool + Send + Sync>;

struct SinkInner {
    tx: UnboundedSender<FlowEvent>,
    /// Whether this process may still act for the flow (see `Licence`).
    licence: Option<Licence>,
    /// Whoever reads the events watches live: `TextDelta`s are made only then.
    deltas: bool,
    /// Held while an event is observed and queued, so both see the same order.
    observer: Option<Mutex<Box<dyn EventObserver>>>,
}

impl EventSink {
    pub fn new(
        tx: UnboundedSender<FlowEvent>,
        observer: Option<Box<dyn EventObserver>>,
        deltas: bool,
    ) -> Self {
        EventSink(Arc::new(SinkInner {
            tx,
            licence: None,
            deltas,
            observer: observer.map(Mutex::new),
        }))
    }

    /// The same sink, whose flow may act only while `licence` says so.
    pub fn licensed(mut self, licence: Licence) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.0) {
            inner.licence = Some(licence);
        }
        self
    }

    /// Whether the flow may still act: asked before every side effect (a tool call, a
    /// model call). `Err` says why not; the flow stops, as it is being stopped anyway.
    pub fn may_act(&self) -> Result<(), String> {
        match &self.0.licence {
            Some(licence) if !licence() => Err(
                "stopped here: this node's lease on the flow lapsed (it was paused or cut off from the store), so another node takes the flow over".into(),
            ),
            _ => Ok(()),
        }
    }

    /// Pass `event` on as `send` does, and wait until the observer has recorded it (at
    /// once without one): what the flow does next survives the process being killed.
    pub async fn send_durably(&self, event: FlowEvent) -> Result<(), String> {
        let inner = &*self.0;
        let durable = {
            let mut observer = inner
                .observer
                .as_ref()
                .map(|o| o.lock().unwrap_or_else(|p| p.into_inner()));
            let durable = observer.as_mut().and_then(|o| o.observe_durably(&event));
            let _ = inner.tx.send(event);
            durable
        };
        match durable {
            Some(recorded) => recorded
                .await
                .unwrap_or_else(|_| Err("the run store stopped".into())),
            None => Ok(()),
        }
    }

    /// Whether `TextDelta`s are wanted: nobody watching live costs no delta at all.
    pub fn wants_deltas(&self) -> bool {
        self.0.deltas
    }

    /// Pass `event` on. A handle that is gone is no error: the flow goes on, and the
    /// observer still sees it.
    pub fn send(&self, event: FlowEvent) {
        let inner = &*self.0;
        // Held until the event is queued too.
        let _observed = inner.observer.as_ref().map(|observer| {
            let mut observer = observer.lock().unwrap_or_else(|p| p.into_inner());
            observer.observe(&event);
            observer
        });
        let _ = inner.tx.send(event);
    }
}

// ─── Root supervisor ────────────────────────────────────────────────────────────────────

/// Messages to the root supervisor, which owns every flow: none. It only supervises; flows
/// are started under it by `root::start_flow`, in the submitter's own task.
pub enum RootMsg {}

// ─── Planner (one per flow) ────────────────────────────────────────────────────────────

/// Whether a flow is planned or handed whole to its primary agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlowMode {
    Plan,
    Single,
}

/// Messages to a flow's planner.
pub enum FlowMsg {
    /// Begin: make the plan and dispatch the first step.
    Begin,
    /// The planning call came back (it runs off the mailbox, so Cancel and timeouts apply
    /// while the model thinks).
    PlanMade {
        plan: Result<Plan, String>,
        usage: Usage,
    },
    /// The revision call came back: the steps that replace what has not completed (text,
    /// and the numbers of the steps each needs), or `None` if the model gave none; and why
    /// the plan was revised.
    PlanRevised {
        steps: Option<Vec<(String, crate::plan::Needs)>>,
        /// The steps the model was told the revision replaces.
        replace: Vec<usize>,
        usage: Usage,
        why: String,
        /// Asked for by a review after a completed step, not by a failure.
        review: bool,
    },
    /// An agent's model call spent these tokens; counted even if its step is later stopped.
    /// With `go_on`, the planner answers whether the flow's budget allows another call, so
    /// nothing is asked of the model once the budget is spent.
    Spent {
        agent: String,
        /// The agent actor that spent them: the planner knows which step it runs.
        from: ractor::ActorId,
        usage: Usage,
        go_on: Option<RpcReplyPort<bool>>,
    },
    /// The agent got one of its kind's replica permits and began the step sent under
    /// `dispatch`, after waiting `queued` for it. The step's timeout runs from here. The
    /// planner answers once it has published `StepStarted`, so that event comes before
    /// any of the step's own.
    StepBegan {
        dispatch: u64,
        queued: Duration,
        ack: RpcReplyPort<()>,
    },
    /// An agent finished the step it was sent under dispatch number `dispatch`.
    StepDone { dispatch: u64, outcome: StepOutcome },
    /// The step sent under `dispatch` ran past `step_timeout_secs`.
    StepTimedOut { dispatch: u64 },
    /// The flow ran past `flow_timeout_secs`.
    FlowTimedOut,
    /// An agent's `ask_human` call: the reply is the human's answer, or why there is none.
    Ask {
        agent: String,
        /// The agent actor that asks: the planner knows which step it runs.
        from: ractor::ActorId,
        /// The tool call that asks, if known: its `ToolFinished` closes the question.
        call_id: Option<String>,
        inquire: String,
        /// The JSON schema the answer must meet (an MCP server's elicitation), shown with
        /// the question; `None` for free text.
        form: Option<Value>,
        reply: RpcReplyPort<Result<String, String>>,
    },
    /// A tool call in progress needs a person's approval to go on (an MCP server's
    /// sampling request under `[mcp] sampling = "approve"`): published as an
    /// `ApprovalRequested` of the asking step; the reply is the decision.
    Hold {
        agent: String,
        from: ractor::ActorId,
        call_id: Option<String>,
        tool: String,
        arguments: String,
        why: String,
        reply: RpcReplyPort<Decision>,
    },
    /// A tool call's progress, as an MCP server reported it.
    Progress {
        agent: String,
        from: ractor::ActorId,
        call_id: Option<String>,
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    },
    /// The answer to a `FlowEvent::Question`.
    Answer { question_id: u64, text: String },
    /// A person's decision on a `FlowEvent::ApprovalRequested`.
    Decide {
        approval_id: u64,
        decision: Decision,
    },
    /// Stop the flow now; the outcome says it was cancelled.
    Cancel,
}

// ─── Executor agent ────────────────────────────────────────────────────────────────────

/// Messages to an executor agent.
pub enum AgentMsg {
    /// Run one plan step to its end, then say how it ended through the report.
    RunStep(StepRequest, StepReport),
}

/// Where a step's outcome goes: straight to its planner, as `FlowMsg::StepDone` under the
/// step's dispatch number, with no task in between. It is sent once. A report dropped
/// unsent (the agent crashed, or was stopped before or while running the step) tells the
/// planner the step failed, so no step is left waiting for an agent that is gone.
pub struct StepReport {
    flow: ActorRef<FlowMsg>,
    dispatch: u64,
    sent: bool,
}

impl StepReport {
    pub fn new(flow: ActorRef<FlowMsg>, dispatch: u64) -> Self {
        StepReport {
            flow,
            dispatch,
            sent: false,
        }
    }

    pub fn send(mut self, outcome: StepOutcome) {
        self.sent = true;
        self.deliver(outcome);
    }

    fn deliver(&self, outcome: StepOutcome) {
        let dispatch = self.dispatch;
        // A planner that is gone has no step to settle.
        let _ = self
            .flow
            .send_message(FlowMsg::StepDone { dispatch, outcome });
    }
}

impl Drop for StepReport {
    fn drop(&mut self) {
        if !self.sent {
            self.deliver(StepOutcome {
                status: StepStatus::Failed,
                summary: "the agent stopped before finishing the step".into(),
                usage: Usage::default(),
                rounds: 0,
                pause: None,
                brief: None,
            });
        }
    }
}

/// What a tool may ask of its flow, on behalf of one agent: a question for the human, and
/// a note of what a model call it made spent. Tools hold this, never the planner's mailbox.
#[derive(Debug, Clone)]
pub struct FlowLink {
    flow: ActorRef<FlowMsg>,
    agent: String,
    from: ractor::ActorId,
    /// The id of the tool call being run (set by the tool worker before each call), so a
    /// question names the call that asks it.
    call: Option<String>,
}

/// Why a question got no answer.
#[derive(Debug)]
pub enum Unanswered {
    /// The flow said why (nobody is attached, the flow ended, …).
    Refused(String),
    /// Nobody answered within the time given.
    TimedOut,
    /// The question did not reach the flow.
    Undelivered(String),
}

impl FlowLink {
    /// The link of agent actor `from`, of kind `agent`.
    pub fn new(flow: ActorRef<FlowMsg>, agent: impl Into<String>, from: ractor::ActorId) -> Self {
        FlowLink {
            flow,
            agent: agent.into(),
            from,
            call: None,
        }
    }

    /// The kind of agent this link speaks for (`manus`, `data_analysis`).
    pub fn agent(&self) -> &str {
        &self.agent
    }

    /// The link for the tool call `call_id`: what it asks carries that id.
    pub fn for_call(&mut self, call_id: &str) {
        self.call = Some(call_id.to_string());
    }

    /// Put `inquire` to the human behind the flow and wait up to `wait` for the answer.
    pub async fn ask(&self, inquire: String, wait: Duration) -> Result<String, Unanswered> {
        self.ask_form(inquire, None, wait).await
    }

    /// `ask`, with the JSON schema the answer must meet shown beside the question.
    pub async fn ask_form(
        &self,
        inquire: String,
        form: Option<Value>,
        wait: Duration,
    ) -> Result<String, Unanswered> {
        let (agent, from, call_id) = (self.agent.clone(), self.from, self.call.clone());
        let answer = ractor::call_t!(
            self.flow,
            |reply| FlowMsg::Ask {
                agent,
                from,
                call_id,
                inquire,
                form,
                reply
            },
            wait.as_millis() as u64
        );
        match answer {
            Ok(Ok(text)) => Ok(text),
            Ok(Err(why)) => Err(Unanswered::Refused(why)),
            Err(ractor::RactorErr::Timeout) => Err(Unanswered::TimedOut),
            Err(e) => Err(Unanswered::Undelivered(e.to_string())),
        }
    }

    /// Whether both links lead to the same flow.
    pub fn same_flow(&self, other: &FlowLink) -> bool {
        self.flow.get_id() == other.flow.get_id()
    }

    /// Ask a person to approve `tool` with `arguments` while the call in progress waits,
    /// up to `wait`; the decision, or why there is none.
    pub async fn approve(
        &self,
        tool: &str,
        arguments: String,
        why: String,
        wait: Duration,
    ) -> Result<Decision, String> {
        let (agent, from, call_id) = (self.agent.clone(), self.from, self.call.clone());
        let tool = tool.to_string();
        let decided = ractor::call_t!(
            self.flow,
            |reply| FlowMsg::Hold {
                agent,
                from,
                call_id,
                tool,
                arguments,
                why,
                reply
            },
            wait.as_millis() as u64
        );
        decided.map_err(|e| match e {
            ractor::RactorErr::Timeout => format!("no one decided within {}s", wait.as_secs()),
            e => format!("the flow could not take the request: {e}"),
        })
    }

    /// Tell the flow how far the tool call in progress has got (as its server reports it).
    pub fn progress(&self, progress: f64, total: Option<f64>, message: Option<String>) {
        // A planner that is gone shows no progress.
        let _ = self.flow.send_message(FlowMsg::Progress {
            agent: self.agent.clone(),
            from: self.from,
            call_id: self.call.clone(),
            progress,
            total,
            message,
        });
    }

    /// Count a model call's tokens toward the flow's tally. The agent asks about the budget
    /// before its next call, so this does not wait.
    pub fn spent(&self, usage: Usage) {
        // A planner that is gone keeps no tally.
        let _ = self.flow.send_message(FlowMsg::Spent {
            agent: self.agent.clone(),
            from: self.from,
            usage,
            go_on: None,
        });
    }
}

/// One plan step as an agent receives it.
pub struct StepRequest {
    pub flow_id: String,
    /// The planner's number for this attempt, echoed in `FlowMsg::StepBegan`.
    pub dispatch: u64,
    pub step_index: usize,
    /// The step text without its `[AGENT]` tag.
    pub step: String,
    /// The whole task, for context.
    pub task: String,
    /// In a follow-up turn of a conversation, what its earlier turns did (`planner::Turn`).
    pub earlier: Option<Arc<str>>,
    /// The plan with current statuses, as text.
    pub plan_view: String,
    /// The steps this one builds on, each with its notes (a graph plan's dependencies).
    pub builds_on: Vec<(usize, String)>,
    /// Set when a step paused for approval goes on from where it stopped.
    pub continued: Option<Continued>,
    /// A code-mode step's rounds from before the flow was interrupted: the step goes on
    /// after them, its cells run again with their calls answered from the record.
    pub recorded: Vec<RecordedRound>,
    /// In a fork, the step's answers as the run it was forked from recorded them: fed to
    /// the step in place of model calls (its tools run for real), then it goes on live.
    pub replay: StepReplay,
    pub flow: ActorRef<FlowMsg>,
    /// Whether the flow has a token or cost budget. Only then does the agent wait for the
    /// planner's word after each model call; otherwise it reports what it spent and goes on.
    pub budgeted: bool,
    pub events: EventSink,
    /// The planner's step span; the agent's run span is its child.
    pub span: tracing::Span,
}

/// A step of the run a fork was made from, as recorded: its model answers in order (each
/// with its tool calls' results) and the brief of its notes, if the model wrote one.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepReplay {
    pub answers: Vec<RecordedAnswer>,
    pub brief: Option<String>,
}

/// One model answer as recorded, with what each of its tool calls gave then.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedAnswer {
    pub message: Message,
    /// By call id: whether the call succeeded and its output as `ToolFinished` holds it.
    pub results: Vec<(String, bool, String)>,
}

/// A tool call of a replayed answer whose result is not the recorded one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDiff {
    pub round: u32,
    pub tool: String,
    pub call_id: String,
    /// The result as recorded and as it came now (`Error: ` before a failed call's).
    pub recorded: String,
    pub now: String,
}

/// How a step ended, from the agent's side.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepOutcome {
    pub status: StepStatus,
    /// The agent's final words on the step (its last assistant text or the reason it stopped).
    pub summary: String,
    pub usage: Usage,
    /// Think/act rounds used.
    pub rounds: u32,
    /// Set with `StepStatus::AwaitingApproval`: the call that waits, and where the step was.
    #[serde(default)]
    pub pause: Option<Pause>,
    /// `summary` summarised for the prompts of later steps, when it is longer than the plan
    /// view shows (`plan::NOTE_CHARS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub brief: Option<String>,
}

/// A step stopped before a tool call that needs approval: the call, why it needs it, and
/// the agent's working memory then (its last message asks for the call), from which the
/// step goes on once a person has decided.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Pause {
    pub call: ToolCall,
    pub why: String,
    pub memory: Vec<Message>,
}

/// A person's decision on a tool call that waited for approval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    pub approve: bool,
    /// Run the call with these arguments (JSON text) instead of the model's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
    /// Why it was rejected; the model reads it as the call's result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Who decided: a service token's name, `$USER` on the command line.
    pub by: String,
    /// When, in milliseconds since the Unix epoch.
    #[serde(default)]
    pub at_ms: i64,
}

impl Decision {
    /// A decision `by` someone (or something: `timeout`, `planner`), made now.
    pub fn now(
        approve: bool,
        arguments: Option<String>,
        reason: Option<String>,
        by: impl Into<String>,
    ) -> Decision {
        let at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        Decision {
            approve,
            arguments,
            reason,
            by: by.into(),
            at_ms,
        }
    }
}

/// A paused step going on: the memory it stopped with, the rounds it had used, and the
/// decision on the call it stopped before.
#[derive(Debug, Clone)]
pub struct Continued {
    pub memory: Vec<Message>,
    pub rounds: u32,
    pub call_id: String,
    pub decision: Decision,
    /// Set when the call was approved and handed to its tool before the flow was
    /// interrupted: it is not run again, and this is its result for the model.
    pub interrupted: Option<String>,
}

// ─── Tool worker ───────────────────────────────────────────────────────────────────────

/// Messages to a tool worker, which owns one agent's tool instances.
pub enum ToolMsg {
    Call(ToolInvocation, RpcReplyPort<ToolResult>),
}

/// One tool call. Where it runs (the flow, the agent, the workspace) the worker was told
/// when it started.
pub struct ToolInvocation {
    pub call: ToolCall,
    /// The parsed arguments (the agent rejects malformed JSON before sending).
    pub args: Value,
    /// Set when the tool is an MCP server's: where the worker sends the call.
    pub mcp: Option<McpRoute>,
    /// The calling agent's span, so the tool's span is its child across the actor boundary.
    pub span: tracing::Span,
    /// The step the call works for, when an agent of a flow makes it.
    pub step: Option<usize>,
}

/// The result of one tool call, success or not.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ToolResult {
    pub ok: bool,
    pub output: String,
    pub terminate: Option<TerminateStatus>,
    pub elapsed: Duration,
    /// Images the tool returned (MCP tools), shown to models that accept images.
    #[serde(default)]
    pub images: Vec<ImageData>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TerminateStatus {
    Success,
    Failure,
}

// ─── Sandbox supervisor ────────────────────────────────────────────────────────────────

/// Messages to the sandbox supervisor, the only holder of a Docker client. Each flow gets
/// one container, created on its first use and removed when the flow ends.
pub enum SandboxMsg {
    /// Do `op` in the flow's container; the reply is its result or why it failed.
    Run {
        flow_id: String,
        op: SandboxOp,
        /// The caller's span (the tool call), so the sandbox span is its child.
        span: tracing::Span,
        reply: RpcReplyPort<Result<SandboxReply, String>>,
    },
    /// The flow has ended: remove its container.
    Release { flow_id: String },
    /// A program attached to the caller started (`true`) or ended (`false`) a piece of work
    /// (a cell): the container is in use meanwhile, however long it takes, and never idle.
    Busy { flow_id: String, busy: bool },
    /// Timer: remove containers idle for longer than `idle_timeout`.
    Sweep,
}

/// Work for a flow's container, done one at a time in its mailbox.
pub enum ContainerMsg {
    Run {
        op: SandboxOp,
        span: tracing::Span,
        reply: RpcReplyPort<Result<SandboxReply, String>>,
    },
}

#[derive(Debug, Clone)]
pub enum SandboxOp {
    /// Run a program (no shell unless `cmd` starts one) in the working directory.
    Exec { cmd: Vec<String>, timeout: Duration },
    /// Read a file's bytes (an absolute path inside the container).
    Read { path: String },
    /// Create or replace a file (an absolute path; parent directories are made).
    Write { path: String, bytes: Vec<u8> },
    /// Run `command` in the bash session named `session` (one per agent), started on first
    /// use; `restart` replaces the session first. An empty command only (re)starts it.
    Shell {
        session: String,
        command: String,
        timeout: Duration,
        restart: bool,
    },
    /// Start `cmd` in the working directory attached to the caller, who then owns it: it
    /// ends when the caller drops its stdin, or with the container.
    Attach { cmd: Vec<String> },
}

#[derive(Debug)]
pub enum SandboxReply {
    Exec(ExecOutput),
    Read(Vec<u8>),
    Written,
    /// A shell command's merged output (head and tail kept) and how it ended.
    Shell {
        output: String,
        end: ShellEnd,
    },
    Attached(Attached),
}

/// A program in a container attached to its caller: its stdin, and its stdout.
pub struct Attached {
    pub input: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
    pub output: std::pin::Pin<Box<dyn tokio::io::AsyncBufRead + Send>>,
}

impl std::fmt::Debug for Attached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Attached")
    }
}

/// How a command in a persistent shell ended, wherever the shell runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShellEnd {
    /// It finished with this exit status; the shell lives on.
    Status(i32),
    /// The shell itself ended (says how); the next command gets a fresh one.
    ShellEnded(String),
    /// It ran past its time limit; the shell and everything it started were killed.
    TimedOut,
}

/// What a command printed and how it ended.
#[derive(Debug, Clone, Default)]
pub struct ExecOutput {
    pub stdout: String,
    pub stderr: String,
    /// None if the command was cut at its timeout.
    pub exit_code: Option<i64>,
    pub timed_out: bool,
}

// ─── Browser supervisor ────────────────────────────────────────────────────────────────

/// Messages to the browser supervisor, which owns the chromedriver it launched (if any) and
/// one browser-owner actor per flow that browses. A flow's browser session is opened on its
/// first request and closed when the flow ends.
pub enum BrowserMsg {
    /// Do `request` in the flow's browser; the reply is its result or why it failed.
    Run {
        flow_id: String,
        request: BrowserRequest,
        /// The caller's span (a tool call or an agent's run), so the browser span is its child.
        span: tracing::Span,
        reply: RpcReplyPort<Result<BrowserReply, String>>,
    },
    /// The flow has ended: close its browser.
    Release { flow_id: String },
}

/// Work for one flow's browser owner, done one at a time in its mailbox.
pub enum BrowserOwnerMsg {
    Run {
        /// The WebDriver endpoint to open a session on, if the owner has none.
        webdriver_url: String,
        /// The endpoint the flow's browser was on, which stopped answering: its session
        /// is gone, and the request fails saying so.
        moved_from: Option<String>,
        request: BrowserRequest,
        span: tracing::Span,
        reply: RpcReplyPort<Result<BrowserReply, String>>,
    },
}

#[derive(Debug, Clone)]
pub enum BrowserRequest {
    Act(BrowserAction),
    /// Where the browser is: URL, title, tabs, the element menu, scroll position, and a
    /// screenshot if asked for.
    State {
        screenshot: bool,
    },
}

/// One browser action, its arguments already checked. Elements are addressed by the index
/// the element menu shows.
#[derive(Debug, Clone, PartialEq)]
pub enum BrowserAction {
    GoToUrl {
        url: String,
    },
    ClickElement {
        index: u32,
    },
    InputText {
        index: u32,
        text: String,
    },
    /// Scroll by `pixels` (one screen when `None`); negative scrolls up.
    Scroll {
        down: bool,
        pixels: Option<i64>,
    },
    ScrollToText {
        text: String,
    },
    SendKeys {
        keys: String,
    },
    GetDropdownOptions {
        index: u32,
    },
    SelectDropdownOption {
        index: u32,
        text: String,
    },
    GoBack,
    /// The current page's HTML, for extraction.
    PageContent,
    SwitchTab {
        tab_id: usize,
    },
    OpenTab {
        url: String,
    },
    CloseTab,
}

impl BrowserAction {
    /// The action's name as the `browser_use` tool spells it.
    pub fn name(&self) -> &'static str {
        match self {
            BrowserAction::GoToUrl { .. } => "go_to_url",
            BrowserAction::ClickElement { .. } => "click_element",
            BrowserAction::InputText { .. } => "input_text",
            BrowserAction::Scroll { down: true, .. } => "scroll_down",
            BrowserAction::Scroll { down: false, .. } => "scroll_up",
            BrowserAction::ScrollToText { .. } => "scroll_to_text",
            BrowserAction::SendKeys { .. } => "send_keys",
            BrowserAction::GetDropdownOptions { .. } => "get_dropdown_options",
            BrowserAction::SelectDropdownOption { .. } => "select_dropdown_option",
            BrowserAction::GoBack => "go_back",
            BrowserAction::PageContent => "page_content",
            BrowserAction::SwitchTab { .. } => "switch_tab",
            BrowserAction::OpenTab { .. } => "open_tab",
            BrowserAction::CloseTab => "close_tab",
        }
    }
}

#[derive(Debug, Clone)]
pub enum BrowserReply {
    /// What the action did, in a sentence or a short list for the model.
    Done(String),
    Page {
        url: String,
        title: String,
        html: String,
    },
    State(BrowserState),
}

/// The browser as the agent's next prompt describes it.
#[derive(Debug, Clone, Default)]
pub struct BrowserState {
    pub url: String,
    pub title: String,
    /// Each tab's title and URL (as last seen), in tab_id order.
    pub tabs: Vec<(String, String)>,
    pub current_tab: usize,
    /// One line per visible interactive element: `[3] <button> Sign in`.
    pub elements: Vec<String>,
    /// Elements left out of `elements` to keep the menu short.
    pub elements_omitted: usize,
    pub pixels_above: u64,
    pub pixels_below: u64,
    /// A PNG of the viewport.
    pub screenshot: Option<Vec<u8>>,
}

/// The answer to an RPC whose reply is itself `Result<T, String>`, with the ways the call
/// can fail said in words that name `who` answers (the sandbox, the browser, …).
pub fn answered<T, E>(
    call: Result<ractor::rpc::CallResult<Result<T, String>>, E>,
    who: &str,
    wait: Duration,
) -> Result<T, String> {
    match call {
        Ok(ractor::rpc::CallResult::Success(r)) => r,
        Ok(ractor::rpc::CallResult::Timeout) => {
            Err(format!("{who} did not answer within {}s", wait.as_secs()))
        }
        Ok(ractor::rpc::CallResult::SenderError) => {
            Err(format!("{who} dropped the request; try again"))
        }
        Err(_) => Err(format!("{who} is not running")),
    }
}

// ─── MCP connections ───────────────────────────────────────────────────────────────────

/// Messages to the actor that owns one MCP server's session (`mcp/client.rs`).
pub enum McpMsg {
    /// The server's tools, connecting first if there is no session (after a failure, not
    /// before its backoff has passed).
    Tools(RpcReplyPort<Result<std::sync::Arc<Vec<McpToolInfo>>, String>>),
    /// Call one of the server's tools by its own name. `traceparent` carries the caller's
    /// trace context to the server in the request's `_meta`.
    Call {
        tool: String,
        args: serde_json::Map<String, Value>,
        traceparent: Option<String>,
        /// The flow behind the call, which answers what the server asks during it.
        caller: Option<Box<McpCaller>>,
        reply: RpcReplyPort<Result<McpOutput, String>>,
    },
    /// List the server's resources (`uri: None`) or read one.
    Resources {
        uri: Option<String>,
        reply: RpcReplyPort<Result<McpOutput, String>>,
    },
    /// From the session: the server announced that its tool list changed.
    ToolsChanged { generation: u64 },
    /// From a call: the session broke (the server exited, or hung past the call timeout).
    Lost { generation: u64, why: String },
}

/// A connection actor, as agents hold it (`mcp` has its calls).
#[derive(Debug, Clone)]
pub struct McpHandle {
    pub server: String,
    pub conn: ActorRef<McpMsg>,
    pub call_timeout: Duration,
    pub connect_timeout: Duration,
}

/// Where a model-facing MCP tool name leads: the server's connection and its own name.
#[derive(Debug, Clone)]
pub struct McpRoute {
    pub handle: McpHandle,
    pub tool: String,
    /// The server's resources tool rather than one of its own tools.
    pub resources: bool,
}

/// Who makes an MCP call: what the server asks back while the call runs (elicitation,
/// sampling, roots) and the progress it reports go to this flow, agent and call.
#[derive(Debug, Clone)]
pub struct McpCaller {
    /// The calling agent's link, set to the call's id.
    pub link: FlowLink,
    /// The calling agent's model, for the server's sampling requests.
    pub llm: Option<crate::llm::LlmClient>,
    /// The flow's workspace, offered as the root.
    pub workspace: std::path::PathBuf,
    /// How long a question to the person waits (`[tools] ask_timeout`).
    pub ask_timeout: Duration,
    /// The call's `execute_tool` span: a sampling request's model call is its child.
    pub span: tracing::Span,
}

/// One tool of an MCP server, as the server describes it.
#[derive(Debug, Clone)]
pub struct McpToolInfo {
    pub name: String,
    pub description: String,
    /// The server's JSON schema for the arguments, passed to the model unchanged.
    pub schema: Value,
    /// The tool is ours: the server's resources, listed and read (`mcp/resources.rs`).
    pub resources: bool,
}

/// An MCP tool's result: its text, structured and resource content as text, and its images.
#[derive(Debug, Clone, Default)]
pub struct McpOutput {
    pub text: String,
    pub images: Vec<ImageData>,
    /// The server marked the result as an error.
    pub is_error: bool,
}

/// An image returned by a tool, base64-encoded as it came.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageData {
    pub mime_type: String,
    pub base64: String,
}

// ─── Events ────────────────────────────────────────────────────────────────────────────

/// What happens in a flow, in order. The CLI board, the `--json` output and embedders all
/// read this one stream.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum FlowEvent {
    FlowStarted {
        flow_id: String,
        task: String,
    },
    /// An interrupted flow continues (right after `FlowStarted`): its plan as it stood, the
    /// tokens spent before, and the steps that were running then and now start over.
    Resumed {
        plan: Option<Plan>,
        usage: Usage,
        /// Steps that were running and start over.
        rerun: Vec<usize>,
        /// Code-mode steps that were running and go on after their recorded rounds.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        goes_on: Vec<usize>,
    },
    PlanCreated {
        plan: Plan,
    },
    /// The plan was revised (`plan.revision` says which time): the steps that had not
    /// completed and were not running are replaced by new ones. `previous` is the plan just
    /// before; the run store keeps every version.
    PlanRevised {
        previous: Plan,
        plan: Plan,
        /// Why it was revised (the step that failed, and how).
        reason: String,
    },
    /// A step will not run: a step it needs (`needs`) ended without completing.
    StepBlocked {
        step: usize,
        needs: usize,
        notes: String,
    },
    /// An agent began the step, once a replica of its kind was free.
    StepStarted {
        step: usize,
        agent: String,
        attempt: u32,
        /// How long the step waited for a replica (`replicas` bounds steps of a kind).
        #[serde(default)]
        queued_ms: u64,
    },
    Thought {
        step: usize,
        agent: String,
        text: String,
    },
    /// A piece of the text the model is writing, as it streams, for whoever watches live
    /// (sent only to sinks that ask for them; the finished text follows as `Thought`).
    TextDelta {
        step: usize,
        agent: String,
        text: String,
    },
    LlmCalled {
        agent: String,
        /// The step the call was for; `None` for the planner's own calls.
        #[serde(default)]
        step: Option<usize>,
        model: String,
        usage: Usage,
        elapsed_ms: u64,
    },
    ToolCalled {
        step: usize,
        agent: String,
        tool: String,
        arguments: String,
    },
    ToolFinished {
        step: usize,
        agent: String,
        tool: String,
        ok: bool,
        output: String,
        /// The call's id in the agent's memory.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        call_id: String,
    },
    /// An agent's question for the person; it is open until the call that asks
    /// (`call_id`) finishes: answered, or unanswered past its time.
    Question {
        id: u64,
        agent: String,
        /// The step whose agent asks.
        #[serde(default)]
        step: Option<usize>,
        inquire: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_id: Option<String>,
        /// The JSON schema the answer must meet (an MCP server's elicitation): the answer
        /// is that JSON, `decline` or `cancel`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        form: Option<Value>,
    },
    /// A tool call reported progress (an MCP server's `notifications/progress`).
    ToolProgress {
        step: Option<usize>,
        agent: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_id: Option<String>,
        progress: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        total: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// An agent compacted its working memory: `pruned` tool outputs became stubs (`recall`
    /// reads them back) and `folded` messages became one summary, taking the memory from
    /// `tokens_before` to `tokens_after`; the summary call's own tokens are in `usage`. With
    /// `notes`, it was the step's final notes instead, summarised for the prompts of the
    /// steps after it (the tokens are the notes'; the whole notes stay in the plan).
    Compacted {
        step: usize,
        agent: String,
        tokens_before: usize,
        tokens_after: usize,
        pruned: usize,
        folded: usize,
        usage: Usage,
        #[serde(default)]
        notes: bool,
    },
    /// A step stopped before a tool call that needs a person's approval (`why`); the flow
    /// waits for `ApprovalDecided` while its other steps go on. With `step: None`, the
    /// plan itself waits for sign-off (`[flow] plan_approval`; tool `plan`, its steps as the
    /// arguments) and no step starts until it is approved.
    ApprovalRequested {
        id: u64,
        step: Option<usize>,
        agent: String,
        tool: String,
        arguments: String,
        why: String,
        /// The call's id in the agent's memory, and the round it was asked for in: where
        /// the step goes on from.
        call_id: String,
        round: u32,
    },
    /// A person decided on approval request `id`.
    ApprovalDecided {
        id: u64,
        step: Option<usize>,
        decision: Decision,
    },
    StepFinished {
        step: usize,
        agent: String,
        status: StepStatus,
        summary: String,
        usage: Usage,
        /// How long the step ran, from `StepStarted` (the whole attempt if it never began).
        #[serde(default)]
        elapsed_ms: u64,
    },
    /// A tool-mode step's model answer, as it came, before any of its calls runs (code
    /// mode records its answers as `Cell`s): what a fork of the run replays.
    Answered {
        step: usize,
        agent: String,
        round: u32,
        message: Message,
    },
    /// This flow is a fork of run `from` (right after `FlowStarted`): it replays that run's
    /// recorded answers for the steps before `at_step` that completed, then goes on live
    /// from `at_step`, in `workspace`. `plan` is the plan it starts from.
    Forked {
        from: String,
        at_step: usize,
        workspace: String,
        plan: Plan,
    },
    /// A forked flow's step ran on `answers` recorded answers instead of model calls; the
    /// tool results that differ from the record are in `differed`.
    StepReplayed {
        step: usize,
        agent: String,
        answers: u32,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        differed: Vec<ToolDiff>,
    },
    /// Code mode's record of a step's rounds, for the run store: after a crash the step
    /// goes on from it, its cells run again with their tool calls answered from it.
    Cell {
        step: usize,
        agent: String,
        record: CellRecord,
    },
    /// An agent's working memory when its step ended (before `StepFinished`), for the run
    /// store; the next step starts fresh and sees only the plan's notes.
    StepMemory {
        step: usize,
        agent: String,
        messages: Vec<Message>,
    },
    FlowFinished {
        outcome: FlowOutcome,
    },
}

/// One entry of a code-mode step's record (`FlowEvent::Cell`), each written before what
/// depends on it happens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum CellRecord {
    /// Round `round`'s answer from the model, before any of its calls runs.
    Answer { round: u32, message: Message },
    /// A tool call a cell made and its result, before the cell is told.
    Call {
        /// The `python` call whose cell made it.
        cell: String,
        /// Its number within the cell (1, 2, …).
        index: u64,
        tool: String,
        ok: bool,
        output: String,
    },
    /// What round `round` added to the memory after the answer: its calls' results.
    Results { round: u32, messages: Vec<Message> },
    /// After an interruption, `cells` cells ran again from the record; those of the rounds
    /// named in `differed` did not come out as the first time.
    Replayed { cells: u32, differed: Vec<String> },
}

/// A round of a code-mode step as the run store kept it (`CellRecord`s gathered).
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRound {
    pub round: u32,
    /// The model's answer.
    pub answer: Message,
    /// Its cells' tool calls, by (`python` call id, index): tool name, ok, output.
    pub calls: Vec<(String, u64, String, bool, String)>,
    /// The results it added to the memory; `None` if the step stopped before they were.
    pub results: Option<Vec<Message>>,
}

/// How a flow ended.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FlowOutcome {
    pub flow_id: String,
    pub status: FlowStatus,
    /// Why it ended, in a sentence.
    pub reason: String,
    pub plan: Plan,
    /// The model's summary of the run (empty if it could not be made).
    pub summary: String,
    pub usage: Usage,
    /// The same tokens by who spent them: each agent by name, and `planner`.
    pub usage_by_agent: BTreeMap<String, Usage>,
    pub elapsed_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlowStatus {
    Completed,
    Failed,
    Cancelled,
    TimedOut,
    /// Stopped by `[flow] max_tokens` or `max_cost`.
    BudgetExceeded,
}
