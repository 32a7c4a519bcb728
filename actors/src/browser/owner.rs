//! The browser-owner actor: holds one flow's WebDriver session, the only client of it, and
//! does the flow's browser requests one at a time. The session (and a fresh Chromium profile
//! directory) is opened on the first request and closed when the actor stops. When the
//! browser or its driver dies, the request in flight fails with that news and the session is
//! dropped, so the next request starts a fresh one.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fantoccini::actions::{InputSource, KeyAction, KeyActions};
use fantoccini::elements::Element;
use fantoccini::error::{CmdError, ErrorStatus, NewSessionError};
use fantoccini::wd::WindowHandle;
use fantoccini::{Client, ClientBuilder, Locator};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::{Value, json};
use tracing::Instrument;

use super::{BrowserSettings, driver, keys};
use crate::protocol::{BrowserAction, BrowserOwnerMsg, BrowserReply, BrowserRequest, BrowserState};

/// How long a click on a link or button waits for the page load it may have started: up to
/// `NAVIGATION_POLLS` looks, `NAVIGATION_POLL` apart.
const NAVIGATION_POLLS: u32 = 20;
const NAVIGATION_POLL: Duration = Duration::from_millis(50);

/// The element-menu script (see its opening comment).
const MENU_JS: &str = include_str!("menu.js");
/// Elements listed in the menu; the rest are counted.
const MENU_LIMIT: u64 = 150;

pub struct BrowserOwner;

pub struct OwnerArgs {
    pub settings: Arc<BrowserSettings>,
    pub flow_id: String,
    /// `--proxy-server` for Chromium, if any.
    pub proxy: Option<String>,
}

pub struct OwnerState {
    settings: Arc<BrowserSettings>,
    flow_id: String,
    proxy: Option<String>,
    session: Option<Session>,
}

/// One open tab, as last seen.
struct Tab {
    handle: WindowHandle,
    title: String,
    url: String,
}

struct Session {
    client: Client,
    /// In tab_id order: the order they were first seen.
    tabs: Vec<Tab>,
    current: usize,
    /// The next element number the menu hands out.
    next_index: u64,
    /// The menu line of each listed element, for reports.
    menu: HashMap<u64, String>,
    profile_dir: PathBuf,
}

/// Why a request failed: something to tell the model, or a WebDriver error to classify.
enum Failure {
    Said(String),
    Driver(CmdError),
}

impl From<CmdError> for Failure {
    fn from(e: CmdError) -> Self {
        Failure::Driver(e)
    }
}

type Done<T> = Result<T, Failure>;

fn said<T>(text: impl Into<String>) -> Done<T> {
    Err(Failure::Said(text.into()))
}

impl Actor for BrowserOwner {
    type Msg = BrowserOwnerMsg;
    type State = OwnerState;
    type Arguments = OwnerArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<BrowserOwnerMsg>,
        args: OwnerArgs,
    ) -> Result<OwnerState, ActorProcessingErr> {
        Ok(OwnerState {
            settings: args.settings,
            flow_id: args.flow_id,
            proxy: args.proxy,
            session: None,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<BrowserOwnerMsg>,
        msg: BrowserOwnerMsg,
        st: &mut OwnerState,
    ) -> Result<(), ActorProcessingErr> {
        let BrowserOwnerMsg::Run {
            webdriver_url,
            moved_from,
            request,
            span: parent,
            reply,
        } = msg;
        if let Some(from) = moved_from
            && st.session.is_some()
        {
            tracing::warn!(flow = %st.flow_id, "the browser's WebDriver endpoint {from} stopped answering; the flow's browser moves to {webdriver_url}");
            st.drop_session().await;
            let _ = reply.send(Err(format!(
                "the browser was lost: its WebDriver endpoint {from} stopped answering, so this flow's \
                 browser starts again on {webdriver_url} with the next action; open tabs, pages and \
                 logins are gone. Open the page again."
            )));
            return Ok(());
        }
        let what = match &request {
            BrowserRequest::Act(a) => a.name(),
            BrowserRequest::State { .. } => "state",
        };
        let span = tracing::info_span!(
            parent: &parent,
            "browser",
            otel.name = format!("browser {what}"),
            manus.browser.action = what,
            manus.flow.id = %st.flow_id,
            otel.status_code = tracing::field::Empty,
            error.type = tracing::field::Empty,
        );
        let result = st
            .run(&webdriver_url, request)
            .instrument(span.clone())
            .await;
        if result.is_err() {
            span.record("otel.status_code", "ERROR");
            span.record("error.type", "browser_error");
        }
        let _ = reply.send(result);
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<BrowserOwnerMsg>,
        st: &mut OwnerState,
    ) -> Result<(), ActorProcessingErr> {
        st.close().await;
        Ok(())
    }
}

impl OwnerState {
    async fn run(
        &mut self,
        webdriver_url: &str,
        request: BrowserRequest,
    ) -> Result<BrowserReply, String> {
        if self.session.is_none() {
            self.session = Some(self.open(webdriver_url).await?);
        }
        let what = match &request {
            BrowserRequest::Act(a) => a.name(),
            BrowserRequest::State { .. } => "reading the browser state",
        };
        // WebDriver bounds page loads and scripts; this only catches a driver that hangs.
        let limit = self
            .settings
            .page_load_timeout
            .saturating_add(Duration::from_secs(30));
        let session = self.session.as_mut().expect("opened above");
        let done = tokio::time::timeout(limit, session.serve(request, &self.settings)).await;
        let failure = match done {
            Ok(Ok(reply)) => return Ok(reply),
            Ok(Err(Failure::Said(text))) => return Err(text),
            Ok(Err(Failure::Driver(e))) => e,
            Err(_) => {
                self.drop_session().await;
                return Err(format!(
                    "{what}: the browser stopped answering for {} s; it was closed, and the next browser action starts a fresh one",
                    limit.as_secs()
                ));
            }
        };
        if let Some(why) = lost(&failure) {
            tracing::warn!(flow = %self.flow_id, "browser session lost: {failure}");
            self.drop_session().await;
            return Err(format!(
                "{what}: {why} ({failure}). The next browser action starts a fresh browser (open tabs are gone)"
            ));
        }
        Err(format!("{what}: {}", explain(&failure, &self.settings)))
    }

    async fn open(&self, webdriver_url: &str) -> Result<Session, String> {
        static N: AtomicU64 = AtomicU64::new(0);
        let profile_dir = std::env::temp_dir().join(format!(
            "manus-rt-chromium-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let caps = driver::capabilities(&self.settings, &profile_dir, self.proxy.as_deref());
        let mut builder =
            ClientBuilder::rustls().map_err(|e| format!("cannot set up TLS for WebDriver: {e}"))?;
        builder.capabilities(caps);
        // A driver that is (re)starting refuses connections for a moment: try for a while.
        let mut attempts = 0;
        let client = loop {
            match builder.connect(webdriver_url).await {
                Ok(c) => break c,
                Err(NewSessionError::Failed(_) | NewSessionError::FailedC(_)) if attempts < 40 => {
                    attempts += 1;
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&profile_dir);
                    return Err(format!(
                        "cannot start a browser session at {webdriver_url}: {e}; check that chromedriver runs there \
                         and that Chromium is installed ([browser] chromium_path)"
                    ));
                }
            }
        };
        let handle = client
            .window()
            .await
            .map_err(|e| format!("the new browser session does not answer: {e}"))?;
        tracing::info!(flow = %self.flow_id, "browser session opened");
        Ok(Session {
            client,
            tabs: vec![Tab {
                handle,
                title: String::new(),
                url: "about:blank".into(),
            }],
            current: 0,
            next_index: 1,
            menu: HashMap::new(),
            profile_dir,
        })
    }

    /// Forget a broken session (a close is attempted, briefly) and its profile.
    async fn drop_session(&mut self) {
        if let Some(s) = self.session.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), s.client.close()).await;
            let _ = std::fs::remove_dir_all(&s.profile_dir);
        }
    }

    /// Close the session for good (flow end or shutdown).
    async fn close(&mut self) {
        if self.session.is_some() {
            tracing::info!(flow = %self.flow_id, "closing the browser session");
        }
        self.drop_session().await;
    }
}

/// If the error means the session is gone, why, in words. Chromedriver reports some of
/// these in non-standard shapes, so the words are looked at whatever the shape.
fn lost(e: &CmdError) -> Option<&'static str> {
    if let CmdError::Lost(_) | CmdError::Failed(_) | CmdError::FailedC(_) = e {
        return Some("the connection to the browser's driver was lost");
    }
    if let CmdError::Standard(w) = e
        && w.error == ErrorStatus::InvalidSessionId
    {
        return Some("the browser session ended");
    }
    let m = e.to_string().to_ascii_lowercase();
    if m.contains("tab crashed") || m.contains("target crashed") {
        Some("the browser tab crashed")
    } else if m.contains("chrome not reachable")
        || m.contains("disconnected")
        || m.contains("session deleted")
    {
        Some("the browser is gone")
    } else {
        None
    }
}

/// A WebDriver error the session survives, said for the model.
fn explain(e: &CmdError, settings: &BrowserSettings) -> String {
    match e {
        CmdError::Standard(w) => match w.error {
            ErrorStatus::Timeout => format!(
                "the page did not finish loading within {} s ([browser] page_load_timeout_secs); loading was stopped and \
                 what had arrived is shown",
                settings.page_load_timeout.as_secs()
            ),
            ErrorStatus::ElementNotInteractable => {
                "the element cannot be used right now (hidden, covered or disabled); scroll to it or pick another".into()
            }
            _ => first_line(&w.message),
        },
        other => first_line(&other.to_string()),
    }
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").trim().to_string()
}

/// Only web pages are for the browser.
fn check_url(url: &str) -> Done<()> {
    if url.starts_with("http://") || url.starts_with("https://") || url == "about:blank" {
        Ok(())
    } else {
        said(format!(
            "`{url}` is not a web address; give a full http:// or https:// URL"
        ))
    }
}

impl Session {
    async fn serve(
        &mut self,
        request: BrowserRequest,
        settings: &BrowserSettings,
    ) -> Done<BrowserReply> {
        match request {
            BrowserRequest::State { screenshot } => {
                self.state(screenshot).await.map(BrowserReply::State)
            }
            BrowserRequest::Act(action) => {
                let changes = !matches!(
                    action,
                    BrowserAction::PageContent | BrowserAction::GetDropdownOptions { .. }
                );
                let reply = self.act(action, settings).await?;
                if changes {
                    // Indices are refreshed after every action that may change the page.
                    self.scan().await?;
                }
                Ok(reply)
            }
        }
    }

    async fn act(
        &mut self,
        action: BrowserAction,
        settings: &BrowserSettings,
    ) -> Done<BrowserReply> {
        let c = self.client.clone();
        let text = match action {
            BrowserAction::GoToUrl { url } => {
                check_url(&url)?;
                self.navigate(&url, settings).await?;
                format!("Opened {url} — \"{}\"", c.title().await?)
            }
            BrowserAction::ClickElement { index } => {
                let el = self.element(index).await?;
                let before = c.windows().await?.len();
                let from = c.current_url().await?;
                if let Err(e) = el.click().await {
                    match e {
                        // Something covers it (a banner, an overlay): click it the page's way.
                        CmdError::Standard(ref w)
                            if w.error == ErrorStatus::ElementClickIntercepted =>
                        {
                            c.execute("arguments[0].click()", vec![json!(el)]).await?;
                        }
                        e => return Err(e.into()),
                    }
                }
                let mut out = format!("Clicked {}", self.label(index));
                self.sync_tabs().await?;
                if self.tabs.len() > before {
                    self.current = self.tabs.len() - 1;
                    c.switch_to_window(self.tabs[self.current].handle.clone())
                        .await?;
                    out += &format!(
                        "; it opened a new tab (tab_id {}), which is now the current tab",
                        self.current
                    );
                }
                let mut now = c.current_url().await?;
                // A link or a form's button may start a page load that commits only after
                // the click returns (later on a busy machine): give it a moment to.
                let label = self.label(index);
                if now == from
                    && (label.contains("<a")
                        || label.contains("<button")
                        || label.contains("submit"))
                {
                    for _ in 0..NAVIGATION_POLLS {
                        tokio::time::sleep(NAVIGATION_POLL).await;
                        now = c.current_url().await?;
                        if now != from {
                            break;
                        }
                    }
                }
                if now != from {
                    out += &format!("; the page is now {now}");
                }
                out
            }
            BrowserAction::InputText { index, text } => {
                let el = self.element(index).await?;
                // Contenteditable elements cannot be cleared the WebDriver way; typing still works.
                let _ = el.clear().await;
                el.send_keys(&text).await?;
                format!("Typed \"{text}\" into {}", self.label(index))
            }
            BrowserAction::Scroll { down, pixels } => {
                let by = match pixels {
                    Some(p) => p.abs(),
                    None => c
                        .execute("return window.innerHeight", vec![])
                        .await?
                        .as_i64()
                        .unwrap_or(600),
                };
                let signed = if down { by } else { -by };
                let at = c
                    .execute(
                        "window.scrollBy(0, arguments[0]); const d = document.documentElement; \
                         return [Math.round(window.scrollY), Math.max(0, Math.round(d.scrollHeight - window.scrollY - window.innerHeight))];",
                        vec![json!(signed)],
                    )
                    .await?;
                format!(
                    "Scrolled {} {by} px; now {} px above and {} px below the view",
                    if down { "down" } else { "up" },
                    at[0],
                    at[1]
                )
            }
            BrowserAction::ScrollToText { text } => {
                let found = c
                    .execute(
                        "const want = arguments[0].toLowerCase(); \
                         const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT); \
                         for (let n = walk.nextNode(); n; n = walk.nextNode()) { \
                           const el = n.parentElement; \
                           if (el && n.textContent.toLowerCase().includes(want) && el.getClientRects().length) { \
                             el.scrollIntoView({block: 'center'}); return true; } } \
                         return false;",
                        vec![json!(text)],
                    )
                    .await?;
                if found != json!(true) {
                    return said(format!("the text \"{text}\" is not on the page"));
                }
                format!("Scrolled to \"{text}\"")
            }
            BrowserAction::SendKeys { keys } => {
                let mut seq = KeyActions::new("keyboard".into());
                for chord in keys::parse(&keys) {
                    for k in &chord {
                        seq = seq.then(KeyAction::Down { value: *k });
                    }
                    for k in chord.iter().rev() {
                        seq = seq.then(KeyAction::Up { value: *k });
                    }
                }
                c.perform_actions(seq).await?;
                format!("Pressed {keys}")
            }
            BrowserAction::GetDropdownOptions { index } => {
                let el = self.element(index).await?;
                let options = c
                    .execute(
                        "const s = arguments[0]; if (s.tagName !== 'SELECT') return null; \
                         return Array.from(s.options).map((o, i) => [i, o.text.trim(), o.value, o.selected]);",
                        vec![json!(el)],
                    )
                    .await?;
                let Value::Array(options) = options else {
                    return said(format!(
                        "{} is not a dropdown (<select>)",
                        self.label(index)
                    ));
                };
                let mut out = format!("Options of {}:", self.label(index));
                for o in options {
                    out += &format!(
                        "\n{}: {} (value {}){}",
                        o[0],
                        o[1].as_str().unwrap_or(""),
                        o[2],
                        if o[3] == json!(true) {
                            " — selected"
                        } else {
                            ""
                        }
                    );
                }
                out + "\nChoose one with select_dropdown_option and its text."
            }
            BrowserAction::SelectDropdownOption { index, text } => {
                let el = self.element(index).await?;
                let picked = c
                    .execute(
                        "const [s, want] = arguments; if (s.tagName !== 'SELECT') return {error: 'not a dropdown (<select>)'}; \
                         const opts = Array.from(s.options); const w = want.trim().toLowerCase(); \
                         const o = opts.find(o => o.text.trim() === want.trim()) || opts.find(o => o.text.trim().toLowerCase() === w) \
                                || opts.find(o => o.value === want); \
                         if (!o) return {error: 'has no option \"' + want + '\"; its options are: ' + opts.map(o => o.text.trim()).join(', ')}; \
                         s.value = o.value; \
                         s.dispatchEvent(new Event('input', {bubbles: true})); s.dispatchEvent(new Event('change', {bubbles: true})); \
                         return {text: o.text.trim()};",
                        vec![json!(el), json!(text)],
                    )
                    .await?;
                if let Some(err) = picked.get("error").and_then(Value::as_str) {
                    return said(format!("{} {err}", self.label(index)));
                }
                format!(
                    "Selected \"{}\" in {}",
                    picked["text"].as_str().unwrap_or(&text),
                    self.label(index)
                )
            }
            BrowserAction::GoBack => {
                c.back().await?;
                format!("Went back to {}", c.current_url().await?)
            }
            BrowserAction::PageContent => {
                return Ok(BrowserReply::Page {
                    url: c.current_url().await?.to_string(),
                    title: c.title().await?,
                    html: c.source().await?,
                });
            }
            BrowserAction::SwitchTab { tab_id } => {
                self.sync_tabs().await?;
                if tab_id >= self.tabs.len() {
                    return said(format!(
                        "there is no tab {tab_id}; open tabs are 0 to {}",
                        self.tabs.len() - 1
                    ));
                }
                c.switch_to_window(self.tabs[tab_id].handle.clone()).await?;
                self.current = tab_id;
                format!("Switched to tab {tab_id}: {}", c.current_url().await?)
            }
            BrowserAction::OpenTab { url } => {
                check_url(&url)?;
                let tab = c.new_window(true).await?;
                c.switch_to_window(tab.handle.clone()).await?;
                self.tabs.push(Tab {
                    handle: tab.handle,
                    title: String::new(),
                    url: "about:blank".into(),
                });
                self.current = self.tabs.len() - 1;
                self.navigate(&url, settings).await?;
                format!("Opened tab {} with {url}", self.current)
            }
            BrowserAction::CloseTab => {
                self.sync_tabs().await?;
                if self.tabs.len() == 1 {
                    return said(
                        "this is the only tab; it stays open (go_to_url to leave the page)",
                    );
                }
                c.close_window().await?;
                let closed = self.tabs.remove(self.current);
                self.current = self.current.saturating_sub(1);
                c.switch_to_window(self.tabs[self.current].handle.clone())
                    .await?;
                format!(
                    "Closed the tab with {}; now on tab {}: {}",
                    closed.url,
                    self.current,
                    c.current_url().await?
                )
            }
        };
        Ok(BrowserReply::Done(text))
    }

    /// Go to `url`; a page that outlives the load limit is stopped where it is.
    async fn navigate(&self, url: &str, settings: &BrowserSettings) -> Done<()> {
        match self.client.goto(url).await {
            Err(CmdError::Standard(w)) if w.error == ErrorStatus::Timeout => {
                let _ = self.client.execute("window.stop()", vec![]).await;
                said(explain(&CmdError::Standard(w), settings))
            }
            other => Ok(other?),
        }
    }

    /// The element the menu numbered `index`.
    async fn element(&self, index: u32) -> Done<Element> {
        let css = format!("[data-manus-index=\"{index}\"]");
        match self.client.find(Locator::Css(&css)).await {
            Ok(el) => Ok(el),
            Err(CmdError::Standard(w)) if w.error == ErrorStatus::NoSuchElement => said(format!(
                "there is no element [{index}] on the page now (it is gone, or the page changed); use an index from the \
                 current element list"
            )),
            Err(e) => Err(e.into()),
        }
    }

    /// `[3] <button> Sign in` for messages, or `[3]` when the menu never showed it.
    fn label(&self, index: u32) -> String {
        self.menu
            .get(&(index as u64))
            .cloned()
            .unwrap_or_else(|| format!("[{index}]"))
    }

    /// Number the page's interactive elements again; returns the scan's answer.
    async fn scan(&mut self) -> Done<Value> {
        let v = self
            .client
            .execute(MENU_JS, vec![json!(self.next_index), json!(MENU_LIMIT)])
            .await?;
        self.next_index = v["next"].as_u64().unwrap_or(self.next_index);
        self.menu = v["lines"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter_map(|line| {
                let n = line.strip_prefix('[')?.split(']').next()?.parse().ok()?;
                Some((n, line.to_string()))
            })
            .collect();
        Ok(v)
    }

    /// Bring the tab list up to date: closed tabs leave, new ones (opened by the page) join
    /// at the end.
    async fn sync_tabs(&mut self) -> Done<()> {
        let open = self.client.windows().await?;
        let current = self.tabs.get(self.current).map(|t| t.handle.clone());
        self.tabs.retain(|t| open.contains(&t.handle));
        for h in open {
            if !self.tabs.iter().any(|t| t.handle == h) {
                self.tabs.push(Tab {
                    handle: h,
                    title: String::new(),
                    url: "(not visited yet)".into(),
                });
            }
        }
        self.current = current
            .and_then(|h| self.tabs.iter().position(|t| t.handle == h))
            .unwrap_or(0);
        Ok(())
    }

    async fn state(&mut self, screenshot: bool) -> Done<BrowserState> {
        self.sync_tabs().await?;
        let scan = self.scan().await?;
        let url = self.client.current_url().await?.to_string();
        let title = self.client.title().await?;
        let tab = &mut self.tabs[self.current];
        (tab.url, tab.title) = (url.clone(), title.clone());
        let shot = if screenshot {
            Some(self.client.screenshot().await?)
        } else {
            None
        };
        Ok(BrowserState {
            url,
            title,
            tabs: self
                .tabs
                .iter()
                .map(|t| (t.title.clone(), t.url.clone()))
                .collect(),
            current_tab: self.current,
            elements: scan["lines"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|l| l.as_str().map(str::to_string))
                .collect(),
            elements_omitted: scan["omitted"].as_u64().unwrap_or(0) as usize,
            pixels_above: scan["above"].as_u64().unwrap_or(0),
            pixels_below: scan["below"].as_u64().unwrap_or(0),
            screenshot: shot,
        })
    }
}
