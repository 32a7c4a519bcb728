//! The LLM client: one seam for wire APIs (`provider`: OpenAI-compatible chat completions
//! for OpenAI, Azure, Ollama, llama.cpp, vLLM, LM Studio; Anthropic's Messages API; OpenAI's Responses API; Gemini), replay
//! of recorded exchanges, recording, token counting and retries.
//!
//! `LlmClient` is a cheap clone handed to each actor that talks to a model. It holds no
//! mutable state of its own: the replay cursor and the record file each live in one task
//! that callers reach through a channel.

mod anthropic;
mod calls;
mod cassette;
mod client;
#[cfg(test)]
mod fuzz;
mod gemini;
mod http;
mod provider;
mod responses;
mod retry;
mod settings;
mod stream;
pub mod tokens;
mod types;
mod wire;

pub use calls::CallMode;
pub use cassette::{CASE_PLACEHOLDER, Cassette, Exchange, Recorder, ReplayCursor, ReplayFrom};
pub use client::{Listener, LlmClient, rewind};
pub use http::LazyHttp;
pub use provider::{Assemble, PROVIDERS, Provider, Untaken, provider, provider_names};
pub use retry::RetryPolicy;
pub use settings::{ApiType, AutoState, LlmError, LlmErrorKind, LlmSettings};
pub use types::*;
