//! One step's run (`StepRun`): its working memory, its tools this round, its usage, and
//! the think/act loop (`StepRun::run`) that asks the model each round, streams what it
//! writes, tells the planner what each call spent, and acts on the answer (`act`) until
//! `terminate`, a nudge that did not help (`nudges`), a pause for approval, the budget or
//! `max_steps` ends the step. Compaction (`compaction`) runs before each round's call; the
//! round's prompts are `prompts`'. In a fork, recorded answers (`replay`) come first.

use std::time::{Duration, Instant};

use ractor::ActorRef;

use super::memory::Memory;
use super::nudges::Nudges;
use super::prompts::step_prompt;
use super::{Action, AgentState};
use crate::llm::{
    ChatRequest, FunctionCall, LlmErrorKind, Message, ToolCall, ToolChoice, ToolSet, Usage,
};
use crate::mcp::McpToolset;
use crate::plan::StepStatus;
use crate::protocol::{AgentMsg, CellRecord, FlowEvent, FlowMsg, StepOutcome, StepRequest};
use crate::tools;
use crate::tools::python::code;

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
pub(super) struct StepRun<'a> {
    pub(super) state: &'a mut AgentState,
    pub(super) req: &'a StepRequest,
    pub(super) myself: &'a ActorRef<AgentMsg>,
    pub(super) memory: Memory,
    /// The tools as the model sees them this round: the built-in ones (the spec's own,
    /// shared), then the MCP servers'.
    pub(super) tools: ToolSet,
    /// The MCP servers' tools this round, and where their names lead.
    pub(super) mcp: McpToolset,
    pub(super) usage: Usage,
    nudges: Nudges,
    /// The last round used the browser: the next prompt shows its state.
    pub(super) browsed: bool,
    /// In code mode after an interruption: what the model is told of its cells run again,
    /// with the next cell's result.
    pub(super) replay_note: Option<String>,
    /// In a fork: the step's recorded answers, fed in place of model calls.
    pub(super) replay: super::replay::Replaying,
}

impl<'a> StepRun<'a> {
    pub(super) fn new(
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
            _ => {
                memory.pin(Message::user(step_prompt(req)));
                // A code-mode step interrupted before: its rounds, as recorded.
                for round in &req.recorded {
                    memory.push(round.answer.clone());
                    for m in round.results.iter().flatten() {
                        memory.push(m.clone());
                    }
                }
            }
        }
        let mut tools = state.spec.tool_specs.clone();
        if p.action == Action::Code {
            tools = code_tool(state, &[]);
        }
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
            nudges: Nudges::after(&memory),
            memory,
            tools,
            mcp: McpToolset::default(),
            usage: Usage::default(),
            browsed: false,
            replay_note: None,
            replay: super::replay::Replaying::new(&req.replay),
        }
    }

    pub(super) fn emit(&self, e: FlowEvent) {
        self.req.events.send(e);
    }

    /// Tell the planner, which keeps the flow's tally, what a model call spent, and whether
    /// the flow may go on. Only a flow with a budget waits for the planner's word; the
    /// message still goes ahead of the step's outcome, so the tally is whole when it ends.
    pub(super) async fn spent(&self, usage: Usage) -> bool {
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

    pub(super) fn outcome(&self, status: StepStatus, summary: String, rounds: u32) -> StepOutcome {
        StepOutcome {
            status,
            summary,
            usage: self.usage,
            rounds,
            pause: None,
            brief: None,
        }
    }

    pub(super) async fn run(&mut self) -> StepOutcome {
        let max = self.state.spec.profile.max_steps;
        let mut first = 1;
        if !self.req.recorded.is_empty() && self.state.open_cell.is_none() {
            // The step was interrupted: its interpreter is made again from its cells.
            self.replay_cells().await;
            if self.req.continued.is_none() {
                let last = self.req.recorded.last().map_or(0, |r| r.round);
                let (calls, text) = self.unanswered();
                if !calls.is_empty() {
                    if let Some(outcome) = self.act(&calls, text, last, None).await {
                        return outcome;
                    }
                    self.record_results(last).await;
                }
                first = last + 1;
            }
        }
        if let Some(c) = self.req.continued.clone() {
            // Stopped before a call for approval: the rest of that round's calls first.
            let (calls, text) = self.unanswered();
            if let Some(outcome) = self.act(&calls, text, c.rounds, Some(&c)).await {
                return outcome;
            }
            self.record_results(c.rounds).await;
            first = c.rounds + 1;
        }
        for round in first..=max {
            let prompt = self
                .nudges
                .prompt(&self.state.spec.profile.next_step_prompt);
            if !self.state.spec.mcp.is_empty() {
                // Servers come and go, and may change their tools between rounds.
                self.mcp =
                    McpToolset::gather(&self.state.spec.mcp, &self.state.spec.profile.tools).await;
                for why in &self.mcp.unavailable {
                    tracing::warn!(agent = %self.state.spec.name, "{why}");
                }
                self.tools = match self.state.spec.profile.action {
                    Action::Tools => {
                        let builtin = self.state.spec.tool_specs.iter();
                        builtin.chain(&self.mcp.specs).cloned().collect()
                    }
                    Action::Code => code_tool(self.state, &self.mcp.specs),
                };
            }
            // A model call is a side effect too (it costs, and may be seen); so are the
            // tool calls of a recorded answer.
            if let Err(why) = self.req.events.may_act() {
                return self.outcome(StepStatus::Failed, why, round);
            }
            let (msg, cut_off, worded) = match self.replay.next(round) {
                // A recorded success-first call the step went on after was held (`worded`).
                Some(recorded) => (recorded, false, self.replay.more()),
                None => match self.ask(round, prompt).await {
                    Ok(answer) => answer,
                    Err(outcome) => return outcome,
                },
            };
            if !msg.text().trim().is_empty() {
                self.emit(FlowEvent::Thought {
                    step: self.req.step_index,
                    agent: self.state.spec.name.clone(),
                    text: msg.text().to_string(),
                });
            }
            if let Some(why) = self.nudges.repeated(&msg) {
                return self.outcome(StepStatus::Blocked, why, round);
            }
            let mut msg = msg;
            if self.state.spec.profile.action == Action::Code
                && msg.tool_calls.is_empty()
                && let Some(cell) = code::fenced_cell(msg.text())
            {
                // A model that writes its cell as text: the block is its `python` call.
                msg.tool_calls.push(ToolCall {
                    id: format!("cell-{}-{round}", self.req.dispatch),
                    kind: "function".into(),
                    function: FunctionCall {
                        name: code::NAME.into(),
                        arguments: serde_json::json!({ "code": cell }).to_string(),
                    },
                });
            }
            let calls = msg.tool_calls.clone();
            let text = msg.text().trim().to_string();
            if self.state.spec.profile.action == Action::Code {
                self.record(CellRecord::Answer {
                    round,
                    message: msg.clone(),
                })
                .await;
            } else {
                self.emit(FlowEvent::Answered {
                    step: self.req.step_index,
                    agent: self.state.spec.name.clone(),
                    round,
                    message: msg.clone(),
                });
            }
            self.memory.push(msg);
            if calls.is_empty() {
                let limit = self.state.spec.llm.settings().max_tokens;
                match self
                    .nudges
                    .plain_text(cut_off, limit, || last_words(&self.memory))
                {
                    Some(why) => return self.outcome(StepStatus::Failed, why, round),
                    None => continue,
                }
            }
            // Held only with a round left to act in: on the last, the model is taken at its word.
            let success_only =
                round < max && matches!(&calls[..], [c] if tools::terminate::claims_success(c));
            if let Some(nudge) = self.nudges.ended_before_acting(success_only, worded) {
                let held = &calls[0];
                self.finished(held, &super::act::answered(false, nudge.into()));
                self.memory.push(Message::tool(held, nudge));
                self.record_results(round).await;
                continue;
            }
            self.nudges.called_a_tool();
            if let Some(outcome) = self.act(&calls, text, round, None).await {
                return outcome;
            }
            self.record_results(round).await;
        }
        let last = last_words(&self.memory);
        self.outcome(
            StepStatus::Failed,
            format!("ran out of rounds (max_steps = {max}) before finishing the step; last words: {last}"),
            max,
        )
    }

    /// Ask the model for round `round`'s answer (after compacting the memory), closing
    /// with `prompt`; the answer, whether it was cut off and whether its calls were read
    /// from its text, or how the step ends.
    async fn ask(
        &mut self,
        round: u32,
        prompt: String,
    ) -> Result<(Message, bool, bool), StepOutcome> {
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
                return Err(self.outcome(
                    StepStatus::Failed,
                    format!("the model call failed: {e}"),
                    round,
                ));
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
            return Err(self.outcome(
                StepStatus::Failed,
                "stopped: the flow's token or cost budget is spent".into(),
                round,
            ));
        }
        let cut_off = resp.finish_reason.as_deref() == Some("length");
        Ok((resp.message, cut_off, resp.calls_in_text))
    }
}

/// The one tool of a code-mode agent: `python`, listing its built-in tools and `mcp`'s as
/// the functions its cells can call.
fn code_tool(state: &AgentState, mcp: &[crate::llm::ToolSpec]) -> ToolSet {
    let functions: Vec<code::CellFunction> = code::functions(state.spec.tool_specs.iter())
        .into_iter()
        .chain(mcp.iter().map(code::CellFunction::of))
        .collect();
    let limit = code::cell_limit(&state.spec.tool_settings).as_secs_f64();
    ToolSet::new(vec![code::spec(&functions, limit)])
}

/// The newest assistant text in `memory`, for a summary.
pub(super) fn last_words(memory: &Memory) -> String {
    memory
        .assistant_history()
        .map(|m| m.text().trim())
        .find(|t| !t.is_empty())
        .unwrap_or("")
        .to_string()
}
