//! `[tools]` and `[search]`: the tools' interpreter and timeouts, and the web search
//! engines in the order they are tried, checked. The Brave key comes from the environment
//! (the variable `[search] brave_api_key_env` names): `resolve` reads it.

use std::sync::Arc;
use std::time::Duration;

use manus_actors::tools::ToolSettings;
use manus_actors::tools::python::PythonSession;
use manus_actors::tools::web::search::{Engine, SearchSettings};
use toml::Spanned;

use super::error::{Lines, Problem};
use super::file::{PythonSessionToml, SearchToml, ToolsToml};
use super::values::{Bounds, Table, web_url};

/// The tools' settings, with no Brave key yet, and the variable that holds it.
pub(super) fn build(
    t: &ToolsToml,
    search: &SearchToml,
    capture_content: Option<usize>,
    lines: Lines,
) -> Result<(ToolSettings, String), Problem> {
    let defaults = ToolSettings::default();
    let table = Table::new("[tools]", lines);
    let tools = ToolSettings {
        python: table
            .text(&t.python, "python", "an interpreter's path")?
            .unwrap_or(defaults.python),
        python_timeout: table.seconds(
            &t.python_timeout_secs,
            "python_timeout_secs",
            defaults.python_timeout,
        )?,
        python_session: match t.python_session {
            None => defaults.python_session,
            Some(PythonSessionToml::Flow) => PythonSession::Flow,
            Some(PythonSessionToml::Call) => PythonSession::Call,
        },
        bash_timeout: table.seconds(
            &t.bash_timeout_secs,
            "bash_timeout_secs",
            defaults.bash_timeout,
        )?,
        ask_timeout: table.seconds(
            &t.ask_timeout_secs,
            "ask_timeout_secs",
            defaults.ask_timeout,
        )?,
        capture_content,
        search: Arc::new(search_settings(search, lines)?),
        // `[sandbox] mode = "process"` sets it (`sandbox::build`).
        confine: None,
    };
    let key_env = Table::new("[search]", lines)
        .text(
            &search.brave_api_key_env,
            "brave_api_key_env",
            "a variable's name",
        )?
        .unwrap_or_else(|| "BRAVE_API_KEY".into());
    Ok((tools, key_env))
}

/// Further rounds over the engines after all of them failed.
const RETRIES: Bounds<i64> = Bounds::new(0, 10, " rounds");
/// The wait between rounds.
const RETRY_DELAY: Bounds<i64> = Bounds::new(0, 3600, " seconds");

/// `[search]` with its defaults, checked.
fn search_settings(t: &SearchToml, lines: Lines) -> Result<SearchSettings, Problem> {
    let defaults = SearchSettings::default();
    let known = || Engine::ALL.map(Engine::name).join(", ");
    let engine = |name: &str, line: Option<usize>, key: &str| {
        Engine::by_name(name).ok_or_else(|| {
            Problem::at(
                line,
                key,
                format!(
                    "[search]: unknown search engine `{name}`; known engines: {}",
                    known()
                ),
            )
        })
    };
    let mut engines = vec![];
    if let Some(e) = &t.engine {
        engines.push(engine(e.get_ref(), lines.of(e), "[search] engine")?);
    }
    if let Some(list) = &t.fallback_engines {
        for name in list.get_ref() {
            let e = engine(name, lines.of(list), "[search] fallback_engines")?;
            if !engines.contains(&e) {
                engines.push(e);
            }
        }
    }
    if engines.is_empty() {
        engines = defaults.engines.clone();
    }
    let url = |v: &Option<Spanned<String>>, key: &str| {
        v.as_ref()
            .map(|u| web_url(u, &format!("[search] {key}"), lines))
            .transpose()
    };
    let table = Table::new("[search]", lines);
    Ok(SearchSettings {
        engines,
        searxng_url: url(&t.searxng_url, "searxng_url")?,
        brave_url: url(&t.brave_url, "brave_url")?.unwrap_or(defaults.brave_url),
        brave_api_key: None,
        duckduckgo_url: url(&t.duckduckgo_url, "duckduckgo_url")?
            .unwrap_or(defaults.duckduckgo_url),
        max_retries: table
            .number(&t.max_retries, "max_retries", RETRIES)?
            .map_or(defaults.max_retries, |n| n as u32),
        retry_delay: table
            .number(&t.retry_delay_secs, "retry_delay_secs", RETRY_DELAY)?
            .map_or(defaults.retry_delay, |s| Duration::from_secs(s as u64)),
        lang: table
            .text(&t.lang, "lang", "a language code")?
            .unwrap_or(defaults.lang),
        country: table
            .text(&t.country, "country", "a country code")?
            .unwrap_or(defaults.country),
        timeout: table.seconds(&t.timeout_secs, "timeout_secs", defaults.timeout)?,
    })
}
