//! `LlmClient`: one model profile, reached over HTTP through its provider (the wire API:
//! `provider.rs`) or replayed from a cassette. Counts tokens before sending, enforces the input budget,
//! retries what is worth retrying and nothing else, and reports usage per call.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tracing::Instrument;

use crate::text::clip;

use super::calls::{self, CallMode};
use super::cassette::{Answered, Recorder, ReplayCursor, ReplayFrom};
use super::http::{Answer, Failure, LazyHttp, Route};
use super::provider::{Provider, Untaken, provider};
use super::settings::{ApiType, LlmError, LlmErrorKind, LlmSettings};
use super::wire::server_message;
use super::{ChatRequest, ChatResponse, Content, Message, Role, ToolChoice, ToolSet, tokens};

/// Where `auto` stands: native tool calls, then constrained, then text.
const AUTO_NATIVE: u8 = 0;
const AUTO_CONSTRAINED: u8 = 1;
const AUTO_TEXT: u8 = 2;

/// A handle on one model profile. Clones are cheap; what they share that changes is the
/// HTTP client (and its idle connections) once it is built.
#[derive(Clone)]
pub struct LlmClient {
    settings: Arc<LlmSettings>,
    /// The wire API (for a replay profile, that of the requests it compares: Chat
    /// Completions).
    provider: &'static dyn Provider,
    /// The provider's URL, as text for messages, and how it is reached.
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

/// Who hears an answer's text as it comes.
pub type Listener<'a> = &'a (dyn Fn(&str) + Sync);

/// A successful answer: whole bytes, or the completion a stream's pieces made.
enum Got {
    Whole(bytes::Bytes),
    Streamed {
        completion: serde_json::Value,
        raw: bytes::Bytes,
    },
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
        let provider = match settings.api_type {
            ApiType::Http(p) => p,
            ApiType::Replay => &super::wire::OPENAI,
        };
        let url = provider.url(&settings);
        let route = Route::new(&url, http, &provider.headers(settings.api_key.as_deref()));
        LlmClient {
            settings,
            provider,
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

    /// Ask the model. Retries 429, 5xx, timeouts and connection errors with backoff;
    /// fails at once on everything else.
    pub async fn chat(&self, req: &ChatRequest<'_>) -> Result<ChatResponse, LlmError> {
        self.chat_with(req, &|_| {}).await
    }

    /// `chat`, handing the answer's text to `on_text` piece by piece as a streamed answer
    /// brings it (once, whole, for a server that does not stream).
    pub async fn chat_with(
        &self,
        req: &ChatRequest<'_>,
        on_text: Listener<'_>,
    ) -> Result<ChatResponse, LlmError> {
        let s = &self.settings;
        let span = tracing::info_span!(
            "chat",
            otel.name = format!("chat {}", s.model),
            otel.kind = "client",
            otel.status_code = tracing::field::Empty,
            gen_ai.operation.name = "chat",
            gen_ai.provider.name = match s.api_type {
                ApiType::Http(p) => p.provider_name(),
                ApiType::Replay => "manus.replay",
            },
            gen_ai.request.model = %s.model,
            gen_ai.request.max_tokens = s.max_tokens,
            gen_ai.request.temperature = s.temperature as f64,
            gen_ai.response.id = tracing::field::Empty,
            gen_ai.response.model = tracing::field::Empty,
            gen_ai.response.finish_reasons = tracing::field::Empty,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            gen_ai.usage.cache_read.input_tokens = tracing::field::Empty,
            gen_ai.usage.cache_creation.input_tokens = tracing::field::Empty,
            manus.cost = tracing::field::Empty,
            manus.llm.retries = tracing::field::Empty,
            gen_ai.input.messages = tracing::field::Empty,
            gen_ai.output.messages = tracing::field::Empty,
            error.type = tracing::field::Empty,
        );
        if let Some(max) = s.capture_content {
            let input = serde_json::to_string(&req.messages).unwrap_or_default();
            span.record("gen_ai.input.messages", clip(&input, max));
        }
        let result = self.chat_inner(req, on_text).instrument(span.clone()).await;
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
                if r.usage.cache_read_tokens > 0 {
                    let read = r.usage.cache_read_tokens;
                    span.record("gen_ai.usage.cache_read.input_tokens", read);
                }
                if r.usage.cache_write_tokens > 0 {
                    let written = r.usage.cache_write_tokens;
                    span.record("gen_ai.usage.cache_creation.input_tokens", written);
                }
                span.record("manus.cost", r.usage.cost);
                if let Some(max) = s.capture_content {
                    let output = serde_json::to_string(&[&r.message]).unwrap_or_default();
                    span.record("gen_ai.output.messages", clip(&output, max));
                }
            }
            Err(e) => {
                span.record("error.type", format!("{:?}", e.kind));
                span.record("otel.status_code", "ERROR");
            }
        }
        result
    }

    async fn chat_inner(
        &self,
        req: &ChatRequest<'_>,
        on_text: Listener<'_>,
    ) -> Result<ChatResponse, LlmError> {
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
        let mut resp = self.ask(req, on_text).await?;
        if resp.usage.prompt_tokens == 0 && resp.usage.completion_tokens == 0 {
            // Some local servers omit usage: count it ourselves.
            let bpe = tokens::encoding_for(&s.model);
            resp.usage.prompt_tokens = self.count_tokens(&req.messages) as u64;
            resp.usage.completion_tokens = tokens::count_message(bpe, &resp.message) as u64;
        }
        resp.usage.calls = 1;
        let u = &resp.usage;
        let uncached = u
            .prompt_tokens
            .saturating_sub(u.cache_read_tokens + u.cache_write_tokens);
        resp.usage.cost = (uncached as f64 * s.input_price_per_mtok
            + u.cache_read_tokens as f64 * s.cache_read_price_per_mtok
            + u.cache_write_tokens as f64 * s.cache_write_price_per_mtok
            + u.completion_tokens as f64 * s.output_price_per_mtok)
            / 1_000_000.0;
        Ok(resp)
    }

    /// The tool-call mode this client uses now (`auto` resolved).
    pub fn call_mode(&self) -> CallMode {
        match self.settings.tool_calls {
            CallMode::Auto => match self.settings.auto_state.0.load(Ordering::Relaxed) {
                AUTO_NATIVE => CallMode::Native,
                AUTO_CONSTRAINED => CallMode::Constrained,
                _ => CallMode::Text,
            },
            mode => mode,
        }
    }

    /// `auto` moves on from `from` to `to` (once, for every client of the profile), saying why
    /// and what to set to start there.
    fn switch(&self, from: u8, to: u8, why: &str) {
        if self
            .settings
            .auto_state
            .0
            .compare_exchange(from, to, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            let mode = self.call_mode().name();
            tracing::warn!(
                profile = %self.settings.profile,
                "tool_calls = \"auto\": {why}; this run now uses {mode} tool calls \
                 (set [llm{}] tool_calls = \"{mode}\" to start with them)",
                profile_suffix(&self.settings.profile)
            );
        }
    }

    /// Ask in the mode the profile uses, moving `auto` on when the server refuses tools
    /// or a JSON schema, or the model answers a tool turn in plain text.
    async fn ask(
        &self,
        req: &ChatRequest<'_>,
        on_text: Listener<'_>,
    ) -> Result<ChatResponse, LlmError> {
        if req.tools.is_empty() || req.tool_choice == ToolChoice::None {
            return self.exchange(req, CallMode::Native, None, on_text).await;
        }
        let auto = self.settings.tool_calls == CallMode::Auto;
        match self.call_mode() {
            CallMode::Native | CallMode::Auto => {
                let answer = self.exchange(req, CallMode::Native, None, on_text).await;
                if !auto {
                    return answer;
                }
                let why = match &answer {
                    Err(e)
                        if e.kind == LlmErrorKind::BadRequest
                            && calls::refuses_tools(&e.message) =>
                    {
                        format!("the server refuses tools ({})", e.message)
                    }
                    Ok(r) if r.message.tool_calls.is_empty() => {
                        "the model answered a tool turn in plain text".to_string()
                    }
                    _ => return answer,
                };
                self.switch(AUTO_NATIVE, AUTO_CONSTRAINED, &why);
                let mut again = Box::pin(self.ask(req, on_text)).await?;
                if let Ok(first) = answer {
                    // The plain answer was paid for too.
                    again.usage.prompt_tokens += first.usage.prompt_tokens;
                    again.usage.completion_tokens += first.usage.completion_tokens;
                }
                Ok(again)
            }
            mode => {
                let shaped = calls::shape(mode, req);
                let plain = ChatRequest {
                    messages: shaped.messages.iter().collect(),
                    tools: ToolSet::default(),
                    tool_choice: req.tool_choice.clone(),
                };
                let answer = self
                    .exchange(&plain, mode, shaped.response_format.as_ref(), on_text)
                    .await;
                let mut resp = match answer {
                    Err(e)
                        if auto
                            && mode == CallMode::Constrained
                            && e.kind == LlmErrorKind::BadRequest
                            && calls::refuses_schema(&e.message) =>
                    {
                        let why = format!("the server refuses a JSON schema ({})", e.message);
                        self.switch(AUTO_CONSTRAINED, AUTO_TEXT, &why);
                        return Box::pin(self.ask(req, on_text)).await;
                    }
                    other => other?,
                };
                calls_from_text(&mut resp);
                Ok(resp)
            }
        }
    }

    /// One request as it goes out (with `response_format` when given), answered over HTTP
    /// or from the cassette, recorded when recording.
    async fn exchange(
        &self,
        req: &ChatRequest<'_>,
        mode: CallMode,
        response_format: Option<&serde_json::Value>,
        on_text: Listener<'_>,
    ) -> Result<ChatResponse, LlmError> {
        let s = &self.settings;
        let body = bytes::Bytes::from(self.provider.body(s, req, response_format));
        let resp = match (&s.api_type, &self.replay) {
            (ApiType::Replay, Some(cursor)) => {
                let first_user = req
                    .messages
                    .iter()
                    .find(|m| m.role == Role::User)
                    .map(|m| m.text().to_string());
                let replayed = cursor.next(first_user).await?;
                let api = replayed.api.as_deref().unwrap_or("openai");
                let recorded = provider(api).ok_or_else(|| {
                    LlmError::new(
                        LlmErrorKind::Replay,
                        format!(
                            "the cassette's answer was recorded from api {api:?}, which this build \
                             does not know (known: {})",
                            super::provider_names().join(", ")
                        ),
                    )
                })?;
                let mut resp = recorded.read_tree(&replayed.response)?;
                if replayed.tool_calls.is_some() {
                    // Recorded in the text or constrained mode: read as the run read it.
                    calls_from_text(&mut resp);
                }
                resp
            }
            (ApiType::Replay, None) => {
                return Err(LlmError::new(
                    LlmErrorKind::Replay,
                    "replay profile used without a cursor (call llm::rewind first)",
                ));
            }
            _ => {
                // A cassette names the API its answers are in, but for Chat Completions.
                let api = (self.provider.name() != "openai").then(|| self.provider.name());
                let p = self.provider;
                match (
                    self.send_with_retries(&body, on_text).await?,
                    &self.recorder,
                ) {
                    (Got::Streamed { completion, raw }, Some(rec)) => {
                        let answered = Answered::Streamed {
                            completion: &completion,
                            raw: &raw,
                        };
                        rec.record(&body, answered, recorded_mode(mode), api).await;
                        p.read_tree(&completion)?
                    }
                    (Got::Streamed { completion, .. }, None) => p.read_tree(&completion)?,
                    (Got::Whole(answer), Some(rec)) => {
                        let resp = p.read(&answer)?;
                        rec.record(&body, Answered::Whole(&answer), recorded_mode(mode), api)
                            .await;
                        on_text(resp.message.text());
                        resp
                    }
                    (Got::Whole(answer), None) => {
                        let resp = p.read(&answer)?;
                        on_text(resp.message.text());
                        resp
                    }
                }
            }
        };
        Ok(resp)
    }

    /// The body of the model's successful answer.
    async fn send_with_retries(
        &self,
        body: &bytes::Bytes,
        on_text: Listener<'_>,
    ) -> Result<Got, LlmError> {
        let policy = self.settings.retry;
        let mut attempt = 0u32;
        // Text heard from an attempt that then failed cannot be taken back: a retry is
        // heard by no one (its whole text still comes with the answer), so no listener
        // hears the start of an answer twice.
        let heard = std::sync::atomic::AtomicBool::new(false);
        let hearing = |text: &str| {
            heard.store(true, std::sync::atomic::Ordering::Relaxed);
            on_text(text);
        };
        let silent = |_: &str| {};
        loop {
            let listener: Listener<'_> = if heard.load(std::sync::atomic::Ordering::Relaxed) {
                &silent
            } else {
                &hearing
            };
            match self.send_once(body, listener).await {
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

    async fn send_once(&self, body: &bytes::Bytes, on_text: Listener<'_>) -> Result<Got, Attempt> {
        let s = &self.settings;
        let (url, route) = &*self.endpoint;
        let started = Instant::now();
        let mut assembly = self.provider.assembly();
        let mut on_event = |data: &str| {
            if let Some(text) = assembly.add(data) {
                on_text(&text);
            }
        };
        let exchanged = route
            .exchange(
                body,
                s.timeout,
                s.total_timeout,
                s.answer_limit(),
                &mut on_event,
            )
            .await;
        let Answer {
            status: code,
            retry_after,
            body: answer,
            streamed,
        } = exchanged.map_err(|f| {
            let suffix = profile_suffix(&s.profile);
            let (kind, retryable, what) = match f {
                Failure::Idle => (
                    LlmErrorKind::Network,
                    s.retry.retry_timeouts,
                    format!(
                        "{url} sent nothing for {}s; a slower model needs a higher [llm{suffix}] \
                         timeout_secs (the longest wait for the answer to start or go on)",
                        s.timeout.as_secs()
                    ),
                ),
                Failure::Timeout => (
                    LlmErrorKind::Network,
                    s.retry.retry_timeouts,
                    format!(
                        "the answer from {url} was not finished within {}s; raise [llm{suffix}] \
                         total_timeout_secs",
                        s.total_timeout.as_secs()
                    ),
                ),
                // Retried: a model that rambled on may not the next time.
                Failure::TooLarge => (
                    LlmErrorKind::TooLarge,
                    true,
                    format!(
                        "the answer from {url} passed {} bytes, the most [llm{suffix}] \
                         max_tokens = {} allows; the server ignores max_tokens or sends \
                         more than an answer",
                        s.answer_limit(),
                        s.max_tokens
                    ),
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
                    format!("cannot send to {url}: {why}; check [llm{suffix}]"),
                ),
            };
            Attempt {
                error: LlmError::new(kind, what),
                retryable,
                retry_after: None,
            }
        })?;
        if let Some(done) = streamed {
            let why = match assembly.complete(done) {
                Ok(tree) => {
                    return Ok(Got::Streamed {
                        completion: tree,
                        raw: answer,
                    });
                }
                Err(Untaken::Fault(fault)) => {
                    format!("the answer from {url} cannot be trusted: {fault}")
                }
                Err(Untaken::BrokeOff(chunks)) => {
                    format!("the answer from {url} broke off after {chunks} pieces")
                }
            };
            // Retried: the server may send the answer whole next time.
            return Err(Attempt {
                error: LlmError::new(LlmErrorKind::Network, why),
                retryable: true,
                retry_after: None,
            });
        }
        tracing::debug!(
            status = code,
            ms = started.elapsed().as_millis() as u64,
            "model answered"
        );
        if (200..300).contains(&code) {
            return Ok(Got::Whole(answer));
        }
        let text = String::from_utf8_lossy(&answer);
        let detail = server_message(&text);
        let profile = profile_suffix(&s.profile);
        let (kind, retryable, message) = match code {
            400..=599 if refuses_images(&detail) => (
                LlmErrorKind::ImagesUnsupported,
                false,
                format!(
                    "the model takes no images ({code}: {detail}); set [llm{profile}] vision = false"
                ),
            ),
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

/// Whether a server's error says it takes no image input (llama.cpp: "image input is not
/// supported"; others name images or vision as unsupported).
fn refuses_images(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    (m.contains("image") || m.contains("vision") || m.contains("multimodal"))
        && (m.contains("not supported")
            || m.contains("does not support")
            || m.contains("unsupported"))
}

/// The calls a text or constrained answer holds, taken out of its text.
fn calls_from_text(resp: &mut ChatResponse) {
    // The answer's own id (a replayed answer keeps it), or, where the server gives none,
    // its text: its calls' ids differ from other answers' in the step.
    let answer = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (&resp.id, resp.message.text()).hash(&mut h);
        format!("{:012x}", h.finish() >> 16)
    };
    let (rest, found) = calls::read_calls(resp.message.text(), &answer);
    resp.message.content = (!rest.is_empty()).then_some(Content::Text(rest));
    resp.message.tool_calls = found;
    resp.calls_in_text = true;
}

/// The mode a cassette notes beside an exchange: none for native calls.
fn recorded_mode(mode: CallMode) -> Option<&'static str> {
    (mode != CallMode::Native).then(|| mode.name())
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

fn profile_suffix(profile: &str) -> String {
    if profile == "default" {
        String::new()
    } else {
        format!(".{profile}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{ToolChoice, ToolSet};

    /// A client of an OpenAI-compatible profile at `base_url` (nothing listens on port 1).
    fn client_for(base_url: &str, api_key: Option<&str>) -> LlmClient {
        let settings = LlmSettings::for_tests(base_url, api_key);
        LlmClient::new(Arc::new(settings), LazyHttp::default(), None)
    }

    /// A server on 127.0.0.1 that answers its first requests with `bodies`, one each, as
    /// event streams (each event's data as given, then the connection closed); its port.
    async fn streams(bodies: Vec<Vec<String>>) -> (u16, tokio::task::JoinHandle<()>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            for events in bodies {
                let (mut conn, _) = listener.accept().await.unwrap();
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                // The request: its head, then its body (content-length bytes).
                loop {
                    let n = conn.read(&mut buf).await.unwrap();
                    seen.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&seen).to_ascii_lowercase();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let length: usize = text[..end]
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .map_or(0, |v| v.trim().parse().unwrap());
                        if seen.len() >= end + 4 + length {
                            break;
                        }
                    }
                }
                let body: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
                conn.write_all(head.as_bytes()).await.unwrap();
                conn.write_all(body.as_bytes()).await.unwrap();
                conn.shutdown().await.unwrap();
            }
        });
        (port, server)
    }

    /// A client of the server on `port` that tries `retries` more times, at once.
    fn retrying(port: u16, retries: u32) -> LlmClient {
        let mut settings = LlmSettings::for_tests(&format!("http://127.0.0.1:{port}/v1"), None);
        settings.retry.max_retries = retries;
        settings.retry.base_delay = std::time::Duration::from_millis(10);
        LlmClient::new(Arc::new(settings), LazyHttp::default(), None)
    }

    fn text(t: &str) -> String {
        serde_json::json!({"choices": [{"index": 0, "delta": {"content": t}}]}).to_string()
    }

    fn args(a: &str) -> String {
        serde_json::json!({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": "c1", "type": "function", "function": {"name": "bash", "arguments": a}}
        ]}}]})
        .to_string()
    }

    fn finished(reason: &str) -> String {
        serde_json::json!({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
            .to_string()
    }

    /// A streamed answer that broke off after some text is asked again; the listener heard
    /// the first attempt's text once and nothing of the retry, whose whole text is the
    /// answer.
    /// Calls read from text get ids of their answer: the same words in another answer get
    /// others (a step's results are told apart by id), the same answer read again (a
    /// replay) the same.
    #[test]
    fn worded_calls_have_ids_of_their_answer() {
        let answer = |id: &str| ChatResponse {
            id: id.into(),
            model: "m".into(),
            message: Message::assistant(r#"{"name": "bash", "arguments": {"command": "ls"}}"#),
            finish_reason: None,
            usage: crate::llm::Usage::default(),
            calls_in_text: false,
        };
        let ids = |id: &str| {
            let mut resp = answer(id);
            calls_from_text(&mut resp);
            assert!(resp.calls_in_text);
            resp.message.tool_calls[0].id.clone()
        };
        assert_eq!(ids("chatcmpl-1"), ids("chatcmpl-1"));
        assert_ne!(ids("chatcmpl-1"), ids("chatcmpl-2"));
        assert!(ids("").starts_with("call_") && ids("").ends_with("_0"));
    }

    #[tokio::test]
    async fn a_stream_cut_short_and_retried_is_not_heard_twice() {
        let (port, server) = streams(vec![
            vec![text("Hel"), text("lo")],
            vec![
                text("Hel"),
                text("lo"),
                text(" there"),
                finished("stop"),
                "[DONE]".into(),
            ],
        ])
        .await;
        let hi = Message::user("hi");
        let req = ChatRequest {
            messages: vec![&hi],
            tools: ToolSet::default(),
            tool_choice: ToolChoice::Auto,
        };
        let heard = std::sync::Mutex::new(String::new());
        let listen = |t: &str| heard.lock().unwrap().push_str(t);
        let resp = retrying(port, 1).chat_with(&req, &listen).await.unwrap();
        server.await.unwrap();
        assert_eq!(resp.message.text(), "Hello there");
        assert_eq!(*heard.lock().unwrap(), "Hello", "the start was heard once");
    }

    /// One mangled event, or the server's error event, in a streamed tool call fails the
    /// attempt, which is tried again: the call that runs is the whole one, never the pieces
    /// around the lost event joined (`rm -rf keep` for `rm -rf keep/scratch`). With no
    /// retry left, the failure says why.
    #[tokio::test]
    async fn a_mangled_or_error_event_fails_the_attempt_instead_of_joining_the_rest() {
        let whole = vec![
            args("{\"command\":\"rm -rf keep"),
            args("/scratch"),
            args("\"}"),
            finished("tool_calls"),
            "[DONE]".to_string(),
        ];
        let hi = Message::user("hi");
        let req = ChatRequest {
            messages: vec![&hi],
            tools: ToolSet::default(),
            tool_choice: ToolChoice::Auto,
        };
        for bad in [
            "{\"choices\": [{\"index\": 0, \"delta\": {\"tool_calls\": [{\"ind".to_string(),
            serde_json::json!({"error": {"message": "the model is overloaded"}}).to_string(),
        ] {
            // The bad event stands where the `/scratch` piece came.
            let mut mangled = whole.clone();
            mangled[1] = bad.clone();
            let (port, server) = streams(vec![mangled.clone(), whole.clone()]).await;
            let resp = retrying(port, 1).chat(&req).await.unwrap();
            server.abort();
            let calls = &resp.message.tool_calls;
            assert_eq!(calls.len(), 1, "{bad}");
            assert_eq!(
                calls[0].function.arguments, "{\"command\":\"rm -rf keep/scratch\"}",
                "{bad}"
            );

            let (port, server) = streams(vec![mangled]).await;
            let e = retrying(port, 0).chat(&req).await.unwrap_err();
            server.abort();
            assert_eq!(e.kind, LlmErrorKind::Network, "{}", e.message);
            assert!(e.message.contains("cannot be trusted"), "{}", e.message);
        }
    }

    /// A stream still going at `total_timeout_secs` fails as not finished in time, not as
    /// an answer that broke off.
    #[tokio::test]
    async fn a_stream_cut_by_the_total_limit_says_so() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf).await;
            let head =
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
            conn.write_all(head.as_bytes()).await.unwrap();
            // A piece every 100 ms, for up to 5 s (the client stops reading after 1 s).
            for _ in 0..50 {
                let piece = format!("data: {}\n\n", text("."));
                if conn.write_all(piece.as_bytes()).await.is_err() {
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        });
        let mut settings = LlmSettings::for_tests(&format!("http://127.0.0.1:{port}/v1"), None);
        settings.retry.max_retries = 0;
        settings.total_timeout = std::time::Duration::from_secs(1);
        let client = LlmClient::new(Arc::new(settings), LazyHttp::default(), None);
        let hi = Message::user("hi");
        let req = ChatRequest {
            messages: vec![&hi],
            tools: ToolSet::default(),
            tool_choice: ToolChoice::Auto,
        };
        let e = client.chat(&req).await.unwrap_err();
        server.abort();
        assert!(
            e.message.contains("was not finished within 1s"),
            "{}",
            e.message
        );
    }

    /// A server on 127.0.0.1 that answers every request with `head` and then `piece` over
    /// and over, until the client lets go; its port.
    async fn endless(head: &'static str, piece: String) -> (u16, tokio::task::JoinHandle<()>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let piece = piece.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = conn.read(&mut buf).await;
                    conn.write_all(head.as_bytes()).await.unwrap();
                    while conn.write_all(piece.as_bytes()).await.is_ok() {}
                });
            }
        });
        (port, server)
    }

    /// An answer that never ends, streamed or whole (with no length, or a length past the
    /// limit), fails its attempt once it passes the profile's byte limit, is tried again, and
    /// then fails saying so: it is never read into memory whole, and never waits for the
    /// total limit.
    #[tokio::test]
    async fn an_answer_past_the_byte_limit_fails_and_is_retried() {
        let sse = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
        let whole = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n\
                     {\"choices\":[{\"message\":{\"content\":\"";
        let said = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000000000\r\n\r\n\
                    {\"choices\":[{\"message\":{\"content\":\"";
        let hi = Message::user("hi");
        let req = ChatRequest {
            messages: vec![&hi],
            tools: ToolSet::default(),
            tool_choice: ToolChoice::Auto,
        };
        for (head, piece) in [
            (sse, format!("data: {}\n\n", text(&"x".repeat(10_000)))),
            (whole, "word ".repeat(2_000)),
            (said, "word ".repeat(2_000)),
        ] {
            let (port, server) = endless(head, piece).await;
            let client = retrying(port, 1);
            let limit = client.settings().answer_limit();
            let e = client.chat(&req).await.unwrap_err();
            server.abort();
            assert_eq!(e.kind, LlmErrorKind::TooLarge, "{}", e.message);
            assert!(
                e.message.contains(&format!("passed {limit} bytes"))
                    && e.message.contains("max_tokens = 100")
                    && e.message.contains("gave up after 2 attempts"),
                "{}",
                e.message
            );
        }
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
}
