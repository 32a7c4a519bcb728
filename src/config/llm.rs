//! `[llm]` and `[llm.NAME]`: each named profile merged over the default, checked, with its
//! defaults. What a profile asks of the environment (the variable holding its API key) and
//! of the disk (its cassette) is named in its `LlmDraft`; `resolve` reads them.

use std::time::Duration;

use manus_actors::llm::{ApiType, LlmSettings, RetryPolicy};
use toml::Spanned;

use super::error::{Lines, Problem};
use super::file::{ApiTypeToml, LlmSection, LlmToml};

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
pub(super) fn profiles(section: &LlmSection) -> Result<Vec<(String, LlmDraft)>, Problem> {
    let mut named: Vec<(String, LlmToml)> = vec![("default".into(), section.base.clone())];
    named.extend(
        section
            .named
            .iter()
            .map(|(k, v)| (k.clone(), v.over(&section.base))),
    );
    named
        .into_iter()
        .map(|(name, t)| Ok((name.clone(), profile(&name, &t)?)))
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

/// One profile with its defaults, checked.
fn profile(name: &str, t: &LlmToml) -> Result<LlmDraft, Problem> {
    let key = |k: &str| {
        if name == "default" {
            format!("[llm] {k}")
        } else {
            format!("[llm.{name}] {k}")
        }
    };
    let problem = |k: &str, message: String| Problem::at(None, key(k), message);
    let api_type = t.api_type.unwrap_or(ApiTypeToml::Openai);
    if api_type == ApiTypeToml::Replay {
        let cassette = t.cassette.clone().ok_or_else(|| {
            problem(
                "cassette",
                format!("{} is required when api_type = \"replay\"", key("cassette")),
            )
        })?;
        return Ok(LlmDraft::Replay {
            cassette,
            key: key("cassette"),
            input_price_per_mtok: t.input_price_per_mtok.unwrap_or(0.0),
            output_price_per_mtok: t.output_price_per_mtok.unwrap_or(0.0),
        });
    }
    let base_url = match (api_type, &t.base_url) {
        (_, Some(u)) => u.clone(),
        (ApiTypeToml::Ollama, None) => "http://127.0.0.1:11434/v1".into(),
        (ApiTypeToml::Azure, None) => {
            return Err(problem(
                "base_url",
                format!("{} is required when api_type = \"azure\"", key("base_url")),
            ));
        }
        _ => "https://api.openai.com/v1".into(),
    };
    if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
        return Err(problem(
            "base_url",
            format!(
                "{} = \"{base_url}\" must start with http:// or https://",
                key("base_url")
            ),
        ));
    }
    let model = t.model.clone().ok_or_else(|| {
        problem(
            "model",
            format!(
                "{} is required (the model's name on the server)",
                key("model")
            ),
        )
    })?;
    let key_env = t.api_key_env.clone().or_else(|| {
        (api_type == ApiTypeToml::Openai && t.api_key.is_none()).then(|| "OPENAI_API_KEY".into())
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
        api_key: t.api_key.clone(),
        api_version: t.api_version.clone(),
        max_tokens: t.max_tokens.unwrap_or(4096),
        max_input_tokens: t.max_input_tokens,
        temperature: t.temperature.unwrap_or(0.2),
        timeout: Duration::from_secs(t.timeout_secs.unwrap_or(120)),
        retry: RetryPolicy {
            max_retries: t.max_retries.unwrap_or(defaults.max_retries),
            ..defaults
        },
        input_price_per_mtok: t.input_price_per_mtok.unwrap_or(0.0),
        output_price_per_mtok: t.output_price_per_mtok.unwrap_or(0.0),
        capture_content: None,
        cassette: None,
        vision: t.vision.unwrap_or_else(|| sees_images(&model)),
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
