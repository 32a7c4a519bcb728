//! `crawl`: fetch web pages and return each as clean markdown with its word and link counts.
//! Only http(s) URLs are fetched; anything else is refused, per URL.

use std::time::Duration;

use schemars::JsonSchema;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::web::{WebClient, fetch, markdown};
use super::{Builtin, Tool, ToolCtx, ToolError, ToolFuture, ToolOutput, args, json_kind};
use crate::llm::ToolSpec;

const NAME: &str = "crawl";

pub const TOOL: Builtin = Builtin::new(NAME, |_| Box::new(Crawl::default()));
/// Pages one call may fetch.
const MAX_URLS: usize = 10;
/// Characters of each page shown.
const PAGE_CHARS: usize = 6_000;

/// A call's arguments.
#[derive(Deserialize, JsonSchema)]
struct Args {
    /// The pages to fetch (at most 10).
    #[serde(deserialize_with = "url_list")]
    #[schemars(with = "Vec<String>")]
    urls: Vec<String>,
    /// Seconds to wait for each page (default 30).
    timeout: Option<i64>,
}

/// `urls` as a list, or one URL on its own.
fn url_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    match Value::deserialize(d)? {
        Value::String(url) => Ok(vec![url]),
        Value::Array(items) => items
            .into_iter()
            .map(|v| match v {
                Value::String(url) => Ok(url),
                other => Err(D::Error::custom(format!(
                    "`urls` must be a list of URLs, each a string, but it holds {}",
                    json_kind(&other)
                ))),
            })
            .collect(),
        other => Err(D::Error::custom(format!(
            "`urls` must be a list of URLs, got {}",
            json_kind(&other)
        ))),
    }
}

pub struct Crawl {
    http: WebClient,
}

impl Default for Crawl {
    fn default() -> Self {
        Crawl { http: WebClient }
    }
}

impl Tool for Crawl {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: NAME.into(),
            description: "Fetch web pages (http or https) and return each one's text as markdown, with its \
                title, word count and link count. Faster than the browser for pages that need no clicking."
                .into(),
            parameters: args::schema::<Args>(),
            variants: None,
        }
    }

    fn call<'a>(&'a mut self, args: Value, _ctx: &'a ToolCtx) -> ToolFuture<'a> {
        Box::pin(async move {
            let fail = |m: String| ToolError::new(format!("{NAME}: {m}"));
            let Args { urls, timeout } = args::parse(NAME, &args)?;
            if urls.is_empty() || urls.len() > MAX_URLS {
                return Err(fail(format!(
                    "give between 1 and {MAX_URLS} URLs, got {}",
                    urls.len()
                )));
            }
            let secs = timeout.unwrap_or(30);
            if !(1..=300).contains(&secs) {
                return Err(fail(format!(
                    "`timeout` must be between 1 and 300 seconds, got {secs}"
                )));
            }
            let mut sections = vec![];
            let mut fetched = 0;
            for url in &urls {
                match fetch::page(&self.http, url, Duration::from_secs(secs as u64)).await {
                    Ok(p) => {
                        fetched += 1;
                        let title = if p.title.is_empty() {
                            "untitled".into()
                        } else {
                            p.title.clone()
                        };
                        sections.push(format!(
                            "## {url} — {title}\nwords: {}, links: {}\n\n{}",
                            p.words,
                            p.links,
                            markdown::cut(&p.markdown, PAGE_CHARS)
                        ));
                    }
                    Err(e) => sections.push(format!("## {url}\nerror: {e}")),
                }
            }
            let text = sections.join("\n\n");
            if fetched == 0 {
                return Err(fail(format!("no page could be fetched:\n{text}")));
            }
            Ok(ToolOutput::text(text))
        })
    }
}
