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

/// An attempt's tool results by call id: whether the call succeeded, and its output.
type Results<'a> = BTreeMap<&'a str, (bool, &'a str)>;

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
    let mut results: BTreeMap<(usize, u32), Results> = BTreeMap::new();
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

#[cfg(test)]
mod tests {
    use super::*;
    use manus_actors::llm::{FunctionCall, ToolCall};

    fn answer(text: &str, calls: &[&str]) -> Message {
        let mut m = Message::assistant(text);
        m.tool_calls = calls
            .iter()
            .map(|id| ToolCall {
                id: id.to_string(),
                kind: "function".into(),
                function: FunctionCall {
                    name: "bash".into(),
                    arguments: "{}".into(),
                },
            })
            .collect();
        m
    }

    fn stored(events: Vec<FlowEvent>) -> Vec<StoredEvent> {
        events
            .into_iter()
            .enumerate()
            .map(|(seq, event)| StoredEvent {
                seq: seq as u64,
                at: 0,
                event,
            })
            .collect()
    }

    fn started(step: usize, attempt: u32) -> FlowEvent {
        FlowEvent::StepStarted {
            step,
            agent: "manus".into(),
            attempt,
            queued_ms: 0,
        }
    }

    fn answered(step: usize, round: u32, message: Message) -> FlowEvent {
        FlowEvent::Answered {
            step,
            agent: "manus".into(),
            round,
            message,
        }
    }

    fn finished(step: usize, call_id: &str, ok: bool, output: &str) -> FlowEvent {
        FlowEvent::ToolFinished {
            step,
            agent: "manus".into(),
            tool: "bash".into(),
            ok,
            output: output.into(),
            call_id: call_id.into(),
        }
    }

    /// Completed steps before the fork's, each from its last attempt, in round order, with
    /// their calls' results; code mode's `Cell` answers count, the first answer of a round
    /// stands; a step that did not complete, or is the fork's, is not replayed.
    #[test]
    fn the_completed_steps_before_the_fork_are_read_from_their_last_attempt() {
        let mut plan = Plan::new("p", "T", (0..4).map(|i| format!("s{i}")).collect());
        for (s, attempts) in plan.steps.iter_mut().zip([1, 2, 1, 1]) {
            s.status = StepStatus::Completed;
            s.attempts = attempts;
        }
        plan.steps[0].brief = Some("short".into());
        plan.steps[2].status = StepStatus::Failed;
        let events = stored(vec![
            started(0, 1),
            answered(0, 1, answer("a", &["c1"])),
            finished(0, "c1", true, "one"),
            answered(0, 2, answer("done", &["c2"])),
            finished(0, "c2", true, "ended"),
            started(1, 1),
            answered(1, 1, answer("first try", &["c3"])),
            finished(1, "c3", false, "boom"),
            started(1, 2),
            FlowEvent::Cell {
                step: 1,
                agent: "manus".into(),
                record: CellRecord::Answer {
                    round: 1,
                    message: answer("cell", &["c4"]),
                },
            },
            FlowEvent::Cell {
                step: 1,
                agent: "manus".into(),
                record: CellRecord::Answer {
                    round: 1,
                    message: answer("again after a resume", &["c5"]),
                },
            },
            finished(1, "c4", true, "cell out"),
            started(2, 1),
            answered(2, 1, answer("failed step", &[])),
            started(3, 1),
            answered(3, 1, answer("the fork's own step", &[])),
        ]);
        let steps = recorded_steps(&plan, &events, 3);
        assert_eq!(steps.keys().copied().collect::<Vec<_>>(), [0, 1]);
        let zero = &steps[&0];
        assert_eq!(zero.brief.as_deref(), Some("short"));
        let texts: Vec<&str> = zero.answers.iter().map(|a| a.message.text()).collect();
        assert_eq!(texts, ["a", "done"]);
        assert_eq!(zero.answers[0].results, [("c1".into(), true, "one".into())]);
        let one = &steps[&1].answers;
        assert_eq!(one.len(), 1, "{one:?}");
        assert_eq!(one[0].message.text(), "cell");
        assert_eq!(one[0].results, [("c4".into(), true, "cell out".into())]);
        assert!(recorded_steps(&plan, &events, 0).is_empty());
    }
}
