//! What the planner says to the model, and how it reads a plan out of plain text.

use crate::plan::Plan;

/// The planner's system prompt, naming the agents it can hand steps to.
pub fn planner_system(agents: &[(String, String)]) -> String {
    let mut s = String::from(
        "You plan work for a team of agents. Break the task you are given into a short sequence of \
         concrete steps (usually two to six), each one a piece of work a single agent can finish and \
         check on its own. Order them so each step has what it needs from the ones before. Do not add \
         steps for reporting or summarising at the end: that happens anyway.\n\n\
         Steps are numbered from 0. When some steps need nothing from each other (say, three \
         sources to research before one comparison), give each step as an object \
         {\"text\": \"...\", \"depends_on\": [numbers of the steps it needs finished first]}: steps \
         whose needs are met run at the same time, each by its own agent. Use [] for a step that \
         needs no other. A step that reads files, results or notes of another step depends on it. \
         When every step needs the one before, plain strings are enough: they run in order.\n\n\
         Create the plan by calling the `planning` tool with command \"create\", a short title and the steps.\n\n",
    );
    if agents.len() > 1 {
        s.push_str("Start every step with the tag of the agent that should do it, in square brackets, chosen from:\n");
    } else {
        s.push_str("Start every step with the tag of the agent, in square brackets:\n");
    }
    for (name, description) in agents {
        s.push_str(&format!("- [{name}] {description}\n"));
    }
    s
}

pub fn planner_user(task: &str, earlier: Option<&str>) -> String {
    task_text(task, earlier)
}

/// The task as the planner's calls give it: alone, or, in a follow-up turn, after what the
/// conversation's earlier turns did.
fn task_text(task: &str, earlier: Option<&str>) -> String {
    match earlier {
        None => format!("Task: {task}"),
        Some(earlier) => format!(
            "{}\n\nTask (this turn; plan only what it asks, building on what was done): {task}",
            crate::agent::earlier_turns(earlier)
        ),
    }
}

/// The revision call's request: what was done, what went wrong, and how to answer.
pub fn revise_user(task: &str, earlier: Option<&str>, plan: &Plan, why: &str) -> String {
    let first = plan.steps.len();
    format!(
        "{}\n\nThe plan is being carried out, and it has run into trouble: {why}\n\n{}\n\
         Revise the plan. Completed steps stand as they are, with their notes, and running \
         steps (and steps waiting for a person's approval) go on. Every other step that is not completed (failed, blocked or not started) \
         is replaced by the steps you give now. Plan a different way to reach the goal: do not \
         simply repeat a step that failed for a reason that still holds.\n\n\
         Call the `planning` tool with command \"update\", plan_id \"{}\" and `steps`: only the \
         new steps. They are numbered from {first}, in the order you give them. A step's \
         `depends_on` may name completed or running steps by their numbers above, and new \
         steps by their new numbers.",
        task_text(task, earlier),
        plan.view(),
        plan.id,
    )
}

/// The review call's request, after a step completed: keep the plan, or revise what has
/// not started.
pub fn review_user(task: &str, earlier: Option<&str>, plan: &Plan, what: &str) -> String {
    let first = plan.steps.len();
    format!(
        "{}\n\nThe plan is being carried out. Just now {what}\n\n{}\n\
         Check the steps not yet started against what has been found so far. If they still \
         lead to the goal, answer with the one word KEEP and call no tool. If they do not \
         (a step is now pointless, missing, or should be done differently), call the \
         `planning` tool with command \"update\", plan_id \"{}\" and `steps`: every step \
         that should still be done, in place of all the steps not yet started. They are \
         numbered from {first}; `depends_on` may name completed or running steps by their \
         numbers above, and new steps by their new numbers.",
        task_text(task, earlier),
        plan.view(),
        plan.id,
    )
}

pub const SUMMARY_SYSTEM: &str = "You report on finished work. Given a task and the plan that was \
carried out, with each step's status and notes, write a short summary for the person who asked: what was \
achieved, where the results are, and plainly what failed or is missing. No preamble.";

/// The most notes one end-of-run pass keeps.
pub const DISTILLED: usize = 5;

pub const DISTILL_SYSTEM: &str = "You keep notes that later runs of a team of agents can search. \
Given a finished run (its task, plan with each step's notes, and the report on it), write the facts \
from it worth knowing in a later, unrelated run: stable facts about the user, their systems, files, \
preferences and decisions, each on its own line starting with \"- \", self-contained (a later reader \
has none of this context), at most five. Leave out what only this run needed, guesses and \
instructions. If nothing is worth keeping, answer NONE.";

/// The end-of-run pass's request: the run as it ended.
pub fn distill_user(task: &str, plan: &Plan, summary: &str) -> String {
    format!("Task: {task}\n\n{}\n\nReport: {summary}", plan.view())
}

/// The facts of an end-of-run answer: its `- ` (or `* `) lines, trimmed, never empty.
pub fn read_facts(answer: &str) -> Vec<String> {
    answer
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            l.strip_prefix("- ").or_else(|| l.strip_prefix("* "))
        })
        .map(|f| crate::text::clip(f.trim(), crate::tools::memory::MAX_NOTE_CHARS / 2))
        .filter(|f| !f.is_empty())
        .collect()
}

pub fn summary_user(task: &str, plan: &Plan) -> String {
    format!("Task: {task}\n\n{}", plan.view())
}

/// A short title from the task's first words.
pub fn title_from(task: &str) -> String {
    let words: Vec<&str> = task.split_whitespace().take(8).collect();
    let mut t = words.join(" ");
    if task.split_whitespace().count() > 8 {
        t.push('…');
    }
    t
}

/// Steps a model wrote as a numbered or bulleted list, for models without tool calls.
pub fn steps_from_text(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| {
            let l = line.trim();
            let rest = if let Some(r) = l.strip_prefix("- ").or_else(|| l.strip_prefix("* ")) {
                r
            } else {
                let digits = l.chars().take_while(|c| c.is_ascii_digit()).count();
                if digits == 0 {
                    return None;
                }
                l[digits..]
                    .strip_prefix('.')
                    .or_else(|| l[digits..].strip_prefix(')'))?
            };
            let rest = rest.trim();
            (!rest.is_empty()).then(|| rest.to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_become_steps() {
        let t = "Here is the plan:\n1. [MANUS] fetch\n2) [DATA_ANALYSIS] chart\n- tidy up\nThanks";
        assert_eq!(
            steps_from_text(t),
            vec!["[MANUS] fetch", "[DATA_ANALYSIS] chart", "tidy up"]
        );
        assert!(steps_from_text("no list here").is_empty());
    }

    #[test]
    fn system_prompt_lists_agents() {
        let s = planner_system(&[
            ("MANUS".into(), "general".into()),
            ("DATA_ANALYSIS".into(), "data".into()),
        ]);
        assert!(s.contains("- [MANUS] general\n- [DATA_ANALYSIS] data"));
    }

    /// An end-of-run answer's facts are its list items; prose and NONE give none.
    #[test]
    fn facts_are_the_listed_lines() {
        let answer = "Here is what to keep:\n- Port 6543.\n  * Prefers YAML. \n-\nNot a fact.";
        assert_eq!(read_facts(answer), ["Port 6543.", "Prefers YAML."]);
        assert!(read_facts("NONE").is_empty());
    }
}
