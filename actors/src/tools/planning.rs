//! `planning`: a book of plans that the model creates, updates and marks. The planner
//! applies the model's `create` call to its own book; agents given this tool get a book of
//! their own.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::args::{self, Named, Names};
use super::{Builtin, Tool, ToolCtx, ToolError, ToolFuture, ToolOutput};
use crate::llm::ToolSpec;
use crate::planner::plan::{Plan, PlanStep, StepStatus};

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

#[derive(Debug, Default)]
pub struct PlanningTool {
    plans: BTreeMap<String, Plan>,
    active: Option<String>,
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

impl PlanningTool {
    /// Apply one call; the planner uses this directly for the model's `create`.
    pub fn apply(&mut self, args: &Value) -> Result<String, ToolError> {
        match args::parse(NAME, args)? {
            Command::Create {
                plan_id: id,
                title,
                steps,
            } => {
                if self.plans.contains_key(&id) {
                    return Err(ToolError::new(format!(
                        "planning: a plan `{id}` exists already; use update"
                    )));
                }
                let steps = checked_steps(steps)?;
                if steps.is_empty() {
                    return Err(ToolError::new(
                        "planning: create needs `steps`, a non-empty array of strings",
                    ));
                }
                let plan = Plan::new(&id, title, steps);
                let view = plan.view();
                self.plans.insert(id.clone(), plan);
                self.active = Some(id.clone());
                Ok(format!("Created plan `{id}` and made it active.\n\n{view}"))
            }
            Command::Update {
                plan_id: id,
                title,
                steps,
            } => {
                let steps = steps.map(checked_steps).transpose()?;
                let plan = self.plan_mut(Some(&id))?;
                if let Some(title) = title {
                    plan.title = title;
                }
                if let Some(steps) = steps {
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
            Command::List => {
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
            Command::Get { plan_id } => Ok(self.plan_mut(plan_id.as_deref())?.view()),
            Command::SetActive { plan_id: id } => {
                self.plan_mut(Some(&id))?;
                self.active = Some(id.clone());
                Ok(format!("Plan `{id}` is now active."))
            }
            Command::MarkStep {
                plan_id,
                step_index,
                step_status,
                step_notes,
            } => {
                let index = usize::try_from(step_index).map_err(|_| {
                    ToolError::new(format!(
                        "planning: `step_index` must be a whole number of 0 or more, got {step_index}"
                    ))
                })?;
                let plan = self.plan_mut(plan_id.as_deref())?;
                let n = plan.steps.len();
                let step = plan.steps.get_mut(index).ok_or_else(|| {
                    ToolError::new(format!("planning: step_index {index} is out of range; the plan has {n} steps (0..{n})"))
                })?;
                if let Some(Named(status)) = step_status {
                    step.status = status;
                }
                if let Some(notes) = step_notes {
                    step.notes = notes;
                }
                Ok(format!("Marked step {index}.\n\n{}", plan.view()))
            }
            Command::Delete { plan_id: id } => {
                self.plans
                    .remove(&id)
                    .ok_or_else(|| ToolError::new(format!("planning: no plan `{id}`")))?;
                if self.active.as_deref() == Some(id.as_str()) {
                    self.active = None;
                }
                Ok(format!("Deleted plan `{id}`."))
            }
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
    use serde_json::json;

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
