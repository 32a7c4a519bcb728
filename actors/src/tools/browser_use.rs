//! `browser_use`: OpenManus' browser tool, with its actions and arguments. Each call is a
//! message to the flow's browser owner (see `crate::browser`); the arguments are checked
//! here first, so a missing or wrong one comes back as a clear observation. Two actions
//! need more than the browser: `web_search` searches with the `[search]` engines and opens
//! the first hit, and `extract_content` reads the page as markdown and asks the model for
//! the goal through a forced tool call.

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::web::{WebClient, markdown, search};
use super::{Builtin, Tool, ToolCtx, ToolError, ToolFuture, ToolOutput, ToolSettings, args};
use crate::llm::{ChatRequest, Message, ToolChoice, ToolSet, ToolSpec};
use crate::protocol::{BrowserAction, BrowserReply};

const NAME: &str = "browser_use";

/// Its calls act on the flow's browser.
pub const TOOL: Builtin = Builtin::new(NAME, |s| Box::new(BrowserUse::new(s))).on_browser();

/// The longest `wait`.
const MAX_WAIT_SECS: i64 = 60;

/// The browser action to take.
#[derive(Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(tag = "action", rename_all = "snake_case")]
#[schemars(transform = args::flat_tagged)]
enum Action {
    GoToUrl {
        /// For go_to_url and open_tab: a full http(s) URL.
        url: String,
    },
    ClickElement {
        /// For click_element, input_text, get_dropdown_options and select_dropdown_option:
        /// the element's number in the element list.
        index: i64,
    },
    InputText {
        index: i64,
        /// For input_text: what to type; scroll_to_text: the text to find;
        /// select_dropdown_option: the option's text.
        text: String,
    },
    ScrollDown {
        /// For scroll_down and scroll_up: pixels (default: one screen).
        scroll_amount: Option<i64>,
    },
    ScrollUp {
        scroll_amount: Option<i64>,
    },
    ScrollToText {
        text: String,
    },
    SendKeys {
        /// For send_keys: keys to press, e.g. Enter or Control+a.
        keys: String,
    },
    GetDropdownOptions {
        index: i64,
    },
    SelectDropdownOption {
        index: i64,
        text: String,
    },
    GoBack,
    WebSearch {
        /// For web_search: what to search for.
        query: String,
    },
    Wait {
        /// For wait: how long, in seconds.
        seconds: Option<i64>,
    },
    ExtractContent {
        /// For extract_content: what to find on the page.
        goal: String,
    },
    SwitchTab {
        /// For switch_tab: the tab's number, from 0.
        tab_id: i64,
    },
    OpenTab {
        url: String,
    },
    CloseTab,
}

pub struct BrowserUse {
    http: WebClient,
    search: std::sync::Arc<search::SearchSettings>,
}

impl BrowserUse {
    pub fn new(settings: &ToolSettings) -> Self {
        BrowserUse {
            http: WebClient,
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
    request(args::parse(NAME, args)?)
}

/// Check what the arguments' types cannot say: text that must not be blank, numbers in range.
fn request(action: Action) -> Result<Request, ToolError> {
    let said = |text: String, action: &str, key: &str, what: &str| {
        if text.trim().is_empty() {
            Err(fail(format!("action `{action}` needs `{key}` ({what})")))
        } else {
            Ok(text)
        }
    };
    let element = |i: i64| {
        u32::try_from(i).map_err(|_| {
            fail(format!(
                "`index` must be an element number from the list, got {i}"
            ))
        })
    };
    let pixels = |amount: Option<i64>| match amount {
        Some(p) if p <= 0 => Err(fail(format!(
            "`scroll_amount` must be a positive number of pixels, got {p}"
        ))),
        other => Ok(other),
    };
    Ok(Request::Browser(match action {
        Action::GoToUrl { url } => BrowserAction::GoToUrl {
            url: said(url, "go_to_url", "url", "the address to open")?,
        },
        Action::ClickElement { index } => BrowserAction::ClickElement {
            index: element(index)?,
        },
        Action::InputText { index, text } => BrowserAction::InputText {
            index: element(index)?,
            text,
        },
        Action::ScrollDown { scroll_amount } => BrowserAction::Scroll {
            down: true,
            pixels: pixels(scroll_amount)?,
        },
        Action::ScrollUp { scroll_amount } => BrowserAction::Scroll {
            down: false,
            pixels: pixels(scroll_amount)?,
        },
        Action::ScrollToText { text } => BrowserAction::ScrollToText {
            text: said(text, "scroll_to_text", "text", "the text to scroll to")?,
        },
        Action::SendKeys { keys } => BrowserAction::SendKeys {
            keys: said(
                keys,
                "send_keys",
                "keys",
                "keys such as Enter, Escape or Control+a",
            )?,
        },
        Action::GetDropdownOptions { index } => BrowserAction::GetDropdownOptions {
            index: element(index)?,
        },
        Action::SelectDropdownOption { index, text } => BrowserAction::SelectDropdownOption {
            index: element(index)?,
            text: said(text, "select_dropdown_option", "text", "the option's text")?,
        },
        Action::GoBack => BrowserAction::GoBack,
        Action::SwitchTab { tab_id } => BrowserAction::SwitchTab {
            tab_id: usize::try_from(tab_id)
                .map_err(|_| fail(format!("`tab_id` must be 0 or more, got {tab_id}")))?,
        },
        Action::OpenTab { url } => BrowserAction::OpenTab {
            url: said(url, "open_tab", "url", "the address to open in the new tab")?,
        },
        Action::CloseTab => BrowserAction::CloseTab,
        Action::WebSearch { query } => {
            return said(query, "web_search", "query", "what to search for").map(Request::Search);
        }
        Action::ExtractContent { goal } => {
            let goal = said(goal, "extract_content", "goal", "what to find on the page");
            return goal.map(Request::Extract);
        }
        Action::Wait { seconds } => {
            let s = seconds.unwrap_or(3);
            if !(0..=MAX_WAIT_SECS).contains(&s) {
                return Err(fail(format!(
                    "`seconds` must be between 0 and {MAX_WAIT_SECS}, got {s}"
                )));
            }
            return Ok(Request::Wait(s as u64));
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
            parameters: args::schema::<Action>(),
            variants: args::variants::<Action>(),
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

/// What the model records for `extract_content`, through a forced tool call. Both are
/// asked for; read leniently (a missing `found` is not a "no").
#[derive(Deserialize, JsonSchema)]
struct Extraction {
    /// Whether the page holds what the goal asks for.
    #[schemars(required)]
    found: Option<bool>,
    /// What the goal asks for, with names, numbers and wording exactly as on the page; empty
    /// if not found.
    #[schemars(required)]
    content: Option<String>,
}

/// The forced tool the model answers `extract_content` through.
fn extraction_spec() -> ToolSpec {
    ToolSpec {
        name: "record_extraction".into(),
        description: "Record what the page says about the goal.".into(),
        parameters: args::schema::<Extraction>(),
        variants: None,
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
    let answer: Extraction = resp
        .message
        .tool_calls
        .iter()
        .find(|c| c.function.name == "record_extraction")
        .and_then(|c| serde_json::from_str(&c.function.arguments).ok())
        .ok_or_else(|| fail("extract_content: the model did not record an extraction"))?;
    let content = answer.content.as_deref().unwrap_or("").trim();
    if answer.found == Some(false) || content.is_empty() {
        return Ok(format!(
            "The page {url} does not say anything about: {goal}"
        ));
    }
    Ok(format!("Extracted from {url} for \"{goal}\":\n{content}"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn err(args: Value) -> String {
        parse(&args).unwrap_err().0
    }

    #[test]
    fn the_description_names_every_action() {
        let spec = BrowserUse::new(&ToolSettings::default()).spec();
        let actions = spec.parameters["properties"]["action"]["enum"]
            .as_array()
            .unwrap();
        assert_eq!(actions.len(), 16);
        for action in actions {
            let name = action.as_str().unwrap();
            assert!(spec.description.contains(name), "{name}");
        }
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
