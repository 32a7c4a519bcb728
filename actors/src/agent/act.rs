//! The act half of a step's think/act loop: a round's tool calls, in order, each after its
//! approval check (a call that needs a person's approval pauses the step, and a paused
//! step goes on with the decision), answered by the agent itself (a rejection, a `recall`)
//! or run through the agent's tool worker, which is started on the first call and started
//! again after it crashes or hangs. Knows nothing of the model call or of the nudges.

use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::Value;

use super::code::CellEnded;
use super::step::{StepRun, last_words};
use super::{Action, AgentSpec};
use crate::llm::{Message, Role, ToolCall};
use crate::plan::StepStatus;
use crate::protocol::{
    AgentMsg, FlowEvent, FlowLink, ImageData, StepOutcome, StepRequest, TerminateStatus,
    ToolInvocation, ToolMsg, ToolResult,
};
use crate::text::clip;
use crate::tools::python::code;
use crate::tools::worker::{ToolWorker, WorkerArgs};
use crate::tools::{self, ToolCtx};

/// How much of a tool's output `ToolFinished` carries.
pub(super) const FINISHED_CHARS: usize = 2_000;

impl StepRun<'_> {
    /// Run a round's tool calls in order, each after its approval check; the step's
    /// outcome if one of them ended it (`terminate`) or stopped it for approval.
    /// `continued`: the decision on the call a paused step stopped before.
    pub(super) async fn act(
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
            match self.settle(&mut call, continued) {
                Settled::Run { note } => edited = note,
                Settled::Answered(text) => rejected = Some(text),
                Settled::Wait(why) => return Some(self.paused(call, why, round)),
            }
            let call = &call;
            if rejected.is_none()
                && let Err(why) = self.req.events.may_act()
            {
                return Some(self.outcome(StepStatus::Failed, why, round));
            }
            let result = match rejected {
                Some(output) => answered(false, output),
                None if self.state.spec.profile.action == Action::Code
                    && call.function.name == code::NAME =>
                {
                    match self.cell(call, round, continued).await {
                        CellEnded::Answered(result) => result,
                        CellEnded::Stopped(outcome) => return Some(outcome),
                    }
                }
                None => self.perform(call).await,
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
            self.finished(call, &result);
            self.memory
                .push(Message::tool(call, format!("{edited}{observation}")));
            if let Some(status) = result.terminate {
                let summary = if text.is_empty() {
                    last_words(&self.memory)
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

    /// What to do with `call` before it runs: run it (approved, perhaps with its arguments
    /// changed, which `note` tells the model), answer it without running it (rejected, or
    /// handed to its tool before an interruption), or wait for a person's approval.
    /// `continued`: the decision on the call a paused step stopped before.
    pub(super) fn settle(
        &self,
        call: &mut ToolCall,
        continued: Option<&crate::protocol::Continued>,
    ) -> Settled {
        let this = continued.filter(|c| c.call_id == call.id);
        match this.map(|c| (&c.decision, &c.interrupted)) {
            // Handed to its tool before the flow was interrupted: not run again.
            Some((_, Some(result))) => Settled::Answered(result.clone()),
            Some((d, None)) if !d.approve => {
                let reason = d.reason.as_deref().unwrap_or("no reason given");
                Settled::Answered(format!(
                    "Not run: {} rejected this call. Their reason: {reason}",
                    d.by
                ))
            }
            Some((d, None)) => {
                let mut note = String::new();
                if let Some(args) = d
                    .arguments
                    .as_ref()
                    .filter(|a| **a != call.function.arguments)
                {
                    note = format!(
                        "{} approved this call with its arguments changed to {args}.\n",
                        d.by
                    );
                    call.function.arguments = args.clone();
                }
                Settled::Run { note }
            }
            None => match self.needs_approval(call) {
                Some(why) => Settled::Wait(why),
                None => Settled::Run {
                    note: String::new(),
                },
            },
        }
    }

    /// The step's outcome when `call` must wait for a person: paused, with its memory.
    pub(super) fn paused(&self, call: ToolCall, why: String, round: u32) -> StepOutcome {
        let summary = format!("waiting for approval of `{}`: {why}", call.function.name);
        let memory = self.memory.request(None).into_iter().cloned().collect();
        let mut outcome = self.outcome(StepStatus::AwaitingApproval, summary, round);
        outcome.pause = Some(crate::protocol::Pause { call, why, memory });
        outcome
    }

    /// Run a call that may run: a `recall` is answered here, every other call by a tool.
    pub(super) async fn perform(&mut self, call: &ToolCall) -> ToolResult {
        if call.function.name == tools::recall::NAME && self.state.spec.profile.compact_at.is_some()
        {
            return match self.recall(call) {
                Ok(text) => answered(true, text),
                Err(why) => answered(false, why),
            };
        }
        self.call_tool(call).await
    }

    /// Tell the flow how `call` ended.
    pub(super) fn finished(&mut self, call: &ToolCall, result: &ToolResult) {
        self.replay.compare(call, result);
        self.emit(FlowEvent::ToolFinished {
            step: self.req.step_index,
            agent: self.state.spec.name.clone(),
            tool: call.function.name.clone(),
            ok: result.ok,
            output: clip(&result.output, FINISHED_CHARS),
            call_id: call.id.clone(),
        });
    }

    /// The calls of the newest assistant message that have no result yet, and its text.
    pub(super) fn unanswered(&self) -> (Vec<ToolCall>, String) {
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
            step: Some(self.req.step_index),
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
            memory: spec.memory.clone(),
            step: None,
        },
    };
    let (worker, _) = Actor::spawn_linked(None, ToolWorker, args, myself.get_cell()).await?;
    Ok(worker)
}

/// What happens to a call before it runs (`StepRun::settle`).
pub(super) enum Settled {
    /// Run it; `note` goes before its result (arguments a person changed).
    Run { note: String },
    /// Do not run it: this is its (failed) result.
    Answered(String),
    /// It waits for a person's approval, for this reason.
    Wait(String),
}

/// A call's result made by the agent itself, without a tool (a rejection, a `recall`).
pub(super) fn answered(ok: bool, output: String) -> ToolResult {
    ToolResult {
        ok,
        output,
        terminate: None,
        elapsed: Duration::ZERO,
        images: vec![],
    }
}
