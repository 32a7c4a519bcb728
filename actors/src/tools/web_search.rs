//! `web_search`: search the web with the `[search]` engines (in their configured order, with
//! fallback and bounded retries) and list the hits; with `fetch_content`, each hit's page
//! is fetched and shown as markdown too.

use std::sync::Arc;

use serde_json::{Value, json};

use super::web::{WebClient, fetch, markdown, search};
use super::{Tool, ToolCtx, ToolError, ToolFuture, ToolOutput, ToolSettings, opt_int_arg, str_arg};
use crate::llm::ToolSpec;

const NAME: &str = "web_search";
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
            parameters: json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to search for."},
                    "num_results": {"type": "integer", "description": "How many results (1 to 20, default 5)."},
                    "lang": {"type": "string", "description": "Language of results, e.g. en (default from the config)."},
                    "country": {"type": "string", "description": "Country of results, e.g. us (default from the config)."},
                    "fetch_content": {"type": "boolean", "description": "Also fetch each result's page (default false)."}
                },
                "required": ["query"]
            }),
        }
    }

    fn call<'a>(&'a mut self, args: Value, _ctx: &'a ToolCtx) -> ToolFuture<'a> {
        Box::pin(async move {
            let text = str_arg(&args, "query", NAME)?.trim().to_string();
            if text.is_empty() {
                return Err(ToolError::new(format!("{NAME}: `query` is empty")));
            }
            let n = opt_int_arg(&args, "num_results", NAME)?.unwrap_or(5);
            if !(1..=20).contains(&n) {
                return Err(ToolError::new(format!(
                    "{NAME}: `num_results` must be between 1 and 20, got {n}"
                )));
            }
            let fetch_content = match args.get("fetch_content") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(other) => {
                    return Err(ToolError::new(format!(
                        "{NAME}: `fetch_content` must be true or false, got {other}"
                    )));
                }
            };
            let lang = super::opt_str_arg(&args, "lang", NAME)?;
            let country = super::opt_str_arg(&args, "country", NAME)?;
            let q = search::Query {
                text,
                num_results: n as usize,
                lang: lang.unwrap_or(&self.settings.lang).to_string(),
                country: country.unwrap_or(&self.settings.country).to_string(),
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
