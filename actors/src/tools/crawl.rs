//! `crawl`: fetch web pages and return each as clean markdown with its word and link counts.
//! Only http(s) URLs are fetched; anything else is refused, per URL.

use std::time::Duration;

use serde_json::{Value, json};

use super::web::{WebClient, fetch, markdown};
use super::{Tool, ToolCtx, ToolError, ToolFuture, ToolOutput, json_kind, opt_int_arg};
use crate::llm::ToolSpec;

const NAME: &str = "crawl";
/// Pages one call may fetch.
const MAX_URLS: usize = 10;
/// Characters of each page shown.
const PAGE_CHARS: usize = 6_000;

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
            parameters: json!({
                "type": "object",
                "properties": {
                    "urls": {"type": "array", "items": {"type": "string"}, "description": "The pages to fetch (at most 10)."},
                    "timeout": {"type": "integer", "description": "Seconds to wait for each page (default 30)."}
                },
                "required": ["urls"]
            }),
        }
    }

    fn call<'a>(&'a mut self, args: Value, _ctx: &'a ToolCtx) -> ToolFuture<'a> {
        Box::pin(async move {
            let fail = |m: String| ToolError::new(format!("{NAME}: {m}"));
            let urls: Vec<String> = match args.get("urls") {
                Some(Value::String(s)) => vec![s.clone()],
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|v| v.as_str().map(str::to_string))
                    .collect::<Option<_>>()
                    .ok_or_else(|| fail("every item of `urls` must be a string".into()))?,
                Some(other) => {
                    return Err(fail(format!(
                        "`urls` must be a list of URLs, got {}",
                        json_kind(other)
                    )));
                }
                None => return Err(fail("missing required argument `urls`".into())),
            };
            if urls.is_empty() || urls.len() > MAX_URLS {
                return Err(fail(format!(
                    "give between 1 and {MAX_URLS} URLs, got {}",
                    urls.len()
                )));
            }
            let secs = opt_int_arg(&args, "timeout", NAME)?.unwrap_or(30);
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
