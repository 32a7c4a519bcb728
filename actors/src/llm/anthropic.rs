//! The Anthropic Messages provider (`api_type = "anthropic"`): `POST {base_url}/v1/messages`
//! with `x-api-key` and `anthropic-version`. System messages become the top-level `system`
//! blocks, tool calls `tool_use` blocks and their results `tool_result` blocks in the next
//! user turn; extended thinking comes back as `thinking` / `redacted_thinking` blocks, kept
//! on the message (`provider_data.anthropic.thinking`) and sent back verbatim, signature and
//! all; a long system prompt and tool list are marked for the prompt cache, whose reads and
//! writes are counted apart. A stream's events are put together into the message a whole
//! answer would have been. Knows nothing of HTTP, retries or cassettes.

use serde_json::{Map, Value, json};

use super::provider::{Assemble, Provider, Untaken};
use super::settings::{LlmError, LlmErrorKind, LlmSettings};
use super::{
    ChatRequest, ChatResponse, Content, ContentPart, FunctionCall, Message, Role, ToolCall,
    ToolChoice, Usage,
};

pub(super) struct Anthropic;

pub(super) static ANTHROPIC: Anthropic = Anthropic;

/// The API version every request names.
const VERSION: &str = "2023-06-01";

/// The key under `Message::provider_data` this provider keeps its state in.
const KEY: &str = "anthropic";

/// Characters of system prompt and tools from which they are marked for the cache: about
/// the 1024 tokens below which Anthropic caches nothing (shorter marks are ignored, so
/// this only keeps short requests as they were).
const CACHE_FROM_CHARS: usize = 4096;

impl Provider for Anthropic {
    fn name(&self) -> &'static str {
        "anthropic"
    }
    fn label(&self) -> &'static str {
        "Anthropic Messages"
    }
    fn provider_name(&self) -> &'static str {
        "anthropic"
    }
    fn default_base_url(&self) -> Option<&'static str> {
        Some("https://api.anthropic.com")
    }
    fn key_env(&self) -> Option<&'static str> {
        Some("ANTHROPIC_API_KEY")
    }
    fn url(&self, s: &LlmSettings) -> String {
        format!("{}/v1/messages", s.base_url.trim_end_matches('/'))
    }
    fn headers(&self, api_key: Option<&str>) -> Vec<(&'static str, String)> {
        let mut headers = vec![("anthropic-version", VERSION.to_string())];
        if let Some(key) = api_key {
            headers.push(("x-api-key", key.to_string()));
        }
        headers
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

/// The Messages request for `req`.
fn request(s: &LlmSettings, req: &ChatRequest<'_>, response_format: Option<&Value>) -> Value {
    let mut system: Vec<Value> = vec![];
    let mut turns: Vec<(Role, Vec<Value>)> = vec![];
    for m in &req.messages {
        let (role, blocks) = match m.role {
            Role::System => {
                system.push(json!({"type": "text", "text": m.text()}));
                continue;
            }
            Role::User => (Role::User, user_blocks(m)),
            Role::Tool => (
                Role::User,
                vec![json!({"type": "tool_result",
                    "tool_use_id": m.tool_call_id.as_deref().unwrap_or_default(),
                    "content": m.text()})],
            ),
            Role::Assistant => (Role::Assistant, assistant_blocks(m)),
        };
        if blocks.is_empty() {
            continue;
        }
        // Turns alternate: results and the user's words after them make one user turn.
        match turns.last_mut() {
            Some((last, kept)) if *last == role => kept.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    let messages: Vec<Value> = turns
        .into_iter()
        .map(|(role, blocks)| {
            let role = if role == Role::User {
                "user"
            } else {
                "assistant"
            };
            // A turn of one text is written as that text, as most requests have it.
            let content = match blocks.as_slice() {
                [one] if one["type"] == "text" => one["text"].clone(),
                _ => Value::Array(blocks),
            };
            json!({"role": role, "content": content})
        })
        .collect();
    let mut tools: Vec<Value> = req
        .tools
        .iter()
        .map(
            |t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}),
        )
        .collect();
    let long = system
        .iter()
        .map(|b| b["text"].as_str().map_or(0, str::len))
        .sum::<usize>()
        + req.tools.wire().len()
        >= CACHE_FROM_CHARS;
    let mut body = Map::new();
    body.insert("model".into(), s.model.clone().into());
    let thinking = s.thinking_tokens;
    // The thinking budget is spent from max_tokens: the answer keeps its own.
    body.insert(
        "max_tokens".into(),
        (s.max_tokens + thinking.unwrap_or(0)).into(),
    );
    match thinking {
        Some(budget) => {
            body.insert(
                "thinking".into(),
                json!({"type": "enabled", "budget_tokens": budget}),
            );
        }
        // Anthropic's temperature runs from 0 to 1 (and must be left out with thinking).
        None => {
            body.insert("temperature".into(), s.temperature.min(1.0).into());
        }
    }
    if s.prompt_cache && long {
        // Tools come first in the cached prefix, then the system prompt: a mark on the last
        // of each caches the tools alone (shared by prompts that differ) and both together.
        for last in [tools.last_mut(), system.last_mut()].into_iter().flatten() {
            last["cache_control"] = json!({"type": "ephemeral"});
        }
    }
    if !system.is_empty() {
        body.insert("system".into(), Value::Array(system));
    }
    body.insert("messages".into(), Value::Array(messages));
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
        let choice = match &req.tool_choice {
            // Extended thinking takes only `auto` and `none`.
            ToolChoice::Required | ToolChoice::Function(_) if thinking.is_some() => {
                json!({"type": "auto"})
            }
            ToolChoice::Auto => json!({"type": "auto"}),
            ToolChoice::Required => json!({"type": "any"}),
            ToolChoice::None => json!({"type": "none"}),
            ToolChoice::Function(name) => json!({"type": "tool", "name": name}),
        };
        body.insert("tool_choice".into(), choice);
    }
    if let Some(schema) = response_format.and_then(|f| f.pointer("/json_schema/schema")) {
        body.insert(
            "output_config".into(),
            json!({"format": {"type": "json_schema", "schema": schema}}),
        );
    }
    if s.stream {
        body.insert("stream".into(), true.into());
    }
    Value::Object(body)
}

/// A user message's blocks: its text, and its images (a `data:` URL as base64 data, any
/// other as a URL).
fn user_blocks(m: &Message) -> Vec<Value> {
    let text = |t: &str| (!t.is_empty()).then(|| json!({"type": "text", "text": t}));
    match &m.content {
        None => vec![],
        Some(Content::Text(t)) => text(t).into_iter().collect(),
        Some(Content::Parts(parts)) => parts
            .iter()
            .filter_map(|p| match p {
                ContentPart::Text { text: t } => text(t),
                ContentPart::ImageUrl { image_url } => Some(image(&image_url.url)),
            })
            .collect(),
    }
}

fn image(url: &str) -> Value {
    let data = url
        .strip_prefix("data:")
        .and_then(|rest| rest.split_once(";base64,"));
    let source = match data {
        Some((media_type, data)) => {
            json!({"type": "base64", "media_type": media_type, "data": data})
        }
        None => json!({"type": "url", "url": url}),
    };
    json!({"type": "image", "source": source})
}

/// An assistant message's blocks: its thinking as it came (first, as Anthropic demands),
/// its text, its tool calls.
fn assistant_blocks(m: &Message) -> Vec<Value> {
    let mut blocks: Vec<Value> = m
        .provider_data
        .as_ref()
        .and_then(|d| d.pointer("/anthropic/thinking"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let text = m.text();
    if !text.is_empty() {
        blocks.push(json!({"type": "text", "text": text}));
    }
    for call in &m.tool_calls {
        // Arguments that are no JSON object (a model's slip) go as they were, in a field.
        let input = match serde_json::from_str::<Value>(&call.function.arguments) {
            Ok(object @ Value::Object(_)) => object,
            _ => json!({"arguments": call.function.arguments}),
        };
        blocks.push(json!({"type": "tool_use", "id": call.id,
            "name": call.function.name, "input": input}));
    }
    blocks
}

/// A Messages answer as our response.
fn read(answer: &Value) -> Result<ChatResponse, LlmError> {
    let bad = |what: String| LlmError::new(LlmErrorKind::Decode, what);
    if answer["type"] == "error" {
        return Err(bad(format!(
            "the model's answer is an error: {}",
            crate::text::clip(&answer["error"].to_string(), 300)
        )));
    }
    let blocks = answer["content"].as_array().ok_or_else(|| {
        bad(format!(
            "the model's answer is not a Messages answer (no content blocks): {}",
            crate::text::clip(&answer.to_string(), 200)
        ))
    })?;
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut thinking = vec![];
    let mut calls = vec![];
    for block in blocks {
        match block["type"].as_str() {
            Some("text") => text.push_str(block["text"].as_str().unwrap_or_default()),
            Some("thinking") => {
                reasoning.push_str(block["thinking"].as_str().unwrap_or_default());
                thinking.push(block.clone());
            }
            Some("redacted_thinking") => thinking.push(block.clone()),
            Some("tool_use") => calls.push(ToolCall {
                id: block["id"].as_str().unwrap_or_default().to_string(),
                kind: "function".into(),
                function: FunctionCall {
                    name: block["name"].as_str().unwrap_or_default().to_string(),
                    arguments: match &block["input"] {
                        // What a stream held that was no JSON, as it came.
                        Value::String(raw) => raw.clone(),
                        input => input.to_string(),
                    },
                },
            }),
            _ => {}
        }
    }
    let count = |key: &str| answer["usage"][key].as_u64().unwrap_or(0);
    let (cache_read, cache_write) = (
        count("cache_read_input_tokens"),
        count("cache_creation_input_tokens"),
    );
    let finish = answer["stop_reason"].as_str().map(|r| {
        match r {
            "end_turn" | "stop_sequence" | "pause_turn" => "stop",
            "max_tokens" => "length",
            "tool_use" => "tool_calls",
            "refusal" => "content_filter",
            other => other,
        }
        .to_string()
    });
    let mut message = Message::assistant(text);
    if message.text().is_empty() {
        message.content = None;
    }
    message.tool_calls = calls;
    message.reasoning_content = (!reasoning.trim().is_empty()).then_some(reasoning);
    message.provider_data = (!thinking.is_empty()).then(|| json!({KEY: {"thinking": thinking}}));
    Ok(ChatResponse {
        calls_in_text: false,
        id: answer["id"].as_str().unwrap_or_default().to_string(),
        model: answer["model"].as_str().unwrap_or_default().to_string(),
        message,
        finish_reason: finish,
        usage: Usage {
            prompt_tokens: count("input_tokens") + cache_read + cache_write,
            completion_tokens: count("output_tokens"),
            calls: 1,
            cache_read_tokens: cache_read,
            cache_write_tokens: cache_write,
            ..Default::default()
        },
    })
}

/// A streamed answer's events put together: `message_start` gives the message, each
/// `content_block_start` a block that its `content_block_delta`s fill (text, thinking and
/// its signature, a tool call's input as pieces of JSON), `message_delta` the stop reason
/// and the output's usage, `message_stop` the end.
#[derive(Default)]
struct Assembly {
    message: Option<Value>,
    blocks: Vec<Value>,
    /// Per block: the pieces of a tool call's input so far.
    inputs: Vec<String>,
    stopped: bool,
    events: usize,
    fault: Option<String>,
}

impl Assembly {
    fn take(&mut self, event: &Value) -> Option<String> {
        let index = event["index"].as_u64().map(|i| i as usize);
        match event["type"].as_str()? {
            "message_start" => self.message = Some(event["message"].clone()),
            "content_block_start" => {
                let i = index.filter(|&i| i <= 1024)?;
                if self.blocks.len() <= i {
                    self.blocks.resize(i + 1, Value::Null);
                    self.inputs.resize(i + 1, String::new());
                }
                self.blocks[i] = event["content_block"].clone();
            }
            "content_block_delta" => {
                let block = self.blocks.get_mut(index?)?;
                let delta = &event["delta"];
                let append = |block: &mut Value, key: &str, piece: &Value| {
                    let piece = piece.as_str().unwrap_or_default();
                    let was = block[key].as_str().unwrap_or_default();
                    block[key] = format!("{was}{piece}").into();
                };
                match delta["type"].as_str()? {
                    "text_delta" => {
                        append(block, "text", &delta["text"]);
                        return delta["text"].as_str().map(str::to_string);
                    }
                    "thinking_delta" => append(block, "thinking", &delta["thinking"]),
                    "signature_delta" => append(block, "signature", &delta["signature"]),
                    "input_json_delta" => {
                        self.inputs[index?].push_str(delta["partial_json"].as_str()?)
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                let i = index?;
                let raw = std::mem::take(self.inputs.get_mut(i)?);
                let block = self.blocks.get_mut(i)?;
                if block["type"] == "tool_use" && !raw.trim().is_empty() {
                    // Input that is no JSON is kept as it came, for the agent to refuse.
                    block["input"] = serde_json::from_str(&raw).unwrap_or(Value::String(raw));
                }
            }
            "message_delta" => {
                let message = self.message.get_or_insert_with(|| json!({}));
                for (key, value) in event["delta"].as_object()? {
                    message[key] = value.clone();
                }
                for (key, value) in event["usage"].as_object().into_iter().flatten() {
                    message["usage"][key] = value.clone();
                }
            }
            "message_stop" => self.stopped = true,
            _ => {}
        }
        None
    }
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
        if event["type"] == "error" {
            let said = event["error"]["message"]
                .as_str()
                .map_or_else(|| event["error"].to_string(), str::to_string);
            self.fault = Some(format!(
                "an error in the stream after {} pieces: {}",
                self.events,
                crate::text::clip(&said, 500)
            ));
            return None;
        }
        self.events += 1;
        self.take(&event)
    }

    fn complete(mut self: Box<Self>, _done: bool) -> Result<Value, Untaken> {
        if let Some(fault) = self.fault.take() {
            return Err(Untaken::Fault(fault));
        }
        if let Some(i) = self.blocks.iter().position(Value::is_null) {
            return Err(Untaken::Fault(format!(
                "content block {i} of {} never started: a piece of the answer was lost",
                self.blocks.len()
            )));
        }
        if !self.stopped {
            return Err(Untaken::BrokeOff(self.events));
        }
        let mut message = self.message.take().unwrap_or_else(|| json!({}));
        message["content"] = Value::Array(self.blocks);
        Ok(message)
    }
}
