//! What the agent says to the model: a step's opening prompt, each round's closing one
//! (with the browser's state after a round that used it), and what the compaction model is
//! asked to do. The nudges are `nudges`'; the system message is the profile's (`spec`).

use base64::Engine;

use super::step::StepRun;
use crate::llm::Message;
use crate::protocol::StepRequest;

impl StepRun<'_> {
    /// The round's closing user message: the next-step prompt, and after a round that used
    /// the browser, the browser's state (with a screenshot for models that see images).
    pub(super) async fn closing_prompt(&self, prompt: String) -> Message {
        let spec = &self.state.spec;
        let Some(browser) = spec.browser.as_ref().filter(|_| self.browsed) else {
            return Message::user(prompt);
        };
        let screenshot =
            browser.settings.screenshots && spec.llm.settings().vision && !self.state.text_only;
        match browser.state(&self.req.flow_id, screenshot).await {
            Ok(state) => {
                let text = format!("{}\n\n{prompt}", browser_state_text(&state));
                match &state.screenshot {
                    Some(png) => Message::user_with_images(
                        text,
                        [format!(
                            "data:image/png;base64,{}",
                            base64::engine::general_purpose::STANDARD.encode(png)
                        )],
                    ),
                    None => Message::user(text),
                }
            }
            Err(e) => Message::user(format!(
                "(The browser state could not be read: {e})\n\n{prompt}"
            )),
        }
    }
}

/// The browser state as the model reads it.
fn browser_state_text(s: &crate::protocol::BrowserState) -> String {
    let mut out = format!(
        "Current browser state\nURL: {}\nTitle: {}\nTabs:",
        s.url, s.title
    );
    for (i, (title, url)) in s.tabs.iter().enumerate() {
        let current = if i == s.current_tab { " (current)" } else { "" };
        out += &format!("\n  tab_id {i}: {title} — {url}{current}");
    }
    out += &format!(
        "\nScroll: {} px above the view, {} px below it",
        s.pixels_above, s.pixels_below
    );
    if s.elements.is_empty() {
        out += "\nInteractive elements: none visible";
    } else {
        out += "\nInteractive elements (use the number in brackets as `index`):\n";
        out += &s.elements.join("\n");
        if s.elements_omitted > 0 {
            out += &format!(
                "\n... and {} more not listed (scroll or use scroll_to_text to reach them)",
                s.elements_omitted
            );
        }
    }
    if s.screenshot.is_some() {
        out += "\nA screenshot of the current view is attached.";
    }
    out
}

pub(super) const SUMMARY_SYSTEM: &str = "You compress an agent's working notes. You are given the middle \
rounds of its work on one step: its messages, the tool calls it made and their results. Write a \
summary it can work from instead: keep every file name and path, every number and measurement, \
every decision taken and why, what was tried and failed, and every open question, exactly as \
written; drop chatter and repeated output. Plain text, no preamble.";

pub(super) const NOTES_SYSTEM: &str = "You shorten the notes an agent left when it finished one step of a \
plan. Later steps, done by other agents, read them to build on the work. Rewrite them in at most \
250 words: keep every file name and path, every number and result, every decision and every open \
problem exactly as written; drop narration and repeated output. Plain text, no preamble.";

/// How a conversation's earlier turns are introduced, to the planner and to each step.
pub fn earlier_turns(earlier: &str) -> String {
    format!(
        "This task is the next turn of a conversation. Its earlier turns worked in this same \
         workspace, and their files are still there. What they did:\n\n{earlier}"
    )
}

/// The opening user message of a step: the task, the plan, what the steps it builds on
/// found, and the one step to do now.
pub(super) fn step_prompt(req: &StepRequest) -> String {
    let mut found = String::new();
    for (step, notes) in &req.builds_on {
        if found.is_empty() {
            found.push_str("This step builds on what these steps found:\n");
        }
        found.push_str(&format!("- step {step}: {}\n", notes.replace('\n', "\n  ")));
    }
    if !found.is_empty() {
        found.push('\n');
    }
    let earlier = req
        .earlier
        .as_deref()
        .map_or(String::new(), |e| format!("{}\n\n", earlier_turns(e)));
    format!(
        "{earlier}The overall task: {}\n\n{}\n{found}Your job now is step {} only: {}\n\n\
         Do this step and nothing beyond it; later steps belong to other agents or later turns. \
         When it is done, summarise what you did and call `terminate`.",
        req.task, req.plan_view, req.step_index, req.step
    )
}
