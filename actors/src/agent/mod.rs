//! The executor-agent actor: runs one plan step at a time as a think/act loop of model
//! calls and tool calls, and supervises the tool worker that holds its tools.
//!
//! Each step starts from clean working memory and a fresh round counter; only the step's
//! outcome goes back to the planner. Nothing an agent learns leaks into the next step or
//! the next flow except through the plan's notes.

pub mod memory;
pub mod profile;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use serde_json::Value;
use tracing::Instrument;

use crate::llm::{
    ChatRequest, LlmClient, LlmErrorKind, Message, Role, ToolCall, ToolChoice, ToolSet, Usage,
};
use crate::mcp::{McpHandle, McpToolset};
use crate::plan::{NOTE_CHARS, StepStatus};
use crate::protocol::{
    AgentMsg, FlowEvent, FlowLink, FlowMsg, ImageData, StepOutcome, StepRequest, TerminateStatus,
    ToolInvocation, ToolMsg, ToolResult,
};
use crate::text::clip;
use crate::tools::worker::{ToolWorker, WorkerArgs};
use crate::tools::{self, ToolCtx, ToolSettings};
use memory::Memory;
pub use profile::AgentProfile;

/// One member of a flow's agent pool, as data.
#[derive(Debug, Clone)]
pub struct AgentSpec {
    /// The pool key, matched against `[TAG]`s case-insensitively (`manus`, `data_analysis`).
    pub name: String,
    /// What the planner is told this agent is good at.
    pub description: String,
    pub profile: AgentProfile,
    /// How many of this agent may run steps at once, across all flows of the runtime.
    pub replicas: u32,
    /// The `replicas` permits, shared by every flow's copy of this spec; a step waits for
    /// one, in arrival order (tokio's semaphore is fair), so extra work queues fairly.
    pub slots: std::sync::Arc<tokio::sync::Semaphore>,
    /// The profile's built-in tools as the model sees them, made once (`specs_for`).
    pub tool_specs: ToolSet,
    pub llm: LlmClient,
    pub tool_settings: ToolSettings,
    pub workspace: PathBuf,
    /// Where code runs when `[sandbox] use_sandbox` is on; the host otherwise.
    pub sandbox: Option<crate::sandbox::SandboxHandle>,
    /// The runtime's browser; each flow gets its own session in it.
    pub browser: Option<crate::browser::BrowserHandle>,
    /// MCP servers whose tools join this agent's (`[agents.NAME] mcp_servers`).
    pub mcp: Vec<McpHandle>,
    /// Which tool calls wait for a person's approval (`[approvals]`).
    pub approvals: Arc<crate::approvals::Approvals>,
    /// Who writes memory compaction's summaries (`compact_llm`), if not the agent's model.
    pub compact_llm: Option<LlmClient>,
    /// The system message every step opens with, made once (`AgentSpec::opening`).
    pub system: Message,
}

impl AgentSpec {
    /// The system message of agent `name` with `profile` in `workspace`: the profile's
    /// prompt with `{workspace}` and `{agent}` filled in. It is frozen, and every step's
    /// memory holds a clone, so its JSON is made once for all steps of all flows.
    pub fn opening(profile: &AgentProfile, workspace: &std::path::Path, name: &str) -> Message {
        let text = profile
            .system_prompt
            .replace("{workspace}", &workspace.display().to_string())
            .replace("{agent}", name);
        let mut system = Message::system(text);
        system.freeze();
        system
    }
}

/// Same output this many times in a row means the agent is going in circles.
const REPEATS_FOR_STUCK: usize = 3;

const STUCK_NUDGE: &str = "You have produced the same response several times without progress. Stop \
repeating it: reconsider what went wrong, try a different approach or tool, or, if the step cannot be \
done, say why and call `terminate` with status failure.";

const NO_TOOL_NUDGE: &str = "You replied in plain text without calling a tool. Only `terminate` \
ends the step: call it with status success if the step is done, or with status failure if it \
cannot be done, saying why; otherwise continue with the next tool call.";

const LENGTH_NUDGE: &str = "Your answer was cut off: it reached the length limit. Answer more \
briefly, with one tool call; call `terminate` when the step is done or cannot be done.";

/// Why a step ended whose model answered in plain text again after being told to call
/// `terminate`: text alone never confirms a step, whatever it says.
fn never_confirmed(last_words: &str) -> String {
    format!(
        "never confirmed: the model answered in plain text without calling `terminate`, \
         even after being told to; its last words: {last_words}"
    )
}

pub struct ExecutorAgent;

pub struct AgentState {
    /// Shared by every flow's agent of this kind.
    spec: Arc<AgentSpec>,
    /// Started on the first tool call, so an idle agent is one small actor.
    worker: Option<ActorRef<ToolMsg>>,
    /// The model refused images once: from then on none are sent.
    text_only: bool,
}

/// Start the agent's tool worker, with the context every call of the flow's runs in.
async fn spawn_worker(
    myself: &ActorRef<AgentMsg>,
    spec: &AgentSpec,
    req: &StepRequest,
) -> Result<ActorRef<ToolMsg>, ActorProcessingErr> {
    let args = WorkerArgs {
        tools: spec.profile.tools.clone(),
        settings: spec.tool_settings.clone(),
        ctx: ToolCtx {
            flow_id: req.flow_id.clone(),
            // Several agents of a kind may work for one flow at once: each its own shell.
            agent: format!("{}-{}", spec.name, myself.get_id()),
            workspace: spec.workspace.clone(),
            flow: Some(FlowLink::new(
                req.flow.clone(),
                spec.name.clone(),
                myself.get_id(),
            )),
            sandbox: spec.sandbox.clone(),
            browser: spec.browser.clone(),
            llm: Some(spec.llm.clone()),
        },
    };
    let (worker, _) = Actor::spawn_linked(None, ToolWorker, args, myself.get_cell()).await?;
    Ok(worker)
}

impl Actor for ExecutorAgent {
    type Msg = AgentMsg;
    type State = AgentState;
    type Arguments = Arc<AgentSpec>;

    async fn pre_start(
        &self,
        _myself: ActorRef<AgentMsg>,
        spec: Arc<AgentSpec>,
    ) -> Result<AgentState, ActorProcessingErr> {
        Ok(AgentState {
            spec,
            worker: None,
            text_only: false,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<AgentMsg>,
        msg: AgentMsg,
        state: &mut AgentState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            AgentMsg::RunStep(req, report) => {
                let span = tracing::info_span!(
                    parent: &req.span,
                    "invoke_agent",
                    otel.name = format!("invoke_agent {}", state.spec.name),
                    gen_ai.operation.name = "invoke_agent",
                    gen_ai.agent.name = %state.spec.name,
                    gen_ai.request.model = %state.spec.llm.model(),
                    manus.step.index = req.step_index,
                    manus.step.status = tracing::field::Empty,
                    manus.agent.rounds = tracing::field::Empty,
                    gen_ai.usage.input_tokens = tracing::field::Empty,
                    gen_ai.usage.output_tokens = tracing::field::Empty,
                    manus.cost = tracing::field::Empty,
                );
                let asked = Instant::now();
                let slots = state.spec.slots.clone();
                let permit = match slots.try_acquire_owned() {
                    Ok(p) => p,
                    Err(_) => {
                        tracing::debug!(agent = %state.spec.name, "all {} replicas busy; the step waits its turn", state.spec.replicas);
                        state
                            .spec
                            .slots
                            .clone()
                            .acquire_owned()
                            .instrument(span.clone())
                            .await?
                    }
                };
                // Wait for the planner to publish StepStarted before emitting anything.
                let queued = asked.elapsed();
                let _ = req
                    .flow
                    .call(
                        |ack| FlowMsg::StepBegan {
                            dispatch: req.dispatch,
                            queued,
                            ack,
                        },
                        Some(Duration::from_secs(30)),
                    )
                    .await;
                let mut run = StepRun::new(state, &req, &myself);
                let mut outcome = run.run().instrument(span.clone()).await;
                run.brief(&mut outcome).instrument(span.clone()).await;
                drop(permit);
                run.emit(FlowEvent::StepMemory {
                    step: req.step_index,
                    agent: run.state.spec.name.clone(),
                    messages: run.memory.request(None).into_iter().cloned().collect(),
                });
                drop(run);
                span.record("manus.step.status", outcome.status.as_str());
                span.record("manus.agent.rounds", outcome.rounds);
                span.record("gen_ai.usage.input_tokens", outcome.usage.prompt_tokens);
                span.record(
                    "gen_ai.usage.output_tokens",
                    outcome.usage.completion_tokens,
                );
                span.record("manus.cost", outcome.usage.cost);
                // Close this step's spans before the planner hears of the outcome: it may end
                // the flow at once, and the flow's span must close with nothing open below it.
                drop(span);
                drop(req);
                report.send(outcome);
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        myself: ActorRef<AgentMsg>,
        _state: &mut AgentState,
    ) -> Result<(), ActorProcessingErr> {
        myself.stop_children(None);
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<AgentMsg>,
        evt: SupervisionEvent,
        state: &mut AgentState,
    ) -> Result<(), ActorProcessingErr> {
        // The worker is replaced where its crash is noticed (in the step); here we only log.
        if let SupervisionEvent::ActorFailed(cell, err) = evt {
            tracing::warn!(agent = %state.spec.name, worker = %cell.get_id(), "tool worker crashed: {err}");
        }
        Ok(())
    }
}

/// The text a streaming model writes, passed on as `TextDelta`s in pieces of at least
/// `DELTA_CHARS` (or what came in `DELTA_EVERY`), and only to a sink that wants them.
struct Deltas<'a> {
    req: Option<&'a StepRequest>,
    agent: &'a str,
    held: std::sync::Mutex<(String, Instant)>,
}

const DELTA_CHARS: usize = 48;
const DELTA_EVERY: Duration = Duration::from_millis(100);

impl<'a> Deltas<'a> {
    fn new(req: &'a StepRequest, agent: &'a str) -> Self {
        Deltas {
            req: req.events.wants_deltas().then_some(req),
            agent,
            held: std::sync::Mutex::new((String::new(), Instant::now())),
        }
    }

    fn heard(&self, piece: &str) {
        if self.req.is_none() {
            return;
        }
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.0.push_str(piece);
        if held.0.len() >= DELTA_CHARS || held.1.elapsed() >= DELTA_EVERY {
            let text = std::mem::take(&mut held.0);
            held.1 = Instant::now();
            self.send(text);
        }
    }

    fn flush(&self) {
        let text = std::mem::take(&mut self.held.lock().unwrap_or_else(|p| p.into_inner()).0);
        if !text.is_empty() {
            self.send(text);
        }
    }

    fn send(&self, text: String) {
        if let Some(req) = self.req {
            req.events.send(FlowEvent::TextDelta {
                step: req.step_index,
                agent: self.agent.to_string(),
                text,
            });
        }
    }
}

/// One step's run: its memory, counters and usage. Dropped when the step ends.
struct StepRun<'a> {
    state: &'a mut AgentState,
    req: &'a StepRequest,
    myself: &'a ActorRef<AgentMsg>,
    memory: Memory,
    /// The tools as the model sees them this round: the built-in ones (the spec's own,
    /// shared), then the MCP servers'.
    tools: ToolSet,
    /// The MCP servers' tools this round, and where their names lead.
    mcp: McpToolset,
    usage: Usage,
    nudge: Option<&'static str>,
    nudged_for_stuck: bool,
    /// The last reply was plain text, and the model has been told to call `terminate`.
    nudged_for_text: bool,
    /// The last round used the browser: the next prompt shows its state.
    browsed: bool,
}

impl<'a> StepRun<'a> {
    fn new(
        state: &'a mut AgentState,
        req: &'a StepRequest,
        myself: &'a ActorRef<AgentMsg>,
    ) -> Self {
        let p = &state.spec.profile;
        let mut memory = Memory::new(state.spec.llm.model(), p.memory_messages, p.memory_tokens);
        memory.pin(state.spec.system.clone());
        match &req.continued {
            // A paused step goes on with the memory it stopped with, its step prompt as it was.
            Some(c) if c.memory.len() >= 2 => {
                memory.pin(c.memory[1].clone());
                for m in &c.memory[2..] {
                    memory.push(m.clone());
                }
            }
            _ => memory.pin(Message::user(step_prompt(req))),
        }
        let mut tools = state.spec.tool_specs.clone();
        if let Some(share) = p.compact_at {
            let limit = state
                .spec
                .llm
                .settings()
                .max_input_tokens
                .map_or(p.memory_tokens, |m| m.min(p.memory_tokens));
            memory.compact_at((limit as f64 * share) as usize);
            tools = tools
                .iter()
                .cloned()
                .chain([tools::recall::spec()])
                .collect();
        }
        StepRun {
            state,
            req,
            myself,
            memory,
            tools,
            mcp: McpToolset::default(),
            usage: Usage::default(),
            nudge: None,
            nudged_for_stuck: false,
            nudged_for_text: false,
            browsed: false,
        }
    }

    fn emit(&self, e: FlowEvent) {
        self.req.events.send(e);
    }

    /// Tell the planner, which keeps the flow's tally, what a model call spent, and whether
    /// the flow may go on. Only a flow with a budget waits for the planner's word; the
    /// message still goes ahead of the step's outcome, so the tally is whole when it ends.
    async fn spent(&self, usage: Usage) -> bool {
        let agent = self.state.spec.name.clone();
        let from = self.myself.get_id();
        if !self.req.budgeted {
            let _ = self.req.flow.send_message(FlowMsg::Spent {
                agent,
                from,
                usage,
                go_on: None,
            });
            return true;
        }
        let go_on = self
            .req
            .flow
            .call(
                |reply| FlowMsg::Spent {
                    agent,
                    from,
                    usage,
                    go_on: Some(reply),
                },
                Some(Duration::from_secs(30)),
            )
            .await;
        !matches!(go_on, Ok(ractor::rpc::CallResult::Success(false)))
    }

    fn outcome(&self, status: StepStatus, summary: String, rounds: u32) -> StepOutcome {
        StepOutcome {
            status,
            summary,
            usage: self.usage,
            rounds,
            pause: None,
            brief: None,
        }
    }

    /// Who writes summaries: the compaction model, else the agent's own.
    fn compaction_llm(&self) -> LlmClient {
        let spec = &self.state.spec;
        spec.compact_llm.clone().unwrap_or_else(|| spec.llm.clone())
    }

    /// Ask the compaction model to summarise `text` as `system` says: the summary and its
    /// tokens (counted toward the step and the budgets, and published), or why not.
    async fn summarise(&mut self, system: &str, text: String) -> Result<(String, Usage), String> {
        let llm = self.compaction_llm();
        let system = Message::system(system);
        let ask = Message::user(text);
        let request = ChatRequest {
            messages: vec![&system, &ask],
            tools: ToolSet::default(),
            tool_choice: ToolChoice::None,
        };
        let started = Instant::now();
        let resp = llm.chat(&request).await.map_err(|e| e.to_string())?;
        let summary = resp.message.text().trim().to_string();
        if summary.is_empty() {
            return Err("the summary came back empty".into());
        }
        let usage = resp.usage;
        self.usage.add(usage);
        self.spent(usage).await;
        self.emit(FlowEvent::LlmCalled {
            agent: self.state.spec.name.clone(),
            step: Some(self.req.step_index),
            model: llm.model().to_string(),
            usage,
            elapsed_ms: started.elapsed().as_millis() as u64,
        });
        Ok((summary, usage))
    }

    /// Final notes longer than the plan view shows are summarised for the later steps'
    /// prompts (by the compaction model, else the agent's); if that fails, the view cuts
    /// them instead. The step's own notes stay whole.
    async fn brief(&mut self, outcome: &mut StepOutcome) {
        let notes = outcome.summary.trim();
        if notes.len() <= NOTE_CHARS || outcome.status == StepStatus::AwaitingApproval {
            return;
        }
        let ask = format!("The step: {}\n\nIts notes:\n{notes}", self.req.step);
        let span = tracing::info_span!("compact", manus.compact.notes = true);
        let (brief, usage) = match self.summarise(NOTES_SYSTEM, ask).instrument(span).await {
            Ok(done) => done,
            Err(e) => {
                tracing::warn!(agent = %self.state.spec.name, "could not summarise the step's notes ({e}); later steps see them cut");
                return;
            }
        };
        outcome.usage = self.usage;
        let llm = self.compaction_llm();
        let bpe = crate::llm::tokens::encoding_for(llm.model());
        let count = |t: &str| crate::llm::tokens::count_text(bpe, t);
        self.emit(FlowEvent::Compacted {
            step: self.req.step_index,
            agent: self.state.spec.name.clone(),
            tokens_before: count(notes),
            tokens_after: count(&brief),
            pruned: 0,
            folded: 0,
            usage,
            notes: true,
        });
        outcome.brief = Some(brief);
    }

    async fn run(&mut self) -> StepOutcome {
        let max = self.state.spec.profile.max_steps;
        let mut first = 1;
        if let Some(c) = self.req.continued.clone() {
            // Stopped before a call for approval: the rest of that round's calls first.
            let (calls, text) = self.unanswered();
            if let Some(outcome) = self.act(&calls, text, c.rounds, Some(&c)).await {
                return outcome;
            }
            first = c.rounds + 1;
        }
        for round in first..=max {
            let prompt = match self.nudge.take() {
                Some(n) => format!("{n}\n\n{}", self.state.spec.profile.next_step_prompt),
                None => self.state.spec.profile.next_step_prompt.clone(),
            };
            if !self.state.spec.mcp.is_empty() {
                // Servers come and go, and may change their tools between rounds.
                self.mcp =
                    McpToolset::gather(&self.state.spec.mcp, &self.state.spec.profile.tools).await;
                for why in &self.mcp.unavailable {
                    tracing::warn!(agent = %self.state.spec.name, "{why}");
                }
                let builtin = self.state.spec.tool_specs.iter();
                self.tools = builtin.chain(&self.mcp.specs).cloned().collect();
            }
            self.compact(round).await;
            let closing = self.closing_prompt(prompt).await;
            let mut request = ChatRequest {
                messages: self.memory.request(Some(&closing)),
                tools: self.tools.clone(),
                tool_choice: ToolChoice::Auto,
            };
            let text_only: Vec<Message>;
            if self.state.text_only {
                text_only = request
                    .messages
                    .iter()
                    .map(|m| m.without_images())
                    .collect();
                request.messages = text_only.iter().collect();
            }
            let started = Instant::now();
            let live = Deltas::new(self.req, &self.state.spec.name);
            let listener = |piece: &str| live.heard(piece);
            let mut answer = self.state.spec.llm.chat_with(&request, &listener).await;
            if let Err(e) = &answer
                && e.kind == LlmErrorKind::ImagesUnsupported
                && !self.state.text_only
            {
                tracing::warn!(agent = %self.state.spec.name, "{e}; going on without images");
                self.state.text_only = true;
                let stripped: Vec<Message> = request
                    .messages
                    .iter()
                    .map(|m| m.without_images())
                    .collect();
                request.messages = stripped.iter().collect();
                answer = self.state.spec.llm.chat_with(&request, &listener).await;
            }
            live.flush();
            let resp = match answer {
                Ok(r) => r,
                Err(e) => {
                    return self.outcome(
                        StepStatus::Failed,
                        format!("the model call failed: {e}"),
                        round,
                    );
                }
            };
            self.usage.add(resp.usage);
            let go_on = self.spent(resp.usage).await;
            self.emit(FlowEvent::LlmCalled {
                agent: self.state.spec.name.clone(),
                step: Some(self.req.step_index),
                model: self.state.spec.llm.model().to_string(),
                usage: resp.usage,
                elapsed_ms: started.elapsed().as_millis() as u64,
            });
            if !go_on {
                return self.outcome(
                    StepStatus::Failed,
                    "stopped: the flow's token or cost budget is spent".into(),
                    round,
                );
            }
            let msg = resp.message;
            if !msg.text().trim().is_empty() {
                self.emit(FlowEvent::Thought {
                    step: self.req.step_index,
                    agent: self.state.spec.name.clone(),
                    text: msg.text().to_string(),
                });
            }
            if self.is_repeating(&msg) {
                if self.nudged_for_stuck {
                    return self.outcome(
                        StepStatus::Blocked,
                        format!("the agent kept repeating the same response ({REPEATS_FOR_STUCK} times), even after being told to change approach"),
                        round,
                    );
                }
                self.nudged_for_stuck = true;
                self.nudge = Some(STUCK_NUDGE);
            }
            let calls = msg.tool_calls.clone();
            let text = msg.text().trim().to_string();
            self.memory.push(msg);
            let cut_off = resp.finish_reason.as_deref() == Some("length");
            if calls.is_empty() {
                // Only `terminate` with success completes a step: text once earns a nudge,
                // text again right after it ends the step unconfirmed. Text cut off at
                // max_tokens is said to be so, to the model and in the step's reason.
                let limit = self.state.spec.llm.settings().max_tokens;
                if self.nudged_for_text {
                    let last = self.last_words();
                    let why = match cut_off {
                        true => format!(
                            "the model's answer was cut off at max_tokens ({limit}; raise [llm] \
                             max_tokens) and never called `terminate`; its last words: {last}"
                        ),
                        false => never_confirmed(&last),
                    };
                    return self.outcome(StepStatus::Failed, why, round);
                }
                self.nudged_for_text = true;
                self.nudge = self.nudge.or(Some(match cut_off {
                    true => LENGTH_NUDGE,
                    false => NO_TOOL_NUDGE,
                }));
                continue;
            }
            self.nudged_for_text = false;
            if let Some(outcome) = self.act(&calls, text, round, None).await {
                return outcome;
            }
        }
        let last = self.last_words();
        self.outcome(
            StepStatus::Failed,
            format!("ran out of rounds (max_steps = {max}) before finishing the step; last words: {last}"),
            max,
        )
    }

    /// Run a round's tool calls in order, each after its approval check; the step's
    /// outcome if one of them ended it (`terminate`) or stopped it for approval.
    /// `continued`: the decision on the call a paused step stopped before.
    async fn act(
        &mut self,
        calls: &[ToolCall],
        text: String,
        round: u32,
        continued: Option<&crate::protocol::Continued>,
    ) -> Option<StepOutcome> {
        self.browsed = calls
            .iter()
            .any(|c| tools::builtin(&c.function.name).is_some_and(|b| b.browser));
        // Images tools returned; they follow the tool messages, which must stay together.
        let mut images: Vec<(String, ImageData)> = vec![];
        for asked in calls {
            let mut call = asked.clone();
            let mut edited = String::new();
            let mut rejected = None;
            match continued
                .filter(|c| c.call_id == call.id)
                .map(|c| &c.decision)
            {
                Some(d) if !d.approve => {
                    let reason = d.reason.as_deref().unwrap_or("no reason given");
                    rejected = Some(format!(
                        "Not run: {} rejected this call. Their reason: {reason}",
                        d.by
                    ));
                }
                Some(d) => {
                    if let Some(args) = d
                        .arguments
                        .as_ref()
                        .filter(|a| **a != call.function.arguments)
                    {
                        edited = format!(
                            "{} approved this call with its arguments changed to {args}.\n",
                            d.by
                        );
                        call.function.arguments = args.clone();
                    }
                }
                None => {
                    if let Some(why) = self.needs_approval(&call) {
                        let summary =
                            format!("waiting for approval of `{}`: {why}", call.function.name);
                        let memory = self.memory.request(None).into_iter().cloned().collect();
                        let mut outcome =
                            self.outcome(StepStatus::AwaitingApproval, summary, round);
                        outcome.pause = Some(crate::protocol::Pause { call, why, memory });
                        return Some(outcome);
                    }
                }
            }
            let call = &call;
            // A rejected call and a `recall` are answered here; every other call by a tool.
            let result = match rejected {
                Some(output) => answered(false, output),
                None if call.function.name == tools::recall::NAME
                    && self.state.spec.profile.compact_at.is_some() =>
                {
                    match self.recall(call) {
                        Ok(text) => answered(true, text),
                        Err(why) => answered(false, why),
                    }
                }
                None => self.call_tool(call).await,
            };
            if self.state.spec.llm.settings().vision && !self.state.text_only {
                let tool = &call.function.name;
                images.extend(result.images.iter().map(|i| (tool.clone(), i.clone())));
            }
            let observation = if result.ok {
                clip(&result.output, self.state.spec.profile.max_observe)
            } else {
                format!(
                    "Error: {}",
                    clip(&result.output, self.state.spec.profile.max_observe)
                )
            };
            self.emit(FlowEvent::ToolFinished {
                step: self.req.step_index,
                agent: self.state.spec.name.clone(),
                tool: call.function.name.clone(),
                ok: result.ok,
                output: clip(&result.output, 2_000),
            });
            self.memory
                .push(Message::tool(call, format!("{edited}{observation}")));
            if let Some(status) = result.terminate {
                let summary = if text.is_empty() {
                    self.last_words()
                } else {
                    text
                };
                let status = match status {
                    TerminateStatus::Success => StepStatus::Completed,
                    TerminateStatus::Failure => StepStatus::Failed,
                };
                return Some(self.outcome(status, summary, round));
            }
        }
        if !images.is_empty() {
            let tools: Vec<&str> = images.iter().map(|(t, _)| t.as_str()).collect();
            let urls = images
                .iter()
                .map(|(_, i)| format!("data:{};base64,{}", i.mime_type, i.base64));
            self.memory.push(Message::user_with_images(
                format!("The image(s) returned by {}:", tools.join(", ")),
                urls,
            ));
        }
        None
    }

    /// Past the compaction threshold after pruning, fold the middle rounds into a summary
    /// the model writes (a failed summary leaves the memory to its token cap, which drops
    /// the oldest rounds); publish what compaction did this round.
    async fn compact(&mut self, round: u32) {
        if self.state.spec.profile.compact_at.is_none() {
            return;
        }
        let pruned = std::mem::take(&mut self.memory.pruned_lately);
        let over = self.memory.over_compaction();
        if pruned == 0 && !over {
            return;
        }
        let span = tracing::info_span!(
            "compact",
            manus.round = round,
            manus.compact.pruned = pruned,
            manus.compact.folded = tracing::field::Empty,
            manus.compact.tokens_before = tracing::field::Empty,
            manus.compact.tokens_after = tracing::field::Empty,
        );
        let before = self.memory.tokens();
        let mut folded = 0;
        let mut usage = Usage::default();
        let middle = self.memory.middle();
        if over && !middle.is_empty() {
            let transcript = transcript(self.memory.messages(middle.clone()));
            match self
                .summarise(SUMMARY_SYSTEM, transcript)
                .instrument(span.clone())
                .await
            {
                Ok((summary, spent)) => {
                    usage = spent;
                    folded = middle.len();
                    let summary = format!(
                        "Summary of this step's earlier rounds (folded to save context; pruned \
                         outputs can still be read with recall):\n{summary}"
                    );
                    self.memory.fold(middle, Message::user(summary));
                }
                Err(e) => {
                    tracing::warn!(agent = %self.state.spec.name, "could not summarise old rounds ({e}); they will be dropped instead")
                }
            }
        }
        let after = self.memory.tokens();
        span.record("manus.compact.folded", folded);
        span.record("manus.compact.tokens_before", before);
        span.record("manus.compact.tokens_after", after);
        self.emit(FlowEvent::Compacted {
            step: self.req.step_index,
            agent: self.state.spec.name.clone(),
            tokens_before: before,
            tokens_after: after,
            pruned,
            folded,
            usage,
            notes: false,
        });
    }

    /// The calls of the newest assistant message that have no result yet, and its text.
    fn unanswered(&self) -> (Vec<ToolCall>, String) {
        let messages = self.memory.request(None);
        let Some(at) = messages.iter().rposition(|m| m.role == Role::Assistant) else {
            return (vec![], String::new());
        };
        let answered: Vec<&str> = messages[at + 1..]
            .iter()
            .filter_map(|m| m.tool_call_id.as_deref())
            .collect();
        let calls = messages[at]
            .tool_calls
            .iter()
            .filter(|c| !answered.contains(&c.id.as_str()))
            .cloned()
            .collect();
        (calls, messages[at].text().trim().to_string())
    }

    /// A `recall` call's answer: the pruned output it names.
    fn recall(&self, call: &ToolCall) -> Result<String, String> {
        let args: Value = serde_json::from_str(&call.function.arguments)
            .map_err(|e| format!("recall: the arguments are not JSON ({e})"))?;
        let wanted = tools::recall::read_call(&args).map_err(|e| e.0)?;
        self.memory
            .recall(wanted.reference.trim())
            .map(str::to_string)
            .ok_or_else(|| {
                format!(
                    "recall: no pruned output has the reference \"{}\"",
                    wanted.reference
                )
            })
    }

    /// Why `call` must wait for a person, if it must. Its arguments are read as the tool
    /// will read them (blank as `{}`); arguments that are not JSON need no approval, as the
    /// call fails on them before any tool runs.
    fn needs_approval(&self, call: &ToolCall) -> Option<String> {
        let raw = call.function.arguments.trim();
        let args: Value = serde_json::from_str(if raw.is_empty() { "{}" } else { raw }).ok()?;
        self.state.spec.approvals.check(&call.function.name, &args)
    }

    /// The round's closing user message: the next-step prompt, and after a round that used
    /// the browser, the browser's state (with a screenshot for models that see images).
    async fn closing_prompt(&self, prompt: String) -> Message {
        let spec = &self.state.spec;
        let Some(browser) = spec.browser.as_ref().filter(|_| self.browsed) else {
            return Message::user(prompt);
        };
        let screenshot =
            browser.settings.screenshots && spec.llm.settings().vision && !self.state.text_only;
        match browser.state(&self.req.flow_id, screenshot).await {
            Ok(state) => {
                let text = format!("{}\n\n{prompt}", browser_state_text(&state));
                match &state.screenshot {
                    Some(png) => Message::user_with_images(
                        text,
                        [format!(
                            "data:image/png;base64,{}",
                            base64::engine::general_purpose::STANDARD.encode(png)
                        )],
                    ),
                    None => Message::user(text),
                }
            }
            Err(e) => Message::user(format!(
                "(The browser state could not be read: {e})\n\n{prompt}"
            )),
        }
    }

    /// The newest assistant text, for a summary.
    fn last_words(&self) -> String {
        self.memory
            .assistant_history()
            .map(|m| m.text().trim())
            .find(|t| !t.is_empty())
            .unwrap_or("")
            .to_string()
    }

    /// Whether `msg` repeats the previous assistant messages often enough to count as stuck.
    fn is_repeating(&self, msg: &Message) -> bool {
        let same = |m: &Message| {
            m.text().trim() == msg.text().trim()
                && m.tool_calls.len() == msg.tool_calls.len()
                && m.tool_calls
                    .iter()
                    .zip(&msg.tool_calls)
                    .all(|(a, b)| a.function == b.function)
        };
        let earlier = self
            .memory
            .assistant_history()
            .take(REPEATS_FOR_STUCK - 1)
            .filter(|m| same(m))
            .count();
        earlier == REPEATS_FOR_STUCK - 1
    }

    /// Run one tool call through the worker; every failure becomes an error result.
    async fn call_tool(&mut self, call: &ToolCall) -> ToolResult {
        let name = &call.function.name;
        self.emit(FlowEvent::ToolCalled {
            step: self.req.step_index,
            agent: self.state.spec.name.clone(),
            tool: name.clone(),
            arguments: clip(&call.function.arguments, 2_000),
        });
        let failed = |output: String| answered(false, output);
        let route = self.mcp.routes.get(name).cloned();
        if route.is_none() && !self.state.spec.profile.tools.iter().any(|t| t == name) {
            let known: Vec<&str> = self.tools.iter().map(|s| s.name.as_str()).collect();
            return failed(format!(
                "there is no tool named `{name}`. The tools you can call are: {}",
                known.join(", ")
            ));
        }
        let raw = if call.function.arguments.trim().is_empty() {
            "{}"
        } else {
            call.function.arguments.as_str()
        };
        let args: Value = match serde_json::from_str(raw) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) => return failed(format!("the arguments for `{name}` must be a JSON object")),
            Err(e) => {
                return failed(format!(
                    "the arguments for `{name}` are not valid JSON ({e}). Send them again as one JSON object"
                ));
            }
        };
        let inv = ToolInvocation {
            call: call.clone(),
            args,
            span: tracing::Span::current(),
            mcp: route,
        };
        // The tools enforce their own limits; this bound only catches a worker that hangs.
        // Saturating: settings built by hand may hold any duration.
        let mcp_limit = inv.mcp.as_ref().map_or(Duration::ZERO, |r| {
            r.handle
                .call_timeout
                .saturating_add(r.handle.connect_timeout)
        });
        let limit = tools::longest_deadline(&self.state.spec.tool_settings)
            .max(mcp_limit)
            .saturating_add(Duration::from_secs(30));
        let worker = match &self.state.worker {
            Some(w) => w.clone(),
            None => match spawn_worker(self.myself, &self.state.spec, self.req).await {
                Ok(w) => self.state.worker.insert(w).clone(),
                Err(e) => return failed(format!("the tool worker could not start: {e}")),
            },
        };
        let answer = worker
            .call(|reply| ToolMsg::Call(inv, reply), Some(limit))
            .await;
        match answer {
            Ok(ractor::rpc::CallResult::Success(r)) => r,
            other => {
                let why = match other {
                    Ok(ractor::rpc::CallResult::Timeout) => {
                        format!("did not finish within {}s", limit.as_secs())
                    }
                    _ => "crashed".to_string(),
                };
                // The next call starts a fresh worker.
                worker.kill();
                self.state.worker = None;
                failed(format!(
                    "the tool `{name}` {why}; its worker was restarted, so tool state such as the shell session was reset"
                ))
            }
        }
    }
}

/// The browser state as the model reads it.
fn browser_state_text(s: &crate::protocol::BrowserState) -> String {
    let mut out = format!(
        "Current browser state\nURL: {}\nTitle: {}\nTabs:",
        s.url, s.title
    );
    for (i, (title, url)) in s.tabs.iter().enumerate() {
        let current = if i == s.current_tab { " (current)" } else { "" };
        out += &format!("\n  tab_id {i}: {title} — {url}{current}");
    }
    out += &format!(
        "\nScroll: {} px above the view, {} px below it",
        s.pixels_above, s.pixels_below
    );
    if s.elements.is_empty() {
        out += "\nInteractive elements: none visible";
    } else {
        out += "\nInteractive elements (use the number in brackets as `index`):\n";
        out += &s.elements.join("\n");
        if s.elements_omitted > 0 {
            out += &format!(
                "\n... and {} more not listed (scroll or use scroll_to_text to reach them)",
                s.elements_omitted
            );
        }
    }
    if s.screenshot.is_some() {
        out += "\nA screenshot of the current view is attached.";
    }
    out
}

/// A call's result made by the agent itself, without a tool (a rejection, a `recall`).
fn answered(ok: bool, output: String) -> ToolResult {
    ToolResult {
        ok,
        output,
        terminate: None,
        elapsed: Duration::ZERO,
        images: vec![],
    }
}

const SUMMARY_SYSTEM: &str = "You compress an agent's working notes. You are given the middle \
rounds of its work on one step: its messages, the tool calls it made and their results. Write a \
summary it can work from instead: keep every file name and path, every number and measurement, \
every decision taken and why, what was tried and failed, and every open question, exactly as \
written; drop chatter and repeated output. Plain text, no preamble.";

const NOTES_SYSTEM: &str = "You shorten the notes an agent left when it finished one step of a \
plan. Later steps, done by other agents, read them to build on the work. Rewrite them in at most \
250 words: keep every file name and path, every number and result, every decision and every open \
problem exactly as written; drop narration and repeated output. Plain text, no preamble.";

/// Messages as a transcript for the summary call: each one's role, its text (long results
/// cut to their head and tail) and the calls it made.
fn transcript<'a>(messages: impl Iterator<Item = &'a Message>) -> String {
    let mut out = String::new();
    for m in messages {
        let who = match m.role {
            Role::Tool => format!("result of {}", m.name.as_deref().unwrap_or("a tool")),
            Role::Assistant => "agent".into(),
            Role::User => "note".into(),
            Role::System => "system".into(),
        };
        out.push_str(&format!("[{who}] {}\n", clip(m.text(), 4_000)));
        for c in &m.tool_calls {
            out.push_str(&format!(
                "[agent calls {}] {}\n",
                c.function.name,
                clip(&c.function.arguments, 2_000)
            ));
        }
    }
    out
}

/// The opening user message of a step: the task, the plan, what the steps it builds on
/// found, and the one step to do now.
fn step_prompt(req: &StepRequest) -> String {
    let mut found = String::new();
    for (step, notes) in &req.builds_on {
        if found.is_empty() {
            found.push_str("This step builds on what these steps found:\n");
        }
        found.push_str(&format!("- step {step}: {}\n", notes.replace('\n', "\n  ")));
    }
    if !found.is_empty() {
        found.push('\n');
    }
    format!(
        "The overall task: {}\n\n{}\n{found}Your job now is step {} only: {}\n\n\
         Do this step and nothing beyond it; later steps belong to other agents or later turns. \
         When it is done, summarise what you did and call `terminate`.",
        req.task, req.plan_view, req.step_index, req.step
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{Cassette, LlmSettings};
    use crate::plan::Plan;
    use crate::protocol::FlowMsg;
    use crate::protocol::StepReport;
    use crate::tools::tests::PANICS;
    use serde_json::json;
    use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

    const BASH: &str = tools::bash::TOOL.name;
    const TERMINATE: &str = tools::terminate::TOOL.name;

    /// Stands in for a planner: passes on how steps ended, takes the agent's other casts and
    /// answers nothing.
    struct Sink;
    impl Actor for Sink {
        type Msg = FlowMsg;
        type State = UnboundedSender<StepOutcome>;
        type Arguments = UnboundedSender<StepOutcome>;
        async fn pre_start(
            &self,
            _m: ActorRef<FlowMsg>,
            ended: Self::Arguments,
        ) -> Result<Self::State, ActorProcessingErr> {
            Ok(ended)
        }
        async fn handle(
            &self,
            _m: ActorRef<FlowMsg>,
            msg: FlowMsg,
            ended: &mut Self::State,
        ) -> Result<(), ActorProcessingErr> {
            if let FlowMsg::StepDone { outcome, .. } = msg {
                let _ = ended.send(outcome);
            }
            Ok(())
        }
    }

    fn tool_reply(name: &str, args: serde_json::Value) -> serde_json::Value {
        json!({"id": "r", "model": "m", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null,
            "tool_calls": [{"id": format!("call_{name}"), "type": "function",
                            "function": {"name": name, "arguments": args.to_string()}}]}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
    }

    /// Step 0 of a one-step plan, for `flow`, its events into `events`.
    fn step_request(
        step: &str,
        flow: &ActorRef<FlowMsg>,
        events: UnboundedSender<FlowEvent>,
    ) -> StepRequest {
        StepRequest {
            flow_id: "f".into(),
            dispatch: 0,
            step_index: 0,
            step: step.into(),
            task: "t".into(),
            plan_view: Plan::new("p", "t", vec![step.into()]).view(),
            builds_on: vec![],
            continued: None,
            flow: flow.clone(),
            budgeted: false,
            events: crate::protocol::EventSink::new(events, None, false),
            span: tracing::Span::none(),
        }
    }

    /// A `manus` agent with these tools and replica permits, whose model replays `replies`
    /// to any request whose first user message is `first_user`.
    fn agent_spec(
        workspace: &std::path::Path,
        tools: &[&str],
        permits: usize,
        first_user: &str,
        replies: Vec<Value>,
    ) -> AgentSpec {
        let request = json!({"messages": [{"role": "user", "content": first_user}]});
        let lines: Vec<String> = replies
            .into_iter()
            .map(|response| json!({"request": request, "response": response}).to_string())
            .collect();
        let cassette = Arc::new(Cassette::parse("test", &lines.join("\n")).unwrap());
        let mut llm = LlmClient::new(
            Arc::new(LlmSettings::replay("default", cassette)),
            crate::llm::LazyHttp::default(),
            None,
        );
        crate::llm::rewind([&mut llm], crate::llm::ReplayFrom::Start);
        let mut profile = crate::agent::profile::builtin("manus").unwrap();
        profile.tools = tools.iter().map(|t| t.to_string()).collect();
        let tool_specs =
            crate::tools::worker::specs_for(&profile.tools, &ToolSettings::default()).into();
        AgentSpec {
            name: "manus".into(),
            description: "d".into(),
            replicas: 1,
            slots: std::sync::Arc::new(tokio::sync::Semaphore::new(permits)),
            tool_specs,
            llm,
            tool_settings: ToolSettings::default(),
            workspace: workspace.to_path_buf(),
            sandbox: None,
            browser: None,
            mcp: vec![],
            approvals: Default::default(),
            compact_llm: None,
            system: AgentSpec::opening(&profile, workspace, "manus"),
            profile,
        }
    }

    /// The next step outcome the sink passed on; a missing one fails the test.
    async fn next_outcome(
        outcomes: &mut tokio::sync::mpsc::UnboundedReceiver<StepOutcome>,
    ) -> StepOutcome {
        tokio::time::timeout(Duration::from_secs(10), outcomes.recv())
            .await
            .expect("no step outcome within 10 s")
            .unwrap()
    }

    #[tokio::test]
    async fn a_step_its_agent_never_finishes_comes_back_failed() {
        let (ended, mut outcomes) = unbounded_channel();
        let (sink, _) = Actor::spawn(None, Sink, ended).await.unwrap();
        let (events, _rx) = unbounded_channel();
        let req = step_request("wait for a replica", &sink, events);
        // No replica permit is free, so the step waits until its agent is killed.
        let finish = vec![tool_reply(TERMINATE, json!({"status": "success"}))];
        let spec = agent_spec(&std::env::temp_dir(), &[TERMINATE], 0, "", finish);
        let (agent, handle) = Actor::spawn(None, ExecutorAgent, Arc::new(spec))
            .await
            .unwrap();
        let report = StepReport::new(sink.clone(), 7);
        agent.send_message(AgentMsg::RunStep(req, report)).unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(outcomes.try_recv().is_err(), "the step is still waiting");
        agent.kill();
        handle.await.unwrap();
        let outcome = next_outcome(&mut outcomes).await;
        assert_eq!(outcome.status, StepStatus::Failed);
        assert!(
            outcome.summary.contains("stopped before finishing"),
            "{outcome:?}"
        );

        // A step sent to an agent that is already gone fails the same way.
        let (events, _rx) = unbounded_channel();
        let req = step_request("too late", &sink, events);
        let refused = agent.send_message(AgentMsg::RunStep(req, StepReport::new(sink.clone(), 8)));
        assert!(refused.is_err());
        drop(refused);
        let outcome = next_outcome(&mut outcomes).await;
        assert_eq!(outcome.status, StepStatus::Failed);
        assert!(outcomes.try_recv().is_err(), "each report is sent once");
        sink.stop(None);
    }

    #[tokio::test]
    async fn a_panicking_tool_is_an_observation_and_its_worker_restarts() {
        let workspace =
            std::env::temp_dir().join(format!("manus-agent-panic-{}", std::process::id()));
        std::fs::create_dir_all(&workspace).unwrap();
        let (ended, mut outcomes) = unbounded_channel();
        let (sink, _) = Actor::spawn(None, Sink, ended).await.unwrap();
        let (events, mut rx) = unbounded_channel();
        let req = step_request("crash then recover", &sink, events);
        // The model's side, as a cassette: crash the worker, use the shell, finish.
        let replies = vec![
            tool_reply(PANICS, json!({})),
            tool_reply(BASH, json!({"command": "echo still here"})),
            tool_reply(TERMINATE, json!({"status": "success"})),
        ];
        let tools = [PANICS, BASH, TERMINATE];
        let spec = agent_spec(&workspace, &tools, 1, &step_prompt(&req), replies);
        let (agent, _) = Actor::spawn(None, ExecutorAgent, Arc::new(spec))
            .await
            .unwrap();
        let report = StepReport::new(sink.clone(), 0);
        agent.send_message(AgentMsg::RunStep(req, report)).unwrap();
        let outcome = outcomes.recv().await.unwrap();
        assert_eq!(outcome.status, StepStatus::Completed, "{}", outcome.summary);
        let mut finished = vec![];
        while let Ok(e) = rx.try_recv() {
            if let FlowEvent::ToolFinished {
                tool, ok, output, ..
            } = e
            {
                finished.push((tool, ok, output));
            }
        }
        assert_eq!(finished[0].0, PANICS);
        assert!(
            !finished[0].1
                && finished[0].2.contains("crashed")
                && finished[0].2.contains("restarted"),
            "{finished:?}"
        );
        assert_eq!(
            (finished[1].0.as_str(), finished[1].1),
            (BASH, true),
            "{finished:?}"
        );
        assert!(finished[1].2.contains("still here"), "{finished:?}");
        agent.stop(None);
        sink.stop(None);
        let _ = std::fs::remove_dir_all(&workspace);
    }
}
