//! A finished run's record read as what a fork of it replays: for each step before the
//! fork's step that completed, its model answers (`FlowEvent::Answered`, or a code-mode
//! step's `Cell` answers) from its last attempt, in order, each with the results its tool
//! calls had (`ToolFinished`), and the brief of its notes. Knows nothing of actors or the
//! runtime: a plan and events in, recorded steps out.

use std::collections::BTreeMap;

use manus_actors::llm::Message;
use manus_actors::plan::{Plan, StepStatus};
use manus_actors::protocol::{CellRecord, FlowEvent, RecordedAnswer, StepReplay};

use crate::store::StoredEvent;

/// The recorded steps of `plan` before `at_step` that completed, by number. A step whose
/// answers were not recorded (a run made before answers were) is left out: it runs live.
pub fn recorded_steps(
    plan: &Plan,
    events: &[StoredEvent],
    at_step: usize,
) -> BTreeMap<usize, StepReplay> {
    // Each step's attempt as the events go; each attempt's answers by round (the first
    // one of a round stands), and its calls' results by call id.
    let mut attempt: BTreeMap<usize, u32> = BTreeMap::new();
    let mut answers: BTreeMap<(usize, u32), BTreeMap<u32, &Message>> = BTreeMap::new();
    let mut results: BTreeMap<(usize, u32), BTreeMap<&str, (bool, &str)>> = BTreeMap::new();
    for e in events {
        let (step, round, message) = match &e.event {
            FlowEvent::StepStarted {
                step, attempt: a, ..
            } => {
                attempt.insert(*step, *a);
                continue;
            }
            FlowEvent::ToolFinished {
                step,
                ok,
                output,
                call_id,
                ..
            } => {
                let a = attempt.get(step).copied().unwrap_or(0);
                let by_id = results.entry((*step, a)).or_default();
                by_id.insert(call_id.as_str(), (*ok, output.as_str()));
                continue;
            }
            FlowEvent::Answered {
                step,
                round,
                message,
                ..
            } => (step, round, message),
            FlowEvent::Cell {
                step,
                record: CellRecord::Answer { round, message },
                ..
            } => (step, round, message),
            _ => continue,
        };
        let a = attempt.get(step).copied().unwrap_or(0);
        answers
            .entry((*step, a))
            .or_default()
            .entry(*round)
            .or_insert(message);
    }
    let mut out = BTreeMap::new();
    for (i, s) in plan.steps.iter().enumerate().take(at_step) {
        if s.status != StepStatus::Completed || !s.is_live() {
            continue;
        }
        let Some(kept) = answers.get(&(i, s.attempts)) else {
            continue;
        };
        let none = BTreeMap::new();
        let had = results.get(&(i, s.attempts)).unwrap_or(&none);
        let answers = kept
            .values()
            .map(|m| RecordedAnswer {
                message: (*m).clone(),
                results: m
                    .tool_calls
                    .iter()
                    .filter_map(|c| {
                        let (ok, output) = had.get(c.id.as_str())?;
                        Some((c.id.clone(), *ok, output.to_string()))
                    })
                    .collect(),
            })
            .collect();
        out.insert(
            i,
            StepReplay {
                answers,
                brief: s.brief.clone(),
            },
        );
    }
    out
}
