//! `planning`: a book of plans that the model creates, updates and marks. The planner
//! applies the model's `create` call to its own book; agents given this tool get a book of
//! their own.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{Tool, ToolCtx, ToolError, ToolFuture, ToolOutput, json_kind, opt_str_arg, str_arg};
use crate::llm::ToolSpec;
use crate::planner::plan::{Plan, PlanStep, StepStatus};

#[derive(Debug, Default)]
pub struct PlanningTool {
    plans: BTreeMap<String, Plan>,
    active: Option<String>,
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

const TOOL: &str = "planning";

fn steps_arg(args: &Value) -> Result<Option<Vec<String>>, ToolError> {
    match args.get("steps") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) if !s.trim().is_empty() => Ok(s.trim().to_string()),
                other => Err(ToolError::new(format!(
                    "planning: steps[{i}] must be a non-empty string, got {}",
                    json_kind(other)
                ))),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(other) => Err(ToolError::new(format!(
            "planning: `steps` must be an array of strings, got {}",
            json_kind(other)
        ))),
    }
}

impl PlanningTool {
    /// Apply one call; the planner uses this directly for the model's `create`.
    pub fn apply(&mut self, args: &Value) -> Result<String, ToolError> {
        match str_arg(args, "command", TOOL)? {
            "create" => {
                let id = str_arg(args, "plan_id", TOOL)?.to_string();
                if self.plans.contains_key(&id) {
                    return Err(ToolError::new(format!(
                        "planning: a plan `{id}` exists already; use update"
                    )));
                }
                let title = str_arg(args, "title", TOOL)?.to_string();
                let steps = steps_arg(args)?.filter(|s| !s.is_empty()).ok_or_else(|| {
                    ToolError::new("planning: create needs `steps`, a non-empty array of strings")
                })?;
                let plan = Plan::new(&id, title, steps);
                let view = plan.view();
                self.plans.insert(id.clone(), plan);
                self.active = Some(id.clone());
                Ok(format!("Created plan `{id}` and made it active.\n\n{view}"))
            }
            "update" => {
                let id = str_arg(args, "plan_id", TOOL)?;
                let plan = self.plan_mut(Some(id))?;
                if let Some(title) = opt_str_arg(args, "title", TOOL)? {
                    plan.title = title.to_string();
                }
                if let Some(steps) = steps_arg(args)? {
                    let old = std::mem::take(&mut plan.steps);
                    plan.steps = steps
                        .into_iter()
                        .map(|text| {
                            old.iter()
                                .find(|s| s.text == text)
                                .cloned()
                                .unwrap_or_else(|| PlanStep::new(text))
                        })
                        .collect();
                }
                Ok(format!("Updated plan `{id}`.\n\n{}", plan.view()))
            }
            "list" => {
                if self.plans.is_empty() {
                    return Ok("No plans yet; create one.".into());
                }
                let lines: Vec<String> = self
                    .plans
                    .values()
                    .map(|p| {
                        let active = if self.active.as_deref() == Some(p.id.as_str()) {
                            " (active)"
                        } else {
                            ""
                        };
                        format!(
                            "- {}{active}: {} — {}/{} completed",
                            p.id,
                            p.title,
                            p.count(StepStatus::Completed),
                            p.steps.len()
                        )
                    })
                    .collect();
                Ok(format!("Plans:\n{}", lines.join("\n")))
            }
            "get" => Ok(self.plan_mut(opt_str_arg(args, "plan_id", TOOL)?)?.view()),
            "set_active" => {
                let id = str_arg(args, "plan_id", TOOL)?;
                self.plan_mut(Some(id))?;
                self.active = Some(id.to_string());
                Ok(format!("Plan `{id}` is now active."))
            }
            "mark_step" => {
                let id = opt_str_arg(args, "plan_id", TOOL)?;
                let index = match args.get("step_index") {
                    Some(Value::Number(n)) if n.as_u64().is_some() => {
                        n.as_u64().unwrap_or_default() as usize
                    }
                    Some(other) => {
                        return Err(ToolError::new(format!(
                            "planning: `step_index` must be a whole number, got {}",
                            json_kind(other)
                        )));
                    }
                    None => return Err(ToolError::new("planning: mark_step needs `step_index`")),
                };
                let status = match opt_str_arg(args, "step_status", TOOL)? {
                    Some(s) => Some(StepStatus::parse(s).ok_or_else(|| {
                        ToolError::new(format!(
                            "planning: unknown step_status `{s}`; use one of not_started, in_progress, completed, blocked, failed"
                        ))
                    })?),
                    None => None,
                };
                let notes = opt_str_arg(args, "step_notes", TOOL)?;
                let plan = self.plan_mut(id)?;
                let n = plan.steps.len();
                let step = plan.steps.get_mut(index).ok_or_else(|| {
                    ToolError::new(format!("planning: step_index {index} is out of range; the plan has {n} steps (0..{n})"))
                })?;
                if let Some(st) = status {
                    step.status = st;
                }
                if let Some(notes) = notes {
                    step.notes = notes.to_string();
                }
                Ok(format!("Marked step {index}.\n\n{}", plan.view()))
            }
            "delete" => {
                let id = str_arg(args, "plan_id", TOOL)?;
                self.plans
                    .remove(id)
                    .ok_or_else(|| ToolError::new(format!("planning: no plan `{id}`")))?;
                if self.active.as_deref() == Some(id) {
                    self.active = None;
                }
                Ok(format!("Deleted plan `{id}`."))
            }
            other => Err(ToolError::new(format!(
                "planning: unknown command `{other}`; use create, update, list, get, set_active, mark_step or delete"
            ))),
        }
    }

    /// The plan named, or the active one.
    fn plan_mut(&mut self, id: Option<&str>) -> Result<&mut Plan, ToolError> {
        let id = match id {
            Some(id) => id.to_string(),
            None => self
                .active
                .clone()
                .ok_or_else(|| ToolError::new("planning: no active plan; pass `plan_id`"))?,
        };
        self.plans
            .get_mut(&id)
            .ok_or_else(|| ToolError::new(format!("planning: no plan `{id}`")))
    }

    /// Take a plan out of the book.
    pub fn take(&mut self, id: &str) -> Option<Plan> {
        self.plans.remove(id)
    }

    pub fn active_id(&self) -> Option<&str> {
        self.active.as_deref()
    }
}

impl Tool for PlanningTool {
    fn spec(&self) -> ToolSpec {
        planning_spec()
    }

    fn call<'a>(&'a mut self, args: Value, _ctx: &'a ToolCtx) -> ToolFuture<'a> {
        Box::pin(async move { self.apply(&args).map(ToolOutput::text) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_mark_update_and_errors() {
        let mut t = PlanningTool::default();
        let out = t
            .apply(&json!({"command": "create", "plan_id": "p", "title": "T", "steps": ["[MANUS] a", "b"]}))
            .unwrap();
        assert!(out.contains("0. [ ] [MANUS] a"), "{out}");
        t.apply(&json!({"command": "mark_step", "step_index": 0, "step_status": "completed", "step_notes": "ok"}))
            .unwrap();
        let out = t
            .apply(&json!({"command": "update", "plan_id": "p", "steps": ["[MANUS] a", "c"]}))
            .unwrap();
        assert!(
            out.contains("0. [✓] [MANUS] a") && out.contains("1. [ ] c"),
            "{out}"
        );
        let e = t
            .apply(&json!({"command": "mark_step", "step_index": 9}))
            .unwrap_err();
        assert!(e.0.contains("out of range"), "{e}");
        let e = t
            .apply(&json!({"command": "create", "plan_id": "q", "title": "T", "steps": "x"}))
            .unwrap_err();
        assert!(e.0.contains("array of strings"), "{e}");
        assert!(
            t.apply(&json!({"command": "fly"}))
                .unwrap_err()
                .0
                .contains("unknown command")
        );
        assert_eq!(t.take("p").unwrap().steps.len(), 2);
    }
}
