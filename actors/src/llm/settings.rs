//! A model profile as data (`LlmSettings`, and how it reaches its model: `ApiType`) and
//! what a model call fails with (`LlmError`, `LlmErrorKind`). Knows nothing of HTTP, the
//! wire format or retrying.

use std::sync::Arc;
use std::time::Duration;

use super::calls::CallMode;
use super::provider::Provider;
use super::retry::RetryPolicy;

/// How the profile reaches its model.
#[derive(Clone, Copy)]
pub enum ApiType {
    /// Over HTTP, in this provider's wire format (`super::provider::PROVIDERS`).
    Http(&'static dyn Provider),
    /// Answers come from a recorded cassette, in order; nothing leaves the process.
    Replay,
}

impl ApiType {
    /// The `api_type` name.
    pub fn name(&self) -> &'static str {
        match self {
            ApiType::Http(p) => p.name(),
            ApiType::Replay => "replay",
        }
    }
}

impl PartialEq for ApiType {
    fn eq(&self, other: &ApiType) -> bool {
        self.name() == other.name()
    }
}

impl Eq for ApiType {}

impl std::fmt::Debug for ApiType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiType({})", self.name())
    }
}

/// One model profile, as data. The host maps `[llm]` / `[llm.NAME]` onto this.
#[derive(Debug, Clone)]
pub struct LlmSettings {
    /// The profile's name (`default` for `[llm]`), used in messages.
    pub profile: String,
    pub api_type: ApiType,
    pub base_url: String,
    pub model: String,
    pub api_key: Option<String>,
    /// Azure's `api-version`; Anthropic's `anthropic-version` header.
    pub api_version: Option<String>,
    pub max_tokens: u32,
    /// Refuse to send a request whose messages exceed this many tokens.
    pub max_input_tokens: Option<usize>,
    pub temperature: f32,
    /// The longest wait for an answer to start, and between two pieces of a streamed one
    /// (for a server that does not stream: for the whole answer).
    pub timeout: Duration,
    /// The longest a whole answer may take, however steadily it comes.
    pub total_timeout: Duration,
    /// Ask for answers as event streams (`stream: true`); a server that answers whole is
    /// read whole.
    pub stream: bool,
    pub retry: RetryPolicy,
    /// Prices per million input and output tokens, for cost accounting.
    pub input_price_per_mtok: f64,
    pub output_price_per_mtok: f64,
    /// Prices per million input tokens read from, and written to, the provider's prompt
    /// cache (`Usage::cache_read_tokens`, `cache_write_tokens`).
    pub cache_read_price_per_mtok: f64,
    pub cache_write_price_per_mtok: f64,
    /// Mark the system prompt and the tool list as cacheable, for a provider that caches
    /// only what it is told to (Anthropic), when they are long enough to be cached.
    pub prompt_cache: bool,
    /// Tokens the model may think for before answering, for a provider whose thinking is
    /// asked for (Anthropic's extended thinking); `None`: not asked.
    pub thinking_tokens: Option<u32>,
    /// Put prompts and completions on the `chat` span, cut to this many characters.
    pub capture_content: Option<usize>,
    /// The recorded exchanges for `ApiType::Replay`.
    pub cassette: Option<Arc<super::Cassette>>,
    /// The model accepts images (screenshots go to it as image parts).
    pub vision: bool,
    /// How tool calls are asked for and read.
    pub tool_calls: CallMode,
    /// Where `auto` stands, shared by every client of the profile (the planner's and each
    /// agent's, in every flow): the server and model are the same for all of them.
    pub auto_state: AutoState,
}

/// The mode `tool_calls = "auto"` has reached: native, then constrained, then text.
#[derive(Debug, Clone, Default)]
pub struct AutoState(pub(super) Arc<std::sync::atomic::AtomicU8>);

impl LlmSettings {
    /// Settings for a profile that replays a cassette.
    pub fn replay(profile: &str, cassette: Arc<super::Cassette>) -> Self {
        LlmSettings {
            profile: profile.into(),
            api_type: ApiType::Replay,
            base_url: String::new(),
            model: cassette.model().unwrap_or("replay").to_string(),
            api_key: None,
            api_version: None,
            max_tokens: 4096,
            max_input_tokens: None,
            temperature: 0.0,
            timeout: Duration::from_secs(60),
            total_timeout: Duration::from_secs(1800),
            stream: false,
            retry: RetryPolicy::default(),
            input_price_per_mtok: 0.0,
            output_price_per_mtok: 0.0,
            cache_read_price_per_mtok: 0.0,
            cache_write_price_per_mtok: 0.0,
            prompt_cache: true,
            thinking_tokens: None,
            capture_content: None,
            cassette: Some(cassette),
            vision: false,
            tool_calls: CallMode::Native,
            auto_state: AutoState::default(),
        }
    }
}

/// Bytes an answer may take on the wire per token of `max_tokens`. A streamed token comes
/// in an event of its own, some 250 bytes of framing on OpenAI and over 600 on Azure (each
/// event carries its content-filter notes); a whole answer takes a few bytes a token. So
/// this is three times the worst framing seen, and hundreds of times a whole answer's need.
const ANSWER_BYTES_PER_TOKEN: usize = 2048;

/// The answer limit of a profile with a small `max_tokens` is that of this many tokens.
const ANSWER_TOKENS_AT_LEAST: usize = 1024;

impl LlmSettings {
    /// The most bytes one answer may take on the wire, whole or streamed (derived from
    /// `max_tokens`: `ANSWER_BYTES_PER_TOKEN` a token, for at least
    /// `ANSWER_TOKENS_AT_LEAST` tokens). An answer past it fails its attempt: a server that
    /// ignores `max_tokens`, or sends something else, cannot fill the memory.
    pub fn answer_limit(&self) -> usize {
        (self.max_tokens as usize).max(ANSWER_TOKENS_AT_LEAST) * ANSWER_BYTES_PER_TOKEN
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LlmErrorKind {
    /// The request is larger than `max_input_tokens`.
    InputBudget,
    /// 401/403: the key is wrong or lacks access.
    Auth,
    /// 400/404/422: the server rejected the request as sent.
    BadRequest,
    /// 429 after every retry.
    RateLimited,
    /// 5xx after every retry.
    Server,
    /// Timeouts or connection failures after every retry.
    Network,
    /// The answer was not a chat completion.
    Decode,
    /// The answer passed `LlmSettings::answer_limit` bytes, after every retry.
    TooLarge,
    /// The cassette ran out or diverged from this run.
    Replay,
    /// The model or server takes no images (llama.cpp without a projector, text-only
    /// models): the request must go again without them.
    ImagesUnsupported,
}

#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct LlmError {
    pub kind: LlmErrorKind,
    pub message: String,
}

impl LlmError {
    pub fn new(kind: LlmErrorKind, message: impl Into<String>) -> Self {
        LlmError {
            kind,
            message: message.into(),
        }
    }
}

#[cfg(test)]
impl LlmSettings {
    /// An OpenAI-compatible profile `default` of model `m` at `base_url`.
    pub(super) fn for_tests(base_url: &str, api_key: Option<&str>) -> Self {
        LlmSettings {
            profile: "default".into(),
            api_type: ApiType::Http(&super::wire::OPENAI),
            base_url: base_url.into(),
            model: "m".into(),
            api_key: api_key.map(str::to_string),
            api_version: None,
            max_tokens: 100,
            max_input_tokens: None,
            temperature: 0.5,
            timeout: Duration::from_secs(1),
            total_timeout: Duration::from_secs(5),
            stream: true,
            retry: RetryPolicy::default(),
            input_price_per_mtok: 0.0,
            output_price_per_mtok: 0.0,
            cache_read_price_per_mtok: 0.0,
            cache_write_price_per_mtok: 0.0,
            prompt_cache: true,
            thinking_tokens: None,
            capture_content: None,
            cassette: None,
            vision: false,
            tool_calls: CallMode::Native,
            auto_state: AutoState::default(),
        }
    }
}
