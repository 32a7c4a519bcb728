//! `planning`: a book of plans that the model creates, updates and marks. The call's
//! arguments are one typed `Command` (its schema derived), read into the plan's own
//! `PlanningCall`; the book lives in `plan.rs`, which the planner also reads its plan with.
//! Agents given this tool get a book of their own.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::args::{self, Named, Names};
use super::{Builtin, Tool, ToolCtx, ToolError, ToolFuture, ToolOutput};
use crate::llm::ToolSpec;
use crate::plan::{PlanBook, PlanningCall, StepStatus};

const NAME: &str = "planning";

pub const TOOL: Builtin = Builtin::new(NAME, |_| Box::new(PlanningTool::default()));

/// What to do.
#[derive(Deserialize, JsonSchema)]
#[serde(tag = "command", rename_all = "snake_case")]
#[schemars(transform = args::flat_tagged)]
enum Command {
    Create {
        /// The plan's identifier. Needed by create, update, set_active and delete; get and
        /// mark_step default to the active plan.
        plan_id: String,
        /// The plan's title (create; optional for update).
        title: String,
        /// The steps, in order (create; optional for update). Steps whose text is unchanged
        /// keep their status.
        steps: Vec<String>,
    },
    Update {
        plan_id: String,
        title: Option<String>,
        steps: Option<Vec<String>>,
    },
    List,
    Get {
        plan_id: Option<String>,
    },
    SetActive {
        plan_id: String,
    },
    MarkStep {
        plan_id: Option<String>,
        /// The step to mark, counting from 0 (mark_step).
        step_index: i64,
        /// The step's new status (mark_step).
        step_status: Option<Named<StepStatus>>,
        /// Notes to keep with the step (mark_step).
        step_notes: Option<String>,
    },
    Delete {
        plan_id: String,
    },
}

impl Names for StepStatus {
    fn names() -> Vec<&'static str> {
        StepStatus::ALL.map(StepStatus::as_str).to_vec()
    }

    fn parse(name: &str) -> Option<Self> {
        StepStatus::parse(name)
    }
}

/// The tool: a book of plans of its own (`plan::PlanBook`).
#[derive(Debug, Default)]
pub struct PlanningTool {
    book: PlanBook,
}

pub fn planning_spec() -> ToolSpec {
    ToolSpec {
        name: NAME.into(),
        description: "Create and keep track of a plan for a task. A plan is a title and an ordered list of \
            steps; each step has a status (not_started, in_progress, completed, blocked, failed) and notes. \
            Prefix a step with [AGENT_NAME] to say which agent should carry it out."
            .into(),
        parameters: args::schema::<Command>(),
    }
}

/// The steps as given, each trimmed; none may be blank.
fn checked_steps(steps: Vec<String>) -> Result<Vec<String>, ToolError> {
    steps
        .into_iter()
        .enumerate()
        .map(|(i, s)| match s.trim() {
            "" => Err(ToolError::new(format!(
                "planning: steps[{i}] must be a non-empty string"
            ))),
            text => Ok(text.to_string()),
        })
        .collect()
}

/// Read a `planning` call (the tool's, or the planner's own) into the plan's terms.
pub fn read_call(args: &Value) -> Result<PlanningCall, ToolError> {
    Ok(match args::parse(NAME, args)? {
        Command::Create {
            plan_id,
            title,
            steps,
        } => {
            let steps = checked_steps(steps)?;
            if steps.is_empty() {
                return Err(ToolError::new(
                    "planning: create needs `steps`, a non-empty array of strings",
                ));
            }
            PlanningCall::Create {
                plan_id,
                title,
                steps,
            }
        }
        Command::Update {
            plan_id,
            title,
            steps,
        } => PlanningCall::Update {
            plan_id,
            title,
            steps: steps.map(checked_steps).transpose()?,
        },
        Command::List => PlanningCall::List,
        Command::Get { plan_id } => PlanningCall::Get { plan_id },
        Command::SetActive { plan_id } => PlanningCall::SetActive { plan_id },
        Command::MarkStep {
            plan_id,
            step_index,
            step_status,
            step_notes,
        } => PlanningCall::MarkStep {
            plan_id,
            step_index: usize::try_from(step_index).map_err(|_| {
                ToolError::new(format!(
                    "planning: `step_index` must be a whole number of 0 or more, got {step_index}"
                ))
            })?,
            step_status: step_status.map(|Named(status)| status),
            step_notes,
        },
        Command::Delete { plan_id } => PlanningCall::Delete { plan_id },
    })
}

impl Tool for PlanningTool {
    fn spec(&self) -> ToolSpec {
        planning_spec()
    }

    fn call<'a>(&'a mut self, args: Value, _ctx: &'a ToolCtx) -> ToolFuture<'a> {
        Box::pin(async move {
            let call = read_call(&args)?;
            self.book
                .apply(call)
                .map(ToolOutput::text)
                .map_err(ToolError::new)
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn apply(book: &mut PlanBook, args: Value) -> Result<String, String> {
        book.apply(read_call(&args).map_err(|e| e.0)?)
    }

    #[test]
    fn book_creates_marks_updates_and_says_what_is_wrong() {
        let mut book = PlanBook::default();
        let out = apply(
            &mut book,
            json!({"command": "create", "plan_id": "p", "title": "T", "steps": ["[MANUS] a", "b"]}),
        )
        .unwrap();
        assert!(out.contains("0. [ ] [MANUS] a"), "{out}");
        apply(
            &mut book,
            json!({"command": "mark_step", "step_index": 0, "step_status": "completed", "step_notes": "ok"}),
        )
        .unwrap();
        let out = apply(
            &mut book,
            json!({"command": "update", "plan_id": "p", "steps": ["[MANUS] a", "c"]}),
        )
        .unwrap();
        assert!(
            out.contains("0. [✓] [MANUS] a") && out.contains("1. [ ] c"),
            "{out}"
        );
        let e = apply(&mut book, json!({"command": "mark_step", "step_index": 9})).unwrap_err();
        assert!(e.contains("out of range"), "{e}");
        let e = apply(
            &mut book,
            json!({"command": "create", "plan_id": "q", "title": "T", "steps": "x"}),
        )
        .unwrap_err();
        assert!(e.contains("array of strings"), "{e}");
        assert!(
            apply(&mut book, json!({"command": "fly"}))
                .unwrap_err()
                .contains("unknown command")
        );
        assert_eq!(book.take("p").unwrap().steps.len(), 2);
    }
}
