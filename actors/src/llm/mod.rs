//! The LLM client: OpenAI-compatible chat completions (OpenAI, Azure, Ollama, llama.cpp,
//! vLLM, LM Studio), replay of recorded exchanges, recording, token counting and retries.
//!
//! `LlmClient` is a cheap clone handed to each actor that talks to a model. It holds no
//! mutable state of its own: the replay cursor and the record file each live in one task
//! that callers reach through a channel.

mod calls;
mod cassette;
mod client;
#[cfg(test)]
mod fuzz;
mod http;
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
pub use retry::RetryPolicy;
pub use settings::{ApiType, AutoState, LlmError, LlmErrorKind, LlmSettings};
pub use types::*;
