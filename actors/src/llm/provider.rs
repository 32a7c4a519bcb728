//! The provider seam: one `Provider` per wire API turns our request (messages, tools, the
//! tool choice, streaming, limits) into that API's request, and its answer, whole or as an
//! event stream, back into our `ChatResponse` (text, tool calls, reasoning, usage, finish
//! reason, and on the message whatever the API needs back next turn). Everything else (the
//! HTTP exchange, retries, timeouts, budgets, tracing, record and replay, the text and
//! constrained tool-call modes) is the client's, written once above this seam.
//!
//! Adding a wire API is one module implementing `Provider` (declared in `mod.rs`) and one
//! line in `PROVIDERS`.

use serde_json::Value;

use super::settings::{LlmError, LlmSettings};
use super::{ChatRequest, ChatResponse};

/// One wire API. Implementations hold no state: they are `static`s.
pub trait Provider: Send + Sync + 'static {
    /// Its `api_type` in the config.
    fn name(&self) -> &'static str;
    /// What `config check` calls it.
    fn label(&self) -> &'static str;
    /// `gen_ai.provider.name` on the `chat` span (the GenAI semantic conventions' value).
    fn provider_name(&self) -> &'static str;
    /// `base_url` when the profile names none; `None`: the profile must name one.
    fn default_base_url(&self) -> Option<&'static str>;
    /// The variable the API key is read from when the profile names neither `api_key` nor
    /// `api_key_env`.
    fn key_env(&self) -> Option<&'static str>;
    /// Where a profile's requests are posted.
    fn url(&self, s: &LlmSettings) -> String;
    /// The headers every request carries: the key's, and any the API demands.
    fn headers(&self, api_key: Option<&str>) -> Vec<(&'static str, String)>;
    /// The request body; `response_format` is the constrained mode's JSON schema, if any.
    fn body(
        &self,
        s: &LlmSettings,
        req: &ChatRequest<'_>,
        response_format: Option<&Value>,
    ) -> Vec<u8>;
    /// A whole answer, read from its bytes.
    fn read(&self, answer: &[u8]) -> Result<ChatResponse, LlmError> {
        let tree = serde_json::from_slice(answer).map_err(|e| {
            LlmError::new(
                super::LlmErrorKind::Decode,
                format!("the model's answer is not JSON: {e}"),
            )
        })?;
        self.read_tree(&tree)
    }
    /// A whole answer as a JSON tree: a recorded one, or what a stream's events made.
    fn read_tree(&self, answer: &Value) -> Result<ChatResponse, LlmError>;
    /// A fresh assembly for one streamed answer.
    fn assembly(&self) -> Box<dyn Assemble>;
}

/// A streamed answer being put together into the whole answer it stands for (in the API's
/// own whole-answer shape, which `Provider::read_tree` reads and a cassette keeps).
pub trait Assemble: Send {
    /// Take one event's data; the answer's text it adds, if any.
    fn add(&mut self, data: &str) -> Option<String>;
    /// The whole answer, if the stream can be taken; `done`: it ended with `[DONE]`.
    fn complete(self: Box<Self>, done: bool) -> Result<Value, Untaken>;
}

/// One stream event's data as the JSON object every API's events are: `Ok(None)` for a
/// blank keep-alive, `Err` the fault to keep when it is no such object (`pieces`: how many
/// came before it).
pub(super) fn event_json(data: &str, pieces: usize) -> Result<Option<Value>, String> {
    if data.trim().is_empty() {
        return Ok(None);
    }
    match serde_json::from_str::<Value>(data) {
        Ok(event) if event.is_object() => Ok(Some(event)),
        _ => Err(format!(
            "an event that is no piece of an answer after {pieces} pieces: {}",
            crate::text::clip(data, 200)
        )),
    }
}

/// Why a streamed answer is not taken.
#[derive(Debug)]
pub enum Untaken {
    /// An event was no piece of an answer, or the server's error.
    Fault(String),
    /// It ended before the API's end, after this many pieces.
    BrokeOff(usize),
}

/// Every wire API, by `api_type`.
pub static PROVIDERS: &[&dyn Provider] = &[
    &super::wire::OPENAI,
    &super::wire::AZURE,
    &super::anthropic::ANTHROPIC,
    &super::responses::RESPONSES,
    &super::gemini::GEMINI,
];

/// The provider `api_type = name` means.
pub fn provider(name: &str) -> Option<&'static dyn Provider> {
    PROVIDERS.iter().copied().find(|p| p.name() == name)
}

/// The names `api_type` takes for a provider, for messages.
pub fn provider_names() -> Vec<&'static str> {
    PROVIDERS.iter().map(|p| p.name()).collect()
}
