//! Generated model answers and cassettes (test builds only). The properties: the lenient
//! answer reader never panics, on arbitrary bytes or on mutations of a valid completion, and
//! reads an answer alike from its bytes and from its recorded tree; the error-body summary
//! never panics; a cassette's text, mutated, never makes its reader panic, its errors name
//! the cassette, and every exchange it accepts replays through the tree reader.

use serde_json::{Value, json};

use super::wire::{read_bytes, read_tree, server_message};
use super::{Cassette, Exchange};
use crate::fuzz::run;

/// The recorded example flow: real requests and answers, one exchange a line.
const EXAMPLE: &str = include_str!("../../../config/cassettes/example-flow.jsonl");

/// A chat completion with text, two tool calls and usage, as servers send them.
fn completion() -> Value {
    json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-4o-mini",
        "choices": [{
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": "Writing the file now.",
                "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "bash", "arguments": "{\"command\":\"ls -la\"}"}},
                    {"id": "call_2", "type": "function",
                     "function": {"name": "terminate", "arguments": "{\"status\":\"success\"}"}}
                ]
            }
        }],
        "usage": {"prompt_tokens": 1200, "completion_tokens": 34, "total_tokens": 1234}
    })
}

#[test]
fn fuzz_model_answer_bytes() {
    let valid = serde_json::to_vec(&completion()).unwrap();
    run("model_answer_bytes", |g| {
        let bytes = if g.one_in(4) {
            g.bytes(256)
        } else {
            g.mutate_bytes(&valid)
        };
        let _ = read_bytes(&bytes);
        if let Ok(t) = serde_json::from_slice(&bytes) {
            let _ = read_tree(&t);
        }
        let _ = server_message(&String::from_utf8_lossy(&bytes));
    });
}

#[test]
fn fuzz_model_answer_trees() {
    let valid = completion();
    run("model_answer_trees", |g| {
        let mut answer = g.mutate_json(&valid);
        for _ in 0..g.below(3) {
            answer = g.mutate_json(&answer);
        }
        let from_bytes = read_bytes(&serde_json::to_vec(&answer).unwrap());
        let from_tree = read_tree(&answer);
        // Errors differ only in where they point (a tree has no line and column).
        match (from_bytes, from_tree) {
            (Ok(a), Ok(b)) => assert_eq!(format!("{a:?}"), format!("{b:?}"), "{answer}"),
            (Err(_), Err(_)) => {}
            (a, b) => panic!("bytes and tree read {answer} differently: {a:?} / {b:?}"),
        }
    });
}

#[test]
fn fuzz_cassettes() {
    let lines: Vec<&str> = EXAMPLE.lines().collect();
    run("cassettes", |g| {
        let from = g.below(lines.len());
        let to = (from + 1 + g.below(3)).min(lines.len());
        let mut text = lines[from..to].join("\n");
        match g.below(3) {
            0 => text = g.mutate_text(&text),
            1 => {
                // A well-formed line whose exchange is mutated.
                if let Ok(v) = serde_json::from_str::<Value>(lines[from]) {
                    text = g.mutate_json(&v).to_string();
                }
            }
            _ => text = g.text(64),
        }
        if let Err(e) = Cassette::parse("fuzz", &text) {
            assert!(
                e.starts_with("cassette fuzz"),
                "an error that names no cassette: {e}"
            );
        }
        for line in text.lines() {
            if let Ok(ex) = serde_json::from_str::<Exchange>(line.trim()) {
                let _ = read_tree(&ex.response);
            }
        }
    });
}
