//! A plan as data: steps, their `[AGENT]` tags, statuses, notes and dependencies, its
//! revisions, and its text view. The planner keeps its flow's plan with this; the `planning`
//! tool keeps its book of them. Which steps may run when is `graph`'s.
//!
//! A step's number (its index) is its identity: it never changes. A revision appends the
//! new steps and marks the ones they replace, so every event, memory and note that names a
//! step by number keeps naming the same step.

mod graph;

pub use graph::Revised;

/// The most of a step's notes the plan view shows: the view goes into every later step's
/// prompt. Longer notes are shown as the model summarised them (`PlanStep::brief`), or, if
/// that failed, cut to their head and tail. The whole notes stay in the plan and the store.
pub const NOTE_CHARS: usize = 2_000;

/// The numbers of the steps a step needs; `None`: it names none.
pub type Needs = Option<Vec<usize>>;

use serde::{Deserialize, Serialize};

use crate::llm::Usage;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    NotStarted,
    InProgress,
    Completed,
    Blocked,
    Failed,
    /// Stopped before a tool call that needs a person's approval; it goes on once answered.
    AwaitingApproval,
}

impl StepStatus {
    pub const ALL: [StepStatus; 6] = [
        StepStatus::NotStarted,
        StepStatus::InProgress,
        StepStatus::Completed,
        StepStatus::Blocked,
        StepStatus::Failed,
        StepStatus::AwaitingApproval,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::NotStarted => "not_started",
            StepStatus::InProgress => "in_progress",
            StepStatus::Completed => "completed",
            StepStatus::Blocked => "blocked",
            StepStatus::Failed => "failed",
            StepStatus::AwaitingApproval => "awaiting_approval",
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
            StepStatus::AwaitingApproval => "[?]",
        }
    }

    /// Whether an agent has the step now, or it waits for a person to let it go on.
    pub fn is_active(self) -> bool {
        matches!(self, StepStatus::InProgress | StepStatus::AwaitingApproval)
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
    /// The steps this one needs completed before it may start, by number. `None`: it names
    /// none, and a plan none of whose live steps names any runs one step at a time, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depends_on: Option<Vec<usize>>,
    /// The revision that replaced this step before it completed. A replaced step is history:
    /// it never runs again and does not count toward how the flow ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaced_in: Option<u32>,
    /// The notes summarised by the model for the plan view, when they are longer than
    /// `NOTE_CHARS`; `notes` stays whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub brief: Option<String>,
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
            depends_on: None,
            replaced_in: None,
            brief: None,
        }
    }

    /// Whether the step is part of the plan as it stands (not replaced by a revision).
    pub fn is_live(&self) -> bool {
        self.replaced_in.is_none()
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
    /// How many times the plan was revised (0: as first made).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub revision: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Plan {
    pub fn new(id: impl Into<String>, title: impl Into<String>, steps: Vec<String>) -> Self {
        Plan {
            id: id.into(),
            title: title.into(),
            steps: steps.into_iter().map(PlanStep::new).collect(),
            revision: 0,
        }
    }

    /// How many live steps have `status`.
    pub fn count(&self, status: StepStatus) -> usize {
        self.live().filter(|(_, s)| s.status == status).count()
    }

    /// The live steps with their numbers.
    pub fn live(&self) -> impl Iterator<Item = (usize, &PlanStep)> {
        self.steps.iter().enumerate().filter(|(_, s)| s.is_live())
    }

    /// The plan as the models read it: title, progress, and each step with its mark.
    pub fn view(&self) -> String {
        use std::fmt::Write;
        let total = self.live().count();
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
        let _ = write!(out, "Plan: {} (id {}", self.title, self.id);
        if self.revision > 0 {
            let _ = write!(out, ", revision {}", self.revision);
        }
        let _ = write!(out, ")\nProgress: {done}/{total} steps completed ({pct}%)");
        let others = [
            StepStatus::InProgress,
            StepStatus::AwaitingApproval,
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
            let _ = write!(out, "{i}. {} {}", s.status.mark(), s.text);
            match (&s.depends_on, s.replaced_in) {
                (_, Some(r)) => {
                    let _ = write!(out, " (replaced in revision {r})");
                }
                (Some(d), None) if d.is_empty() => out.push_str(" (needs no other step)"),
                (Some(d), None) => {
                    out.push_str(" (after step");
                    if d.len() > 1 {
                        out.push('s');
                    }
                    for (k, n) in d.iter().enumerate() {
                        let _ = write!(out, "{}{n}", if k == 0 { " " } else { ", " });
                    }
                    out.push(')');
                }
                (None, None) => {}
            }
            out.push('\n');
            if !s.notes.is_empty() {
                let notes = match &s.brief {
                    Some(brief) => crate::text::clip(brief, NOTE_CHARS),
                    None => crate::text::clip(&s.notes, NOTE_CHARS),
                };
                let _ = writeln!(out, "   Notes: {}", notes.replace('\n', "\n   "));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
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
    fn long_notes_are_cut_in_the_view_and_kept_whole_in_the_plan() {
        let mut p = Plan::new("p", "T", vec!["a".into(), "b".into()]);
        p.steps[0].notes = format!("head {} tail", "x".repeat(10 * NOTE_CHARS));
        let v = p.view();
        assert!(
            v.contains("Notes: head") && v.contains("tail") && v.contains("characters cut"),
            "{v}"
        );
        assert!(v.len() < 2 * NOTE_CHARS + 300, "{}", v.len());
        assert!(p.steps[0].notes.len() > 10 * NOTE_CHARS);
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
}
