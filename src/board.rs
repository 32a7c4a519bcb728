//! The terminal view of a flow: a live plan board redrawn in place on a TTY, or one plain
//! line per event when output is a pipe or a log. It only reads `FlowEvent`s.

use std::io::Write;
use std::time::Instant;

use manus_actors::llm::Usage;
use manus_actors::plan::{PlanStep, StepStatus};
use manus_actors::protocol::{CellRecord, FlowEvent, FlowOutcome, FlowStatus};

use crate::view::FlowView;

/// How much of the model's growing text the activity line shows: its last characters.
const LIVE_CHARS: usize = 100;

pub struct Board<W: Write> {
    out: W,
    live: bool,
    width: usize,
    started: Instant,
    view: FlowView,
    /// When each running step started.
    step_started: Vec<Option<Instant>>,
    activity: String,
    drawn_lines: usize,
}

impl<W: Write> Board<W> {
    /// `live`: redraw a board in place (a terminal); otherwise print lines.
    pub fn new(out: W, live: bool) -> Self {
        let width = std::env::var("COLUMNS")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(100);
        Board {
            out,
            live,
            width,
            started: Instant::now(),
            view: FlowView::default(),
            step_started: vec![],
            activity: String::new(),
            drawn_lines: 0,
        }
    }

    pub fn on_event(&mut self, e: &FlowEvent) {
        let line = self.apply(e);
        if self.live {
            if let FlowEvent::Question { .. }
            | FlowEvent::ApprovalRequested { .. }
            | FlowEvent::FlowFinished { .. } = e
            {
                self.redraw();
                if let Some(l) = line {
                    let _ = writeln!(self.out, "{l}");
                    self.drawn_lines = 0;
                }
            } else {
                self.redraw();
            }
        } else if let Some(l) = line {
            let _ = writeln!(self.out, "{l}");
        }
        let _ = self.out.flush();
    }

    /// The flow's state as the board has folded it.
    pub fn view(&self) -> &FlowView {
        &self.view
    }

    /// Whether `tick` redraws anything: a live board with a plan, whose times move.
    pub fn ticks(&self) -> bool {
        self.live && self.view.plan.is_some()
    }

    /// Refresh the elapsed times on a live board.
    pub fn tick(&mut self) {
        if self.ticks() {
            self.redraw();
            let _ = self.out.flush();
        }
    }

    /// Update the state from an event; the plain line for it, if any.
    fn apply(&mut self, e: &FlowEvent) -> Option<String> {
        self.view.apply(e);
        match e {
            FlowEvent::FlowStarted { flow_id, task } => Some(format!("[flow {flow_id}] {task}")),
            FlowEvent::PlanCreated { plan } => {
                self.step_started = vec![None; plan.steps.len()];
                let steps: Vec<String> = plan
                    .steps
                    .iter()
                    .enumerate()
                    .map(|(i, s)| format!("  {i}. {}", s.text))
                    .collect();
                Some(format!(
                    "[plan] {} ({} steps)\n{}",
                    plan.title,
                    plan.steps.len(),
                    steps.join("\n")
                ))
            }
            FlowEvent::Resumed {
                plan,
                rerun,
                goes_on,
                ..
            } => {
                let Some(plan) = plan else {
                    return Some(
                        "[resumed] the flow was interrupted while planning: planning again".into(),
                    );
                };
                self.step_started = vec![None; plan.steps.len()];
                let done = plan.count(StepStatus::Completed);
                let list = |steps: &[usize]| {
                    steps
                        .iter()
                        .map(|s| s.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let mut again = match rerun.as_slice() {
                    [] => String::new(),
                    steps => format!(
                        "; step(s) {} were running at the interruption and start over",
                        list(steps)
                    ),
                };
                if !goes_on.is_empty() {
                    again += &format!(
                        "; step(s) {} were running and go on after their recorded cells",
                        list(goes_on)
                    );
                }
                Some(format!(
                    "[resumed] {} ({done}/{} steps completed before the interruption{again})",
                    plan.title,
                    plan.steps.len()
                ))
            }
            FlowEvent::StepStarted {
                step,
                agent,
                attempt,
                ..
            } => {
                if let Some(s) = self.step_started.get_mut(*step) {
                    *s = Some(Instant::now());
                }
                self.activity = format!("[{step}] {agent} is thinking");
                let again = if *attempt > 1 {
                    format!(" (attempt {attempt})")
                } else {
                    String::new()
                };
                Some(format!("[step {step}] {agent} started{again}"))
            }
            FlowEvent::TextDelta { step, agent, text } => {
                // The text grows on the activity line; the whole of it comes as `Thought`.
                let who = format!("[{step}] {agent}: ");
                if !self.activity.starts_with(&who) {
                    self.activity.clone_from(&who);
                }
                self.activity.push_str(&one_line(text));
                let keep = self.activity.char_indices().rev().nth(LIVE_CHARS);
                if let Some((cut, _)) = keep {
                    self.activity = format!("{who}…{}", &self.activity[cut..]);
                }
                None
            }
            FlowEvent::Thought { step, agent, text } => {
                self.activity = format!("[{step}] {agent}: {}", one_line(text));
                Some(format!("[step {step}] {agent}: {}", one_line(text)))
            }
            FlowEvent::Cell {
                step,
                agent,
                record: CellRecord::Replayed { cells, differed },
            } => {
                let how = match differed.is_empty() {
                    true => "each as before".to_string(),
                    false => format!("{} not as before", differed.join(", ")),
                };
                Some(format!(
                    "[step {step}] {agent}: interpreter made again from {cells} recorded cell(s), {how}"
                ))
            }
            FlowEvent::Forked {
                from,
                at_step,
                workspace,
                plan,
            } => {
                self.step_started = vec![None; plan.steps.len()];
                Some(format!(
                    "[fork] of run {from}: steps before {at_step} replay its recorded answers, \
                     step {at_step} on runs live; workspace {workspace}"
                ))
            }
            FlowEvent::StepReplayed {
                step,
                agent,
                answers,
                differed,
            } => {
                let mut line = format!(
                    "[step {step}] {agent}: {answers} recorded answer(s) replayed, no model call"
                );
                match differed.as_slice() {
                    [] => line.push_str("; every tool result as recorded"),
                    diffs => {
                        line.push_str(&format!("; {} tool result(s) differ:", diffs.len()));
                        for d in diffs {
                            line.push_str(&format!("\n  {}", diff_line(d)));
                        }
                    }
                }
                Some(line)
            }
            FlowEvent::LlmCalled { .. }
            | FlowEvent::StepMemory { .. }
            | FlowEvent::Answered { .. }
            | FlowEvent::Cell { .. } => None,
            FlowEvent::ToolCalled {
                step,
                agent,
                tool,
                arguments,
            } => {
                self.activity = format!("[{step}] {agent} → {tool} {}", one_line(arguments));
                Some(format!(
                    "[step {step}] {agent} → {tool} {}",
                    one_line(arguments)
                ))
            }
            FlowEvent::ToolFinished {
                step,
                agent,
                tool,
                ok,
                output,
                ..
            } => {
                let mark = if *ok { "ok" } else { "error" };
                Some(format!(
                    "[step {step}] {agent} ← {tool} {mark}: {}",
                    one_line(output)
                ))
            }
            FlowEvent::Question {
                id,
                agent,
                step,
                inquire,
                form,
                ..
            } => {
                let at = step.map(|s| format!(" (step {s})")).unwrap_or_default();
                let form = form
                    .as_ref()
                    .map(|f| format!("\n  the answer must meet this schema: {f}\n  answer with that JSON, or `decline` or `cancel`"))
                    .unwrap_or_default();
                Some(format!(
                    "\n[question {id}] {agent}{at} asks: {inquire}{form}\nyour answer> "
                ))
            }
            FlowEvent::ToolProgress {
                step,
                agent,
                progress,
                total,
                message,
                ..
            } => {
                let at = step.map(|s| format!("[step {s}] ")).unwrap_or_default();
                let of = total.map(|t| format!(" of {t}")).unwrap_or_default();
                let what = message
                    .as_deref()
                    .map(|m| format!(": {}", one_line(m)))
                    .unwrap_or_default();
                Some(format!("{at}{agent} … progress {progress}{of}{what}"))
            }
            FlowEvent::PlanRevised { plan, reason, .. } => {
                self.step_started.resize(plan.steps.len(), None);
                let added: Vec<String> = plan
                    .steps
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| {
                        s.is_live() && s.status == StepStatus::NotStarted && s.attempts == 0
                    })
                    .map(|(i, s)| format!("  {i}. {}{}", s.text, needs(s)))
                    .collect();
                let replaced: Vec<String> = plan
                    .steps
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.replaced_in == Some(plan.revision))
                    .map(|(i, _)| i.to_string())
                    .collect();
                Some(format!(
                    "[plan] revision {} after: {}\n  replaces step(s) {} with:\n{}",
                    plan.revision,
                    one_line(reason),
                    replaced.join(", "),
                    added.join("\n")
                ))
            }
            FlowEvent::Compacted {
                step,
                agent,
                tokens_before,
                tokens_after,
                notes: true,
                ..
            } => Some(format!(
                "[step {step}] {agent} summarised its long notes for the later steps: {} → {} tokens",
                group(*tokens_before as u64),
                group(*tokens_after as u64)
            )),
            FlowEvent::Compacted {
                step,
                agent,
                tokens_before,
                tokens_after,
                pruned,
                folded,
                ..
            } => Some(format!(
                "[step {step}] {agent} compacted its memory: {} → {} tokens ({pruned} output(s) pruned, {folded} message(s) summarised)",
                group(*tokens_before as u64),
                group(*tokens_after as u64)
            )),
            FlowEvent::StepBlocked { step, notes, .. } => {
                Some(format!("[step {step}] blocked: {notes}"))
            }
            FlowEvent::ApprovalRequested {
                id,
                step,
                agent,
                tool,
                arguments,
                why,
                ..
            } => Some(match step {
                Some(step) => format!(
                    "\n[approval {id}] step {step}: {agent} wants to call {tool} {}\n  (needs approval: {why})",
                    one_line(arguments)
                ),
                None => format!(
                    "\n[approval {id}] the plan needs sign-off before any step runs ({why})"
                ),
            }),
            FlowEvent::ApprovalDecided { id, step, decision } => {
                let what = match (decision.approve, &decision.arguments) {
                    (true, None) => "approved".to_string(),
                    (true, Some(a)) => format!("approved with arguments {}", one_line(a)),
                    (false, _) => format!(
                        "rejected: {}",
                        decision.reason.as_deref().unwrap_or("no reason given")
                    ),
                };
                let of = match step {
                    Some(s) => format!("step {s}"),
                    None => "the plan".into(),
                };
                Some(format!("[approval {id}] {of}: {what} by {}", decision.by))
            }
            FlowEvent::StepFinished {
                step,
                agent,
                status,
                summary,
                ..
            } => {
                self.activity.clear();
                Some(format!(
                    "[step {step}] {agent} {}: {}",
                    status.as_str(),
                    one_line(summary)
                ))
            }
            FlowEvent::FlowFinished { outcome } => {
                self.activity.clear();
                Some(final_report(outcome))
            }
        }
    }

    fn redraw(&mut self) {
        let mut lines = vec![format!(
            "manus-rt · flow {} · {} · {} tokens in {} model calls{}",
            self.view.flow_id,
            clock(self.started.elapsed().as_millis() as u64),
            group(self.view.usage.total()),
            self.view.usage.calls,
            cost(&self.view.usage)
        )];
        if let Some(plan) = &self.view.plan {
            let revised = match plan.revision {
                0 => String::new(),
                n => format!(" (revision {n})"),
            };
            let running = plan.count(StepStatus::InProgress);
            let at_once = if running > 1 {
                format!(" · {running} steps running")
            } else {
                String::new()
            };
            lines.push(format!("Plan: {}{revised}{at_once}", plan.title));
            for (i, depth) in plan.outline() {
                let s = &plan.steps[i];
                let elapsed = match (s.status, self.step_started.get(i)) {
                    (StepStatus::InProgress, Some(Some(t))) => t.elapsed().as_millis() as u64,
                    _ => s.elapsed_ms,
                };
                let time = if elapsed > 0 {
                    clock(elapsed)
                } else {
                    String::new()
                };
                let tokens = if s.usage.total() > 0 {
                    format!("{} tok{}", group(s.usage.total()), cost(&s.usage))
                } else {
                    String::new()
                };
                let agent = s.agent.clone().unwrap_or_default();
                // Fixed columns first, so a narrow terminal cuts the step text, not the figures.
                let indent = "  ".repeat(depth);
                lines.push(format!(
                    "  {} {i:>2}. {agent:<14} {time:>6} {tokens:<12} {indent}{}{}",
                    s.status.mark(),
                    s.text,
                    needs(s)
                ));
            }
            let replaced: Vec<String> = plan
                .steps
                .iter()
                .enumerate()
                .filter(|(_, s)| !s.is_live())
                .map(|(i, _)| i.to_string())
                .collect();
            if !replaced.is_empty() {
                lines.push(format!(
                    "  replaced by revisions: step(s) {}",
                    replaced.join(", ")
                ));
            }
        } else {
            lines.push("Planning…".into());
        }
        if !self.activity.is_empty() {
            lines.push(format!("  ↳ {}", self.activity));
        }
        let mut frame = String::new();
        if self.drawn_lines > 0 {
            frame.push_str(&format!("\x1b[{}A\x1b[J", self.drawn_lines));
        }
        for l in &lines {
            frame.push_str(&truncate(l, self.width));
            frame.push('\n');
        }
        let _ = self.out.write_all(frame.as_bytes());
        self.drawn_lines = lines.len();
    }
}

/// The closing report of a flow, for people.
pub fn final_report(o: &FlowOutcome) -> String {
    let verdict = match o.status {
        FlowStatus::Completed => "completed",
        FlowStatus::Failed => "FAILED",
        FlowStatus::Cancelled => "cancelled",
        FlowStatus::TimedOut => "TIMED OUT",
        FlowStatus::BudgetExceeded => "STOPPED (over budget)",
    };
    let mut s = format!(
        "\nFlow {} {verdict} in {} ({}): {} tokens ({} prompt, {} completion) in {} model calls{}\n",
        o.flow_id,
        clock(o.elapsed_ms),
        o.reason,
        group(o.usage.total()),
        group(o.usage.prompt_tokens),
        group(o.usage.completion_tokens),
        o.usage.calls,
        cost(&o.usage)
    );
    if !o.usage_by_agent.is_empty() {
        let parts: Vec<String> = o
            .usage_by_agent
            .iter()
            .map(|(who, u)| format!("{who} {}{}", group(u.total()), cost(u)))
            .collect();
        s.push_str(&format!("  tokens by agent: {}\n", parts.join(" · ")));
    }
    for (i, depth) in o.plan.outline() {
        let st = &o.plan.steps[i];
        let indent = "  ".repeat(depth);
        s.push_str(&format!(
            "  {} {indent}{i}. {}{}\n",
            st.status.mark(),
            st.text,
            needs(st)
        ));
    }
    for (i, st) in o
        .plan
        .steps
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.is_live())
    {
        s.push_str(&format!(
            "  {} {i}. {} (replaced in revision {})\n",
            st.status.mark(),
            st.text,
            st.replaced_in.unwrap_or_default()
        ));
    }
    if !o.summary.is_empty() {
        s.push_str(&format!("\n{}\n", o.summary));
    }
    s
}

/// ` (after 1, 2)` for a step that needs more than one other step: the outline shows it
/// under one of them only.
fn needs(s: &PlanStep) -> String {
    match s.depends_on.as_deref() {
        Some(d) if d.len() > 1 => format!(
            " (after {})",
            d.iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        _ => String::new(),
    }
}

/// `, cost 0.0123` when a price table gave the usage a cost.
fn cost(u: &Usage) -> String {
    if u.cost > 0.0 {
        format!(", cost {:.4}", u.cost)
    } else {
        String::new()
    }
}

fn one_line(s: &str) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    truncate(&flat, 160)
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        format!(
            "{}…",
            s.chars().take(max.saturating_sub(1)).collect::<String>()
        )
    }
}

/// `m:ss` for durations.
fn clock(ms: u64) -> String {
    let secs = ms / 1000;
    if secs < 60 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        format!("{}:{:02}", secs / 60, secs % 60)
    }
}

/// Thousands separators.
fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// One tool result that differed from the record, on a line.
pub fn diff_line(d: &manus_actors::protocol::ToolDiff) -> String {
    format!(
        "round {} {} ({}): recorded {:?}, now {:?}",
        d.round,
        d.tool,
        d.call_id,
        one_line(&d.recorded),
        one_line(&d.now)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    use manus_actors::plan::Plan;

    fn graph() -> Plan {
        let mut plan = Plan::new(
            "p",
            "Fan out",
            ["set up", "left", "right", "join"]
                .map(String::from)
                .to_vec(),
        );
        plan.depend(vec![
            Some(vec![]),
            Some(vec![0]),
            Some(vec![0]),
            Some(vec![1, 2]),
        ])
        .unwrap();
        plan
    }

    fn started(step: usize) -> FlowEvent {
        FlowEvent::StepStarted {
            step,
            agent: "manus".into(),
            attempt: 1,
            queued_ms: 0,
        }
    }

    /// The last frame a live board drew.
    fn last_frame(out: &[u8]) -> String {
        let text = String::from_utf8_lossy(out);
        text.rsplit("\x1b[J").next().unwrap_or_default().to_string()
    }

    #[test]
    fn a_graph_is_drawn_indented_with_several_steps_running_and_its_revisions() {
        let mut board = Board::new(Vec::new(), true);
        board.width = 200;
        let mut plan = graph();
        board.on_event(&FlowEvent::PlanCreated { plan: plan.clone() });
        plan.steps[0].status = StepStatus::Completed;
        board.on_event(&FlowEvent::StepStarted {
            step: 0,
            agent: "manus".into(),
            attempt: 1,
            queued_ms: 0,
        });
        board.on_event(&FlowEvent::StepFinished {
            step: 0,
            agent: "manus".into(),
            status: StepStatus::Completed,
            summary: "ready".into(),
            usage: Usage::default(),
            elapsed_ms: 5,
        });
        board.on_event(&started(1));
        board.on_event(&started(2));
        let frame = last_frame(&board.out);
        assert!(frame.contains("Plan: Fan out · 2 steps running"), "{frame}");
        let line = |needle: &str| {
            frame
                .lines()
                .find(|l| l.ends_with(needle))
                .unwrap_or_else(|| panic!("no line ending `{needle}` in:\n{frame}"))
                .to_string()
        };
        assert!(line(" set up").contains("[✓]"), "{frame}");
        assert!(line("   left").contains("[→]"), "{frame}");
        assert!(line("   right").contains("[→]"), "{frame}");
        assert!(line("     join (after 1, 2)").contains("[ ]"), "{frame}");

        // Step 1 fails; the plan is revised: the board says so and shows the new step.
        let previous = board.view.plan.clone().unwrap();
        let mut revised = previous.clone();
        revised.steps[1].status = StepStatus::Failed;
        let replace = revised.replaceable();
        revised
            .revise(vec![("left again".into(), Some(vec![0]))], &replace)
            .unwrap();
        let event = FlowEvent::PlanRevised {
            previous,
            plan: revised,
            reason: "step 1 ended failed: gone".into(),
        };
        board.on_event(&event);
        // Without a terminal, the revision is a line of its own.
        let mut lines = Board::new(Vec::new(), false);
        lines.on_event(&event);
        let text = String::from_utf8_lossy(&lines.out).to_string();
        assert!(
            text.contains(
                "[plan] revision 1 after: step 1 ended failed: gone\n  replaces step(s) 1, 3 with:\n  4. left again"
            ),
            "{text}"
        );
        let frame = last_frame(&board.out);
        assert!(frame.contains("Plan: Fan out (revision 1)"), "{frame}");
        assert!(
            frame.contains("replaced by revisions: step(s) 1, 3"),
            "{frame}"
        );
        assert!(frame.contains("   left again"), "{frame}");
    }

    #[test]
    fn numbers_and_times_read_well() {
        assert_eq!(group(1234567), "1,234,567");
        assert_eq!(group(12), "12");
        assert_eq!(clock(1500), "1.5s");
        assert_eq!(clock(125_000), "2:05");
    }
}
