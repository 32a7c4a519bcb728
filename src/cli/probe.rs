//! `config check --probe`: ask the default profile's server a few tiny questions and say
//! what it supports — an answer at all, streaming, native tool calls, a JSON schema for the
//! reply, images — and which `[llm] tool_calls` mode to pick, before a long run finds out.
//! Each question has its own short limits and no retries.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use manus_rt::Config;
use manus_rt::engine::llm::{
    ApiType, CallMode, ChatRequest, ChatResponse, LazyHttp, LlmClient, LlmError, LlmErrorKind,
    LlmSettings, Message, RetryPolicy, ToolChoice, ToolSet, ToolSpec,
};
use serde_json::json;

/// How long one probe may wait for its answer to start, and take in all.
const IDLE: Duration = Duration::from_secs(120);
const TOTAL: Duration = Duration::from_secs(300);

/// A 1x1 PNG.
const PIXEL: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

/// Probe the default profile; the exit code says whether the server answered at all.
pub async fn run(config: &Config) -> Result<String, String> {
    let Some(base) = config.llm.get("default") else {
        return Err("no [llm] profile to probe".into());
    };
    if base.api_type == ApiType::Replay {
        return Err("the [llm] profile replays a cassette: there is no server to probe".into());
    }
    let client = |mode: CallMode, stream: bool| {
        let settings = LlmSettings {
            timeout: IDLE,
            total_timeout: TOTAL,
            retry: RetryPolicy {
                max_retries: 0,
                ..base.retry
            },
            max_tokens: base.max_tokens.min(128),
            tool_calls: mode,
            stream,
            ..(**base).clone()
        };
        // Each question on connections of its own: with no retries, a pooled connection the
        // server closed after the last answer would fail the next question for nothing.
        LlmClient::new(Arc::new(settings), LazyHttp::default(), None)
    };
    let mut out = format!(
        "probing {} at {} (each question: up to {}s to start, {}s in all)\n",
        base.model,
        base.base_url,
        IDLE.as_secs(),
        TOTAL.as_secs()
    );
    let line = |out: &mut String, what: &str, verdict: String| {
        out.push_str(&format!("  {what:<14} {verdict}\n"));
    };

    let hi = Message::user("Say hello in one short sentence.");
    let plain = ask(&client(CallMode::Native, false), &hi, ToolSet::default()).await;
    match &plain.answer {
        Ok(_) => line(&mut out, "answers", format!("yes ({})", plain.took())),
        Err(e) => {
            line(&mut out, "answers", format!("no: {e}"));
            return Err(out);
        }
    }

    let streamed = ask(&client(CallMode::Native, true), &hi, ToolSet::default()).await;
    line(
        &mut out,
        "streaming",
        match &streamed.answer {
            Ok(_) if streamed.pieces > 1 => format!("yes ({} pieces)", streamed.pieces),
            Ok(_) => "no: the answer came whole (manus-rt reads it whole)".into(),
            Err(e) => format!("refused: {e} (set [llm] stream = false)"),
        },
    );

    let tools = ToolSet::new(vec![ToolSpec {
        name: "get_weather".into(),
        description: "Get the current weather for a city.".into(),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"}},
            "required": ["city"]}),
        variants: None,
    }]);
    let weather = Message::user("What is the weather in Paris? Use get_weather.");
    let native = ask(&client(CallMode::Native, true), &weather, tools.clone()).await;
    let native_ok = matches!(&native.answer, Ok(r) if !r.message.tool_calls.is_empty());
    line(
        &mut out,
        "tool calls",
        match &native.answer {
            Ok(_) if native_ok => format!("yes ({})", native.took()),
            Ok(_) => "ignored: tools were offered and the model answered in text (the server or \
                      its chat template may drop them)"
                .into(),
            Err(e) => format!("refused: {e}"),
        },
    );

    let schema = ask(&client(CallMode::Constrained, true), &weather, tools).await;
    let schema_ok = matches!(&schema.answer, Ok(r) if !r.message.tool_calls.is_empty());
    line(
        &mut out,
        "JSON schema",
        match &schema.answer {
            Ok(_) if schema_ok => format!("yes: a well-formed call came back ({})", schema.took()),
            Ok(_) => "ignored: the reply did not follow the schema".into(),
            Err(e) => format!("refused: {e}"),
        },
    );

    let look = Message::user_with_images(
        "What colour is this pixel?",
        [format!("data:image/png;base64,{PIXEL}")],
    );
    let image = ask(&client(CallMode::Native, true), &look, ToolSet::default()).await;
    line(
        &mut out,
        "images",
        match &image.answer {
            Ok(_) => format!(
                "accepted{}",
                if base.vision {
                    ""
                } else {
                    " (set [llm] vision = true to send screenshots)"
                }
            ),
            Err(e) if e.kind == LlmErrorKind::ImagesUnsupported => {
                "refused (keep [llm] vision = false)".into()
            }
            Err(e) => format!("failed: {e}"),
        },
    );

    let pick = if native_ok {
        "native"
    } else if schema_ok {
        "constrained"
    } else {
        "text"
    };
    out.push_str(&format!(
        "\nrecommended: [llm] tool_calls = \"{pick}\" (now: \"{}\")\n",
        base.tool_calls.name()
    ));
    Ok(out)
}

/// One probe's answer, how long it took and in how many streamed pieces.
struct Probe {
    answer: Result<ChatResponse, LlmError>,
    took: Duration,
    pieces: usize,
}

impl Probe {
    fn took(&self) -> String {
        format!("{:.1}s", self.took.as_secs_f64())
    }
}

async fn ask(client: &LlmClient, message: &Message, tools: ToolSet) -> Probe {
    let pieces = AtomicUsize::new(0);
    let started = Instant::now();
    let req = ChatRequest {
        messages: vec![message],
        tools,
        tool_choice: ToolChoice::Auto,
    };
    let answer = client
        .chat_with(&req, &|_| {
            pieces.fetch_add(1, Ordering::Relaxed);
        })
        .await;
    Probe {
        answer,
        took: started.elapsed(),
        pieces: pieces.into_inner(),
    }
}
