//! The model a run uses when no config file names one (the example config is in use): an
//! OpenAI key in the environment, else an Ollama server answering on 127.0.0.1:11434, else a
//! llama.cpp server on 127.0.0.1:8080, else the replay of the README's example task. Owns
//! that order, the short look at each local server, and the line that says what was picked
//! and how to change it. Where the local servers are looked for can be moved with
//! `MANUS_OLLAMA_URL` and `MANUS_LLAMACPP_URL` (tests point them at servers of their own).

use std::time::Duration;

use serde_json::Value;

use super::Config;

/// How long a local server may take to list its models.
const LOOK: Duration = Duration::from_millis(800);

/// What the default found.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Found {
    OpenAi {
        base_url: String,
        model: String,
    },
    Local {
        kind: &'static str,
        base_url: String,
        model: String,
    },
    Replay,
}

/// If `config` is the example, point its default profile at the first model found, and say
/// which one on `config.model_source`.
pub async fn apply(config: &mut Config, env: &(dyn Fn(&str) -> Option<String> + Sync)) {
    if !config.example {
        return;
    }
    let found = find(env).await;
    let (table, line) = match &found {
        Found::OpenAi { base_url, model } => (
            format!(
                "[llm]\napi_type = \"openai\"\nbase_url = {base_url:?}\nmodel = {model:?}\napi_key_env = \"OPENAI_API_KEY\"\n"
            ),
            format!(
                "model: {model} at {base_url}, from OPENAI_API_KEY (OPENAI_BASE_URL and OPENAI_MODEL change it)"
            ),
        ),
        Found::Local {
            kind,
            base_url,
            model,
        } => (
            format!("[llm]\napi_type = \"{kind}\"\nbase_url = {base_url:?}\nmodel = {model:?}\n"),
            format!("model: {model} on the {kind} server answering at {base_url}"),
        ),
        Found::Replay => (
            String::new(),
            "model: none found (no OPENAI_API_KEY, no Ollama or llama.cpp server on 127.0.0.1), \
             so the answers recorded for the README's example task are replayed"
                .to_string(),
        ),
    };
    config.model_source = Some(format!(
        "{line}; write config/config.toml (see config/config.example.toml) to choose"
    ));
    if table.is_empty() {
        return;
    }
    let text = format!("{table}\n[agents.manus]\nprofile = \"manus\"\n");
    match Config::from_text(&text, "the model found", None) {
        Ok(found) => {
            if let Some(settings) = found.llm.get("default") {
                config.llm.insert("default".into(), settings.clone());
            }
        }
        Err(e) => tracing::warn!("the model found cannot be used ({e}); replaying instead"),
    }
}

async fn find(env: &(dyn Fn(&str) -> Option<String> + Sync)) -> Found {
    if env("OPENAI_API_KEY").is_some_and(|k| !k.trim().is_empty()) {
        return Found::OpenAi {
            base_url: env("OPENAI_BASE_URL").unwrap_or_else(|| "https://api.openai.com/v1".into()),
            model: env("OPENAI_MODEL").unwrap_or_else(|| "gpt-4o-mini".into()),
        };
    }
    let http = match reqwest::Client::builder().timeout(LOOK).build() {
        Ok(c) => c,
        Err(_) => return Found::Replay,
    };
    let ollama = env("MANUS_OLLAMA_URL").unwrap_or_else(|| "http://127.0.0.1:11434".into());
    let ollama = ollama.trim_end_matches('/');
    if let Some(model) = first_model(&http, &format!("{ollama}/api/tags"), "/models/0/name").await {
        return Found::Local {
            kind: "ollama",
            base_url: format!("{ollama}/v1"),
            model,
        };
    }
    let llamacpp = env("MANUS_LLAMACPP_URL").unwrap_or_else(|| "http://127.0.0.1:8080".into());
    let llamacpp = llamacpp.trim_end_matches('/');
    if let Some(model) = first_model(&http, &format!("{llamacpp}/v1/models"), "/data/0/id").await {
        return Found::Local {
            kind: "llamacpp",
            base_url: format!("{llamacpp}/v1"),
            model,
        };
    }
    Found::Replay
}

/// The first model a server lists at `url`, found at `pointer` in its JSON answer.
async fn first_model(http: &reqwest::Client, url: &str, pointer: &str) -> Option<String> {
    let answer = http.get(url).send().await.ok()?.error_for_status().ok()?;
    let listed: Value = answer.json().await.ok()?;
    listed.pointer(pointer)?.as_str().map(str::to_string)
}
