//! `web_search`: search the web with the `[search]` engines (in their configured order, with
//! fallback and bounded retries) and list the hits; with `fetch_content`, each hit's page
//! is fetched and shown as markdown too.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::web::{WebClient, fetch, markdown, search};
use super::{Builtin, Tool, ToolCtx, ToolError, ToolFuture, ToolOutput, ToolSettings, args};
use crate::llm::ToolSpec;

const NAME: &str = "web_search";

pub const TOOL: Builtin = Builtin::new(NAME, |s| Box::new(WebSearch::new(s)));

/// A call's arguments.
#[derive(Deserialize, JsonSchema)]
struct Args {
    /// What to search for.
    query: String,
    /// How many results (1 to 20, default 5).
    num_results: Option<i64>,
    /// Language of results, e.g. en (default from the config).
    lang: Option<String>,
    /// Country of results, e.g. us (default from the config).
    country: Option<String>,
    /// Also fetch each result's page (default false).
    fetch_content: Option<bool>,
}
/// Characters of each fetched page shown.
const PAGE_CHARS: usize = 2_000;

pub struct WebSearch {
    http: WebClient,
    settings: Arc<search::SearchSettings>,
}

impl WebSearch {
    pub fn new(settings: &ToolSettings) -> Self {
        WebSearch {
            http: WebClient,
            settings: settings.search.clone(),
        }
    }
}

impl Tool for WebSearch {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: NAME.into(),
            description: "Search the web. Returns the top results with their titles, URLs and snippets; with \
                fetch_content, also each result page's text as markdown. Use it to find pages, then read them \
                with crawl or browser_use."
                .into(),
            parameters: args::schema::<Args>(),
            variants: None,
        }
    }

    fn call<'a>(&'a mut self, args: Value, _ctx: &'a ToolCtx) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: Args = args::parse(NAME, &args)?;
            let text = args.query.trim().to_string();
            if text.is_empty() {
                return Err(ToolError::new(format!("{NAME}: `query` is empty")));
            }
            let n = args.num_results.unwrap_or(5);
            if !(1..=20).contains(&n) {
                return Err(ToolError::new(format!(
                    "{NAME}: `num_results` must be between 1 and 20, got {n}"
                )));
            }
            let fetch_content = args.fetch_content.unwrap_or(false);
            let q = search::Query {
                text,
                num_results: n as usize,
                lang: args.lang.unwrap_or_else(|| self.settings.lang.clone()),
                country: args
                    .country
                    .unwrap_or_else(|| self.settings.country.clone()),
            };
            let (engine, hits) = search::search(&self.http, &self.settings, &q)
                .await
                .map_err(|e| ToolError::new(format!("{NAME}: {e}")))?;
            if hits.is_empty() {
                return Ok(ToolOutput::text(format!(
                    "No results for \"{}\" ({}).",
                    q.text,
                    engine.name()
                )));
            }
            let mut out = format!("Results for \"{}\" ({}):", q.text, engine.name());
            for (i, h) in hits.iter().enumerate() {
                out += &format!("\n\n{}. {}\n   {}", i + 1, h.title, h.url);
                if !h.snippet.is_empty() {
                    out += &format!("\n   {}", h.snippet);
                }
                if fetch_content {
                    match fetch::page(&self.http, &h.url, self.settings.timeout).await {
                        Ok(p) => {
                            out += &format!(
                                "\n   Content:\n{}",
                                markdown::cut(&p.markdown, PAGE_CHARS)
                            )
                        }
                        Err(e) => out += &format!("\n   (content not fetched: {e})"),
                    }
                }
            }
            Ok(ToolOutput::text(out))
        })
    }
}
