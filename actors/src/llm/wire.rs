//! The Chat Completions provider (OpenAI and every compatible server; Azure OpenAI): what
//! goes over the wire and back. The request body, written straight from a borrowed
//! `ChatRequest`; the answer, read leniently into a `ChatResponse` (from its bytes, or from
//! a recorded JSON tree; a stream's pieces are put together by `stream.rs`); the human part
//! of an error body (which other providers' errors share). Knows nothing of HTTP, retries or
//! cassettes.

use serde::Deserialize;
use serde_json::Value;

use super::provider::{Assemble, Provider};
use super::settings::{LlmError, LlmErrorKind, LlmSettings};
use super::stream::Assembly;
use super::{ChatRequest, ChatResponse, Content, Message, Role, ToolCall, Usage};

/// Chat Completions: `POST {base_url}/chat/completions` with a bearer key, or Azure's
/// deployment URL with an `api-key` header.
pub(super) struct ChatCompletions {
    azure: bool,
}

pub(super) static OPENAI: ChatCompletions = ChatCompletions { azure: false };
pub(super) static AZURE: ChatCompletions = ChatCompletions { azure: true };

impl Provider for ChatCompletions {
    fn name(&self) -> &'static str {
        if self.azure { "azure" } else { "openai" }
    }
    fn label(&self) -> &'static str {
        if self.azure {
            "Azure OpenAI"
        } else {
            "OpenAI-compatible"
        }
    }
    fn provider_name(&self) -> &'static str {
        if self.azure {
            "azure.ai.openai"
        } else {
            "openai"
        }
    }
    fn default_base_url(&self) -> Option<&'static str> {
        (!self.azure).then_some("https://api.openai.com/v1")
    }
    fn key_env(&self) -> Option<&'static str> {
        (!self.azure).then_some("OPENAI_API_KEY")
    }
    fn url(&self, s: &LlmSettings) -> String {
        let base = s.base_url.trim_end_matches('/');
        if self.azure {
            format!(
                "{base}/openai/deployments/{}/chat/completions?api-version={}",
                s.model,
                s.api_version.as_deref().unwrap_or("2024-10-21")
            )
        } else {
            format!("{base}/chat/completions")
        }
    }
    fn headers(&self, api_key: Option<&str>) -> Vec<(&'static str, String)> {
        let Some(key) = api_key else { return vec![] };
        if self.azure {
            vec![("api-key", key.to_string())]
        } else {
            vec![("authorization", format!("Bearer {key}"))]
        }
    }
    fn body(
        &self,
        s: &LlmSettings,
        req: &ChatRequest<'_>,
        response_format: Option<&Value>,
    ) -> Vec<u8> {
        request_body(s, req, response_format)
    }
    fn read(&self, answer: &[u8]) -> Result<ChatResponse, LlmError> {
        read_bytes(answer)
    }
    fn read_tree(&self, answer: &Value) -> Result<ChatResponse, LlmError> {
        read_tree(answer)
    }
    fn assembly(&self) -> Box<dyn Assemble> {
        Box::new(Assembly::default())
    }
}

/// The request body as the wire sees it, serialised straight from the borrowed request;
/// frozen messages go in as the JSON they were frozen with, and the tools as the set's
/// ready-made JSON.
pub(super) fn request_body(
    s: &LlmSettings,
    req: &ChatRequest<'_>,
    response_format: Option<&Value>,
) -> Vec<u8> {
    #[derive(serde::Serialize)]
    struct Wire<'a> {
        model: &'a str,
        max_tokens: u32,
        temperature: f32,
        #[serde(skip_serializing_if = "Option::is_none")]
        tool_choice: Option<Value>,
        #[serde(skip_serializing_if = "Option::is_none")]
        response_format: Option<&'a Value>,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        stream: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        stream_options: Option<Value>,
    }
    let tools = req.tools.wire();
    let wire = Wire {
        model: &s.model,
        max_tokens: s.max_tokens,
        temperature: s.temperature,
        tool_choice: (!tools.is_empty()).then(|| req.tool_choice.to_wire()),
        response_format,
        stream: s.stream,
        // The usage of a streamed answer comes in a last chunk, asked for here.
        stream_options: s.stream.then(|| serde_json::json!({"include_usage": true})),
    };
    let mut body = Vec::with_capacity(4096 + tools.len());
    serde_json::to_writer(&mut body, &wire).expect("a chat request always serialises");
    // Reopen the object (serde_json ends it with its `}`) to add the messages and tools.
    body.pop();
    body.extend_from_slice(br#","messages":["#);
    for (i, m) in req.messages.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        if m.provider_data.is_some() {
            // Another API's state (a profile switched mid-conversation): not for this wire.
            let mine = Message {
                provider_data: None,
                frozen: Default::default(),
                ..(*m).clone()
            };
            mine.write_json(&mut body);
        } else {
            m.write_json(&mut body);
        }
    }
    body.push(b']');
    if !tools.is_empty() {
        body.extend_from_slice(br#","tools":"#);
        body.extend_from_slice(tools.as_bytes());
    }
    body.push(b'}');
    body
}

/// The model's answer, read straight from its bytes: no JSON tree in between.
pub(super) fn read_bytes(answer: &[u8]) -> Result<ChatResponse, LlmError> {
    parse_response(serde_json::from_slice(answer))
}

/// The model's answer, read from a JSON tree (a recorded or replayed one).
pub(super) fn read_tree(answer: &Value) -> Result<ChatResponse, LlmError> {
    parse_response(Completion::deserialize(answer))
}

/// The human part of an error body: OpenAI's `{"error": {"message": …}}` or the raw text.
pub(super) fn server_message(text: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(text).ok();
    let msg = parsed
        .as_ref()
        .and_then(|v| {
            v.pointer("/error/message")
                .or_else(|| v.get("error"))
                .or_else(|| v.get("message"))
        })
        .and_then(|m| m.as_str().map(str::to_string))
        .unwrap_or_else(|| text.trim().to_string());
    let mut msg: String = msg.chars().take(300).collect();
    if msg.is_empty() {
        msg = "no details".into();
    }
    msg
}

/// A chat completion as the wire has it: only what is read, leniently (a field of an
/// unexpected type reads as absent, as most servers' quirks deserve).
#[derive(Deserialize)]
struct Completion {
    id: Option<Lenient<String>>,
    model: Option<Lenient<String>>,
    #[serde(default)]
    choices: Vec<Choice>,
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct Choice {
    message: Option<WireMessage>,
    finish_reason: Option<Lenient<String>>,
}

#[derive(Deserialize)]
struct WireMessage {
    content: Option<Lenient<String>>,
    tool_calls: Option<Vec<ToolCall>>,
    reasoning_content: Option<Lenient<String>>,
    reasoning: Option<Lenient<String>>,
}

#[derive(Deserialize)]
struct WireUsage {
    prompt_tokens: Option<Lenient<u64>>,
    completion_tokens: Option<Lenient<u64>>,
}

/// A `T`, or anything else (read and dropped), in one pass over the input: no copy of the
/// value is buffered first, as an untagged enum would, for every field of every answer.
struct Lenient<T>(Option<T>);

impl<T> Lenient<T> {
    fn get(v: Option<Lenient<T>>) -> Option<T> {
        v.and_then(|l| l.0)
    }
}

/// What a lenient field wants from a JSON scalar; anything else reads as absent.
trait Wanted: Sized {
    fn text(_: &str) -> Option<Self> {
        None
    }
    fn whole(_: u64) -> Option<Self> {
        None
    }
}

impl Wanted for String {
    fn text(s: &str) -> Option<Self> {
        Some(s.to_owned())
    }
}

impl Wanted for u64 {
    fn whole(n: u64) -> Option<Self> {
        Some(n)
    }
}

impl<'de, T: Wanted> Deserialize<'de> for Lenient<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(LenientVisitor(std::marker::PhantomData))
    }
}

struct LenientVisitor<T>(std::marker::PhantomData<T>);

impl<'de, T: Wanted> serde::de::Visitor<'de> for LenientVisitor<T> {
    type Value = Lenient<T>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Lenient(None))
    }
    fn visit_u64<E>(self, n: u64) -> Result<Self::Value, E> {
        Ok(Lenient(T::whole(n)))
    }
    fn visit_i64<E>(self, n: i64) -> Result<Self::Value, E> {
        Ok(Lenient(u64::try_from(n).ok().and_then(T::whole)))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Lenient(None))
    }
    fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
        Ok(Lenient(T::text(s)))
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Lenient(None))
    }
    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(Lenient(None))
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(Lenient(None))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map
            .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
            .is_some()
        {}
        Ok(Lenient(None))
    }
}

fn undecodable(e: serde_json::Error) -> LlmError {
    LlmError::new(
        LlmErrorKind::Decode,
        format!("the model's answer is not a chat completion: {e}"),
    )
}

/// The text with a leading `<think>…</think>` block taken out, and that block's content: a
/// model's thinking never reaches plans, notes or summaries. An unclosed block is all
/// thinking (the answer was cut off inside it).
fn split_thinking(content: Option<String>) -> (Option<String>, Option<String>) {
    let Some(text) = content else {
        return (None, None);
    };
    let Some(rest) = text.trim_start().strip_prefix("<think>") else {
        return (Some(text), None);
    };
    match rest.split_once("</think>") {
        Some((thought, answer)) => (
            Some(answer.trim_start().to_string()),
            Some(thought.trim().to_string()),
        ),
        None => (Some(String::new()), Some(rest.trim().to_string())),
    }
}

/// Turn a chat completion, as read, into a response.
fn parse_response(read: Result<Completion, serde_json::Error>) -> Result<ChatResponse, LlmError> {
    let c = read.map_err(undecodable)?;
    let bad =
        |what: &str| LlmError::new(LlmErrorKind::Decode, format!("the model's answer {what}"));
    let choice = c
        .choices
        .into_iter()
        .next()
        .ok_or_else(|| bad("has no choices"))?;
    let m = choice.message.ok_or_else(|| bad("has no message"))?;
    let (prompt_tokens, completion_tokens) = c.usage.map_or((0, 0), |u| {
        (
            Lenient::get(u.prompt_tokens).unwrap_or(0),
            Lenient::get(u.completion_tokens).unwrap_or(0),
        )
    });
    let (content, thought) = split_thinking(Lenient::get(m.content));
    let reasoning = [
        Lenient::get(m.reasoning_content),
        Lenient::get(m.reasoning),
        thought,
    ]
    .into_iter()
    .flatten()
    .find(|r| !r.trim().is_empty());
    Ok(ChatResponse {
        calls_in_text: false,
        id: Lenient::get(c.id).unwrap_or_default(),
        model: Lenient::get(c.model).unwrap_or_default(),
        message: Message {
            role: Role::Assistant,
            content: content.map(Content::Text),
            tool_calls: m.tool_calls.unwrap_or_default(),
            tool_call_id: None,
            name: None,
            reasoning_content: reasoning,
            provider_data: None,
            frozen: Default::default(),
        },
        finish_reason: Lenient::get(choice.finish_reason),
        usage: Usage {
            prompt_tokens,
            completion_tokens,
            calls: 1,
            ..Default::default()
        },
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::llm::{ToolChoice, ToolSet, ToolSpec};

    #[test]
    fn parses_tool_calls_and_usage_from_bytes_and_from_a_recorded_tree() {
        let v = json!({"id": "x", "model": "m", "choices": [{"message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}}]},
            "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 7, "completion_tokens": 3}, "system_fingerprint": "fp"});
        let bytes = serde_json::to_vec(&v).unwrap();
        for r in [read_bytes(&bytes).unwrap(), read_tree(&v).unwrap()] {
            assert_eq!(r.message.tool_calls[0].function.name, "bash");
            assert_eq!(
                r.message.tool_calls[0].function.arguments,
                r#"{"command":"ls"}"#
            );
            assert_eq!(r.message.content, None);
            assert_eq!((r.id.as_str(), r.model.as_str()), ("x", "m"));
            assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
            assert_eq!((r.usage.prompt_tokens, r.usage.completion_tokens), (7, 3));
        }
        let err = |v: Value| read_tree(&v).unwrap_err().message;
        assert!(err(json!({"choices": []})).contains("has no choices"));
        assert!(err(json!({"choices": [{}]})).contains("has no message"));
        let broken = json!({"choices": [{"message": {"tool_calls": [{"function": 3}]}}]});
        assert!(err(broken).contains("not a chat completion"));
        let not_json = read_bytes(b"<html>").unwrap_err();
        assert!(
            not_json.message.contains("not a chat completion"),
            "{}",
            not_json.message
        );
    }

    #[test]
    fn odd_fields_read_as_absent() {
        // Content as parts, a numeric id, an object for a model, a fractional token count,
        // a negative one; read from a tree (replay) and from the bytes (the wire).
        let v = json!({"id": 5, "model": {"name": ["m"]}, "choices": [{"message": {"content":
            [{"type": "text", "text": "hi"}]}, "finish_reason": true}],
            "usage": {"prompt_tokens": 2.5, "completion_tokens": 4, "total_tokens": -1}});
        let bytes = serde_json::to_vec(&v).unwrap();
        for r in [read_tree(&v).unwrap(), read_bytes(&bytes).unwrap()] {
            assert_eq!((r.id.as_str(), r.model.as_str()), ("", ""));
            assert_eq!((r.message.content, r.finish_reason), (None, None));
            assert_eq!((r.usage.prompt_tokens, r.usage.completion_tokens), (0, 4));
        }
        let negative =
            br#"{"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": -3}}"#;
        let r = read_bytes(negative).unwrap();
        assert_eq!(r.usage.prompt_tokens, 0);
        let plain = json!({"choices": [{"message": {"content": "hello"}}]});
        let r = read_tree(&plain).unwrap();
        assert_eq!(r.message.text(), "hello");
        assert_eq!(r.usage.total(), 0);
    }

    #[test]
    fn the_body_carries_the_tool_sets_json_only_when_there_are_tools() {
        let settings = LlmSettings::for_tests("http://127.0.0.1:1/v1", None);
        let spec = |name: &str| ToolSpec {
            name: name.into(),
            description: format!("does \"{name}\""),
            parameters: json!({"type": "object", "properties": {}}),
            variants: None,
        };
        let hi = Message::user("hi");
        let mut req = ChatRequest {
            messages: vec![&hi],
            tools: ToolSet::new(vec![spec("a"), spec("b")]),
            tool_choice: ToolChoice::Required,
        };
        let body: Value = serde_json::from_slice(&request_body(&settings, &req, None)).unwrap();
        assert_eq!(body["model"], "m");
        assert_eq!(body["messages"][0]["content"], "hi");
        assert_eq!(body["tool_choice"], "required");
        assert_eq!(body["tools"][1]["type"], "function");
        assert_eq!(body["tools"][1]["function"]["name"], "b");
        assert_eq!(body["tools"][1]["function"]["description"], "does \"b\"");
        assert_eq!(body["tools"][0]["function"]["parameters"]["type"], "object");

        req.tools = ToolSet::default();
        let body: Value = serde_json::from_slice(&request_body(&settings, &req, None)).unwrap();
        let keys: Vec<&str> = body
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        assert_eq!(
            keys,
            [
                "max_tokens",
                "messages",
                "model",
                "stream",
                "stream_options",
                "temperature"
            ]
        );
        assert_eq!(body["stream_options"]["include_usage"], true);
        let whole = LlmSettings {
            stream: false,
            ..settings
        };
        let body: Value = serde_json::from_slice(&request_body(&whole, &req, None)).unwrap();
        assert!(body.get("stream").is_none() && body.get("stream_options").is_none());
    }

    #[test]
    fn frozen_messages_go_out_as_they_were_frozen_and_equal_their_twins() {
        let settings = LlmSettings::for_tests("http://127.0.0.1:1/v1", None);
        let call = ToolCall {
            id: "c1".into(),
            kind: "function".into(),
            function: crate::llm::FunctionCall {
                name: "bash".into(),
                arguments: r#"{"command": "echo \"hi\"\n"}"#.into(),
            },
        };
        let mut asked = Message::assistant("line one\n\t\"quoted\" \u{1F600}");
        asked.tool_calls = vec![call.clone()];
        let thawed = vec![
            Message::system("You are {agent}.\u{0007}"),
            asked,
            Message::tool(&call, "hi\n"),
            Message::user_with_images("look", ["data:image/png;base64,AAAA".to_string()]),
        ];
        let mut frozen = thawed.clone();
        frozen.iter_mut().for_each(Message::freeze);
        assert_eq!(frozen, thawed);
        let body = |messages: &[Message]| -> Value {
            let req = ChatRequest {
                messages: messages.iter().collect(),
                tools: ToolSet::default(),
                tool_choice: ToolChoice::Auto,
            };
            serde_json::from_slice(&request_body(&settings, &req, None)).unwrap()
        };
        // The first request makes the frozen JSON, which its clones share; the second sends it.
        let cold = body(&thawed);
        assert_eq!(body(&frozen), cold);
        // A clone frozen again (as each step's memory does with its agent's system message)
        // keeps the JSON its original made.
        let mut refrozen = frozen[0].clone();
        refrozen.freeze();
        assert!(refrozen.json_made(), "the JSON would be made again");
        assert_eq!(body(&frozen), cold);
        assert_eq!(cold["messages"], serde_json::to_value(&thawed).unwrap());
        // A request of only fresh messages, and of none, is still one JSON object.
        assert_eq!(body(&[]).get("messages"), Some(&json!([])));
    }

    #[test]
    fn error_bodies_are_summarised() {
        assert_eq!(
            server_message(r#"{"error":{"message":"bad key"}}"#),
            "bad key"
        );
        assert_eq!(server_message("plain"), "plain");
    }

    #[test]
    fn thinking_is_kept_apart_from_the_text_and_sent_back() {
        let v = json!({"choices": [{"message": {"role": "assistant",
            "content": "<think>\nThe user wants a file.\n</think>\n\nWriting it now.",
            "tool_calls": [{"id": "c", "type": "function",
                "function": {"name": "bash", "arguments": "{}"}}]}}]});
        let r = read_tree(&v).unwrap();
        assert_eq!(r.message.text(), "Writing it now.");
        assert_eq!(
            r.message.reasoning_content.as_deref(),
            Some("The user wants a file.")
        );
        // Sent back with the assistant turn.
        let mut out = Vec::new();
        r.message.write_json(&mut out);
        let sent: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(sent["reasoning_content"], "The user wants a file.");
        assert_eq!(sent["content"], "Writing it now.");

        for key in ["reasoning_content", "reasoning"] {
            let v = json!({"choices": [{"message": {"role": "assistant", "content": "Done.",
                key: "step by step"}}]});
            let r = read_tree(&v).unwrap();
            assert_eq!(r.message.reasoning_content.as_deref(), Some("step by step"));
            assert_eq!(r.message.text(), "Done.");
        }
        // Cut off while thinking: no text at all, never the thinking.
        let v = json!({"choices": [{"message": {"content": "<think>hmm, maybe"}}]});
        let r = read_tree(&v).unwrap();
        assert_eq!(r.message.text(), "");
        assert_eq!(r.message.reasoning_content.as_deref(), Some("hmm, maybe"));
        // A message without thinking sends none.
        let mut out = Vec::new();
        Message::assistant("hi").write_json(&mut out);
        assert!(!String::from_utf8(out).unwrap().contains("reasoning"));
    }
}
