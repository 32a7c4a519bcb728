//! A streamed answer put together: the chunks of `stream: true` (text deltas, tool-call
//! pieces keyed by their index, the finish reason, usage in a chunk of its own) assembled
//! into the completion a whole answer would have been, so one reader handles both. Knows
//! nothing of HTTP, retries or cassettes.

use serde_json::{Value, json};

use super::provider::{Assemble, Untaken};

/// The pieces of one streamed answer so far.
#[derive(Default)]
pub(super) struct Assembly {
    id: Option<Value>,
    model: Option<Value>,
    content: String,
    reasoning: String,
    /// Per call index: id, name, arguments.
    calls: Vec<(String, String, String)>,
    finish_reason: Option<Value>,
    usage: Option<Value>,
    chunks: usize,
    /// How much of `content` was passed on as the answer's text.
    passed: usize,
    /// Why the stream cannot be trusted, from the first event that was no chunk: one that
    /// is not JSON, or the server's `{"error": …}`. The pieces around a lost event must not
    /// be joined (a call's arguments would run without what it held), so the attempt fails
    /// and every later event is ignored.
    fault: Option<String>,
}

const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";

/// Where the answer's own text begins in `content` so far: after a leading `<think>…</think>`
/// block (a reasoning model's thinking, which `wire::split_thinking` keeps apart from the
/// text), or `None` while that is not yet known (a block or its opening still coming).
fn text_start(content: &str) -> Option<usize> {
    let lead = content.len() - content.trim_start().len();
    let rest = &content[lead..];
    if rest.len() < THINK_OPEN.len() && THINK_OPEN.starts_with(rest) {
        return None;
    }
    let Some(inside) = rest.strip_prefix(THINK_OPEN) else {
        return Some(0);
    };
    let end = inside.find(THINK_CLOSE)?;
    let after = lead + THINK_OPEN.len() + end + THINK_CLOSE.len();
    Some(after + (content[after..].len() - content[after..].trim_start().len()))
}

impl Assembly {
    /// Take one event's data; the text it adds to the answer, if any.
    pub fn add(&mut self, data: &str) -> Option<String> {
        if self.fault.is_some() {
            return None;
        }
        let chunk = match super::provider::event_json(data, self.chunks) {
            Ok(Some(chunk)) => chunk,
            Ok(None) => return None,
            Err(fault) => {
                self.fault = Some(fault);
                return None;
            }
        };
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            let said = error
                .get("message")
                .and_then(Value::as_str)
                .map_or_else(|| error.to_string(), str::to_string);
            self.fault = Some(format!(
                "an error in the stream after {} pieces: {}",
                self.chunks,
                crate::text::clip(&said, 500)
            ));
            return None;
        }
        self.chunks += 1;
        self.id = self.id.take().or_else(|| chunk.get("id").cloned());
        self.model = self.model.take().or_else(|| chunk.get("model").cloned());
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(usage.clone());
        }
        let choice = chunk.get("choices")?.get(0)?;
        if let Some(reason) = choice.get("finish_reason").filter(|r| !r.is_null()) {
            self.finish_reason = Some(reason.clone());
        }
        let delta = choice.get("delta")?;
        for key in ["reasoning_content", "reasoning"] {
            if let Some(r) = delta.get(key).and_then(Value::as_str) {
                self.reasoning.push_str(r);
            }
        }
        for piece in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index = piece.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
            if index > 1024 {
                continue;
            }
            if self.calls.len() <= index {
                self.calls.resize(index + 1, Default::default());
            }
            let call = &mut self.calls[index];
            if let Some(id) = piece.get("id").and_then(Value::as_str) {
                call.0 = id.to_string();
            }
            let function = piece.get("function");
            if let Some(name) = function.and_then(|f| f.get("name")).and_then(Value::as_str) {
                call.1.push_str(name);
            }
            if let Some(args) = function
                .and_then(|f| f.get("arguments"))
                .and_then(Value::as_str)
            {
                call.2.push_str(args);
            }
        }
        let text = delta.get("content").and_then(Value::as_str)?;
        self.content.push_str(text);
        // Thinking is not the answer: only text after a leading think block is passed on.
        let start = text_start(&self.content)?.max(self.passed);
        let new = &self.content[start..];
        self.passed = self.content.len();
        (!new.is_empty()).then(|| new.to_string())
    }

    /// The completion, if the stream can be taken: no event was lost (`fault`, or a call
    /// with no name, whose first piece never came, or a number skipped before a later
    /// call's), and it ended, with `[DONE]` (`done`) or at least after a finish reason.
    pub fn complete(mut self, done: bool) -> Result<Value, Untaken> {
        if let Some(fault) = self.fault.take() {
            return Err(Untaken::Fault(fault));
        }
        if let Some(i) = self.calls.iter().position(|(_, name, _)| name.is_empty()) {
            return Err(Untaken::Fault(format!(
                "tool call {i} of {} came without its name: a piece of the answer was lost",
                self.calls.len()
            )));
        }
        let chunks = self.chunks;
        let tree = self.finish();
        if !done && tree["choices"][0]["finish_reason"].is_null() {
            return Err(Untaken::BrokeOff(chunks));
        }
        Ok(tree)
    }

    /// The completion the pieces make.
    pub fn finish(self) -> Value {
        let calls: Vec<Value> = self
            .calls
            .into_iter()
            .filter(|(_, name, _)| !name.is_empty())
            .enumerate()
            .map(|(i, (id, name, arguments))| {
                let id = if id.is_empty() {
                    format!("call_{i}")
                } else {
                    id
                };
                json!({"id": id, "type": "function",
                    "function": {"name": name, "arguments": arguments}})
            })
            .collect();
        let mut message = json!({"role": "assistant", "content": self.content});
        if !calls.is_empty() {
            message["tool_calls"] = Value::Array(calls);
        }
        if !self.reasoning.is_empty() {
            message["reasoning_content"] = Value::String(self.reasoning);
        }
        json!({
            "id": self.id.unwrap_or(Value::Null),
            "object": "chat.completion",
            "model": self.model.unwrap_or(Value::Null),
            "choices": [{"index": 0, "message": message,
                "finish_reason": self.finish_reason.unwrap_or(Value::Null)}],
            "usage": self.usage.unwrap_or(Value::Null),
        })
    }
}

impl Assemble for Assembly {
    fn add(&mut self, data: &str) -> Option<String> {
        Assembly::add(self, data)
    }
    fn complete(self: Box<Self>, done: bool) -> Result<Value, Untaken> {
        Assembly::complete(*self, done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_make_the_whole_answer() {
        let mut a = Assembly::default();
        let chunks = [
            r#"{"id":"c1","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":null}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"Hé"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"llo"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"reasoning_content":"think"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"t1","type":"function","function":{"name":"bash","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"comm"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"and\":\"ls\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}"#,
        ];
        let texts: Vec<String> = chunks.iter().filter_map(|c| a.add(c)).collect();
        assert_eq!(texts, ["Hé", "llo"]);
        let done = a.finish();
        let m = &done["choices"][0]["message"];
        assert_eq!(m["content"], "Héllo");
        assert_eq!(m["reasoning_content"], "think");
        assert_eq!(m["tool_calls"][0]["id"], "t1");
        assert_eq!(
            m["tool_calls"][0]["function"]["arguments"],
            r#"{"command":"ls"}"#
        );
        assert_eq!(done["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(done["usage"]["completion_tokens"], 3);
        assert_eq!(done["id"], "c1");
    }

    #[test]
    fn a_leading_think_block_is_not_passed_on_as_text() {
        let piece = |t: &str| json!({"choices":[{"index":0,"delta":{"content":t}}]}).to_string();
        let mut a = Assembly::default();
        let heard: Vec<String> = ["<th", "ink>plan the", " move</thi", "nk>\n\nDo", " it"]
            .iter()
            .filter_map(|t| a.add(&piece(t)))
            .collect();
        assert_eq!(heard, ["Do", " it"]);
        let mut a = Assembly::default();
        let heard: Vec<String> = ["<b>bold", "</b>"]
            .iter()
            .filter_map(|t| a.add(&piece(t)))
            .collect();
        assert_eq!(
            heard,
            ["<b>bold", "</b>"],
            "text that is no think block passes"
        );
        let mut a = Assembly::default();
        let heard: Vec<String> = ["<", "t", "x"]
            .iter()
            .filter_map(|t| a.add(&piece(t)))
            .collect();
        assert_eq!(heard, ["<tx"], "held back only while it could open a block");
    }

    #[test]
    fn empty_events_and_impossible_call_indices_are_skipped() {
        let mut a = Assembly::default();
        for c in [
            "",
            " ",
            r#"{"choices":[{"delta":{"tool_calls":[{"index":99999999}]}}]}"#,
        ] {
            assert_eq!(a.add(c), None);
        }
        assert!(a.fault.is_none());
        let done = a.finish();
        assert_eq!(done["choices"][0]["message"]["content"], "");
    }

    /// A call whose first piece (its name) never came, or whose number was skipped before
    /// a later call's, refuses the answer rather than leaving the call out.
    #[test]
    fn a_call_without_its_name_refuses_the_answer() {
        let piece = |i: usize, f: Value| {
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":i,"function":f}]}}]})
                .to_string()
        };
        let named = piece(0, json!({"name": "bash", "arguments": "{}"}));
        for (events, lost) in [
            (
                vec![piece(1, json!({"name": "bash", "arguments": "{}"}))],
                "call 0 of 2",
            ),
            (
                vec![named.clone(), piece(1, json!({"arguments": "{}"}))],
                "call 1 of 2",
            ),
        ] {
            let mut a = Assembly::default();
            events.iter().for_each(|e| _ = a.add(e));
            match a.complete(true) {
                Err(Untaken::Fault(why)) => assert!(why.contains(lost), "{why}"),
                other => panic!("taken: {other:?}"),
            }
        }
        let mut a = Assembly::default();
        a.add(&named);
        assert!(a.complete(true).is_ok());
    }

    /// An event that is no chunk is a fault, never skipped: the pieces around it are not
    /// joined (`rm -rf keep` + lost + `/scratch` must not become `rm -rf keep`), and what
    /// comes after it is not taken.
    #[test]
    fn an_event_that_is_no_chunk_faults_the_stream() {
        let args = |a: &str| {
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"t1","function":{"name":"bash","arguments":a}}]}}]})
                .to_string()
        };
        for bad in ["{", "[]", "null", "42", "not json", r#"{"choices":"#] {
            let mut a = Assembly::default();
            a.add(&args("{\"command\":\"rm -rf keep"));
            a.add(bad);
            a.add(&args("\"}"));
            let fault = a.fault.clone().expect("a fault");
            assert!(fault.contains("after 1 pieces"), "{fault}");
            assert_eq!(a.chunks, 1, "nothing after the fault is taken: {bad}");
        }
        let mut a = Assembly::default();
        a.add(&json!({"choices":[{"index":0,"delta":{"content":"Hi"}}]}).to_string());
        a.add(r#"{"error":{"message":"overloaded","type":"server_error"}}"#);
        let fault = a.fault.clone().expect("a fault");
        assert!(fault.contains("overloaded"), "{fault}");
        assert_eq!(
            a.add(&json!({"choices":[{"index":0,"delta":{"content":" there"}}]}).to_string()),
            None
        );
    }
}
