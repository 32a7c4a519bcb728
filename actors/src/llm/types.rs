//! The chat-completions wire types, shaped exactly like the OpenAI API so that requests can
//! be sent, recorded and replayed without translation.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// One chat message. `content` is absent on assistant messages that only call tools.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    #[serde(default)]
    pub content: Option<Content>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A reasoning model's thinking before this answer (`reasoning_content`, `reasoning`
    /// or a `<think>` block), kept apart from the text and sent back with the message, as
    /// DeepSeek's thinking mode demands on a tool-call turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// What a provider's adapter must get back with this message and no other wire carries,
    /// under the adapter's name: Anthropic's thinking blocks with their signatures, say. The
    /// Chat Completions adapter never sends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_data: Option<Value>,
    /// Set by `freeze`: the message's wire JSON once first sent; not part of its value.
    #[serde(skip)]
    pub(crate) frozen: Frozen,
}

/// A frozen message's wire JSON, made on first need and shared by all its clones (a
/// memory's copy and every request's). Equal to any other, so that a frozen message equals
/// its thawed twin.
#[derive(Debug, Clone, Default)]
pub(crate) struct Frozen(Option<Arc<std::sync::OnceLock<Box<str>>>>);

impl PartialEq for Frozen {
    fn eq(&self, _: &Frozen) -> bool {
        true
    }
}

impl Message {
    fn plain(role: Role, text: impl Into<String>) -> Self {
        Message {
            role,
            content: Some(Content::Text(text.into())),
            tool_calls: vec![],
            tool_call_id: None,
            name: None,
            reasoning_content: None,
            provider_data: None,
            frozen: Frozen::default(),
        }
    }

    /// Mark the message as one that no longer changes, so that it is serialised once, when
    /// first sent, for every request that carries it or a clone of it: an agent's memory
    /// freezes what it keeps, so a long system prompt is not escaped again each round. A
    /// field changed afterwards would not reach the wire. Freezing a frozen message (or a
    /// clone of one) keeps the JSON it shares.
    pub(crate) fn freeze(&mut self) {
        if self.frozen.0.is_none() {
            self.frozen = Frozen(Some(Arc::default()));
        }
    }

    /// Whether the message is frozen and its JSON already made.
    #[cfg(test)]
    pub(crate) fn json_made(&self) -> bool {
        self.frozen
            .0
            .as_ref()
            .is_some_and(|json| json.get().is_some())
    }

    /// Append the message's wire JSON to `out`; a frozen message's is made once.
    pub(crate) fn write_json(&self, out: &mut Vec<u8>) {
        const ALWAYS: &str = "a message always serialises";
        match &self.frozen.0 {
            Some(json) => {
                let json = json.get_or_init(|| serde_json::to_string(self).expect(ALWAYS).into());
                out.extend_from_slice(json.as_bytes());
            }
            None => serde_json::to_writer(out, self).expect(ALWAYS),
        }
    }

    /// A user message of text followed by images (`data:` or `https:` URLs), for models
    /// that accept images.
    pub fn user_with_images(
        text: impl Into<String>,
        image_urls: impl IntoIterator<Item = String>,
    ) -> Self {
        let mut parts = vec![ContentPart::Text { text: text.into() }];
        parts.extend(image_urls.into_iter().map(|url| ContentPart::ImageUrl {
            image_url: ImageUrl { url },
        }));
        Message {
            content: Some(Content::Parts(parts)),
            ..Self::plain(Role::User, "")
        }
    }
    pub fn system(text: impl Into<String>) -> Self {
        Self::plain(Role::System, text)
    }
    pub fn user(text: impl Into<String>) -> Self {
        Self::plain(Role::User, text)
    }
    pub fn assistant(text: impl Into<String>) -> Self {
        Self::plain(Role::Assistant, text)
    }
    /// The observation for one tool call.
    pub fn tool(call: &ToolCall, text: impl Into<String>) -> Self {
        Message {
            role: Role::Tool,
            content: Some(Content::Text(text.into())),
            tool_calls: vec![],
            tool_call_id: Some(call.id.clone()),
            name: Some(call.function.name.clone()),
            reasoning_content: None,
            provider_data: None,
            frozen: Frozen::default(),
        }
    }
    /// The same message with `text` as its content (a tool result's stub, say).
    pub(crate) fn with_text(&self, text: impl Into<String>) -> Message {
        Message {
            content: Some(Content::Text(text.into())),
            frozen: Frozen::default(),
            ..self.clone()
        }
    }

    /// The text of the message (the first text part of a multi-part one).
    pub fn text(&self) -> &str {
        match &self.content {
            None => "",
            Some(Content::Text(t)) => t,
            Some(Content::Parts(parts)) => parts
                .iter()
                .find_map(|p| match p {
                    ContentPart::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .unwrap_or(""),
        }
    }

    /// The message with its images left out (its text parts kept, in order), for a model
    /// that takes none.
    pub fn without_images(&self) -> Message {
        let mut m = Message {
            frozen: Frozen::default(),
            ..self.clone()
        };
        if let Some(Content::Parts(parts)) = &self.content {
            let text: Vec<&str> = parts
                .iter()
                .filter_map(|p| match p {
                    ContentPart::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect();
            m.content = Some(Content::Text(text.join("\n")));
        }
        m
    }

    /// The images the message carries.
    pub fn images(&self) -> impl Iterator<Item = &ImageUrl> {
        let parts = match &self.content {
            Some(Content::Parts(parts)) => parts.as_slice(),
            _ => &[],
        };
        parts.iter().filter_map(|p| match p {
            ContentPart::ImageUrl { image_url } => Some(image_url),
            _ => None,
        })
    }
}

/// A message's content: plain text, or parts (text and images) for models that see images.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

/// One part of a multi-part message, in the chat-completions wire shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    Text { text: String },
    ImageUrl { image_url: ImageUrl },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageUrl {
    pub url: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    pub function: FunctionCall,
}

fn function_kind() -> String {
    "function".into()
}

/// The model's call: `arguments` is a JSON document in a string, and may be malformed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    #[serde(default)]
    pub arguments: String,
}

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: Value,
    /// For arguments that are a tagged enum (`parameters` shows them as one flat object):
    /// one alternative per variant with its own required arguments (`anyOf`), which the
    /// constrained tool-call mode holds the model to. Never on the wire as the tool's schema.
    #[serde(skip)]
    pub variants: Option<Value>,
}

/// The tools a request offers, with their wire form (the request's `tools` array) made once
/// with the set: an agent offers the same tools every round, so they are not serialised
/// again for each request. Cheap to clone; derefs to the specs.
#[derive(Debug, Clone, Default)]
pub struct ToolSet(Arc<ToolSetInner>);

#[derive(Debug, Default)]
struct ToolSetInner {
    specs: Vec<ToolSpec>,
    /// `[{"type":"function","function":spec}, …]`; empty for no tools.
    wire: String,
}

impl ToolSet {
    pub fn new(specs: Vec<ToolSpec>) -> ToolSet {
        #[derive(Serialize)]
        struct WireTool<'a> {
            #[serde(rename = "type")]
            kind: &'static str,
            function: &'a ToolSpec,
        }
        let wire = if specs.is_empty() {
            String::new()
        } else {
            let tools: Vec<WireTool> = specs
                .iter()
                .map(|function| WireTool {
                    kind: "function",
                    function,
                })
                .collect();
            serde_json::to_string(&tools).expect("tool specs always serialise")
        };
        ToolSet(Arc::new(ToolSetInner { specs, wire }))
    }

    /// The request's `tools` array as JSON (empty when there are no tools).
    pub fn wire(&self) -> &str {
        &self.0.wire
    }
}

impl std::ops::Deref for ToolSet {
    type Target = [ToolSpec];
    fn deref(&self) -> &[ToolSpec] {
        &self.0.specs
    }
}

impl FromIterator<ToolSpec> for ToolSet {
    fn from_iter<I: IntoIterator<Item = ToolSpec>>(iter: I) -> ToolSet {
        ToolSet::new(iter.into_iter().collect())
    }
}

impl From<Vec<ToolSpec>> for ToolSet {
    fn from(specs: Vec<ToolSpec>) -> ToolSet {
        ToolSet::new(specs)
    }
}

/// Whether and which tool the model must call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    Auto,
    Required,
    None,
    Function(String),
}

impl ToolChoice {
    pub fn to_wire(&self) -> Value {
        match self {
            ToolChoice::Auto => "auto".into(),
            ToolChoice::Required => "required".into(),
            ToolChoice::None => "none".into(),
            ToolChoice::Function(name) => {
                serde_json::json!({"type": "function", "function": {"name": name}})
            }
        }
    }
}

/// What a caller asks of the model.
#[derive(Debug, Clone)]
pub struct ChatRequest<'a> {
    /// Borrowed from where they are kept (an agent's memory, the runtime's planner prompt),
    /// so building a request copies no message.
    pub messages: Vec<&'a Message>,
    /// Shared with whoever offers the same tools every round, not copied per request.
    pub tools: ToolSet,
    pub tool_choice: ToolChoice,
}

/// Token usage, added up per call, per agent, per step and per flow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// How many model calls the figures cover.
    pub calls: u64,
    /// What the tokens cost, from the profiles' price table (0 where no price is set).
    #[serde(default)]
    pub cost: f64,
    /// Of `prompt_tokens`, those read from the provider's prompt cache, and those written
    /// to it (priced apart: `LlmSettings::cache_read_price_per_mtok`, `…write…`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read_tokens: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Usage {
    pub fn add(&mut self, other: Usage) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.calls += other.calls;
        self.cost += other.cost;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
    }
    pub fn total(&self) -> u64 {
        self.prompt_tokens + self.completion_tokens
    }
}

/// The model's answer to one request.
#[derive(Debug, Clone)]
pub struct ChatResponse {
    pub id: String,
    pub model: String,
    pub message: Message,
    pub finish_reason: Option<String>,
    pub usage: Usage,
    /// The answer's tool calls were read from its text (the text or constrained tool-call
    /// mode, live or as recorded), not sent natively.
    pub calls_in_text: bool,
}
