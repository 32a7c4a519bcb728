//! `browser_use`: OpenManus' browser tool, with its actions and arguments. Each call is a
//! message to the flow's browser owner (see `crate::browser`); the arguments are checked
//! here first, so a missing or wrong one comes back as a clear observation. Two actions
//! need more than the browser: `web_search` searches with the `[search]` engines and opens
//! the first hit, and `extract_content` reads the page as markdown and asks the model for
//! the goal through a forced tool call.

use std::time::Duration;

use serde_json::{Value, json};

use super::web::{markdown, search};
use super::{
    Tool, ToolCtx, ToolError, ToolFuture, ToolOutput, ToolSettings, opt_int_arg, opt_str_arg,
};
use crate::llm::{ChatRequest, Message, ToolChoice, ToolSet, ToolSpec};
use crate::protocol::{BrowserAction, BrowserReply};

const NAME: &str = "browser_use";

const ACTIONS: &[&str] = &[
    "go_to_url",
    "click_element",
    "input_text",
    "scroll_down",
    "scroll_up",
    "scroll_to_text",
    "send_keys",
    "get_dropdown_options",
    "select_dropdown_option",
    "go_back",
    "web_search",
    "wait",
    "extract_content",
    "switch_tab",
    "open_tab",
    "close_tab",
];

/// The longest `wait`.
const MAX_WAIT_SECS: i64 = 60;

pub struct BrowserUse {
    http: reqwest::Client,
    search: std::sync::Arc<search::SearchSettings>,
}

impl BrowserUse {
    pub fn new(settings: &ToolSettings) -> Self {
        BrowserUse {
            http: super::shared_http(),
            search: settings.search.clone(),
        }
    }
}

/// What a call asks for, once its arguments are checked.
#[derive(Debug, PartialEq)]
enum Request {
    Browser(BrowserAction),
    Search(String),
    Wait(u64),
    Extract(String),
}

fn fail(msg: impl std::fmt::Display) -> ToolError {
    ToolError::new(format!("{NAME}: {msg}"))
}

fn parse(args: &Value) -> Result<Request, ToolError> {
    let action = opt_str_arg(args, "action", NAME)?.ok_or_else(|| {
        fail(format!(
            "missing required argument `action`; one of: {}",
            ACTIONS.join(", ")
        ))
    })?;
    let need_str = |key: &str, what: &str| -> Result<String, ToolError> {
        match opt_str_arg(args, key, NAME)? {
            Some(s) if !s.trim().is_empty() => Ok(s.to_string()),
            _ => Err(fail(format!("action `{action}` needs `{key}` ({what})"))),
        }
    };
    let need_int = |key: &str, what: &str| -> Result<i64, ToolError> {
        opt_int_arg(args, key, NAME)?
            .ok_or_else(|| fail(format!("action `{action}` needs `{key}` ({what})")))
    };
    let index = || -> Result<u32, ToolError> {
        let i = need_int("index", "the number of an element in the element list")?;
        u32::try_from(i).map_err(|_| {
            fail(format!(
                "`index` must be an element number from the list, got {i}"
            ))
        })
    };
    let amount = || -> Result<Option<i64>, ToolError> {
        match opt_int_arg(args, "scroll_amount", NAME)? {
            Some(p) if p <= 0 => Err(fail(format!(
                "`scroll_amount` must be a positive number of pixels, got {p}"
            ))),
            other => Ok(other),
        }
    };
    Ok(Request::Browser(match action {
        "go_to_url" => BrowserAction::GoToUrl {
            url: need_str("url", "the address to open")?,
        },
        "click_element" => BrowserAction::ClickElement { index: index()? },
        "input_text" => BrowserAction::InputText {
            index: index()?,
            text: opt_str_arg(args, "text", NAME)?
                .ok_or_else(|| fail("action `input_text` needs `text` (what to type)"))?
                .to_string(),
        },
        "scroll_down" => BrowserAction::Scroll {
            down: true,
            pixels: amount()?,
        },
        "scroll_up" => BrowserAction::Scroll {
            down: false,
            pixels: amount()?,
        },
        "scroll_to_text" => BrowserAction::ScrollToText {
            text: need_str("text", "the text to scroll to")?,
        },
        "send_keys" => BrowserAction::SendKeys {
            keys: need_str("keys", "keys such as Enter, Escape or Control+a")?,
        },
        "get_dropdown_options" => BrowserAction::GetDropdownOptions { index: index()? },
        "select_dropdown_option" => BrowserAction::SelectDropdownOption {
            index: index()?,
            text: need_str("text", "the option's text")?,
        },
        "go_back" => BrowserAction::GoBack,
        "switch_tab" => {
            let id = need_int("tab_id", "the tab's number, from 0")?;
            BrowserAction::SwitchTab {
                tab_id: usize::try_from(id)
                    .map_err(|_| fail(format!("`tab_id` must be 0 or more, got {id}")))?,
            }
        }
        "open_tab" => BrowserAction::OpenTab {
            url: need_str("url", "the address to open in the new tab")?,
        },
        "close_tab" => BrowserAction::CloseTab,
        "web_search" => return Ok(Request::Search(need_str("query", "what to search for")?)),
        "extract_content" => {
            return Ok(Request::Extract(need_str(
                "goal",
                "what to find on the page",
            )?));
        }
        "wait" => {
            let s = opt_int_arg(args, "seconds", NAME)?.unwrap_or(3);
            if !(0..=MAX_WAIT_SECS).contains(&s) {
                return Err(fail(format!(
                    "`seconds` must be between 0 and {MAX_WAIT_SECS}, got {s}"
                )));
            }
            return Ok(Request::Wait(s as u64));
        }
        other => {
            return Err(fail(format!(
                "unknown action `{other}`; one of: {}",
                ACTIONS.join(", ")
            )));
        }
    }))
}

impl Tool for BrowserUse {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: NAME.into(),
            description: "Use a web browser: open pages, click, type, scroll, pick from dropdowns, manage tabs, \
                search the web and pull information out of the page. Elements are named by the numbers in the \
                element list that comes with the browser state after each action (`[3] <button> Sign in` is \
                index 3). Actions and the arguments they need:\n\
                - go_to_url: url — open a page in the current tab\n\
                - click_element: index\n\
                - input_text: index, text — replace the field's text\n\
                - scroll_down / scroll_up: scroll_amount in pixels (optional; one screen by default)\n\
                - scroll_to_text: text\n\
                - send_keys: keys — e.g. Enter, Escape, Tab, Control+a\n\
                - get_dropdown_options: index — list a dropdown's options\n\
                - select_dropdown_option: index, text — pick an option by its text\n\
                - go_back\n\
                - web_search: query — search the web and open the first result\n\
                - wait: seconds (default 3)\n\
                - extract_content: goal — read the page and return what the goal asks for\n\
                - switch_tab: tab_id; open_tab: url; close_tab"
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "action": {"type": "string", "enum": ACTIONS, "description": "The browser action to take."},
                    "url": {"type": "string", "description": "For go_to_url and open_tab: a full http(s) URL."},
                    "index": {"type": "integer", "description": "For click_element, input_text, get_dropdown_options and select_dropdown_option: the element's number in the element list."},
                    "text": {"type": "string", "description": "For input_text: what to type; scroll_to_text: the text to find; select_dropdown_option: the option's text."},
                    "scroll_amount": {"type": "integer", "description": "For scroll_down and scroll_up: pixels (default: one screen)."},
                    "tab_id": {"type": "integer", "description": "For switch_tab: the tab's number, from 0."},
                    "query": {"type": "string", "description": "For web_search: what to search for."},
                    "goal": {"type": "string", "description": "For extract_content: what to find on the page."},
                    "keys": {"type": "string", "description": "For send_keys: keys to press, e.g. Enter or Control+a."},
                    "seconds": {"type": "integer", "description": "For wait: how long, in seconds."}
                },
                "required": ["action"]
            }),
        }
    }

    fn call<'a>(&'a mut self, args: Value, ctx: &'a ToolCtx) -> ToolFuture<'a> {
        Box::pin(async move {
            let request = parse(&args)?;
            let browser = ctx
                .browser
                .as_ref()
                .ok_or_else(|| fail("there is no browser in this runtime"))?;
            let act = |action| async move {
                match browser
                    .act(&ctx.flow_id, action)
                    .await
                    .map_err(ToolError::new)?
                {
                    BrowserReply::Done(text) => Ok(text),
                    other => Err(fail(format!(
                        "unexpected answer from the browser: {other:?}"
                    ))),
                }
            };
            let text = match request {
                Request::Browser(action) => act(action).await?,
                Request::Wait(secs) => {
                    tokio::time::sleep(Duration::from_secs(secs)).await;
                    format!("Waited {secs} s")
                }
                Request::Search(query) => {
                    let q = search::Query {
                        text: query.clone(),
                        num_results: 5,
                        lang: self.search.lang.clone(),
                        country: self.search.country.clone(),
                    };
                    let (engine, hits) = search::search(&self.http, &self.search, &q)
                        .await
                        .map_err(|e| fail(format!("web_search: {e}")))?;
                    let Some(first) = hits.first() else {
                        return Err(fail(format!(
                            "web_search: {} found nothing for \"{query}\"",
                            engine.name()
                        )));
                    };
                    let opened = act(BrowserAction::GoToUrl {
                        url: first.url.clone(),
                    })
                    .await?;
                    let list: Vec<String> = hits
                        .iter()
                        .enumerate()
                        .map(|(i, h)| format!("{}. {} — {}", i + 1, h.title, h.url))
                        .collect();
                    format!(
                        "Results for \"{query}\" ({}):\n{}\n{opened}",
                        engine.name(),
                        list.join("\n")
                    )
                }
                Request::Extract(goal) => extract(browser, ctx, &goal).await?,
            };
            Ok(ToolOutput::text(text))
        })
    }
}

/// The forced tool the model answers `extract_content` through.
fn extraction_spec() -> ToolSpec {
    ToolSpec {
        name: "record_extraction".into(),
        description: "Record what the page says about the goal.".into(),
        parameters: json!({
            "type": "object",
            "properties": {
                "found": {"type": "boolean", "description": "Whether the page holds what the goal asks for."},
                "content": {"type": "string", "description": "What the goal asks for, with names, numbers and wording exactly as on the page; empty if not found."}
            },
            "required": ["found", "content"]
        }),
    }
}

const EXTRACT_SYSTEM: &str = "You read web pages for an agent. You get a goal and a page as markdown. \
Report only what the page itself says that serves the goal, exactly as written there: never guess or \
add knowledge of your own. Answer by calling record_extraction.";

/// Read the page as markdown, cut it to `max_content_length`, and ask the model for `goal`.
async fn extract(
    browser: &crate::browser::BrowserHandle,
    ctx: &ToolCtx,
    goal: &str,
) -> Result<String, ToolError> {
    let BrowserReply::Page { url, title, html } = browser
        .act(&ctx.flow_id, BrowserAction::PageContent)
        .await
        .map_err(ToolError::new)?
    else {
        return Err(fail("extract_content: the browser sent no page"));
    };
    let llm = ctx
        .llm
        .as_ref()
        .ok_or_else(|| fail("extract_content: no model is available to read the page"))?;
    let page = markdown::page(&html, &url);
    let body = markdown::cut(&page.markdown, browser.settings.max_content_length);
    let system = Message::system(EXTRACT_SYSTEM);
    let page = Message::user(format!("Goal: {goal}\n\nPage: {title} ({url})\n\n{body}"));
    let request = ChatRequest {
        messages: vec![&system, &page],
        tools: ToolSet::new(vec![extraction_spec()]),
        tool_choice: ToolChoice::Function("record_extraction".into()),
    };
    let resp = llm
        .chat(&request)
        .await
        .map_err(|e| fail(format!("extract_content: the model call failed: {e}")))?;
    if let Some(flow) = &ctx.flow {
        flow.spent(resp.usage);
    }
    let answer: Value = resp
        .message
        .tool_calls
        .iter()
        .find(|c| c.function.name == "record_extraction")
        .and_then(|c| serde_json::from_str(&c.function.arguments).ok())
        .ok_or_else(|| fail("extract_content: the model did not record an extraction"))?;
    let content = answer["content"].as_str().unwrap_or("").trim();
    if answer["found"] == json!(false) || content.is_empty() {
        return Ok(format!(
            "The page {url} does not say anything about: {goal}"
        ));
    }
    Ok(format!("Extracted from {url} for \"{goal}\":\n{content}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(args: Value) -> String {
        parse(&args).unwrap_err().0
    }

    #[test]
    fn arguments_are_checked_per_action() {
        assert_eq!(
            parse(&json!({"action": "click_element", "index": 3})).unwrap(),
            Request::Browser(BrowserAction::ClickElement { index: 3 })
        );
        assert_eq!(
            parse(&json!({"action": "scroll_up"})).unwrap(),
            Request::Browser(BrowserAction::Scroll {
                down: false,
                pixels: None
            })
        );
        assert_eq!(parse(&json!({"action": "wait"})).unwrap(), Request::Wait(3));
        assert!(err(json!({})).contains("missing required argument `action`"));
        assert!(err(json!({"action": "fly"})).contains("unknown action `fly`"));
        assert!(err(json!({"action": "go_to_url"})).contains("needs `url`"));
        assert!(err(json!({"action": "click_element"})).contains("needs `index`"));
        assert!(err(json!({"action": "click_element", "index": "3"})).contains("`index` must be"));
        assert!(err(json!({"action": "click_element", "index": -1})).contains("element number"));
        assert!(err(json!({"action": "input_text", "index": 2})).contains("needs `text`"));
        assert!(err(json!({"action": "scroll_down", "scroll_amount": 0})).contains("positive"));
        assert!(err(json!({"action": "switch_tab"})).contains("needs `tab_id`"));
        assert!(err(json!({"action": "wait", "seconds": 600})).contains("between 0 and 60"));
        assert!(err(json!({"action": "extract_content"})).contains("needs `goal`"));
        assert!(err(json!({"action": "web_search", "query": " "})).contains("needs `query`"));
        assert!(err(json!({"action": "send_keys"})).contains("needs `keys`"));
    }
}
