//! A plan as data: steps, their `[AGENT]` tags, statuses and notes, and its text view; a
//! book of plans and the `planning` calls that change it, read from a call's arguments.
//! The planner reads its plan with this, and the `planning` tool keeps its book here.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::llm::Usage;
use crate::text::json_kind;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    NotStarted,
    InProgress,
    Completed,
    Blocked,
    Failed,
}

impl StepStatus {
    pub const ALL: [StepStatus; 5] = [
        StepStatus::NotStarted,
        StepStatus::InProgress,
        StepStatus::Completed,
        StepStatus::Blocked,
        StepStatus::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::NotStarted => "not_started",
            StepStatus::InProgress => "in_progress",
            StepStatus::Completed => "completed",
            StepStatus::Blocked => "blocked",
            StepStatus::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<StepStatus> {
        StepStatus::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// The mark the plan view and the board show.
    pub fn mark(self) -> &'static str {
        match self {
            StepStatus::NotStarted => "[ ]",
            StepStatus::InProgress => "[→]",
            StepStatus::Completed => "[✓]",
            StepStatus::Blocked => "[!]",
            StepStatus::Failed => "[✗]",
        }
    }

    /// Whether the step has ended, well or not.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            StepStatus::Completed | StepStatus::Blocked | StepStatus::Failed
        )
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanStep {
    /// The step as the model wrote it, tag included.
    pub text: String,
    pub status: StepStatus,
    #[serde(default)]
    pub notes: String,
    /// The agent that ran (or runs) it.
    #[serde(default)]
    pub agent: Option<String>,
    #[serde(default)]
    pub attempts: u32,
    #[serde(default)]
    pub usage: Usage,
    #[serde(default)]
    pub elapsed_ms: u64,
}

impl PlanStep {
    pub fn new(text: impl Into<String>) -> Self {
        PlanStep {
            text: text.into(),
            status: StepStatus::NotStarted,
            notes: String::new(),
            agent: None,
            attempts: 0,
            usage: Usage::default(),
            elapsed_ms: 0,
        }
    }

    /// The `[AGENT]` tag, lower-cased, if the step carries one.
    pub fn tag(&self) -> Option<String> {
        split_tag(&self.text).0
    }

    /// The step text without its tag.
    pub fn body(&self) -> &str {
        split_tag(&self.text).1
    }
}

/// Split `"[DATA_ANALYSIS] chart it"` into `(Some("data_analysis"), "chart it")`. The tag is
/// the first bracketed word made of letters, digits, `_` or `-`; text around it is kept.
pub fn split_tag(text: &str) -> (Option<String>, &str) {
    let t = text.trim_start();
    let Some(rest) = t.strip_prefix('[') else {
        return (None, text.trim());
    };
    let Some(end) = rest.find(']') else {
        return (None, text.trim());
    };
    let name = &rest[..end];
    let valid = !name.is_empty()
        && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !valid {
        return (None, text.trim());
    }
    (Some(name.to_ascii_lowercase()), rest[end + 1..].trim())
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Plan {
    pub id: String,
    pub title: String,
    pub steps: Vec<PlanStep>,
}

impl Plan {
    pub fn new(id: impl Into<String>, title: impl Into<String>, steps: Vec<String>) -> Self {
        Plan {
            id: id.into(),
            title: title.into(),
            steps: steps.into_iter().map(PlanStep::new).collect(),
        }
    }

    pub fn count(&self, status: StepStatus) -> usize {
        self.steps.iter().filter(|s| s.status == status).count()
    }

    /// The plan as the models read it: title, progress, and each step with its mark.
    pub fn view(&self) -> String {
        use std::fmt::Write;
        let total = self.steps.len();
        let done = self.count(StepStatus::Completed);
        let pct = (done * 100).checked_div(total).unwrap_or(0);
        // One buffer, written in place: this runs for every step's prompt.
        let mut out = String::with_capacity(
            128 + self
                .steps
                .iter()
                .map(|s| s.text.len() + s.notes.len() + 16)
                .sum::<usize>(),
        );
        let _ = write!(
            out,
            "Plan: {} (id {})\nProgress: {done}/{total} steps completed ({pct}%)",
            self.title, self.id
        );
        let others = [
            StepStatus::InProgress,
            StepStatus::Blocked,
            StepStatus::Failed,
            StepStatus::NotStarted,
        ]
        .into_iter()
        .map(|s| (s, self.count(s)))
        .filter(|&(_, n)| n > 0);
        for (i, (s, n)) in others.enumerate() {
            let _ = write!(
                out,
                "{}{n} {}",
                if i == 0 { "; " } else { ", " },
                s.as_str()
            );
        }
        out.push_str("\n\nSteps:\n");
        for (i, s) in self.steps.iter().enumerate() {
            let _ = writeln!(out, "{i}. {} {}", s.status.mark(), s.text);
            if !s.notes.is_empty() {
                let _ = writeln!(out, "   Notes: {}", s.notes.replace('\n', "\n   "));
            }
        }
        out
    }
}

/// One `planning` call, its arguments read and checked.
#[derive(Debug, Clone, PartialEq)]
pub enum PlanningCall {
    Create {
        plan_id: String,
        title: String,
        /// Never empty.
        steps: Vec<String>,
    },
    Update {
        plan_id: String,
        title: Option<String>,
        steps: Option<Vec<String>>,
    },
    List,
    /// The plan named, or the active one.
    Get {
        plan_id: Option<String>,
    },
    SetActive {
        plan_id: String,
    },
    MarkStep {
        plan_id: Option<String>,
        step_index: usize,
        step_status: Option<StepStatus>,
        step_notes: Option<String>,
    },
    Delete {
        plan_id: String,
    },
}

/// A call's arguments, with errors that name the argument and what it must be.
struct CallArgs<'a>(&'a Value);

impl<'a> CallArgs<'a> {
    fn string(&self, key: &str) -> Result<String, String> {
        self.opt_string(key)?
            .ok_or_else(|| format!("planning: missing required argument `{key}`"))
    }

    /// Null counts as absent.
    fn opt_string(&self, key: &str) -> Result<Option<String>, String> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(format!(
                "planning: argument `{key}` must be a string, got {}",
                json_kind(other)
            )),
        }
    }

    /// The steps, each trimmed and non-empty.
    fn steps(&self) -> Result<Option<Vec<String>>, String> {
        match self.0.get("steps") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, v)| match v {
                    Value::String(s) if !s.trim().is_empty() => Ok(s.trim().to_string()),
                    other => Err(format!(
                        "planning: steps[{i}] must be a non-empty string, got {}",
                        json_kind(other)
                    )),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(other) => Err(format!(
                "planning: `steps` must be an array of strings, got {}",
                json_kind(other)
            )),
        }
    }
}

impl PlanningCall {
    /// Read a `planning` call from its arguments (a JSON object).
    pub fn from_args(args: &Value) -> Result<PlanningCall, String> {
        let args = CallArgs(args);
        Ok(match args.string("command")?.as_str() {
            "create" => PlanningCall::Create {
                plan_id: args.string("plan_id")?,
                title: args.string("title")?,
                steps: args
                    .steps()?
                    .filter(|s| !s.is_empty())
                    .ok_or("planning: create needs `steps`, a non-empty array of strings")?,
            },
            "update" => PlanningCall::Update {
                plan_id: args.string("plan_id")?,
                title: args.opt_string("title")?,
                steps: args.steps()?,
            },
            "list" => PlanningCall::List,
            "get" => PlanningCall::Get {
                plan_id: args.opt_string("plan_id")?,
            },
            "set_active" => PlanningCall::SetActive {
                plan_id: args.string("plan_id")?,
            },
            "mark_step" => PlanningCall::MarkStep {
                plan_id: args.opt_string("plan_id")?,
                step_index: match args.0.get("step_index") {
                    Some(Value::Number(n)) if n.as_u64().is_some() => {
                        n.as_u64().unwrap_or_default() as usize
                    }
                    Some(other) => {
                        return Err(format!(
                            "planning: `step_index` must be a whole number, got {}",
                            json_kind(other)
                        ));
                    }
                    None => return Err("planning: mark_step needs `step_index`".into()),
                },
                step_status: match args.opt_string("step_status")? {
                    Some(s) => Some(StepStatus::parse(&s).ok_or_else(|| {
                        format!(
                            "planning: unknown step_status `{s}`; use one of not_started, \
                             in_progress, completed, blocked, failed"
                        )
                    })?),
                    None => None,
                },
                step_notes: args.opt_string("step_notes")?,
            },
            "delete" => PlanningCall::Delete {
                plan_id: args.string("plan_id")?,
            },
            other => {
                return Err(format!(
                    "planning: unknown command `{other}`; use create, update, list, get, \
                     set_active, mark_step or delete"
                ));
            }
        })
    }
}

/// A book of plans that `planning` calls create, update and mark, one of them active.
#[derive(Debug, Default)]
pub struct PlanBook {
    plans: BTreeMap<String, Plan>,
    active: Option<String>,
}

impl PlanBook {
    /// Apply one call; the answer is what the model reads back.
    pub fn apply(&mut self, call: PlanningCall) -> Result<String, String> {
        match call {
            PlanningCall::Create {
                plan_id: id,
                title,
                steps,
            } => {
                if self.plans.contains_key(&id) {
                    return Err(format!(
                        "planning: a plan `{id}` exists already; use update"
                    ));
                }
                let plan = Plan::new(&id, title, steps);
                let view = plan.view();
                self.plans.insert(id.clone(), plan);
                self.active = Some(id.clone());
                Ok(format!("Created plan `{id}` and made it active.\n\n{view}"))
            }
            PlanningCall::Update {
                plan_id: id,
                title,
                steps,
            } => {
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
            PlanningCall::List => {
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
            PlanningCall::Get { plan_id } => Ok(self.plan_mut(plan_id.as_deref())?.view()),
            PlanningCall::SetActive { plan_id: id } => {
                self.plan_mut(Some(&id))?;
                let answer = format!("Plan `{id}` is now active.");
                self.active = Some(id);
                Ok(answer)
            }
            PlanningCall::MarkStep {
                plan_id,
                step_index: index,
                step_status,
                step_notes,
            } => {
                let plan = self.plan_mut(plan_id.as_deref())?;
                let n = plan.steps.len();
                let step = plan.steps.get_mut(index).ok_or_else(|| {
                    format!(
                        "planning: step_index {index} is out of range; the plan has {n} steps \
                         (0..{n})"
                    )
                })?;
                if let Some(status) = step_status {
                    step.status = status;
                }
                if let Some(notes) = step_notes {
                    step.notes = notes;
                }
                Ok(format!("Marked step {index}.\n\n{}", plan.view()))
            }
            PlanningCall::Delete { plan_id: id } => {
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

    /// Take a plan out of the book.
    pub fn take(&mut self, id: &str) -> Option<Plan> {
        self.plans.remove(id)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn tags_are_split_case_insensitively() {
        assert_eq!(
            split_tag("[DATA_ANALYSIS] chart it"),
            (Some("data_analysis".into()), "chart it")
        );
        assert_eq!(split_tag("  [Manus]find"), (Some("manus".into()), "find"));
        assert_eq!(split_tag("no tag here"), (None, "no tag here"));
        assert_eq!(split_tag("[1] numbered"), (None, "[1] numbered"));
        assert_eq!(split_tag("[a b] spaced"), (None, "[a b] spaced"));
    }

    #[test]
    fn view_shows_marks_progress_and_notes() {
        let mut p = Plan::new("p1", "T", vec!["[MANUS] a".into(), "b".into()]);
        p.steps[0].status = StepStatus::Completed;
        p.steps[0].notes = "done it".into();
        p.steps[1].status = StepStatus::Failed;
        let v = p.view();
        assert!(v.contains("1/2 steps completed (50%); 1 failed"), "{v}");
        assert!(v.contains("0. [✓] [MANUS] a\n   Notes: done it"), "{v}");
        assert!(v.contains("1. [✗] b"), "{v}");

        let mut p = Plan::new("p2", "U", vec!["a".into(), "b".into(), "c".into()]);
        p.steps[0].status = StepStatus::InProgress;
        p.steps[0].notes = "first line\nsecond line".into();
        let v = p.view();
        let expected = format!(
            "Plan: U (id p2)\nProgress: 0/3 steps completed (0%); 1 {}, 2 {}\n\nSteps:\n\
             0. {} a\n   Notes: first line\n   second line\n1. {} b\n2. {} c\n",
            StepStatus::InProgress.as_str(),
            StepStatus::NotStarted.as_str(),
            StepStatus::InProgress.mark(),
            StepStatus::NotStarted.mark(),
            StepStatus::NotStarted.mark(),
        );
        assert_eq!(v, expected);
    }

    fn apply(book: &mut PlanBook, args: Value) -> Result<String, String> {
        book.apply(PlanningCall::from_args(&args)?)
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
