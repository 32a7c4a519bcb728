//! The browser-supervisor actor: owns the chromedriver it launched (when there is no
//! `webdriver_url` to attach to) and one browser-owner actor per flow that browses. A flow's
//! requests go to its own owner, so two flows never share a session or a tab; the owner is
//! started on the flow's first request and stopped (its session closed) when the flow ends
//! and when the runtime shuts down. A chromedriver that died is started again on the next
//! request.

mod driver;
mod keys;
mod owner;
pub mod proxy;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};

use crate::children::FlowChildren;
use crate::protocol::{
    BrowserAction, BrowserMsg, BrowserOwnerMsg, BrowserReply, BrowserRequest, BrowserState,
};
use driver::Driver;
use owner::{BrowserOwner, OwnerArgs};

/// `[browser]`, as data.
#[derive(Debug, Clone)]
pub struct BrowserSettings {
    pub webdriver: WebDriverSource,
    pub headless: bool,
    /// The Chromium binary; chromedriver's own search when `None`.
    pub chromium_path: Option<String>,
    /// More Chromium arguments, after ours.
    pub extra_args: Vec<String>,
    pub proxy: Option<ProxySettings>,
    /// Characters of page text `extract_content` gives the model.
    pub max_content_length: usize,
    pub page_load_timeout: Duration,
    /// Window width and height in pixels.
    pub viewport: (u32, u32),
    /// Send a screenshot with the browser state to models that accept images.
    pub screenshots: bool,
}

impl Default for BrowserSettings {
    fn default() -> Self {
        BrowserSettings {
            webdriver: WebDriverSource::Launch("chromedriver".into()),
            headless: true,
            chromium_path: None,
            extra_args: vec![],
            proxy: None,
            max_content_length: 2000,
            page_load_timeout: Duration::from_secs(30),
            viewport: (1280, 800),
            screenshots: true,
        }
    }
}

/// Where the WebDriver endpoint comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebDriverSource {
    /// A running endpoint, e.g. `http://127.0.0.1:9515`.
    Url(String),
    /// A chromedriver binary to launch on a free loopback port.
    Launch(String),
    /// Several running endpoints (chromedrivers, or Selenium-Grid-compatible hubs) on other
    /// hosts: each flow's browser goes to the reachable one with the fewest browsers, and
    /// moves to another when its endpoint stops answering.
    Pool(Vec<String>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxySettings {
    /// `http://host:port` (or `socks5://…`).
    pub server: String,
    pub username: Option<String>,
    pub password: Option<String>,
}

/// How tools and agents reach the browser: a message to the supervisor per request.
#[derive(Debug, Clone)]
pub struct BrowserHandle {
    pub supervisor: ActorRef<BrowserMsg>,
    pub settings: Arc<BrowserSettings>,
}

impl BrowserHandle {
    async fn run(&self, flow_id: &str, request: BrowserRequest) -> Result<BrowserReply, String> {
        // A session may need starting first; the owner bounds each request itself.
        let wait = self
            .settings
            .page_load_timeout
            .saturating_mul(2)
            .saturating_add(Duration::from_secs(90));
        let flow_id = flow_id.to_string();
        let call = self
            .supervisor
            .call(
                |reply| BrowserMsg::Run {
                    flow_id,
                    request,
                    span: tracing::Span::current(),
                    reply,
                },
                Some(wait),
            )
            .await;
        crate::protocol::answered(call, "the browser", wait)
    }

    /// Do one action in the flow's browser.
    pub async fn act(&self, flow_id: &str, action: BrowserAction) -> Result<BrowserReply, String> {
        self.run(flow_id, BrowserRequest::Act(action)).await
    }

    /// The flow's browser as the next prompt shows it.
    pub async fn state(&self, flow_id: &str, screenshot: bool) -> Result<BrowserState, String> {
        match self
            .run(flow_id, BrowserRequest::State { screenshot })
            .await?
        {
            BrowserReply::State(s) => Ok(s),
            other => Err(format!("the browser answered {other:?} to a state request")),
        }
    }
}

pub struct BrowserSupervisor;

pub struct SupervisorState {
    settings: Arc<BrowserSettings>,
    /// The chromedriver we launched, if we launch one.
    driver: Option<Driver>,
    /// A local forwarder that adds the proxy's credentials, when it has some.
    proxy: Option<proxy::AuthForwarder>,
    owners: FlowChildren<BrowserOwnerMsg>,
    /// With several endpoints (`WebDriverSource::Pool`): where each flow's browser is.
    placed: HashMap<String, String>,
    /// Asks the endpoints whether they answer.
    http: reqwest::Client,
}

/// How long an endpoint of a pool has to answer `GET /status`.
const STATUS_WAIT: Duration = Duration::from_secs(5);

impl SupervisorState {
    /// The WebDriver endpoint for `flow`'s browser, launching (or relaunching) chromedriver
    /// if that is our job; with a pool, the endpoint it is on, or (when that stopped
    /// answering, or it has none) the answering one with the fewest browsers, and the one
    /// it moved from.
    async fn endpoint(&mut self, flow: &str) -> Result<(String, Option<String>), String> {
        let path = match &self.settings.webdriver {
            WebDriverSource::Url(url) => return Ok((url.clone(), None)),
            WebDriverSource::Pool(urls) => return self.place(flow, &urls.clone()).await,
            WebDriverSource::Launch(path) => path.clone(),
        };
        self.launched(&path).await.map(|u| (u, None))
    }

    async fn place(
        &mut self,
        flow: &str,
        urls: &[String],
    ) -> Result<(String, Option<String>), String> {
        let current = self.placed.get(flow).cloned();
        if let Some(u) = &current {
            if self.answers(u).await {
                return Ok((u.clone(), None));
            }
            tracing::warn!(
                flow,
                "the WebDriver endpoint {u} does not answer; moving the flow's browser"
            );
        }
        let load = |u: &String| self.placed.values().filter(|p| *p == u).count();
        let mut by_load: Vec<&String> = urls
            .iter()
            .filter(|u| Some(*u) != current.as_ref())
            .collect();
        by_load.sort_by_key(|u| load(u));
        for u in by_load {
            if self.answers(u).await {
                self.placed.insert(flow.to_string(), u.clone());
                return Ok((u.clone(), current));
            }
            tracing::warn!("the WebDriver endpoint {u} does not answer");
        }
        Err(format!(
            "no WebDriver endpoint of [browser] webdriver_urls answers ({})",
            urls.join(", ")
        ))
    }

    /// Whether a WebDriver endpoint answers `GET /status` and is ready for a session.
    async fn answers(&self, url: &str) -> bool {
        let asked = self
            .http
            .get(format!("{url}/status"))
            .timeout(STATUS_WAIT)
            .send()
            .await;
        match asked {
            Ok(r) if r.status().is_success() => r
                .json::<serde_json::Value>()
                .await
                .map(|v| v["value"]["ready"] != serde_json::Value::Bool(false))
                .unwrap_or(true),
            _ => false,
        }
    }

    /// The chromedriver at `path` we launched, started (again) if it is not running.
    async fn launched(&mut self, path: &str) -> Result<String, String> {
        if let Some(d) = &mut self.driver {
            if d.alive() {
                return Ok(d.url.clone());
            }
            tracing::warn!("chromedriver has exited; starting it again");
        }
        let d = self.driver.insert(Driver::launch(path).await?);
        Ok(d.url.clone())
    }

    /// The `--proxy-server` Chromium should use: the configured proxy, or our forwarder to
    /// it when it needs credentials (Chromium cannot take them on its command line).
    async fn proxy_server(&mut self) -> Result<Option<String>, String> {
        let Some(p) = &self.settings.proxy else {
            return Ok(None);
        };
        if p.username.is_none() {
            return Ok(Some(p.server.clone()));
        }
        if self.proxy.is_none() {
            self.proxy = Some(proxy::AuthForwarder::start(p).await?);
        }
        Ok(self.proxy.as_ref().map(|f| f.url()))
    }
}

impl Actor for BrowserSupervisor {
    type Msg = BrowserMsg;
    type State = SupervisorState;
    type Arguments = Arc<BrowserSettings>;

    async fn pre_start(
        &self,
        _myself: ActorRef<BrowserMsg>,
        settings: Arc<BrowserSettings>,
    ) -> Result<SupervisorState, ActorProcessingErr> {
        Ok(SupervisorState {
            settings,
            driver: None,
            proxy: None,
            owners: FlowChildren::new("browser owner"),
            placed: HashMap::new(),
            http: crate::tls::client(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<BrowserMsg>,
        msg: BrowserMsg,
        st: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            BrowserMsg::Run {
                flow_id,
                request,
                span,
                reply,
            } => {
                let ready = async {
                    let url = st.endpoint(&flow_id).await?;
                    let proxy = st.proxy_server().await?;
                    Ok::<_, String>((url, proxy))
                };
                let ((webdriver_url, moved_from), proxy) = match ready.await {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = reply.send(Err(e));
                        return Ok(());
                    }
                };
                let owner = match st.owners.get(&flow_id) {
                    Some(o) => o.actor.clone(),
                    None => {
                        let args = OwnerArgs {
                            settings: st.settings.clone(),
                            flow_id: flow_id.clone(),
                            proxy,
                        };
                        let cell = myself.get_cell();
                        let started = st.owners.start(&flow_id, BrowserOwner, args, cell, || ());
                        match started.await {
                            Ok(o) => o,
                            Err(e) => {
                                let _ =
                                    reply.send(Err(format!("the browser could not start: {e}")));
                                return Ok(());
                            }
                        }
                    }
                };
                if let Err(e) = owner.send_message(BrowserOwnerMsg::Run {
                    webdriver_url,
                    moved_from,
                    request,
                    span,
                    reply,
                }) {
                    tracing::warn!(flow = %flow_id, "the flow's browser owner is gone: {e}");
                    st.owners.remove(&flow_id);
                }
            }
            BrowserMsg::Release { flow_id } => {
                // The owner closes its session as it stops; nothing here waits for it.
                st.placed.remove(&flow_id);
                if let Some(o) = st.owners.remove(&flow_id) {
                    o.actor.stop(Some("flow ended".into()));
                }
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<BrowserMsg>,
        st: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        // Sessions close before the driver goes, so no browser outlives the runtime.
        st.owners.stop_all(Duration::from_secs(15)).await;
        if let Some(mut d) = st.driver.take() {
            d.stop();
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<BrowserMsg>,
        evt: SupervisionEvent,
        st: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        // An owner that stopped or crashed leaves the table; the flow's next request makes
        // a new one with a fresh session.
        st.owners.forget(&evt);
        Ok(())
    }
}
