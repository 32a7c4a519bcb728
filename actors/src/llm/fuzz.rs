//! Generated model answers and cassettes (test builds only). The properties: the lenient
//! answer reader never panics, on arbitrary bytes or on mutations of a valid completion, and
//! reads an answer alike from its bytes and from its recorded tree; the error-body summary
//! never panics; a cassette's text, mutated, never makes its reader panic, its errors name
//! the cassette, and every exchange it accepts replays through the tree reader; a streamed
//! answer, however its bytes are cut into chunks and its events framed, is taken as the
//! answer its events make, and one with a mangled or error event, or cut short, is either
//! refused or taken with the very message it would have had (never an altered call).

use futures_util::FutureExt;
use serde_json::{Value, json};

use super::stream::Assembly;
use super::wire::{read_bytes, read_tree, server_message};
use super::{Cassette, Exchange};
use crate::fuzz::{Gen, run};

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

/// The events of a generated streamed answer: text, thinking and up to three tool calls
/// (their arguments in pieces, the calls interleaved), then the finish reason, the usage
/// and `[DONE]`, as servers send them.
fn streamed_answer(g: &mut Gen) -> Vec<String> {
    let chunk =
        |delta: Value| json!({"id": "c", "model": "m", "choices": [{"index": 0, "delta": delta}]});
    let mut events = vec![chunk(json!({"role": "assistant", "content": null}))];
    let calls = g.below(4);
    // Per call: its pieces of arguments still to send.
    let mut pending: Vec<Vec<String>> = (0..calls)
        .map(|_| (0..1 + g.below(4)).map(|_| g.text(12)).collect())
        .collect();
    let mut named = vec![false; calls];
    for _ in 0..g.below(6) {
        let key = *g.pick(&["content", "content", "reasoning_content"]);
        events.push(chunk(json!({ key: g.text(16) })));
    }
    while pending.iter().any(|p| !p.is_empty()) {
        let i = g.below(calls);
        if pending[i].is_empty() {
            continue;
        }
        let args = pending[i].remove(0);
        let mut piece = json!({"index": i, "function": {"arguments": args}});
        if !named[i] {
            named[i] = true;
            piece["id"] = json!(format!("call_{i}"));
            piece["type"] = json!("function");
            piece["function"]["name"] = json!(g.pick(&["bash", "str_replace_editor", "terminate"]));
        }
        events.push(chunk(json!({"tool_calls": [piece]})));
    }
    let reason = if calls > 0 { "tool_calls" } else { "stop" };
    events.push(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}));
    events.push(json!({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 7}}));
    let mut events: Vec<String> = events.iter().map(Value::to_string).collect();
    events.push("[DONE]".into());
    events
}

/// The events as an event stream: each with its `data:` line (a space after the colon or
/// not), sometimes after a comment, an `id:` or an `event:` line, all lines ended in LF,
/// CRLF or CR (one kind per stream).
fn framed(g: &mut Gen, events: &[String]) -> Vec<u8> {
    let end = *g.pick(&["\n", "\r\n", "\r"]);
    let mut out = String::new();
    for data in events {
        match g.below(8) {
            0 => out.push_str(&format!(": keep-alive{end}")),
            1 => out.push_str(&format!("id: {}{end}", g.below(100))),
            2 => out.push_str(&format!("event: message{end}")),
            _ => {}
        }
        let space = if g.one_in(4) { "" } else { " " };
        out.push_str(&format!("data:{space}{data}{end}{end}"));
    }
    out.into_bytes()
}

/// The events read from `bytes` cut into chunks at random places (sometimes byte by
/// byte), assembled as the client assembles them; whether the stream said `[DONE]`.
fn assembled(g: &mut Gen, bytes: &[u8]) -> (Assembly, bool) {
    let mut chunks = vec![];
    let mut rest = bytes;
    let most = if g.one_in(8) { 1 } else { 1 + g.below(64) };
    while !rest.is_empty() {
        let n = (1 + g.below(most)).min(rest.len());
        chunks.push(Ok::<_, std::io::Error>(bytes::Bytes::copy_from_slice(
            &rest[..n],
        )));
        rest = &rest[n..];
    }
    let mut events = crate::sse::Events::new(futures_util::stream::iter(chunks));
    let mut assembly = Assembly::default();
    loop {
        let next = events
            .next()
            .now_or_never()
            .expect("the chunks are all there");
        match next {
            Some((_, data)) if data.trim() == "[DONE]" => return (assembly, true),
            Some((_, data)) => {
                assembly.add(&data);
            }
            None => return (assembly, false),
        }
    }
}

#[test]
fn fuzz_streamed_answers() {
    run("streamed_answers", |g| {
        let mut events = streamed_answer(g);
        let mut whole = Assembly::default();
        for data in &events[..events.len() - 1] {
            whole.add(data);
        }
        let whole = whole.complete(true).expect("the answer as sent is taken");
        let mut altered = false;
        if g.one_in(2) {
            altered = true;
            let at = g.below(events.len());
            events[at] = match g.below(3) {
                // Cut inside: a proper start of a JSON object is no JSON.
                0 => {
                    let data = &events[at];
                    let mut cut = 1 + g.below(data.len().max(2) - 1);
                    while !data.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    data[..cut.max(1)].to_string()
                }
                // Junk in its place, on its line: no chunk (a blank event would be no event
                // at all, as a keep-alive, and `{}` a chunk that says nothing; either in
                // place of a call's only piece is another answer, which no reader can tell).
                1 => Some(g.text(24).replace(['\n', '\r'], " "))
                    .filter(|t| !t.trim().is_empty())
                    .filter(|t| !serde_json::from_str::<Value>(t).is_ok_and(|v| v.is_object()))
                    .unwrap_or("?".into()),
                _ => json!({"error": {"message": g.text(12)}}).to_string(),
            };
        }
        let mut bytes = framed(g, &events);
        if g.one_in(4) {
            altered = true;
            bytes.truncate(g.below(bytes.len()));
        }
        let (assembly, done) = assembled(g, &bytes);
        match assembly.complete(done) {
            Ok(tree) if altered => assert_eq!(
                tree["choices"][0]["message"], whole["choices"][0]["message"],
                "taken with another message than sent: {events:?}"
            ),
            Ok(tree) => assert_eq!(tree, whole, "{events:?}"),
            Err(why) => assert!(
                altered,
                "the answer as sent was refused ({why:?}): {events:?}"
            ),
        }
    });
}
