//! A code-mode step's rounds as the run store kept them (`FlowEvent::Cell` records): what
//! a resumed flow hands each step that was running or paused, so the step goes on after its
//! recorded rounds, its cells run again with their tool calls answered from the record.
//! Knows nothing of actors: events in, rounds out.

use std::collections::BTreeMap;

use manus_actors::plan::{Plan, StepStatus};
use manus_actors::protocol::{CellRecord, FlowEvent, RecordedRound};

use crate::store::StoredEvent;

/// The recorded rounds of each step of `plan` that has not ended (running, paused, or to
/// be retried), from its latest attempt's records, in order.
pub fn recorded_rounds(plan: &Plan, events: &[StoredEvent]) -> BTreeMap<usize, Vec<RecordedRound>> {
    // Each step's attempt as the events go, and the records made in it.
    let mut attempt: BTreeMap<usize, u32> = BTreeMap::new();
    let mut records: BTreeMap<(usize, u32), Vec<&CellRecord>> = BTreeMap::new();
    for e in events {
        match &e.event {
            FlowEvent::StepStarted {
                step, attempt: a, ..
            } => {
                attempt.insert(*step, *a);
            }
            FlowEvent::Cell { step, record, .. } => {
                let a = attempt.get(step).copied().unwrap_or(0);
                records.entry((*step, a)).or_default().push(record);
            }
            _ => {}
        }
    }
    let mut out = BTreeMap::new();
    for (i, s) in plan.steps.iter().enumerate() {
        if !matches!(
            s.status,
            StepStatus::InProgress | StepStatus::AwaitingApproval
        ) {
            continue;
        }
        let Some(kept) = records.get(&(i, s.attempts)) else {
            continue;
        };
        let rounds = gather(kept);
        if !rounds.is_empty() {
            out.insert(i, rounds);
        }
    }
    out
}

/// One attempt's records as rounds: each answer with the calls its cells made and the
/// results that followed it. A round answered again (after an earlier resume) keeps its
/// first answer, which is the one the memory went on from.
fn gather(records: &[&CellRecord]) -> Vec<RecordedRound> {
    let mut rounds: Vec<RecordedRound> = vec![];
    for record in records {
        match record {
            CellRecord::Answer { round, message } => {
                if !rounds.iter().any(|r| r.round == *round) {
                    rounds.push(RecordedRound {
                        round: *round,
                        answer: message.clone(),
                        calls: vec![],
                        results: None,
                    });
                }
            }
            CellRecord::Call {
                cell,
                index,
                tool,
                ok,
                output,
            } => {
                let made = rounds
                    .iter_mut()
                    .rev()
                    .find(|r| r.answer.tool_calls.iter().any(|c| c.id == *cell));
                if let Some(round) = made {
                    round
                        .calls
                        .push((cell.clone(), *index, tool.clone(), *ok, output.clone()));
                }
            }
            CellRecord::Results { round, messages } => {
                if let Some(r) = rounds.iter_mut().find(|r| r.round == *round) {
                    r.results = Some(messages.clone());
                }
            }
            CellRecord::Replayed { .. } => {}
        }
    }
    // Only the rounds up to the first that did not end can be gone on from.
    if let Some(open) = rounds.iter().position(|r| r.results.is_none()) {
        rounds.truncate(open + 1);
    }
    rounds
}

#[cfg(test)]
mod tests {
    use manus_actors::llm::{FunctionCall, Message, ToolCall};

    use super::*;

    fn answer(id: &str) -> Message {
        let mut m = Message::assistant("");
        m.tool_calls.push(ToolCall {
            id: id.into(),
            kind: "function".into(),
            function: FunctionCall {
                name: "python".into(),
                arguments: "{}".into(),
            },
        });
        m
    }

    fn event(seq: u64, event: FlowEvent) -> StoredEvent {
        StoredEvent { seq, at: 0, event }
    }

    fn cell(step: usize, record: CellRecord) -> FlowEvent {
        FlowEvent::Cell {
            step,
            agent: "manus".into(),
            record,
        }
    }

    fn started(step: usize, attempt: u32) -> FlowEvent {
        FlowEvent::StepStarted {
            step,
            agent: "manus".into(),
            attempt,
            queued_ms: 0,
        }
    }

    #[test]
    fn a_running_steps_latest_attempt_gives_its_rounds_up_to_the_open_one() {
        let mut plan = Plan::new("p", "T", vec!["a".into(), "b".into()]);
        plan.steps[0].status = StepStatus::InProgress;
        plan.steps[0].attempts = 2;
        plan.steps[1].status = StepStatus::Completed;
        plan.steps[1].attempts = 1;
        let call = |cell: &str, index| CellRecord::Call {
            cell: cell.into(),
            index,
            tool: "bash".into(),
            ok: true,
            output: format!("{cell}/{index}"),
        };
        let events: Vec<StoredEvent> = [
            started(0, 1),
            cell(
                0,
                CellRecord::Answer {
                    round: 1,
                    message: answer("old"),
                },
            ),
            started(1, 1),
            cell(
                1,
                CellRecord::Answer {
                    round: 1,
                    message: answer("other"),
                },
            ),
            started(0, 2),
            cell(
                0,
                CellRecord::Answer {
                    round: 1,
                    message: answer("c1"),
                },
            ),
            cell(0, call("c1", 1)),
            cell(0, call("c1", 2)),
            cell(
                0,
                CellRecord::Results {
                    round: 1,
                    messages: vec![Message::user("r1")],
                },
            ),
            cell(
                0,
                CellRecord::Answer {
                    round: 2,
                    message: answer("c2"),
                },
            ),
            cell(0, call("c2", 1)),
            // A resumed attempt answers round 2 again: its first answer stands.
            started(0, 2),
            cell(
                0,
                CellRecord::Answer {
                    round: 2,
                    message: answer("c2-again"),
                },
            ),
        ]
        .into_iter()
        .enumerate()
        .map(|(i, e)| event(i as u64, e))
        .collect();
        let rounds = recorded_rounds(&plan, &events);
        assert_eq!(
            rounds.keys().copied().collect::<Vec<_>>(),
            [0],
            "finished steps are left out"
        );
        let r = &rounds[&0];
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].answer.tool_calls[0].id, "c1");
        assert_eq!(r[0].calls.len(), 2);
        assert_eq!(r[0].results.as_ref().unwrap()[0].text(), "r1");
        assert_eq!(r[1].answer.tool_calls[0].id, "c2");
        assert_eq!(r[1].calls[0].4, "c2/1");
        assert!(r[1].results.is_none());
    }
}
