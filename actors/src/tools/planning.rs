//! `planning`: a book of plans that the model creates, updates and marks. The book and the
//! calls live in `plan.rs`, which the planner reads its own plan with; agents given this
//! tool get a book of their own.

use serde_json::{Value, json};

use super::{Tool, ToolCtx, ToolError, ToolFuture, ToolOutput};
use crate::llm::ToolSpec;
use crate::plan::{PlanBook, PlanningCall};

/// The tool: a book of plans of its own (`plan::PlanBook`).
#[derive(Debug, Default)]
pub struct PlanningTool {
    book: PlanBook,
}

pub fn planning_spec() -> ToolSpec {
    ToolSpec {
        name: "planning".into(),
        description: "Create and keep track of a plan for a task. A plan is a title and an ordered list of \
            steps; each step has a status (not_started, in_progress, completed, blocked, failed) and notes. \
            Prefix a step with [AGENT_NAME] to say which agent should carry it out."
            .into(),
        parameters: json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "enum": ["create", "update", "list", "get", "set_active", "mark_step", "delete"],
                    "description": "What to do."},
                "plan_id": {"type": "string", "description": "The plan's identifier. Needed by create, update, set_active and delete; get and mark_step default to the active plan."},
                "title": {"type": "string", "description": "The plan's title (create; optional for update)."},
                "steps": {"type": "array", "items": {"type": "string"}, "description": "The steps, in order (create; optional for update). Steps whose text is unchanged keep their status."},
                "step_index": {"type": "integer", "description": "The step to mark, counting from 0 (mark_step)."},
                "step_status": {"type": "string", "enum": ["not_started", "in_progress", "completed", "blocked", "failed"], "description": "The step's new status (mark_step)."},
                "step_notes": {"type": "string", "description": "Notes to keep with the step (mark_step)."}
            },
            "required": ["command"]
        }),
    }
}

impl Tool for PlanningTool {
    fn spec(&self) -> ToolSpec {
        planning_spec()
    }

    fn call<'a>(&'a mut self, args: Value, _ctx: &'a ToolCtx) -> ToolFuture<'a> {
        Box::pin(async move {
            PlanningCall::from_args(&args)
                .and_then(|call| self.book.apply(call))
                .map(ToolOutput::text)
                .map_err(ToolError::new)
        })
    }
}
