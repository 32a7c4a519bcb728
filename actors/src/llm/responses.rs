//! The OpenAI Responses provider (`api_type = "openai-responses"`): `POST {base_url}/responses`
//! (the same `…/v1` base as Chat Completions) with a bearer key. Our messages become input
//! items: messages by role, tool calls `function_call` items and their results
//! `function_call_output` items; reasoning items come back kept on the message
//! (`provider_data.responses.items`, with their encrypted content: requests are not stored on
//! the server) and go back verbatim before the turn they led to. A stream's events are read
//! for their text, and its `response.completed` (or `.incomplete`) event is the whole answer.
//! Knows nothing of HTTP, retries or cassettes.

use serde_json::{Map, Value, json};

use super::provider::{Assemble, Provider, Untaken};
use super::settings::{LlmError, LlmErrorKind, LlmSettings};
use super::{
    ChatRequest, ChatResponse, Content, ContentPart, FunctionCall, Message, Role, ToolCall,
    ToolChoice, Usage,
};

pub(super) struct Responses;

pub(super) static RESPONSES: Responses = Responses;

/// The key under `Message::provider_data` this provider keeps its state in.
const KEY: &str = "responses";

impl Provider for Responses {
    fn name(&self) -> &'static str {
        "openai-responses"
    }
    fn label(&self) -> &'static str {
        "OpenAI Responses"
    }
    fn provider_name(&self) -> &'static str {
        "openai"
    }
    fn default_base_url(&self) -> Option<&'static str> {
        Some("https://api.openai.com/v1")
    }
    fn key_env(&self) -> Option<&'static str> {
        Some("OPENAI_API_KEY")
    }
    fn url(&self, s: &LlmSettings) -> String {
        format!("{}/responses", s.base_url.trim_end_matches('/'))
    }
    fn headers(&self, api_key: Option<&str>) -> Vec<(&'static str, String)> {
        api_key
            .map(|key| ("authorization", format!("Bearer {key}")))
            .into_iter()
            .collect()
    }
    fn body(
        &self,
        s: &LlmSettings,
        req: &ChatRequest<'_>,
        response_format: Option<&Value>,
    ) -> Vec<u8> {
        serde_json::to_vec(&request(s, req, response_format)).expect("a request always serialises")
    }
    fn read_tree(&self, answer: &Value) -> Result<ChatResponse, LlmError> {
        read(answer)
    }
    fn assembly(&self) -> Box<dyn Assemble> {
        Box::<Assembly>::default()
    }
}

/// The Responses request for `req`.
fn request(s: &LlmSettings, req: &ChatRequest<'_>, response_format: Option<&Value>) -> Value {
    let mut input: Vec<Value> = vec![];
    for m in &req.messages {
        match m.role {
            // Typed, as servers stricter than OpenAI's demand of every item.
            Role::System => {
                input.push(json!({"type": "message", "role": "system", "content": m.text()}))
            }
            Role::User => {
                input.push(json!({"type": "message", "role": "user", "content": user_content(m)}))
            }
            Role::Tool => input.push(json!({"type": "function_call_output",
                "call_id": m.tool_call_id.as_deref().unwrap_or_default(),
                "output": m.text()})),
            Role::Assistant => {
                if let Some(items) = m
                    .provider_data
                    .as_ref()
                    .and_then(|d| d.pointer("/responses/items"))
                    .and_then(Value::as_array)
                {
                    input.extend(items.iter().cloned());
                }
                if !m.text().is_empty() {
                    input
                        .push(json!({"type": "message", "role": "assistant", "content": m.text()}));
                }
                for call in &m.tool_calls {
                    input.push(json!({"type": "function_call", "call_id": call.id,
                        "name": call.function.name, "arguments": call.function.arguments}));
                }
            }
        }
    }
    let mut body = Map::new();
    body.insert("model".into(), s.model.clone().into());
    body.insert("input".into(), Value::Array(input));
    body.insert("max_output_tokens".into(), s.max_tokens.into());
    body.insert("temperature".into(), s.temperature.into());
    // Nothing is kept on the server: reasoning travels with the conversation instead.
    body.insert("store".into(), false.into());
    body.insert("include".into(), json!(["reasoning.encrypted_content"]));
    if !req.tools.is_empty() {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "name": t.name, "description": t.description,
                "parameters": t.parameters})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        let choice = match &req.tool_choice {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::Required => json!("required"),
            ToolChoice::None => json!("none"),
            ToolChoice::Function(name) => json!({"type": "function", "name": name}),
        };
        body.insert("tool_choice".into(), choice);
    }
    if let Some(format) = response_format.and_then(|f| f.get("json_schema")) {
        let mut format = format.clone();
        format["type"] = "json_schema".into();
        body.insert("text".into(), json!({"format": format}));
    }
    if s.stream {
        body.insert("stream".into(), true.into());
    }
    Value::Object(body)
}

/// A user message's content: its text, or its parts as input parts.
fn user_content(m: &Message) -> Value {
    match &m.content {
        Some(Content::Parts(parts)) => parts
            .iter()
            .map(|p| match p {
                ContentPart::Text { text } => json!({"type": "input_text", "text": text}),
                ContentPart::ImageUrl { image_url } => {
                    json!({"type": "input_image", "image_url": image_url.url})
                }
            })
            .collect(),
        _ => m.text().into(),
    }
}

/// A Responses answer as our response.
fn read(answer: &Value) -> Result<ChatResponse, LlmError> {
    let bad = |what: String| LlmError::new(LlmErrorKind::Decode, what);
    if let Some(error) = answer.get("error").filter(|e| !e.is_null()) {
        return Err(bad(format!(
            "the model's answer is an error: {}",
            crate::text::clip(&error.to_string(), 300)
        )));
    }
    let items = answer["output"].as_array().ok_or_else(|| {
        bad(format!(
            "the model's answer is not a Responses answer (no output): {}",
            crate::text::clip(&answer.to_string(), 200)
        ))
    })?;
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut kept = vec![];
    let mut calls = vec![];
    for item in items {
        match item["type"].as_str() {
            Some("message") => {
                for part in item["content"].as_array().into_iter().flatten() {
                    if part["type"] == "output_text" {
                        text.push_str(part["text"].as_str().unwrap_or_default());
                    }
                }
            }
            Some("reasoning") => {
                for key in ["summary", "content"] {
                    for part in item[key].as_array().into_iter().flatten() {
                        reasoning.push_str(part["text"].as_str().unwrap_or_default());
                    }
                }
                kept.push(item.clone());
            }
            Some("function_call") => calls.push(ToolCall {
                id: item["call_id"].as_str().unwrap_or_default().to_string(),
                kind: "function".into(),
                function: FunctionCall {
                    name: item["name"].as_str().unwrap_or_default().to_string(),
                    arguments: item["arguments"].as_str().unwrap_or_default().to_string(),
                },
            }),
            _ => {}
        }
    }
    let finish = match (
        answer["status"].as_str(),
        &answer["incomplete_details"]["reason"],
    ) {
        (Some("incomplete"), r) if r == "content_filter" => Some("content_filter"),
        (Some("incomplete"), _) => Some("length"),
        (Some("completed"), _) if !calls.is_empty() => Some("tool_calls"),
        (Some("completed"), _) => Some("stop"),
        _ => None,
    };
    let cached = answer["usage"]["input_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0);
    let mut message = Message::assistant(text);
    if message.text().is_empty() {
        message.content = None;
    }
    message.tool_calls = calls;
    message.reasoning_content = (!reasoning.trim().is_empty()).then_some(reasoning);
    message.provider_data = (!kept.is_empty()).then(|| json!({KEY: {"items": kept}}));
    Ok(ChatResponse {
        calls_in_text: false,
        id: answer["id"].as_str().unwrap_or_default().to_string(),
        model: answer["model"].as_str().unwrap_or_default().to_string(),
        message,
        finish_reason: finish.map(str::to_string),
        usage: Usage {
            prompt_tokens: answer["usage"]["input_tokens"].as_u64().unwrap_or(0),
            completion_tokens: answer["usage"]["output_tokens"].as_u64().unwrap_or(0),
            calls: 1,
            cache_read_tokens: cached,
            ..Default::default()
        },
    })
}

/// A streamed answer: its text deltas heard as they come, and the response its last event
/// (`response.completed`, or `response.incomplete` when cut short) carries whole.
#[derive(Default)]
struct Assembly {
    done: Option<Value>,
    events: usize,
    fault: Option<String>,
}

impl Assemble for Assembly {
    fn add(&mut self, data: &str) -> Option<String> {
        if self.fault.is_some() {
            return None;
        }
        let event = match super::provider::event_json(data, self.events) {
            Ok(Some(event)) => event,
            Ok(None) => return None,
            Err(fault) => {
                self.fault = Some(fault);
                return None;
            }
        };
        self.events += 1;
        match event["type"].as_str()? {
            "response.output_text.delta" => return event["delta"].as_str().map(str::to_string),
            "response.completed" | "response.incomplete" => {
                self.done = Some(event["response"].clone());
            }
            "error" | "response.failed" => {
                let error = if event["type"] == "error" {
                    &event
                } else {
                    &event["response"]["error"]
                };
                let said = error["message"]
                    .as_str()
                    .map_or_else(|| error.to_string(), str::to_string);
                self.fault = Some(format!(
                    "an error in the stream after {} pieces: {}",
                    self.events,
                    crate::text::clip(&said, 500)
                ));
            }
            _ => {}
        }
        None
    }

    fn complete(mut self: Box<Self>, _done: bool) -> Result<Value, Untaken> {
        if let Some(fault) = self.fault.take() {
            return Err(Untaken::Fault(fault));
        }
        self.done.take().ok_or(Untaken::BrokeOff(self.events))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{ToolSet, ToolSpec};

    /// A reasoning item (with its encrypted content) that came with a call goes back
    /// verbatim, just before the call, in the next request; the call's result follows it.
    #[test]
    fn a_reasoning_item_is_carried_to_the_next_turn_verbatim() {
        let reasoning = json!({"type": "reasoning", "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "Look it up."}],
            "encrypted_content": "gAAAAB-opaque=="});
        let answer = json!({"id": "resp_1", "model": "o4-mini", "status": "completed",
            "output": [reasoning, {"type": "function_call", "id": "fc_1", "call_id": "call_1",
                "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}],
            "usage": {"input_tokens": 50, "output_tokens": 20,
                "input_tokens_details": {"cached_tokens": 32}}});
        let r = read(&answer).unwrap();
        assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(r.message.reasoning_content.as_deref(), Some("Look it up."));
        assert_eq!(r.message.tool_calls[0].id, "call_1");
        assert_eq!((r.usage.prompt_tokens, r.usage.cache_read_tokens), (50, 32));

        let settings = LlmSettings::for_tests("http://127.0.0.1:1/v1", None);
        let ask = Message::user("Weather in Paris?");
        let result = Message::tool(&r.message.tool_calls[0], "Sunny");
        let tools = ToolSet::new(vec![ToolSpec {
            name: "get_weather".into(),
            description: "weather".into(),
            parameters: json!({"type": "object"}),
            variants: None,
        }]);
        let req = ChatRequest {
            messages: vec![&ask, &r.message, &result],
            tools,
            tool_choice: ToolChoice::Auto,
        };
        let body = request(&settings, &req, None);
        let input = body["input"].as_array().unwrap();
        assert_eq!(input[1], reasoning, "{body}");
        assert_eq!(input[2]["type"], "function_call");
        assert_eq!(input[2]["call_id"], "call_1");
        assert_eq!(
            input[3],
            json!({"type": "function_call_output", "call_id": "call_1", "output": "Sunny"})
        );
        assert_eq!(body["tools"][0]["name"], "get_weather");
        assert_eq!(body["store"], false);
    }

    /// A stream's text is heard as it comes; its `response.completed` is the answer; one
    /// that ends before it broke off, and an error event faults it.
    #[test]
    fn a_stream_is_its_completed_response() {
        let mut a: Box<dyn Assemble> = Box::<Assembly>::default();
        let delta = |t: &str| json!({"type": "response.output_text.delta", "delta": t}).to_string();
        assert_eq!(a.add(&delta("Hel")).as_deref(), Some("Hel"));
        assert_eq!(a.add(&delta("lo")).as_deref(), Some("lo"));
        let whole = json!({"id": "r", "status": "completed", "output": [{"type": "message",
            "content": [{"type": "output_text", "text": "Hello"}]}]});
        a.add(&json!({"type": "response.completed", "response": whole}).to_string());
        let tree = a.complete(false).unwrap();
        assert_eq!(read(&tree).unwrap().message.text(), "Hello");

        let mut cut: Box<dyn Assemble> = Box::<Assembly>::default();
        cut.add(&delta("Hel"));
        assert!(matches!(cut.complete(false), Err(Untaken::BrokeOff(1))));
        let mut failed: Box<dyn Assemble> = Box::<Assembly>::default();
        failed.add(&json!({"type": "error", "message": "overloaded"}).to_string());
        assert!(
            matches!(failed.complete(true), Err(Untaken::Fault(f)) if f.contains("overloaded"))
        );
    }
}
