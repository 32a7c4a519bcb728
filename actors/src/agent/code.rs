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
use crate::protocol::{Continued, FlowEvent, StepOutcome, TerminateStatus, ToolResult};
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
                if let Some(c) = decided {
                    return CellEnded::Answered(answered(false, lost_cell(c)));
                }
                let started = self.begin_cell(call, limit).instrument(span.clone()).await;
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
        let (ok, mut output) = match cell_report(run, limit, &note) {
            Ok(text) => (true, text),
            Err(text) => (false, text),
        };
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
    /// it ended since its last cell: the note for the model says so).
    async fn begin_cell(
        &mut self,
        call: &ToolCall,
        limit: std::time::Duration,
    ) -> Result<(Interpreter, Cell, String), ToolResult> {
        let failed = |text: String| answered(false, text);
        let raw = match call.function.arguments.trim() {
            "" => "{}",
            raw => raw,
        };
        let args = serde_json::from_str(raw)
            .map_err(|e| failed(format!("python: the arguments are not JSON ({e})")))?;
        let source = code::read_call(&args).map_err(|e| failed(e.0))?;
        self.emit(FlowEvent::ToolCalled {
            step: self.req.step_index,
            agent: self.state.spec.name.clone(),
            tool: code::NAME.into(),
            arguments: clip(&call.function.arguments, 2_000),
        });
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
                        Interpreter::start_on_host(&spec.tool_settings.python, &spec.workspace)
                            .await
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
