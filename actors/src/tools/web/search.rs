//! The web search engines behind one call, tried in the configured order: the first engine
//! that answers with results wins; when every engine fails, the round is repeated after
//! `retry_delay`, at most `max_retries` more times. Engines: SearxNG's JSON API, the Brave
//! Search API (key from the environment) and DuckDuckGo's HTML endpoint.

use std::time::Duration;

use serde_json::Value;

use super::WebClient;
use super::fetch::{USER_AGENT, describe};
use super::html::{Token, tokens};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Searxng,
    Brave,
    Duckduckgo,
}

impl Engine {
    pub const ALL: [Engine; 3] = [Engine::Searxng, Engine::Brave, Engine::Duckduckgo];

    pub fn name(self) -> &'static str {
        match self {
            Engine::Searxng => "searxng",
            Engine::Brave => "brave",
            Engine::Duckduckgo => "duckduckgo",
        }
    }

    pub fn by_name(name: &str) -> Option<Engine> {
        Engine::ALL
            .into_iter()
            .find(|e| e.name().eq_ignore_ascii_case(name))
    }
}

/// `[search]`, as data.
#[derive(Debug, Clone)]
pub struct SearchSettings {
    /// In the order they are tried.
    pub engines: Vec<Engine>,
    /// A SearxNG instance, e.g. `http://127.0.0.1:8888`; the engine is skipped without one.
    pub searxng_url: Option<String>,
    pub brave_url: String,
    /// Brave's subscription token; the engine is skipped without one.
    pub brave_api_key: Option<String>,
    pub duckduckgo_url: String,
    /// Further rounds over every engine after all of them failed.
    pub max_retries: u32,
    pub retry_delay: Duration,
    /// Default language and country of results (`en`, `us`).
    pub lang: String,
    pub country: String,
    /// Limit for one engine request or one fetched page.
    pub timeout: Duration,
}

impl Default for SearchSettings {
    fn default() -> Self {
        SearchSettings {
            engines: vec![Engine::Duckduckgo, Engine::Searxng, Engine::Brave],
            searxng_url: None,
            brave_url: "https://api.search.brave.com/res/v1/web/search".into(),
            brave_api_key: None,
            duckduckgo_url: "https://html.duckduckgo.com/html/".into(),
            max_retries: 2,
            retry_delay: Duration::from_secs(10),
            lang: "en".into(),
            country: "us".into(),
            timeout: Duration::from_secs(20),
        }
    }
}

/// One search as asked.
#[derive(Debug, Clone)]
pub struct Query {
    pub text: String,
    pub num_results: usize,
    pub lang: String,
    pub country: String,
}

/// One result.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    pub title: String,
    pub url: String,
    pub snippet: String,
}

/// Search with the engines in order; the answer names the engine that found the hits.
pub async fn search(
    http: &WebClient,
    s: &SearchSettings,
    q: &Query,
) -> Result<(Engine, Vec<Hit>), String> {
    let mut failures = vec![];
    for round in 0..=s.max_retries {
        failures.clear();
        let mut empty = None;
        for &engine in &s.engines {
            match run(http, s, engine, q).await {
                Ok(hits) if !hits.is_empty() => {
                    return Ok((engine, hits.into_iter().take(q.num_results).collect()));
                }
                Ok(_) => {
                    empty.get_or_insert(engine);
                    failures.push(format!("{}: no results", engine.name()));
                }
                Err(e) => {
                    tracing::info!(engine = engine.name(), "search engine failed: {e}");
                    failures.push(format!("{}: {e}", engine.name()));
                }
            }
        }
        // An engine that answered with nothing is an answer: searching again will not help.
        if let Some(engine) = empty {
            return Ok((engine, vec![]));
        }
        if round < s.max_retries {
            tokio::time::sleep(s.retry_delay).await;
        }
    }
    Err(format!(
        "every search engine failed ({} round{}): {}",
        s.max_retries + 1,
        if s.max_retries == 0 { "" } else { "s" },
        failures.join("; ")
    ))
}

async fn run(
    http: &WebClient,
    s: &SearchSettings,
    engine: Engine,
    q: &Query,
) -> Result<Vec<Hit>, String> {
    let n = q.num_results.to_string();
    let with_query = |base: &str, pairs: &[(&str, &str)]| {
        url::Url::parse_with_params(base, pairs)
            .map_err(|e| format!("bad engine URL `{base}`: {e}"))
    };
    let request = match engine {
        Engine::Searxng => {
            let base = s
                .searxng_url
                .as_deref()
                .ok_or("not configured ([search] searxng_url)")?;
            let url = with_query(
                &format!("{}/search", base.trim_end_matches('/')),
                &[
                    ("q", &q.text),
                    ("format", "json"),
                    ("language", &q.lang),
                    ("pageno", "1"),
                ],
            )?;
            http.client().get(url)
        }
        Engine::Brave => {
            let key = s
                .brave_api_key
                .as_deref()
                .ok_or("no API key (set the variable [search] brave_api_key_env names, BRAVE_API_KEY by default)")?;
            let url = with_query(
                &s.brave_url,
                &[
                    ("q", &q.text),
                    ("count", &n),
                    ("country", &q.country),
                    ("search_lang", &q.lang),
                ],
            )?;
            http.client()
                .get(url)
                .header("X-Subscription-Token", key)
                .header(reqwest::header::ACCEPT, "application/json")
        }
        Engine::Duckduckgo => {
            let form = url::form_urlencoded::Serializer::new(String::new())
                .append_pair("q", &q.text)
                .append_pair("kl", &format!("{}-{}", q.country, q.lang))
                .finish();
            http.client()
                .post(&s.duckduckgo_url)
                .header(
                    reqwest::header::CONTENT_TYPE,
                    "application/x-www-form-urlencoded",
                )
                .body(form)
        }
    };
    let resp = request
        .timeout(s.timeout)
        .header(reqwest::header::USER_AGENT, USER_AGENT)
        .send()
        .await
        .map_err(|e| describe(&e, s.timeout))?;
    let status = resp.status();
    let body = resp.text().await.map_err(|e| describe(&e, s.timeout))?;
    if !status.is_success() {
        return Err(format!("HTTP {status}"));
    }
    match engine {
        Engine::Duckduckgo => Ok(duckduckgo_hits(&body)),
        Engine::Searxng => json_hits(&body, "/results", "content"),
        Engine::Brave => json_hits(&body, "/web/results", "description"),
    }
}

/// Results from a JSON answer: an array at `pointer` of objects with title, url and the
/// snippet under `snippet_key` (Brave marks matches with `<strong>`: kept as text).
fn json_hits(body: &str, pointer: &str, snippet_key: &str) -> Result<Vec<Hit>, String> {
    let v: Value =
        serde_json::from_str(body).map_err(|e| format!("the answer is not JSON ({e})"))?;
    let Some(results) = v.pointer(pointer).and_then(Value::as_array) else {
        return Ok(vec![]);
    };
    Ok(results
        .iter()
        .filter_map(|r| {
            let field = |k: &str| r.get(k).and_then(Value::as_str).map(text_of);
            Some(Hit {
                title: field("title").unwrap_or_default(),
                url: r.get("url").and_then(Value::as_str)?.to_string(),
                snippet: field(snippet_key).unwrap_or_default(),
            })
        })
        .collect())
}

/// The text of an HTML fragment, whitespace squashed.
fn text_of(fragment: &str) -> String {
    tokens(fragment)
        .into_iter()
        .filter_map(|t| match t {
            Token::Text(s) => Some(s),
            _ => None,
        })
        .collect::<String>()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Results from DuckDuckGo's HTML page: `a.result__a` links (through its `/l/?uddg=`
/// redirect, or direct) and the `result__snippet` after each; ads are left out.
fn duckduckgo_hits(html: &str) -> Vec<Hit> {
    let mut hits: Vec<Hit> = vec![];
    // The element being read: its tag, whether it is a title or a snippet, and its text.
    let mut reading: Option<(String, bool, String)> = None;
    let mut href = String::new();
    for t in tokens(html) {
        match (&mut reading, t) {
            (Some((_, _, text)), Token::Text(s)) => text.push_str(&s),
            (Some((tag, is_title, text)), Token::Close(name)) if *tag == name => {
                let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
                if *is_title {
                    if let Some(url) = duckduckgo_target(&href) {
                        hits.push(Hit {
                            title: text,
                            url,
                            snippet: String::new(),
                        });
                    }
                } else if let Some(last) = hits.last_mut().filter(|h| h.snippet.is_empty()) {
                    last.snippet = text;
                }
                reading = None;
            }
            (None, open @ Token::Open { .. }) => {
                let class = open.attr("class").unwrap_or("");
                let Token::Open { name, .. } = &open else {
                    continue;
                };
                if class.split_whitespace().any(|c| c == "result__a") {
                    href = open.attr("href").unwrap_or("").to_string();
                    reading = Some((name.clone(), true, String::new()));
                } else if class.split_whitespace().any(|c| c == "result__snippet") {
                    reading = Some((name.clone(), false, String::new()));
                }
            }
            _ => {}
        }
    }
    hits
}

/// The page a DuckDuckGo result link leads to; `None` for ads.
fn duckduckgo_target(href: &str) -> Option<String> {
    let absolute = if href.starts_with("//") {
        format!("https:{href}")
    } else {
        href.to_string()
    };
    let u = url::Url::parse(&absolute).ok()?;
    if u.path().starts_with("/y.js") {
        return None;
    }
    if u.path().starts_with("/l/") {
        return u
            .query_pairs()
            .find(|(k, _)| k == "uddg")
            .map(|(_, v)| v.into_owned());
    }
    matches!(u.scheme(), "http" | "https").then_some(absolute)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duckduckgo_results_are_read_and_ads_skipped() {
        let html = r#"<div class="result results_links result--ad"><a class="result__a" href="https://duckduckgo.com/y.js?ad=1">Ad</a>
            <a class="result__snippet" href="x">buy</a></div>
            <div class="result"><h2><a rel="nofollow" class="result__a" href="//duckduckgo.com/l/?uddg=https%3A%2F%2Fkites.test%2Fdelta&amp;rut=abc">Delta <b>kites</b></a></h2>
            <a class="result__snippet" href="x">All about <b>delta</b> kites.</a></div>
            <div class="result"><a class="result__a" href="https://direct.test/">Direct</a></div>"#;
        assert_eq!(
            duckduckgo_hits(html),
            vec![
                Hit {
                    title: "Delta kites".into(),
                    url: "https://kites.test/delta".into(),
                    snippet: "All about delta kites.".into()
                },
                Hit {
                    title: "Direct".into(),
                    url: "https://direct.test/".into(),
                    snippet: String::new()
                },
            ]
        );
    }

    #[test]
    fn json_engines_are_read() {
        let brave = r#"{"web": {"results": [{"title": "A", "url": "https://a.test/", "description": "about <strong>a</strong>"}]}}"#;
        let hits = json_hits(brave, "/web/results", "description").unwrap();
        assert_eq!(hits[0].snippet, "about a");
        assert!(json_hits("nope", "/results", "content").is_err());
        assert_eq!(json_hits("{}", "/results", "content").unwrap(), vec![]);
    }
}
