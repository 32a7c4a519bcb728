//! Fetching one web page over HTTP for `crawl` and `web_search`'s `fetch_content`: http(s)
//! only, bounded in time and size; HTML is read as markdown, other text kept as it is.

use std::time::Duration;

use super::WebClient;
use super::markdown::{self, Page};

/// Bytes read from one response at most.
const MAX_BYTES: usize = 4 * 1024 * 1024;

/// What we say we are to web servers.
pub const USER_AGENT: &str = "Mozilla/5.0 (compatible; manus-rt/0.1)";

/// Refuse anything but an absolute http(s) URL, saying why.
pub fn check_web_url(url: &str) -> Result<url::Url, String> {
    let parsed = url::Url::parse(url).map_err(|e| format!("`{url}` is not a valid URL ({e})"))?;
    match parsed.scheme() {
        "http" | "https" => Ok(parsed),
        other => Err(format!(
            "`{url}` was refused: only http:// and https:// URLs can be fetched, not {other}:"
        )),
    }
}

/// Fetch `url` and read it as a page.
pub async fn page(http: &WebClient, url: &str, timeout: Duration) -> Result<Page, String> {
    let parsed = check_web_url(url)?;
    let mut resp = http
        .client()
        .get(parsed)
        .timeout(timeout)
        .header(reqwest::header::USER_AGENT, USER_AGENT)
        .send()
        .await
        .map_err(|e| describe(&e, timeout))?;
    let status = resp.status();
    if !status.is_success() {
        return Err(format!("the server answered HTTP {status}"));
    }
    let final_url = resp.url().to_string();
    let kind = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("text/html")
        .to_ascii_lowercase();
    let textual = kind.contains("html")
        || kind.starts_with("text/")
        || kind.contains("json")
        || kind.contains("xml");
    if !textual {
        return Err(format!("it is not a text page (content-type {kind})"));
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| describe(&e, timeout))? {
        body.extend_from_slice(&chunk);
        if body.len() >= MAX_BYTES {
            body.truncate(MAX_BYTES);
            break;
        }
    }
    let text = String::from_utf8_lossy(&body);
    if kind.contains("html") {
        return Ok(markdown::page(&text, &final_url));
    }
    Ok(Page {
        title: String::new(),
        words: text.split_whitespace().count(),
        markdown: text.into_owned(),
        links: 0,
    })
}

/// A request failure in words.
pub fn describe(e: &reqwest::Error, timeout: Duration) -> String {
    if e.is_timeout() {
        format!("no answer within {} s", timeout.as_secs())
    } else if e.is_connect() {
        "cannot connect to the server".into()
    } else {
        format!("the request failed: {e}")
    }
}
