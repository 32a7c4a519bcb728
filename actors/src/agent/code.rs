//! Code as the action, the agent's side (`[agents.NAME] action = "code"`): a round's
//! `python` call runs as a cell in the agent's own interpreter (started on its first cell, on
//! the host or in the flow's container), and every tool call the cell makes goes the way a
//! JSON call goes (`settle`'s approval check, the events, the tool worker, its
//! `execute_tool` span under the cell's), its result answered back into the cell. A call
//! that must wait for a person pauses the step with the cell waiting on it; the continued
//! step answers it and the cell goes on. Knows nothing of the tools themselves.

use tracing::Instrument;

use super::act::{Settled, answered};
use super::step::StepRun;
use crate::llm::{FunctionCall, ToolCall};
use crate::llm::{Message, Role};
use crate::protocol::{CellRecord, Continued, FlowEvent, StepOutcome, TerminateStatus, ToolResult};
use crate::text::clip;
use crate::tools::python::cell_report;
use crate::tools::python::code::{self, CellFunction};
use crate::tools::python::session::{Cell, CellCall, Interpreter};

/// How a round's cell ended for the step.
pub(super) enum CellEnded {
    /// It ran to its end (or failed): its result for the model.
    Answered(ToolResult),
    /// The step stops here: a call waits for approval, or the flow may no longer act.
    Stopped(StepOutcome),
}

/// A cell waiting for a person's decision on one of its calls, kept by the agent while its
/// step is paused.
pub(super) struct OpenCell {
    /// The model's `python` call the cell answers.
    call_id: String,
    interpreter: Interpreter,
    cell: Cell,
    /// The call that waits, as the cell made it.
    waiting: CellCall,
    made: Made,
}

/// The calls a cell made, for its report, and a `terminate` among them.
#[derive(Default)]
struct Made {
    tools: Vec<String>,
    terminate: Option<TerminateStatus>,
}

impl StepRun<'_> {
    /// Run the cell of the model's `python` call `call`, or go on with the one that waited
    /// for the decision in `continued`.
    pub(super) async fn cell(
        &mut self,
        call: &ToolCall,
        round: u32,
        continued: Option<&Continued>,
    ) -> CellEnded {
        let limit = code::cell_limit(&self.state.spec.tool_settings);
        let span = tracing::info_span!(
            "execute_tool",
            otel.name = format!("execute_tool {}", code::NAME),
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = code::NAME,
            gen_ai.tool.call.id = %call.id,
        );
        let open = self.state.open_cell.take().filter(|o| o.call_id == call.id);
        let mut note = String::new();
        let (mut interpreter, mut cell, mut waiting, mut made) = match open {
            Some(o) => (o.interpreter, o.cell, Some(o.waiting), o.made),
            None => {
                let decided = continued.filter(|c| c.call_id.starts_with(&format!("{}.", call.id)));
                // Recorded before an interruption: its calls so far are answered from the
                // record, and the decision goes to the one that waited.
                let replayable = self
                    .req
                    .recorded
                    .iter()
                    .any(|r| r.answer.tool_calls.iter().any(|c| c.id == call.id));
                if let Some(c) = decided.filter(|_| !replayable) {
                    return CellEnded::Answered(answered(false, lost_cell(c)));
                }
                let started = self
                    .begin_cell(call, limit, true)
                    .instrument(span.clone())
                    .await;
                match started {
                    Ok((interpreter, cell, fresh)) => {
                        note = fresh;
                        (interpreter, cell, None, Made::default())
                    }
                    Err(result) => return CellEnded::Answered(result),
                }
            }
        };
        loop {
            let asked = match waiting.take() {
                Some(asked) => asked,
                None => match interpreter.next(&mut cell).instrument(span.clone()).await {
                    Some(asked) => asked,
                    None => break,
                },
            };
            // Made before an interruption: answered as it was then, not run again.
            if let Some((tool, ok, output)) = self.recorded_call(&call.id, asked.id, &asked.name) {
                made.tools.push(tool);
                interpreter.answer(asked.id, ok, &output).await;
                continue;
            }
            let mut inner = ToolCall {
                id: format!("{}.{}", call.id, asked.id),
                kind: "function".into(),
                function: FunctionCall {
                    name: asked.name.clone(),
                    arguments: serde_json::Value::Object(asked.args.clone()).to_string(),
                },
            };
            let result = match self.settle(&mut inner, continued) {
                Settled::Wait(why) => {
                    self.state.open_cell = Some(OpenCell {
                        call_id: call.id.clone(),
                        interpreter,
                        cell,
                        waiting: asked,
                        made,
                    });
                    return CellEnded::Stopped(self.paused(inner, why, round));
                }
                Settled::Answered(text) => answered(false, text),
                Settled::Run { note } => {
                    if let Err(why) = self.req.events.may_act() {
                        return CellEnded::Stopped(self.outcome(
                            crate::plan::StepStatus::Failed,
                            why,
                            round,
                        ));
                    }
                    let mut result = self.perform(&inner).instrument(span.clone()).await;
                    result.output = format!("{note}{}", result.output);
                    result
                }
            };
            self.record(CellRecord::Call {
                cell: call.id.clone(),
                index: asked.id,
                tool: asked.name.clone(),
                ok: result.ok,
                output: result.output.clone(),
            })
            .await;
            self.finished(&inner, &result);
            made.tools.push(asked.name.clone());
            made.terminate = made.terminate.or(result.terminate);
            interpreter
                .answer(asked.id, result.ok, &result.output)
                .await;
        }
        let run = cell.into_run();
        if run.interpreter_lives() {
            self.state.interpreter = Some(interpreter);
        }
        if let Some(replayed) = self.replay_note.take() {
            note = format!("{replayed}\n{note}");
        }
        let (ok, mut output) = match cell_report(run, limit, &note) {
            Ok(text) => (true, text),
            Err(text) => (false, text),
        };
        // A cell on a confined host says which setting allows what the sandbox refused, as
        // python_execute's results do.
        let spec = &self.state.spec;
        if spec.sandbox.is_none()
            && let Some(confine) = &spec.tool_settings.confine
            && let Some(refused) = crate::confine::refusal_note(&output, confine)
        {
            output.push('\n');
            output.push_str(&refused);
        }
        if !made.tools.is_empty() {
            output += &format!(
                "\n[tool calls made by this cell: {}]",
                made.tools.join(", ")
            );
        }
        CellEnded::Answered(ToolResult {
            ok,
            output,
            terminate: made.terminate,
            elapsed: std::time::Duration::ZERO,
            images: vec![],
        })
    }

    /// Start `call`'s cell in the agent's interpreter (started first if it has none, or if
    /// it ended since its last cell: the note for the model says so). `announce`: tell the
    /// flow the call started (not for a cell run again from the record).
    async fn begin_cell(
        &mut self,
        call: &ToolCall,
        limit: std::time::Duration,
        announce: bool,
    ) -> Result<(Interpreter, Cell, String), ToolResult> {
        let failed = |text: String| answered(false, text);
        let raw = match call.function.arguments.trim() {
            "" => "{}",
            raw => raw,
        };
        let args = serde_json::from_str(raw)
            .map_err(|e| failed(format!("python: the arguments are not JSON ({e})")))?;
        let source = code::read_call(&args).map_err(|e| failed(e.0))?;
        if announce {
            self.emit(FlowEvent::ToolCalled {
                step: self.req.step_index,
                agent: self.state.spec.name.clone(),
                tool: code::NAME.into(),
                arguments: clip(&call.function.arguments, 2_000),
            });
        }
        let mut note = String::new();
        let kept = match self.state.interpreter.take() {
            Some(mut kept) => match kept.ended_between_cells().await {
                None => Some(kept),
                Some(how) => {
                    note = format!(
                        "(Your interpreter {how} after the previous cell, so this cell runs in a \
                         fresh one: variables, imports and data from earlier cells are gone.)\n"
                    );
                    None
                }
            },
            None => None,
        };
        let mut interpreter = match kept {
            Some(kept) => kept,
            None => {
                let spec = &self.state.spec;
                let started = match &spec.sandbox {
                    Some(sandbox) => {
                        Interpreter::start_in_container(sandbox, &self.req.flow_id).await
                    }
                    None => {
                        let settings = &spec.tool_settings;
                        let (python, confine) = (&settings.python, settings.confine.as_ref());
                        Interpreter::start_on_host(python, &spec.workspace, confine).await
                    }
                };
                started.map_err(|e| failed(format!("python: {e}")))?
            }
        };
        let functions: Vec<CellFunction> = code::functions(self.state.spec.tool_specs.iter())
            .into_iter()
            .chain(self.mcp.specs.iter().map(CellFunction::of))
            .collect();
        if let Err(how) = interpreter.define(&functions).await {
            return Err(failed(format!("{note}python: the interpreter {how}")));
        }
        match interpreter.begin(&source, limit).await {
            Ok(cell) => Ok((interpreter, cell, note)),
            Err(run) => Err(failed(
                cell_report(run, limit, &note).unwrap_or_else(|text| text),
            )),
        }
    }
}

impl StepRun<'_> {
    /// Record `record` in the run store (at once without one) before going on. A record the
    /// store could not take is logged: after a crash its round runs again.
    pub(super) async fn record(&self, record: CellRecord) {
        let event = FlowEvent::Cell {
            step: self.req.step_index,
            agent: self.state.spec.name.clone(),
            record,
        };
        if let Err(why) = self.req.events.send_durably(event).await {
            tracing::warn!(agent = %self.state.spec.name, "a cell's record was not kept: {why}");
        }
    }

    /// In code mode, record what round `round` added to the memory after its answer.
    pub(super) async fn record_results(&self, round: u32) {
        if self.state.spec.profile.action != super::Action::Code {
            return;
        }
        let messages = self.memory.request(None);
        let Some(at) = messages.iter().rposition(|m| m.role == Role::Assistant) else {
            return;
        };
        let messages: Vec<Message> = messages[at + 1..].iter().map(|m| (*m).clone()).collect();
        self.record(CellRecord::Results { round, messages }).await;
    }

    /// The recorded result of call `index` of cell `cell`, if it was recorded as a call of
    /// `tool`: its tool, ok and output.
    fn recorded_call(&self, cell: &str, index: u64, tool: &str) -> Option<(String, bool, String)> {
        self.req
            .recorded
            .iter()
            .flat_map(|r| &r.calls)
            .find(|(c, i, t, ..)| c == cell && *i == index && t == tool)
            .map(|(_, _, t, ok, output)| (t.clone(), *ok, output.clone()))
    }

    /// Make the agent's interpreter again after an interruption: run the cells of the
    /// recorded rounds that ended, each tool call answered from the record (no tool runs),
    /// and check each cell's result against the recorded one. Cells that came out otherwise
    /// (they read the clock, the network, or a file that changed since) are named to the
    /// model and in a record.
    pub(super) async fn replay_cells(&mut self) {
        let limit = code::cell_limit(&self.state.spec.tool_settings);
        let max_observe = self.state.spec.profile.max_observe;
        let mut cells = 0;
        let mut differed = vec![];
        let rounds: Vec<_> = self
            .req
            .recorded
            .iter()
            .filter(|r| r.results.is_some())
            .cloned()
            .collect();
        for round in rounds {
            let results = round.results.unwrap_or_default();
            for call in round
                .answer
                .tool_calls
                .iter()
                .filter(|c| c.function.name == code::NAME)
            {
                let Some(recorded) = results
                    .iter()
                    .find(|m| m.tool_call_id.as_deref() == Some(call.id.as_str()))
                else {
                    continue;
                };
                cells += 1;
                let replayed = match self.begin_cell(call, limit, false).await {
                    Ok((mut interpreter, mut cell, _)) => {
                        while let Some(asked) = interpreter.next(&mut cell).await {
                            let (ok, output) =
                                match self.recorded_call(&call.id, asked.id, &asked.name) {
                                    Some((_, ok, output)) => (ok, output),
                                    None => (
                                        false,
                                        "this call was not made when the cell first ran".into(),
                                    ),
                                };
                            interpreter.answer(asked.id, ok, &output).await;
                        }
                        let run = cell.into_run();
                        if run.interpreter_lives() {
                            self.state.interpreter = Some(interpreter);
                        }
                        cell_report(run, limit, "")
                    }
                    Err(result) => Err(result.output),
                };
                let again = match replayed {
                    Ok(text) => clip(&text, max_observe),
                    Err(text) => format!("Error: {}", clip(&text, max_observe)),
                };
                if !recorded.text().starts_with(again.trim_end()) {
                    differed.push(format!("round {}", round.round));
                }
            }
        }
        if cells == 0 {
            return;
        }
        let note = match differed.is_empty() {
            true => format!(
                "(The run was interrupted and resumed: your interpreter was made again by running \
                 your {cells} earlier cell(s) once more, each tool call answered as it was the \
                 first time, so no tool ran twice. Every cell came out as before.)"
            ),
            false => format!(
                "(The run was interrupted and resumed: your interpreter was made again by running \
                 your {cells} earlier cell(s) once more, each tool call answered as it was the \
                 first time, so no tool ran twice. The cell(s) of {} did not come out as before \
                 (they may read the clock, the network, or files that changed): check the \
                 variables they set before you rely on them.)",
                differed.join(", ")
            ),
        };
        self.record(CellRecord::Replayed {
            cells,
            differed: differed.clone(),
        })
        .await;
        // Said before the model's next turn: as a message of its own, or, while a call of
        // the memory's last answer is still to be answered, with that call's result.
        match self.unanswered().0.is_empty() {
            true => self.memory.push(Message::user(note)),
            false => self.replay_note = Some(note),
        }
    }
}

/// What the model is told when the cell that waited for a decision is gone (the agent or
/// the runtime started again while it waited).
fn lost_cell(c: &Continued) -> String {
    let decided = match c.decision.approve {
        true => "approved",
        false => "rejected",
    };
    format!(
        "Your cell stopped while one of its tool calls waited for approval ({decided} by {}), \
         and the interpreter that ran it is gone: the rest of the cell did not run, and the \
         calls it made before that ran once. Its variables are gone too. Check what was done, \
         then write a cell for what remains.",
        c.decision.by
    )
}
