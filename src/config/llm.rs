//! `[llm]` and `[llm.NAME]`: each named profile merged over the default, checked, with its
//! defaults. What a profile asks of the environment (the variable holding its API key) and
//! of the disk (its cassette) is named in its `LlmDraft`; `resolve` reads them.

use std::time::Duration;

use manus_actors::llm::{ApiType, CallMode, LlmSettings, RetryPolicy};
use toml::Spanned;

use super::error::{Lines, Problem};
use super::file::{ApiTypeToml, LlmSection, LlmToml, ToolCallsToml};
use super::values::{Bounds, Table, web_url};

/// A profile as the file says it.
#[derive(Debug, Clone)]
pub(super) enum LlmDraft {
    /// A model over HTTP; `api_key` is the one written in the file, if any. The variable
    /// `key_env` names, when set and not empty, wins over it.
    Http {
        settings: Box<LlmSettings>,
        key_env: Option<String>,
    },
    /// Answers replayed from `cassette` (`builtin:example-flow`, or a path); `key` names the
    /// key in messages.
    Replay {
        cassette: String,
        key: String,
        input_price_per_mtok: f64,
        output_price_per_mtok: f64,
    },
}

/// Every profile: `default` (`[llm]`) first, then the named ones in name order.
pub(super) fn profiles(
    section: &LlmSection,
    lines: Lines,
) -> Result<Vec<(String, LlmDraft)>, Problem> {
    let mut named: Vec<(String, LlmToml)> = vec![("default".into(), section.base.clone())];
    named.extend(
        section
            .named
            .iter()
            .map(|(k, v)| (k.clone(), v.over(&section.base))),
    );
    named
        .into_iter()
        .map(|(name, t)| Ok((name.clone(), profile(&name, &t, lines)?)))
        .collect()
}

/// `key` names a defined profile (`default` when unset), or the problem says which exist.
pub(super) fn named_profile(
    r: &Option<Spanned<String>>,
    key: &str,
    defined: &[(String, LlmDraft)],
    lines: Lines,
) -> Result<String, Problem> {
    match r {
        None => Ok("default".into()),
        Some(s) if defined.iter().any(|(n, _)| n == s.get_ref()) => Ok(s.get_ref().clone()),
        Some(s) => Err(Problem::at(
            lines.of(s),
            key,
            format!(
                "{key} = \"{}\": no such LLM profile; defined: {}",
                s.get_ref(),
                defined
                    .iter()
                    .map(|(n, _)| n.clone())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

/// Tokens a model may be asked to write in one answer.
const MAX_TOKENS: Bounds<i64> = Bounds::new(1, 1_000_000, " tokens");
/// Tokens a request may carry.
const MAX_INPUT_TOKENS: Bounds<i64> = Bounds::new(1, 100_000_000, " tokens");
/// The sampling temperature the OpenAI-style APIs accept.
const TEMPERATURE: Bounds<f64> = Bounds::new(0.0, 2.0, "");
/// Retries of a failed model call.
const RETRIES: Bounds<i64> = Bounds::new(0, 20, " retries");
/// The price of a million tokens, in the unit the budget (`[flow] max_cost`) counts.
const PRICE: Bounds<f64> = Bounds::new(0.0, 1_000_000.0, " per million tokens");

/// One profile with its defaults, checked.
fn profile(name: &str, t: &LlmToml, lines: Lines) -> Result<LlmDraft, Problem> {
    let table = Table::new(
        if name == "default" {
            "[llm]".to_string()
        } else {
            format!("[llm.{name}]")
        },
        lines,
    );
    let key = |k: &str| table.key(k);
    let problem = |k: &str, message: String| table.missing(k, message);
    let api_type = t.api_type.unwrap_or(ApiTypeToml::Openai);
    let input_price_per_mtok = table
        .number(&t.input_price_per_mtok, "input_price_per_mtok", PRICE)?
        .unwrap_or(0.0);
    let output_price_per_mtok = table
        .number(&t.output_price_per_mtok, "output_price_per_mtok", PRICE)?
        .unwrap_or(0.0);
    let cassette = table.text(&t.cassette, "cassette", "a cassette's path")?;
    let model = table.text(&t.model, "model", "the model's name on the server")?;
    let api_key = table.text(&t.api_key, "api_key", "the key")?;
    let api_key_env = table.text(&t.api_key_env, "api_key_env", "a variable's name")?;
    let api_version = table.text(&t.api_version, "api_version", "a version")?;
    let max_tokens = table.number(&t.max_tokens, "max_tokens", MAX_TOKENS)?;
    let max_input_tokens =
        table.number(&t.max_input_tokens, "max_input_tokens", MAX_INPUT_TOKENS)?;
    let temperature = table.number(&t.temperature, "temperature", TEMPERATURE)?;
    // A local server on a CPU may take minutes over one answer.
    let local = matches!(api_type, ApiTypeToml::Ollama | ApiTypeToml::Llamacpp);
    let timeout = table.seconds(
        &t.timeout_secs,
        "timeout_secs",
        Duration::from_secs(if local { 900 } else { 120 }),
    )?;
    let total_timeout = table.seconds(
        &t.total_timeout_secs,
        "total_timeout_secs",
        Duration::from_secs(if local { 3600 } else { 1800 }),
    )?;
    let max_retries = table.number(&t.max_retries, "max_retries", RETRIES)?;
    if api_type == ApiTypeToml::Replay {
        let cassette = cassette.ok_or_else(|| {
            problem(
                "cassette",
                format!("{} is required when api_type = \"replay\"", key("cassette")),
            )
        })?;
        return Ok(LlmDraft::Replay {
            cassette,
            key: key("cassette"),
            input_price_per_mtok,
            output_price_per_mtok,
        });
    }
    let base_url = match (api_type, &t.base_url) {
        (_, Some(u)) => web_url(u, &key("base_url"), lines)?,
        (ApiTypeToml::Ollama, None) => "http://127.0.0.1:11434/v1".into(),
        (ApiTypeToml::Llamacpp, None) => "http://127.0.0.1:8080/v1".into(),
        (ApiTypeToml::Azure, None) => {
            return Err(problem(
                "base_url",
                format!("{} is required when api_type = \"azure\"", key("base_url")),
            ));
        }
        _ => "https://api.openai.com/v1".into(),
    };
    let model = model.ok_or_else(|| {
        problem(
            "model",
            format!(
                "{} is required (the model's name on the server)",
                key("model")
            ),
        )
    })?;
    let key_env = api_key_env.or_else(|| {
        (api_type == ApiTypeToml::Openai && api_key.is_none()).then(|| "OPENAI_API_KEY".into())
    });
    let defaults = RetryPolicy::default();
    let settings = LlmSettings {
        profile: name.to_string(),
        api_type: if api_type == ApiTypeToml::Azure {
            ApiType::Azure
        } else {
            ApiType::OpenAi
        },
        base_url,
        api_key,
        api_version,
        max_tokens: max_tokens.map_or(4096, |n| n as u32),
        max_input_tokens: max_input_tokens.map(|n| n as usize),
        temperature: temperature.map_or(0.2, |t| t as f32),
        timeout,
        total_timeout,
        stream: t.stream.unwrap_or(true),
        retry: RetryPolicy {
            max_retries: max_retries.map_or(defaults.max_retries, |n| n as u32),
            retry_timeouts: !local,
            ..defaults
        },
        input_price_per_mtok,
        output_price_per_mtok,
        capture_content: None,
        cassette: None,
        vision: t.vision.unwrap_or_else(|| sees_images(&model)),
        // Local servers and small models often lack native tool calls: find what works.
        tool_calls: match t.tool_calls {
            Some(ToolCallsToml::Native) => CallMode::Native,
            Some(ToolCallsToml::Text) => CallMode::Text,
            Some(ToolCallsToml::Constrained) => CallMode::Constrained,
            Some(ToolCallsToml::Auto) => CallMode::Auto,
            None if local => CallMode::Auto,
            None => CallMode::Native,
        },
        auto_state: Default::default(),
        model,
    };
    Ok(LlmDraft::Http {
        settings: Box::new(settings),
        key_env,
    })
}

/// Whether a model name belongs to a family known to accept images; `[llm] vision` says
/// so explicitly for any other.
pub(super) fn sees_images(model: &str) -> bool {
    const FAMILIES: &[&str] = &[
        "gpt-4o",
        "gpt-4.1",
        "gpt-4-turbo",
        "gpt-5",
        "claude",
        "gemini",
        "gemma3",
        "llava",
        "pixtral",
        "vision",
        "-vl",
    ];
    let m = model.to_ascii_lowercase();
    FAMILIES.iter().any(|f| m.contains(f)) || ["o1", "o3", "o4"].iter().any(|o| m.starts_with(o))
}
