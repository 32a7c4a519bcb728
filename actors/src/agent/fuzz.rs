//! Generated rounds for an agent's memory (test builds only). The property: whatever the
//! caps (messages, tokens, an opening past them), the rounds (parallel calls, text-only
//! answers, a note after the results, outputs of any size) and compaction (stubs, folds),
//! the memory stays well-formed after every message (`Memory::well_formed`), holds the
//! latest assistant message, and is within its caps or down to the opening and the latest
//! round.

use super::memory::Memory;
use crate::fuzz::{Gen, run};
use crate::llm::{FunctionCall, Message, ToolCall};

/// Text of about `max` bytes at most: words, or any characters (multi-byte ones among
/// them, which a cut must not split).
fn text(g: &mut Gen, max: usize) -> String {
    if g.one_in(3) {
        g.text(max / 4)
    } else {
        (0..g.below(max / 5 + 1))
            .map(|i| format!("w{} ", i % 10))
            .collect()
    }
}

#[test]
fn fuzz_memory_trimming() {
    run("memory_trimming", |g| {
        let max_messages = 3 + g.below(30);
        let max_tokens = 20 + g.below(800);
        let mut m = Memory::new("gpt-4", max_messages, max_tokens);
        if g.one_in(3) {
            m.compact_at(g.below(max_tokens + 1));
        }
        let long = g.one_in(4);
        let opening = text(g, if long { 3_000 } else { 300 });
        m.pin(Message::system(opening));
        m.pin(Message::user(text(g, 100)));
        for round in 0..1 + g.below(6) {
            let calls: Vec<ToolCall> = (0..g.below(7))
                .map(|i| ToolCall {
                    id: format!("call_{round}_{i}"),
                    kind: "function".into(),
                    function: FunctionCall {
                        name: "some_tool".into(),
                        arguments: text(g, 40),
                    },
                })
                .collect();
            let mut asked = Message::assistant(text(g, 100));
            asked.tool_calls = calls.clone();
            let mut in_round = 1;
            let mut add = |m: &mut Memory, message: Message| {
                m.push(message);
                in_round += 1;
                if let Err(why) = m.well_formed() {
                    panic!("{why}: {:#?}", m.request(None));
                }
                assert_eq!(m.assistant_history().next(), Some(&asked));
            };
            m.push(asked.clone());
            for call in &calls {
                let big = g.one_in(4);
                let size = if big { 2_000 } else { 300 };
                add(&mut m, Message::tool(call, text(g, size)));
            }
            if !calls.is_empty() && g.one_in(4) {
                add(&mut m, Message::user("The image(s) returned by some_tool:"));
            }
            let only_latest = m.len() == 2 + in_round;
            assert!(
                only_latest || (m.tokens() <= max_tokens && m.len() <= max_messages),
                "over a cap with more than the latest round: {} messages, {} tokens",
                m.len(),
                m.tokens()
            );
            if g.one_in(3) {
                let middle = m.middle();
                if !middle.is_empty() {
                    m.fold(middle, Message::user("summary"));
                    m.well_formed().unwrap();
                }
            }
        }
    });
}
