//! `LlmClient`: one model profile, reached over HTTP (OpenAI-compatible or Azure) or
//! replayed from a cassette. Counts tokens before sending, enforces the input budget,
//! retries what is worth retrying and nothing else, and reports usage per call.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::Value;
#[cfg(test)]
use serde_json::json;
use tracing::Instrument;

use super::cassette::{Recorder, ReplayCursor, ReplayFrom};
use super::http::{Answer, Failure, LazyHttp, Route};
use super::retry::RetryPolicy;
use super::tokens;
use super::{ChatRequest, ChatResponse, Message, Role, ToolCall, Usage};

/// How the profile reaches its model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiType {
    /// `POST {base_url}/chat/completions` with a bearer key: OpenAI, Ollama, llama.cpp
    /// server, vLLM, LM Studio and other compatible servers.
    OpenAi,
    /// `POST {base_url}/openai/deployments/{model}/chat/completions?api-version=…` with an
    /// `api-key` header.
    Azure,
    /// Answers come from a recorded cassette, in order; nothing leaves the process.
    Replay,
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
    /// Azure's `api-version`.
    pub api_version: Option<String>,
    pub max_tokens: u32,
    /// Refuse to send a request whose messages exceed this many tokens.
    pub max_input_tokens: Option<usize>,
    pub temperature: f32,
    /// Limit for one HTTP exchange.
    pub timeout: Duration,
    pub retry: RetryPolicy,
    /// Prices per million input and output tokens, for cost accounting.
    pub input_price_per_mtok: f64,
    pub output_price_per_mtok: f64,
    /// Put prompts and completions on the `chat` span, cut to this many characters.
    pub capture_content: Option<usize>,
    /// The recorded exchanges for `ApiType::Replay`.
    pub cassette: Option<Arc<super::Cassette>>,
    /// The model accepts images (screenshots go to it as image parts).
    pub vision: bool,
}

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
            retry: RetryPolicy::default(),
            input_price_per_mtok: 0.0,
            output_price_per_mtok: 0.0,
            capture_content: None,
            cassette: Some(cassette),
            vision: false,
        }
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
    /// The cassette ran out or diverged from this run.
    Replay,
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

/// A handle on one model profile. Clones are cheap; what they share that changes is the
/// direct route's idle connections, behind a lock, and the HTTPS client once it is built.
#[derive(Clone)]
pub struct LlmClient {
    settings: Arc<LlmSettings>,
    /// The chat-completions URL, as text for messages, and how it is reached.
    endpoint: Arc<(String, Route)>,
    replay: Option<ReplayCursor>,
    recorder: Option<Recorder>,
}

impl std::fmt::Debug for LlmClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "LlmClient({}: {})",
            self.settings.profile, self.settings.model
        )
    }
}

/// One attempt's failure, before deciding whether to retry.
struct Attempt {
    error: LlmError,
    retryable: bool,
    retry_after: Option<Duration>,
}

impl LlmClient {
    /// A client for `settings`. A replay profile needs a cursor before use: see `rewind`.
    pub fn new(settings: Arc<LlmSettings>, http: LazyHttp, recorder: Option<Recorder>) -> Self {
        let url = endpoint(&settings);
        let key_header = match settings.api_type {
            ApiType::Azure => Some("api-key"),
            _ => None,
        };
        let route = Route::new(&url, http, settings.api_key.as_deref(), key_header);
        LlmClient {
            settings,
            endpoint: Arc::new((url, route)),
            replay: None,
            recorder,
        }
    }

    pub fn settings(&self) -> &LlmSettings {
        &self.settings
    }

    pub fn model(&self) -> &str {
        &self.settings.model
    }

    /// Tokens the request's messages would cost.
    pub fn count_tokens(&self, messages: &[&Message]) -> usize {
        tokens::count_messages(tokens::encoding_for(&self.settings.model), messages)
    }

    /// The request body as the wire sees it, serialised straight from the borrowed request;
    /// frozen messages go in as the JSON they were frozen with, and the tools as the set's
    /// ready-made JSON.
    fn body(&self, req: &ChatRequest<'_>) -> Vec<u8> {
        #[derive(serde::Serialize)]
        struct Wire<'a> {
            model: &'a str,
            max_tokens: u32,
            temperature: f32,
            #[serde(skip_serializing_if = "Option::is_none")]
            tool_choice: Option<Value>,
        }
        let s = &self.settings;
        let tools = req.tools.wire();
        let wire = Wire {
            model: &s.model,
            max_tokens: s.max_tokens,
            temperature: s.temperature,
            tool_choice: (!tools.is_empty()).then(|| req.tool_choice.to_wire()),
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
            m.write_json(&mut body);
        }
        body.push(b']');
        if !tools.is_empty() {
            body.extend_from_slice(br#","tools":"#);
            body.extend_from_slice(tools.as_bytes());
        }
        body.push(b'}');
        body
    }

    /// Ask the model. Retries 429, 5xx, timeouts and connection errors with backoff;
    /// fails at once on everything else.
    pub async fn chat(&self, req: &ChatRequest<'_>) -> Result<ChatResponse, LlmError> {
        let s = &self.settings;
        let span = tracing::info_span!(
            "chat",
            otel.name = format!("chat {}", s.model),
            otel.kind = "client",
            otel.status_code = tracing::field::Empty,
            gen_ai.operation.name = "chat",
            gen_ai.provider.name = provider_name(&s.api_type),
            gen_ai.request.model = %s.model,
            gen_ai.request.max_tokens = s.max_tokens,
            gen_ai.request.temperature = s.temperature as f64,
            gen_ai.response.id = tracing::field::Empty,
            gen_ai.response.model = tracing::field::Empty,
            gen_ai.response.finish_reasons = tracing::field::Empty,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            manus.cost = tracing::field::Empty,
            manus.llm.retries = tracing::field::Empty,
            gen_ai.input.messages = tracing::field::Empty,
            gen_ai.output.messages = tracing::field::Empty,
            error.type = tracing::field::Empty,
        );
        if let Some(max) = s.capture_content {
            let input = serde_json::to_string(&req.messages).unwrap_or_default();
            span.record("gen_ai.input.messages", crate::text::clip(&input, max));
        }
        let result = self.chat_inner(req).instrument(span.clone()).await;
        if span.is_disabled() {
            // Nobody records spans: skip making the values.
            return result;
        }
        match &result {
            Ok(r) => {
                span.record("gen_ai.response.id", r.id.as_str());
                span.record("gen_ai.response.model", r.model.as_str());
                let reasons =
                    serde_json::json!([r.finish_reason.as_deref().unwrap_or("")]).to_string();
                span.record("gen_ai.response.finish_reasons", reasons);
                span.record("gen_ai.usage.input_tokens", r.usage.prompt_tokens);
                span.record("gen_ai.usage.output_tokens", r.usage.completion_tokens);
                span.record("manus.cost", r.usage.cost);
                if let Some(max) = s.capture_content {
                    let output = serde_json::to_string(&[&r.message]).unwrap_or_default();
                    span.record("gen_ai.output.messages", crate::text::clip(&output, max));
                }
            }
            Err(e) => {
                span.record("error.type", format!("{:?}", e.kind));
                span.record("otel.status_code", "ERROR");
            }
        }
        result
    }

    async fn chat_inner(&self, req: &ChatRequest<'_>) -> Result<ChatResponse, LlmError> {
        let s = &self.settings;
        if let Some(limit) = s.max_input_tokens
            && let Err(input_tokens) = tokens::fits(&s.model, &req.messages, limit)
        {
            return Err(LlmError::new(
                LlmErrorKind::InputBudget,
                format!(
                    "the request needs {input_tokens} input tokens but [llm{}] max_input_tokens is {limit}; \
                     raise the limit or lower the agent's memory_tokens",
                    profile_suffix(&s.profile)
                ),
            ));
        }
        let body = bytes::Bytes::from(self.body(req));
        let mut resp = match (&s.api_type, &self.replay) {
            (ApiType::Replay, Some(cursor)) => {
                let first_user = req
                    .messages
                    .iter()
                    .find(|m| m.role == Role::User)
                    .map(|m| m.text().to_string());
                let raw = cursor.next(first_user).await?;
                parse_response(Completion::deserialize(&raw))?
            }
            (ApiType::Replay, None) => {
                return Err(LlmError::new(
                    LlmErrorKind::Replay,
                    "replay profile used without a cursor (call llm::rewind first)",
                ));
            }
            _ => {
                let answer = self.send_with_retries(&body).await?;
                match &self.recorder {
                    Some(rec) => {
                        let raw: Value = serde_json::from_slice(&answer).map_err(undecodable)?;
                        rec.record(&body, &raw).await;
                        parse_response(Completion::deserialize(&raw))?
                    }
                    // Read straight into the response: no JSON tree in between.
                    None => parse_response(serde_json::from_slice(&answer))?,
                }
            }
        };
        if resp.usage.prompt_tokens == 0 && resp.usage.completion_tokens == 0 {
            // Some local servers omit usage: count it ourselves.
            let bpe = tokens::encoding_for(&s.model);
            resp.usage.prompt_tokens = self.count_tokens(&req.messages) as u64;
            resp.usage.completion_tokens = tokens::count_message(bpe, &resp.message) as u64;
        }
        resp.usage.calls = 1;
        resp.usage.cost = (resp.usage.prompt_tokens as f64 * s.input_price_per_mtok
            + resp.usage.completion_tokens as f64 * s.output_price_per_mtok)
            / 1_000_000.0;
        Ok(resp)
    }

    /// The body of the model's successful answer.
    async fn send_with_retries(&self, body: &bytes::Bytes) -> Result<bytes::Bytes, LlmError> {
        let policy = self.settings.retry;
        let mut attempt = 0u32;
        loop {
            match self.send_once(body).await {
                Ok(v) => return Ok(v),
                Err(a) if a.retryable && attempt < policy.max_retries => {
                    attempt += 1;
                    let wait = policy.delay(attempt, a.retry_after);
                    tracing::Span::current().record("manus.llm.retries", attempt);
                    tracing::warn!(
                        profile = %self.settings.profile,
                        "model call failed ({}); retry {attempt}/{} in {:.1}s",
                        a.error, policy.max_retries, wait.as_secs_f64()
                    );
                    tokio::time::sleep(wait).await;
                }
                Err(a) if a.retryable => {
                    let mut e = a.error;
                    e.message = format!("{} (gave up after {} attempts)", e.message, attempt + 1);
                    return Err(e);
                }
                Err(a) => return Err(a.error),
            }
        }
    }

    async fn send_once(&self, body: &bytes::Bytes) -> Result<bytes::Bytes, Attempt> {
        let s = &self.settings;
        let (url, route) = &*self.endpoint;
        let started = Instant::now();
        let Answer {
            status: code,
            retry_after,
            body: answer,
        } = route.exchange(body, s.timeout).await.map_err(|f| {
            let (kind, retryable, what) = match f {
                Failure::Timeout => (
                    LlmErrorKind::Network,
                    true,
                    format!("no answer from {url} within {}s", s.timeout.as_secs()),
                ),
                Failure::Connect => (
                    LlmErrorKind::Network,
                    true,
                    format!("cannot connect to {url}: is the server running?"),
                ),
                Failure::Other(e) => (
                    LlmErrorKind::Network,
                    true,
                    format!("request to {url} failed: {e}"),
                ),
                Failure::Unsendable(why) => (
                    LlmErrorKind::BadRequest,
                    false,
                    format!(
                        "cannot send to {url}: {why}; check [llm{}]",
                        profile_suffix(&s.profile)
                    ),
                ),
            };
            Attempt {
                error: LlmError::new(kind, what),
                retryable,
                retry_after: None,
            }
        })?;
        tracing::debug!(
            status = code,
            ms = started.elapsed().as_millis() as u64,
            "model answered"
        );
        if (200..300).contains(&code) {
            return Ok(answer);
        }
        let text = String::from_utf8_lossy(&answer);
        let detail = server_message(&text);
        let profile = profile_suffix(&s.profile);
        let (kind, retryable, message) = match code {
            401 | 403 => (
                LlmErrorKind::Auth,
                false,
                format!(
                    "the model server refused the credentials ({code}: {detail}); check [llm{profile}] api_key or api_key_env"
                ),
            ),
            429 => (
                LlmErrorKind::RateLimited,
                true,
                format!("rate limited (429: {detail})"),
            ),
            500..=599 => (
                LlmErrorKind::Server,
                true,
                format!("server error ({code}: {detail})"),
            ),
            404 => (
                LlmErrorKind::BadRequest,
                false,
                format!("{url} answered 404 ({detail}); check [llm{profile}] base_url and model"),
            ),
            _ => (
                LlmErrorKind::BadRequest,
                false,
                format!("the model server rejected the request ({code}: {detail})"),
            ),
        };
        Err(Attempt {
            error: LlmError::new(kind, message),
            retryable,
            retry_after,
        })
    }
}

/// Where a profile's chat completions are posted.
fn endpoint(s: &LlmSettings) -> String {
    let base = s.base_url.trim_end_matches('/');
    match s.api_type {
        ApiType::Azure => format!(
            "{base}/openai/deployments/{}/chat/completions?api-version={}",
            s.model,
            s.api_version.as_deref().unwrap_or("2024-10-21")
        ),
        _ => format!("{base}/chat/completions"),
    }
}

/// Give a flow's clients their own place in their cassettes: one fresh cursor per cassette,
/// shared by every client that replays it, so the flow replays from the first answer (or,
/// resumed, from its first request's).
pub fn rewind<'a>(clients: impl IntoIterator<Item = &'a mut LlmClient>, from: ReplayFrom) {
    let mut cursors: Vec<(*const super::Cassette, ReplayCursor)> = vec![];
    for c in clients {
        let Some(cassette) = c.settings.cassette.clone() else {
            continue;
        };
        let key = Arc::as_ptr(&cassette);
        let cursor = match cursors.iter().find(|(k, _)| *k == key) {
            Some((_, cur)) => cur.clone(),
            None => {
                let cur = cassette.cursor(from);
                cursors.push((key, cur.clone()));
                cur
            }
        };
        c.replay = Some(cursor);
    }
}

/// `gen_ai.provider.name` for a profile.
fn provider_name(api: &ApiType) -> &'static str {
    match api {
        ApiType::OpenAi => "openai",
        ApiType::Azure => "azure.ai.openai",
        ApiType::Replay => "manus.replay",
    }
}

fn profile_suffix(profile: &str) -> String {
    if profile == "default" {
        String::new()
    } else {
        format!(".{profile}")
    }
}

/// The human part of an error body: OpenAI's `{"error": {"message": …}}` or the raw text.
fn server_message(text: &str) -> String {
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
    Ok(ChatResponse {
        id: Lenient::get(c.id).unwrap_or_default(),
        model: Lenient::get(c.model).unwrap_or_default(),
        message: Message {
            role: Role::Assistant,
            content: Lenient::get(m.content).map(super::Content::Text),
            tool_calls: m.tool_calls.unwrap_or_default(),
            tool_call_id: None,
            name: None,
            frozen: Default::default(),
        },
        finish_reason: Lenient::get(choice.finish_reason),
        usage: Usage {
            prompt_tokens,
            completion_tokens,
            calls: 1,
            cost: 0.0,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{ToolChoice, ToolSet, ToolSpec};

    #[test]
    fn parses_tool_calls_and_usage_from_bytes_and_from_a_recorded_tree() {
        let v = json!({"id": "x", "model": "m", "choices": [{"message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}}]},
            "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 7, "completion_tokens": 3}, "system_fingerprint": "fp"});
        let bytes = serde_json::to_vec(&v).unwrap();
        for r in [
            parse_response(serde_json::from_slice(&bytes)).unwrap(),
            parse_response(Completion::deserialize(&v)).unwrap(),
        ] {
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
        let err = |v: Value| {
            parse_response(Completion::deserialize(&v))
                .unwrap_err()
                .message
        };
        assert!(err(json!({"choices": []})).contains("has no choices"));
        assert!(err(json!({"choices": [{}]})).contains("has no message"));
        let broken = json!({"choices": [{"message": {"tool_calls": [{"function": 3}]}}]});
        assert!(err(broken).contains("not a chat completion"));
        let not_json = parse_response(serde_json::from_slice(b"<html>")).unwrap_err();
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
        for r in [
            parse_response(Completion::deserialize(&v)).unwrap(),
            parse_response(serde_json::from_slice(&bytes)).unwrap(),
        ] {
            assert_eq!((r.id.as_str(), r.model.as_str()), ("", ""));
            assert_eq!((r.message.content, r.finish_reason), (None, None));
            assert_eq!((r.usage.prompt_tokens, r.usage.completion_tokens), (0, 4));
        }
        let negative =
            br#"{"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": -3}}"#;
        let r = parse_response(serde_json::from_slice(negative)).unwrap();
        assert_eq!(r.usage.prompt_tokens, 0);
        let plain = json!({"choices": [{"message": {"content": "hello"}}]});
        let r = parse_response(Completion::deserialize(&plain)).unwrap();
        assert_eq!(r.message.text(), "hello");
        assert_eq!(r.usage.total(), 0);
    }

    /// A client of an OpenAI-compatible profile at `base_url` (nothing listens on port 1).
    fn client_for(base_url: &str, api_key: Option<&str>) -> LlmClient {
        let settings = LlmSettings {
            profile: "default".into(),
            api_type: ApiType::OpenAi,
            base_url: base_url.into(),
            model: "m".into(),
            api_key: api_key.map(str::to_string),
            api_version: None,
            max_tokens: 100,
            max_input_tokens: None,
            temperature: 0.5,
            timeout: Duration::from_secs(1),
            retry: RetryPolicy::default(),
            input_price_per_mtok: 0.0,
            output_price_per_mtok: 0.0,
            capture_content: None,
            cassette: None,
            vision: false,
        };
        LlmClient::new(Arc::new(settings), LazyHttp::default(), None)
    }

    #[tokio::test]
    async fn a_request_that_cannot_be_sent_fails_at_once_and_says_what_to_fix() {
        let hi = Message::user("hi");
        let req = ChatRequest {
            messages: vec![&hi],
            tools: ToolSet::default(),
            tool_choice: ToolChoice::Auto,
        };
        for client in [
            client_for("not a url", None),
            client_for("http://127.0.0.1:1/v1", Some("sk-\n1")),
        ] {
            let e = client.chat(&req).await.unwrap_err();
            assert_eq!(e.kind, LlmErrorKind::BadRequest, "{}", e.message);
            assert!(e.message.contains("check [llm]"), "{}", e.message);
            // Not retried: a retried failure says how many attempts it gave up after.
            assert!(!e.message.contains("gave up"), "{}", e.message);
        }
    }

    #[test]
    fn the_body_carries_the_tool_sets_json_only_when_there_are_tools() {
        let client = client_for("http://127.0.0.1:1/v1", None);
        let spec = |name: &str| ToolSpec {
            name: name.into(),
            description: format!("does \"{name}\""),
            parameters: json!({"type": "object", "properties": {}}),
        };
        let hi = Message::user("hi");
        let mut req = ChatRequest {
            messages: vec![&hi],
            tools: ToolSet::new(vec![spec("a"), spec("b")]),
            tool_choice: ToolChoice::Required,
        };
        let body: Value = serde_json::from_slice(&client.body(&req)).unwrap();
        assert_eq!(body["model"], "m");
        assert_eq!(body["messages"][0]["content"], "hi");
        assert_eq!(body["tool_choice"], "required");
        assert_eq!(body["tools"][1]["type"], "function");
        assert_eq!(body["tools"][1]["function"]["name"], "b");
        assert_eq!(body["tools"][1]["function"]["description"], "does \"b\"");
        assert_eq!(body["tools"][0]["function"]["parameters"]["type"], "object");

        req.tools = ToolSet::default();
        let body: Value = serde_json::from_slice(&client.body(&req)).unwrap();
        let keys: Vec<&str> = body
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        assert_eq!(keys, ["max_tokens", "messages", "model", "temperature"]);
    }

    #[test]
    fn frozen_messages_go_out_as_they_were_frozen_and_equal_their_twins() {
        let client = client_for("http://127.0.0.1:1/v1", None);
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
            serde_json::from_slice(&client.body(&req)).unwrap()
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
}
