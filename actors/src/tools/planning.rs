//! `planning`: a book of plans that the model creates, updates and marks. A call's arguments
//! are one typed `Command` (its schema derived); the planner reads the model's `create` with
//! the same `read_call`. Agents given this tool get a book of their own.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::args::{self, Named, Names};
use super::{Builtin, Tool, ToolCtx, ToolError, ToolFuture, ToolOutput};
use crate::llm::ToolSpec;
use crate::plan::{Needs, Plan, PlanStep, StepStatus};

const NAME: &str = "planning";

pub const TOOL: Builtin = Builtin::new(NAME, |_| Box::new(PlanningTool::default()));

/// What to do.
#[derive(Deserialize, JsonSchema)]
#[serde(tag = "command", rename_all = "snake_case")]
#[schemars(transform = args::flat_tagged)]
pub enum Command {
    Create {
        /// The plan's identifier. Needed by create, update, set_active and delete; get and
        /// mark_step default to the active plan.
        plan_id: String,
        /// The plan's title (create; optional for update).
        title: String,
        /// The steps, in order (create; optional for update): each a string, or an object
        /// with the step's `text` and `depends_on`, the numbers of the steps it needs
        /// finished first (counting from 0). Steps whose text is unchanged keep their status.
        steps: Vec<StepArg>,
    },
    Update {
        plan_id: String,
        title: Option<String>,
        steps: Option<Vec<StepArg>>,
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

/// One step as given: its text, or its text and the steps it needs.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum StepArg {
    Text(String),
    Detailed {
        text: String,
        /// The numbers of the steps this one needs finished first; [] for none.
        depends_on: Option<Vec<StepRef>>,
    },
}

/// A step named by its number: 2, or "2", "s2", "step 2".
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum StepRef {
    Number(u64),
    Name(String),
}

impl StepArg {
    /// The step's text and the numbers of the steps it needs, if it names them.
    pub fn into_parts(self) -> Result<(String, Needs), ToolError> {
        match self {
            StepArg::Text(text) => Ok((text, None)),
            StepArg::Detailed { text, depends_on } => {
                let deps = depends_on
                    .map(|refs| refs.into_iter().map(StepRef::number).collect())
                    .transpose()?;
                Ok((text, deps))
            }
        }
    }

    fn text_mut(&mut self) -> &mut String {
        match self {
            StepArg::Text(text) | StepArg::Detailed { text, .. } => text,
        }
    }
}

impl StepRef {
    fn number(self) -> Result<usize, ToolError> {
        let n = match &self {
            StepRef::Number(n) => usize::try_from(*n).ok(),
            StepRef::Name(name) => {
                let t = name.trim().to_ascii_lowercase();
                let t = t.strip_prefix("step").unwrap_or(&t).trim_start();
                let t = t.strip_prefix('s').unwrap_or(t).trim_start_matches('#');
                t.trim().parse().ok()
            }
        };
        n.ok_or_else(|| {
            ToolError::new(format!(
                "planning: `depends_on` lists step numbers (0, 1, …), got {self:?}"
            ))
        })
    }
}

/// Each step's text and the steps it needs.
pub fn split_steps(steps: Vec<StepArg>) -> Result<Vec<(String, Needs)>, ToolError> {
    steps.into_iter().map(StepArg::into_parts).collect()
}

impl Names for StepStatus {
    fn names() -> Vec<&'static str> {
        StepStatus::ALL.map(StepStatus::as_str).to_vec()
    }

    fn parse(name: &str) -> Option<Self> {
        StepStatus::parse(name)
    }
}

/// The tool: a book of plans of its own.
#[derive(Debug, Default)]
pub struct PlanningTool {
    book: PlanBook,
}

pub fn planning_spec() -> ToolSpec {
    ToolSpec {
        name: NAME.into(),
        description: "Create and keep track of a plan for a task. A plan is a title and an ordered list of \
            steps; each step has a status (not_started, in_progress, completed, blocked, failed) and notes. \
            Prefix a step with [AGENT_NAME] to say which agent should carry it out. A step given as \
            {\"text\": …, \"depends_on\": [numbers]} names the steps it needs finished first; steps that \
            need nothing from each other can run at the same time."
            .into(),
        parameters: args::schema::<Command>(),
        variants: args::variants::<Command>(),
    }
}

/// The steps as given, each text trimmed; none may be blank.
fn checked_steps(mut steps: Vec<StepArg>) -> Result<Vec<StepArg>, ToolError> {
    for (i, step) in steps.iter_mut().enumerate() {
        let text = step.text_mut();
        match text.trim() {
            "" => {
                return Err(ToolError::new(format!(
                    "planning: steps[{i}] must be a non-empty string"
                )));
            }
            t => *text = t.to_string(),
        }
    }
    Ok(steps)
}

/// Read a `planning` call (the tool's, or the planner's own): its arguments typed, its steps
/// trimmed and none blank, and a `create` with at least one.
pub fn read_call(args: &Value) -> Result<Command, ToolError> {
    let mut call: Command = args::parse(NAME, args)?;
    match &mut call {
        Command::Create { steps, .. } => {
            *steps = checked_steps(std::mem::take(steps))?;
            if steps.is_empty() {
                return Err(ToolError::new(
                    "planning: create needs `steps`, a non-empty array of strings",
                ));
            }
        }
        Command::Update {
            steps: Some(steps), ..
        } => *steps = checked_steps(std::mem::take(steps))?,
        _ => {}
    }
    Ok(call)
}

/// A book of plans that `planning` calls create, update and mark, one of them active.
#[derive(Debug, Default)]
struct PlanBook {
    plans: BTreeMap<String, Plan>,
    active: Option<String>,
}

impl PlanBook {
    /// Apply one call; the answer is what the model reads back.
    fn apply(&mut self, call: Command) -> Result<String, String> {
        match call {
            Command::Create {
                plan_id: id,
                title,
                steps,
            } => {
                if self.plans.contains_key(&id) {
                    return Err(format!(
                        "planning: a plan `{id}` exists already; use update"
                    ));
                }
                let (texts, deps) = split_steps(steps).map_err(|e| e.0)?.into_iter().unzip();
                let mut plan = Plan::new(&id, title, texts);
                plan.depend(deps)
                    .map_err(|why| format!("planning: {why}"))?;
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
                let plan = self.plan_mut(Some(&id))?;
                if let Some(title) = title {
                    plan.title = title;
                }
                if let Some(steps) = steps {
                    let (texts, deps): (Vec<String>, _) =
                        split_steps(steps).map_err(|e| e.0)?.into_iter().unzip();
                    let mut next = plan.clone();
                    next.steps = texts
                        .into_iter()
                        .map(|text| {
                            let old = plan.steps.iter().find(|s| s.text == text);
                            let mut step = old.cloned().unwrap_or_else(|| PlanStep::new(text));
                            step.depends_on = None;
                            step
                        })
                        .collect();
                    next.depend(deps)
                        .map_err(|why| format!("planning: {why}"))?;
                    *plan = next;
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
                let answer = format!("Plan `{id}` is now active.");
                self.active = Some(id);
                Ok(answer)
            }
            Command::MarkStep {
                plan_id,
                step_index,
                step_status,
                step_notes,
            } => {
                let index = usize::try_from(step_index).map_err(|_| {
                    format!(
                        "planning: `step_index` must be a whole number of 0 or more, got \
                         {step_index}"
                    )
                })?;
                let plan = self.plan_mut(plan_id.as_deref())?;
                let n = plan.steps.len();
                let step = plan.steps.get_mut(index).ok_or_else(|| {
                    format!(
                        "planning: step_index {index} is out of range; the plan has {n} steps \
                         (0..{n})"
                    )
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
                    .ok_or_else(|| format!("planning: no plan `{id}`"))?;
                if self.active.as_deref() == Some(id.as_str()) {
                    self.active = None;
                }
                Ok(format!("Deleted plan `{id}`."))
            }
        }
    }

    /// The plan named, or the active one.
    fn plan_mut(&mut self, id: Option<&str>) -> Result<&mut Plan, String> {
        let id = match id {
            Some(id) => id.to_string(),
            None => self
                .active
                .clone()
                .ok_or("planning: no active plan; pass `plan_id`")?,
        };
        self.plans
            .get_mut(&id)
            .ok_or_else(|| format!("planning: no plan `{id}`"))
    }
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
        assert!(e.contains("must be an array"), "{e}");
        assert!(
            apply(&mut book, json!({"command": "fly"}))
                .unwrap_err()
                .contains("unknown command")
        );
        assert_eq!(book.plans["p"].steps.len(), 2);
    }

    #[test]
    fn steps_may_name_what_they_need_and_a_cycle_is_refused() {
        let mut book = PlanBook::default();
        let out = apply(
            &mut book,
            json!({"command": "create", "plan_id": "g", "title": "T", "steps": [
                "fetch",
                {"text": "chart", "depends_on": [0]},
                {"text": "table", "depends_on": ["s0"]},
                {"text": "report", "depends_on": ["step 1", 2]},
            ]}),
        )
        .unwrap();
        assert!(out.contains("3. [ ] report (after steps 1, 2)"), "{out}");
        assert_eq!(book.plans["g"].steps[0].depends_on, Some(vec![]));
        let e = apply(
            &mut book,
            json!({"command": "update", "plan_id": "g", "steps": [
                {"text": "a", "depends_on": [1]}, {"text": "b", "depends_on": [0]}
            ]}),
        )
        .unwrap_err();
        assert!(e.contains("cycle"), "{e}");
        assert_eq!(
            book.plans["g"].steps.len(),
            4,
            "a refused update changes nothing"
        );
        let e = apply(
            &mut book,
            json!({"command": "create", "plan_id": "h", "title": "T", "steps": [
                {"text": "a", "depends_on": ["first"]}
            ]}),
        )
        .unwrap_err();
        assert!(e.contains("step numbers"), "{e}");
    }
}
