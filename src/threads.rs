//! A conversation's earlier turns as the next turn reads them: each turn's task, how it
//! ended, its plan with every step's status and notes (long notes as their briefs, as the
//! plan view shows them to later steps) and its answer. When the whole would pass
//! `EARLIER_CHARS`, the oldest turns are cut down to their task, status and answer, and
//! past that left out with a line that says so: the newest turns stay whole, since a
//! follow-up is most often about the last one. Knows nothing of actors: stored runs in,
//! text out.

use manus_actors::protocol::FlowOutcome;

use crate::store::StoredRun;

/// About how much of a follow-up's prompts the earlier turns may take (some 3,000 tokens).
pub const EARLIER_CHARS: usize = 12_000;

/// How much of an answer a cut-down turn keeps.
const SHORT_ANSWER: usize = 600;

/// The earlier turns `turns` (oldest first) as one text for the next turn.
pub fn earlier(turns: &[(u32, StoredRun)]) -> String {
    let whole: Vec<String> = turns.iter().map(|(n, run)| whole(*n, run)).collect();
    let short: Vec<String> = turns.iter().map(|(n, run)| short(*n, run)).collect();
    let size = |whole_from: usize, from: usize| -> usize {
        short[from..whole_from]
            .iter()
            .map(String::len)
            .sum::<usize>()
            + whole[whole_from..].iter().map(String::len).sum::<usize>()
    };
    // The turns from `whole_from` on are whole, the ones before it short: as many whole
    // as fit, the newest always.
    let mut whole_from = 0;
    while whole_from + 1 < turns.len() && size(whole_from, 0) > EARLIER_CHARS {
        whole_from += 1;
    }
    // Then the oldest short ones go, while it is still too long.
    let mut from = 0;
    while from < whole_from && size(whole_from, from) > EARLIER_CHARS {
        from += 1;
    }
    let mut out = String::new();
    if from > 0 {
        out.push_str(&format!(
            "({from} earlier turn{} left out to save room: `manus-rt runs show` has them.)\n\n",
            if from == 1 { " is" } else { "s are" }
        ));
    }
    for text in short[from..whole_from].iter().chain(&whole[whole_from..]) {
        out.push_str(text);
        out.push('\n');
    }
    out.trim_end().to_string()
}

/// A turn's heading: its number, task and how it ended.
fn heading(n: u32, run: &StoredRun) -> String {
    let status = run.status.as_str();
    let ended = match &run.outcome {
        Some(o) if !o.reason.is_empty() => format!("{status}: {}", o.reason.trim_end_matches('.')),
        _ => status.to_string(),
    };
    format!("Turn {n}: {}\nIt ended {ended}.", run.task.trim())
}

fn answer(outcome: Option<&FlowOutcome>) -> &str {
    outcome.map_or("", |o| o.summary.trim())
}

/// A turn in full: heading, plan with notes, answer.
fn whole(n: u32, run: &StoredRun) -> String {
    let mut out = heading(n, run);
    if let Some(plan) = &run.plan {
        out.push('\n');
        out.push_str(&plan.view());
    }
    let answer = answer(run.outcome.as_ref());
    if !answer.is_empty() {
        out.push_str(&format!("\nAnswer given: {answer}"));
    }
    out.push('\n');
    out
}

/// A turn cut down: heading and the start of its answer.
fn short(n: u32, run: &StoredRun) -> String {
    let mut out = heading(n, run);
    let answer = answer(run.outcome.as_ref());
    if !answer.is_empty() {
        let mut end = SHORT_ANSWER.min(answer.len());
        while !answer.is_char_boundary(end) {
            end -= 1;
        }
        let cut = &answer[..end];
        let more = if cut.len() < answer.len() {
            " […]"
        } else {
            ""
        };
        out.push_str(&format!("\nAnswer given: {cut}{more}"));
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use manus_actors::plan::Plan;
    use manus_actors::protocol::FlowStatus;

    use crate::store::RunStatus;

    fn turn(n: u32, notes: &str) -> (u32, StoredRun) {
        let mut plan = Plan::new("p", "t", vec![format!("[MANUS] step of turn {n}")]);
        plan.steps[0].notes = notes.to_string();
        let outcome = FlowOutcome {
            flow_id: format!("r{n}"),
            status: FlowStatus::Completed,
            reason: "every step completed".into(),
            plan: plan.clone(),
            summary: format!("answer of turn {n}"),
            usage: Default::default(),
            usage_by_agent: Default::default(),
            elapsed_ms: 0,
        };
        let run = StoredRun {
            id: format!("r{n}"),
            task: format!("task of turn {n}"),
            mode: manus_actors::protocol::FlowMode::Plan,
            status: RunStatus::Completed,
            plan: Some(plan),
            usage: Default::default(),
            usage_by_agent: Default::default(),
            outcome: Some(outcome),
            owner: None,
            created_at: 0,
            updated_at: 0,
            elapsed_ms: 0,
        };
        (n, run)
    }

    /// Short turns are all shown whole: task, status, plan with notes, answer.
    #[test]
    fn short_threads_are_shown_whole() {
        let text = earlier(&[turn(0, "wrote a.txt"), turn(1, "wrote b.txt")]);
        for n in 0..2 {
            assert!(
                text.contains(&format!("Turn {n}: task of turn {n}")),
                "{text}"
            );
            assert!(
                text.contains(&format!("Answer given: answer of turn {n}")),
                "{text}"
            );
            assert!(text.contains(&format!("step of turn {n}")), "{text}");
        }
        assert!(
            text.contains("It ended completed: every step completed."),
            "{text}"
        );
        assert!(text.contains("wrote a.txt") && text.contains("wrote b.txt"));
        assert!(!text.contains("left out"));
    }

    /// Long threads keep the newest turn whole, cut older ones down to their task and
    /// answer, and leave the oldest out with a line that says so, within the budget.
    #[test]
    fn long_threads_are_cut_down_oldest_first() {
        let notes = "n".repeat(400);
        let turns: Vec<_> = (0..200).map(|n| turn(n, &notes)).collect();
        let text = earlier(&turns);
        assert!(text.len() <= EARLIER_CHARS + 200, "{} chars", text.len());
        // The newest turn, whole.
        assert!(text.contains("step of turn 199"), "{text}");
        assert!(text.ends_with("Answer given: answer of turn 199"), "{text}");
        // Older ones short: their answer, not their plan.
        assert!(text.contains("Answer given: answer of turn 150"), "{text}");
        assert!(!text.contains("step of turn 150"), "{text}");
        // The oldest, left out and counted.
        assert!(!text.contains("Turn 0:"), "{text}");
        let left = text.lines().next().unwrap();
        assert!(left.contains("earlier turns are left out"), "{left}");
        // One turn longer than the budget is still shown (the newest always is).
        let huge = earlier(&[turn(0, &"x".repeat(EARLIER_CHARS * 2))]);
        assert!(huge.contains("Turn 0: task of turn 0"));
    }
}
