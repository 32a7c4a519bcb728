//! The nudges: what the next round's prompt opens with when the model goes in circles,
//! answers in plain text or is cut off at the length limit, and why a step ends when a
//! nudge did not help (blocked when it still repeats itself, failed when it answers in text
//! again). Knows nothing of tools or of how the model is called; the step loop asks it
//! about every answer.

use super::memory::Memory;
use crate::llm::Message;

/// Same output this many times in a row means the agent is going in circles.
const REPEATS_FOR_STUCK: usize = 3;

const STUCK_NUDGE: &str = "You have produced the same response several times without progress. Stop \
repeating it: reconsider what went wrong, try a different approach or tool, or, if the step cannot be \
done, say why and call `terminate` with status failure.";

const NO_TOOL_NUDGE: &str = "You replied in plain text without calling a tool. Only `terminate` \
ends the step: call it with status success if the step is done, or with status failure if it \
cannot be done, saying why; otherwise continue with the next tool call.";

const LENGTH_NUDGE: &str = "Your answer was cut off: it reached the length limit. Answer more \
briefly, with one tool call; call `terminate` when the step is done or cannot be done.";

/// Why a step ended whose model answered in plain text again after being told to call
/// `terminate`: text alone never confirms a step, whatever it says.
fn never_confirmed(last_words: &str) -> String {
    format!(
        "never confirmed: the model answered in plain text without calling `terminate`, \
         even after being told to; its last words: {last_words}"
    )
}

/// One step's nudges: the one the next round's prompt opens with, and which were given.
#[derive(Default)]
pub(super) struct Nudges {
    next: Option<&'static str>,
    /// The model has been told it keeps repeating itself.
    for_stuck: bool,
    /// The last reply was plain text, and the model has been told to call `terminate`.
    for_text: bool,
}

impl Nudges {
    /// The round's prompt: the profile's `next_step_prompt`, after the nudge the last round
    /// earned, if it earned one.
    pub(super) fn prompt(&mut self, next_step_prompt: &str) -> String {
        match self.next.take() {
            Some(n) => format!("{n}\n\n{next_step_prompt}"),
            None => next_step_prompt.to_string(),
        }
    }

    /// The model's answer `msg`, before it joins `memory`: when it repeats the answers
    /// before it, the next round is told to change approach, or, if it was told already,
    /// why the step is blocked.
    pub(super) fn repeated(&mut self, memory: &Memory, msg: &Message) -> Option<String> {
        if !is_repeating(memory, msg) {
            return None;
        }
        if self.for_stuck {
            return Some(format!(
                "the agent kept repeating the same response ({REPEATS_FOR_STUCK} times), even after being told to change approach"
            ));
        }
        self.for_stuck = true;
        self.next = Some(STUCK_NUDGE);
        None
    }

    /// The model answered in plain text, `cut_off` at `limit` (`[llm] max_tokens`) or not.
    /// Only `terminate` with success completes a step: text once earns a nudge, text again
    /// right after it ends the step unconfirmed, and this says why (with the model's
    /// `last_words`). Text cut off at max_tokens is said to be so, to the model and in the
    /// step's reason.
    pub(super) fn plain_text(
        &mut self,
        cut_off: bool,
        limit: u32,
        last_words: impl FnOnce() -> String,
    ) -> Option<String> {
        if self.for_text {
            let last = last_words();
            return Some(match cut_off {
                true => format!(
                    "the model's answer was cut off at max_tokens ({limit}; raise [llm] \
                     max_tokens) and never called `terminate`; its last words: {last}"
                ),
                false => never_confirmed(&last),
            });
        }
        self.for_text = true;
        self.next = self.next.or(Some(match cut_off {
            true => LENGTH_NUDGE,
            false => NO_TOOL_NUDGE,
        }));
        None
    }

    /// The model called a tool: plain text next time earns a nudge again.
    pub(super) fn called_a_tool(&mut self) {
        self.for_text = false;
    }
}

/// Whether `msg` repeats the previous assistant messages in `memory` often enough to count
/// as stuck.
fn is_repeating(memory: &Memory, msg: &Message) -> bool {
    let same = |m: &Message| {
        m.text().trim() == msg.text().trim()
            && m.tool_calls.len() == msg.tool_calls.len()
            && m.tool_calls
                .iter()
                .zip(&msg.tool_calls)
                .all(|(a, b)| a.function == b.function)
    };
    let earlier = memory
        .assistant_history()
        .take(REPEATS_FOR_STUCK - 1)
        .filter(|m| same(m))
        .count();
    earlier == REPEATS_FOR_STUCK - 1
}
