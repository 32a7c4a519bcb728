//! `[llm]` and `[llm.NAME]`: each named profile merged over the default, checked, with its
//! defaults. What a profile asks of the environment (the variable holding its API key) and
//! of the disk (its cassette) is named in its `LlmDraft`; `resolve` reads them.

use std::time::Duration;

use manus_actors::llm::{ApiType, CallMode, LlmSettings, Provider, RetryPolicy};
use toml::Spanned;

use super::error::{Lines, Problem};
use super::file::{LlmSection, LlmToml, ToolCallsToml};
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
        /// The recording's `max_tokens`, which a cut-off answer's report quotes.
        max_tokens: Option<u32>,
    },
}

/// What `api_type` names: a provider, or replay. `ollama` and `llamacpp` are Chat
/// Completions on a local server (its usual address, local timeouts and `auto` tool calls).
#[derive(Clone, Copy)]
enum Api {
    Http {
        provider: &'static dyn Provider,
        local: Option<&'static str>,
    },
    Replay,
}

/// The `api_type` of a profile, or the problem naming what it may be.
fn api_type(t: &LlmToml, table: &Table, lines: Lines) -> Result<Api, Problem> {
    let Some(v) = &t.api_type else {
        return Ok(Api::Http {
            provider: manus_actors::llm::provider("openai").expect("openai is a provider"),
            local: None,
        });
    };
    let local = match v.get_ref().as_str() {
        "replay" => return Ok(Api::Replay),
        "ollama" => Some("http://127.0.0.1:11434/v1"),
        "llamacpp" => Some("http://127.0.0.1:8080/v1"),
        _ => None,
    };
    let name = if local.is_some() {
        "openai"
    } else {
        v.get_ref()
    };
    match manus_actors::llm::provider(name) {
        Some(provider) => Ok(Api::Http { provider, local }),
        None => {
            let key = table.key("api_type");
            let mut names = manus_actors::llm::provider_names();
            names.extend(["ollama", "llamacpp", "replay"]);
            Err(Problem::at(
                lines.of(v),
                &key,
                format!(
                    "{key} = {:?} is not a wire API this build knows: use one of {}",
                    v.get_ref(),
                    names.join(", ")
                ),
            ))
        }
    }
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
/// Tokens a model may think for before its answer (Anthropic's minimum is 1024).
const THINKING_TOKENS: Bounds<i64> = Bounds::new(1024, 1_000_000, " tokens");
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
    let api_type = api_type(t, &table, lines)?;
    let input_price_per_mtok = table
        .number(&t.input_price_per_mtok, "input_price_per_mtok", PRICE)?
        .unwrap_or(0.0);
    let output_price_per_mtok = table
        .number(&t.output_price_per_mtok, "output_price_per_mtok", PRICE)?
        .unwrap_or(0.0);
    // Anthropic's ratios: a cache read costs a tenth of an input token, a write a quarter more.
    let cache_read_price_per_mtok = table
        .number(
            &t.cache_read_price_per_mtok,
            "cache_read_price_per_mtok",
            PRICE,
        )?
        .unwrap_or(input_price_per_mtok * 0.1);
    let cache_write_price_per_mtok = table
        .number(
            &t.cache_write_price_per_mtok,
            "cache_write_price_per_mtok",
            PRICE,
        )?
        .unwrap_or(input_price_per_mtok * 1.25);
    let thinking_tokens = table.number(&t.thinking_tokens, "thinking_tokens", THINKING_TOKENS)?;
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
    let local = matches!(api_type, Api::Http { local: Some(_), .. });
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
    let (provider, local_url) = match api_type {
        Api::Http { provider, local } => (provider, local),
        Api::Replay => {
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
                max_tokens: max_tokens.map(|n| n as u32),
            });
        }
    };
    let base_url = match (&t.base_url, local_url.or(provider.default_base_url())) {
        (Some(u), _) => web_url(u, &key("base_url"), lines)?,
        (None, Some(default)) => default.into(),
        (None, None) => {
            return Err(problem(
                "base_url",
                format!(
                    "{} is required when api_type = \"{}\"",
                    key("base_url"),
                    provider.name()
                ),
            ));
        }
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
        (!local && api_key.is_none())
            .then(|| provider.key_env().map(str::to_string))
            .flatten()
    });
    let defaults = RetryPolicy::default();
    let settings = LlmSettings {
        profile: name.to_string(),
        api_type: ApiType::Http(provider),
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
        cache_read_price_per_mtok,
        cache_write_price_per_mtok,
        prompt_cache: t.prompt_cache.unwrap_or(true),
        thinking_tokens: thinking_tokens.map(|n| n as u32),
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
