//! The nudges: what the next round's prompt opens with when the model goes in circles,
//! answers in plain text or is cut off at the length limit, what answers a call that ends
//! the step with success before anything was done, and why a step ends when a nudge did
//! not help (blocked when it still repeats itself, failed when it answers in text
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

const NOTHING_DONE_NUDGE: &str = "Not ended: nothing has been done in this step yet. If the step \
truly needs no action, say why in your message and call `terminate` with status success again; \
otherwise carry it out with the tools first.";

/// Why a step ended whose model answered in plain text again after being told to call
/// `terminate`: text alone never confirms a step, whatever it says.
fn never_confirmed(last_words: &str) -> String {
    format!(
        "never confirmed: the model answered in plain text without calling `terminate`, \
         even after being told to; its last words: {last_words}"
    )
}

/// One step's nudges: the one the next round's prompt opens with, and which were given.
pub(super) struct Nudges {
    /// The fingerprints of the last answers, oldest first, at most `REPEATS_FOR_STUCK - 1`:
    /// kept here, not read from the memory, which may have had to drop them (an opening
    /// past the token cap leaves room for the latest round only).
    recent: Vec<u64>,
    next: Option<&'static str>,
    /// The model has been told it keeps repeating itself.
    for_stuck: bool,
    /// The last reply was plain text, and the model has been told to call `terminate`.
    for_text: bool,
    /// The model has called a tool in this step.
    acted: bool,
    /// The model has been told that ending with success before acting is held once.
    for_nothing_done: bool,
}

impl Nudges {
    /// The nudges of a step whose memory is `memory` so far (a paused step's, going on).
    pub(super) fn after(memory: &Memory) -> Nudges {
        let mut recent: Vec<u64> = memory
            .assistant_history()
            .take(REPEATS_FOR_STUCK - 1)
            .map(fingerprint)
            .collect();
        recent.reverse();
        Nudges {
            recent,
            next: None,
            for_stuck: false,
            for_text: false,
            acted: memory.assistant_history().any(|m| !m.tool_calls.is_empty()),
            for_nothing_done: false,
        }
    }

    /// The round's prompt: the profile's `next_step_prompt`, after the nudge the last round
    /// earned, if it earned one.
    pub(super) fn prompt(&mut self, next_step_prompt: &str) -> String {
        match self.next.take() {
            Some(n) => format!("{n}\n\n{next_step_prompt}"),
            None => next_step_prompt.to_string(),
        }
    }

    /// The model's answer `msg`: when it repeats the `REPEATS_FOR_STUCK - 1` answers before
    /// it, the next round is told to change approach, or, if it was told already, why the
    /// step is blocked.
    pub(super) fn repeated(&mut self, msg: &Message) -> Option<String> {
        let print = fingerprint(msg);
        let stuck =
            self.recent.len() == REPEATS_FOR_STUCK - 1 && self.recent.iter().all(|p| *p == print);
        self.recent.push(print);
        if self.recent.len() >= REPEATS_FOR_STUCK {
            self.recent.remove(0);
        }
        if !stuck {
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

    /// The model's round is one call ending the step with success (`success_only`) before
    /// it called any tool: a small model writing its calls in text or held to a grammar
    /// (`worded`) reaches for that first. Once a step, the call is answered with the text
    /// this returns instead of ending the step; a model calling tools natively is taken at
    /// its word.
    pub(super) fn ended_before_acting(
        &mut self,
        success_only: bool,
        worded: bool,
    ) -> Option<&'static str> {
        if !success_only || !worded || self.acted || self.for_nothing_done {
            return None;
        }
        self.for_nothing_done = true;
        Some(NOTHING_DONE_NUDGE)
    }

    /// The model called a tool: plain text next time earns a nudge again.
    pub(super) fn called_a_tool(&mut self) {
        self.for_text = false;
        self.acted = true;
    }
}

/// What makes two answers the same: their text (trimmed) and their calls, names and
/// arguments in order.
fn fingerprint(m: &Message) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    m.text().trim().hash(&mut h);
    m.tool_calls.len().hash(&mut h);
    for call in &m.tool_calls {
        call.function.name.hash(&mut h);
        call.function.arguments.hash(&mut h);
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{FunctionCall, ToolCall};

    /// The same call answered again and again is caught even when the memory can keep only
    /// the latest round (an opening past the token cap): told once, then blocked.
    #[test]
    fn repeats_are_caught_when_the_memory_keeps_only_the_latest_round() {
        let mut memory = Memory::new("gpt-4", 1000, 100);
        memory.pin(Message::system("word ".repeat(1_000)));
        memory.pin(Message::user("step"));
        let mut nudges = Nudges::after(&memory);
        let call = ToolCall {
            id: "c".into(),
            kind: "function".into(),
            function: FunctionCall {
                name: "bash".into(),
                arguments: r#"{"command":"ls"}"#.into(),
            },
        };
        let mut said = vec![];
        for _ in 0..4 {
            let mut answer = Message::assistant("");
            answer.tool_calls = vec![call.clone()];
            said.push(nudges.repeated(&answer));
            memory.push(answer);
            memory.push(Message::tool(&call, "a.txt"));
            assert_eq!(memory.assistant_history().count(), 1);
        }
        assert_eq!(said[..3], [None, None, None]);
        assert_eq!(nudges.prompt("go on"), format!("{STUCK_NUDGE}\n\ngo on"));
        assert!(
            said[3].as_ref().unwrap().contains("kept repeating"),
            "{said:?}"
        );
    }

    /// Ending with success before any other call is held once, and only for worded calls;
    /// a step that has acted, here or before a pause, is taken at its word.
    #[test]
    fn success_before_acting_is_held_once_for_worded_calls() {
        let mut memory = Memory::new("gpt-4", 1000, 100_000);
        memory.pin(Message::system("sys"));
        memory.pin(Message::user("step"));
        let mut nudges = Nudges::after(&memory);
        assert_eq!(nudges.ended_before_acting(true, false), None);
        assert_eq!(nudges.ended_before_acting(false, true), None);
        assert_eq!(
            nudges.ended_before_acting(true, true),
            Some(NOTHING_DONE_NUDGE)
        );
        assert_eq!(nudges.ended_before_acting(true, true), None);

        let mut acted = Nudges::after(&memory);
        acted.called_a_tool();
        assert_eq!(acted.ended_before_acting(true, true), None);
        let mut call = Message::assistant("");
        call.tool_calls = vec![ToolCall {
            id: "c".into(),
            kind: "function".into(),
            function: FunctionCall {
                name: "bash".into(),
                arguments: "{}".into(),
            },
        }];
        memory.push(call);
        assert_eq!(Nudges::after(&memory).ended_before_acting(true, true), None);
    }

    /// A paused step going on remembers the answers its memory holds.
    #[test]
    fn a_step_going_on_remembers_the_answers_in_its_memory() {
        let mut memory = Memory::new("gpt-4", 1000, 100_000);
        memory.pin(Message::system("sys"));
        memory.pin(Message::user("step"));
        memory.push(Message::assistant("same"));
        memory.push(Message::assistant("same"));
        let mut nudges = Nudges::after(&memory);
        assert_eq!(nudges.repeated(&Message::assistant("same")), None);
        assert!(nudges.prompt("").starts_with(STUCK_NUDGE));
        assert_eq!(
            Nudges::after(&memory).repeated(&Message::assistant("other")),
            None
        );
    }
}
