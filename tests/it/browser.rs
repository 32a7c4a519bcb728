//! The browser against real Chromium (scripts/test.sh installs Debian's chromium and
//! chromium-driver; each test starts its own chromedriver on 127.0.0.1): an agent browses,
//! fills a form and extracts a value, and the model is shown the element menu and a
//! screenshot; a killed driver or a crashed tab fails the action in flight and the next one
//! works on a fresh browser; concurrent flows never see each other's pages. Also the search
//! engines against local servers speaking each engine's format, and `crawl`.

use crate::support;

use manus_rt::{Config, FlowHandle, FlowMode, FlowOutcome, FlowStatus, Runtime, SubmitOptions};
use serde_json::{Value, json};
use support::browser::{Chromedriver, TestSite, browser_overrides};
use support::llm_server::{Gate, Recorded, ScriptedLlm};
use support::scenario::{Scratch, config_with, done, last_tool_text};

fn browse(args: Value) -> support::llm_server::Reply {
    support::llm_server::Reply::tool("browser_use", args)
}

/// A runtime browsing with `driver`, with further `(key, TOML value)` overrides.
fn browser_config(
    server: &ScriptedLlm,
    dir: &Scratch,
    driver: &Chromedriver,
    extra: &[(&str, &str)],
) -> Config {
    let mut overrides: Vec<(&str, String)> = browser_overrides(driver);
    overrides.push(("agents.manus.max_steps", "12".into()));
    overrides.push(("flow.max_step_retries", "0".into()));
    overrides.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
    let pairs: Vec<(&str, &str)> = overrides.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Config::from_text(
        &config_with(server, &dir.workspace(), &pairs),
        "browser-test",
        None,
    )
    .unwrap()
}

async fn run_single(rt: &Runtime, task: &str) -> FlowHandle {
    rt.submit(
        task,
        SubmitOptions {
            mode: FlowMode::Single,
            ..Default::default()
        },
    )
    .await
    .unwrap()
}

/// The closing user message of a request: its text, and its image URLs.
fn closing(r: &Recorded) -> (String, Vec<String>) {
    let last = r.messages().last().cloned().unwrap_or_default();
    match &last["content"] {
        Value::String(s) => (s.clone(), vec![]),
        Value::Array(parts) => (
            parts.iter().filter_map(|p| p["text"].as_str()).collect(),
            parts
                .iter()
                .filter_map(|p| p.pointer("/image_url/url").and_then(Value::as_str))
                .map(str::to_string)
                .collect(),
        ),
        _ => (String::new(), vec![]),
    }
}

fn assert_completed(o: &FlowOutcome) {
    assert_eq!(
        o.status,
        FlowStatus::Completed,
        "{}: {:?}",
        o.reason,
        o.plan
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_fills_a_form_and_extracts_a_value() {
    let driver = Chromedriver::start();
    let site = TestSite::start().await;
    let server = ScriptedLlm::start().await;
    server.push_all([
        browse(json!({"action": "go_to_url", "url": site.url("/form")})),
        browse(json!({"action": "input_text", "index": 1, "text": "Ada"})),
        browse(json!({"action": "get_dropdown_options", "index": 2})),
        browse(json!({"action": "select_dropdown_option", "index": 2, "text": "Green"})),
        browse(json!({"action": "click_element", "index": 3})),
        browse(json!({"action": "extract_content", "goal": "the order number"})),
        // The extraction call, forced to its tool.
        support::llm_server::Reply::tool(
            "record_extraction",
            json!({"found": true, "content": "KITE-GREEN-3"}),
        ),
        done("The order number is KITE-GREEN-3."),
    ]);
    let dir = Scratch::new("browser-form");
    let rt = Runtime::builder()
        .config(browser_config(&server, &dir, &driver, &[]))
        .start()
        .await
        .unwrap();
    let outcome = run_single(
        &rt,
        "order a green kite for Ada and report the order number",
    )
    .await
    .outcome()
    .await;
    rt.shutdown().await;
    assert_completed(&outcome);
    let requests = server.requests();
    assert_eq!(requests.len(), 8);

    // After go_to_url the model saw the page's element menu and a screenshot.
    assert!(
        last_tool_text(&requests[1]).starts_with("Opened http://127.0.0.1"),
        "{}",
        last_tool_text(&requests[1])
    );
    let (state, images) = closing(&requests[1]);
    assert!(state.contains("Title: Order form"), "{state}");
    assert!(
        state.contains("[1] <input type=text name=\"name\" placeholder=\"Your name\"> Name"),
        "{state}"
    );
    assert!(
        state.contains("[2] <select name=\"colour\"> Pick one (4 options)"),
        "{state}"
    );
    assert!(state.contains("[3] <button> Place order"), "{state}");
    assert_eq!(images.len(), 1, "one screenshot");
    let png = base64_decode(
        images[0]
            .strip_prefix("data:image/png;base64,")
            .expect("a PNG data URL"),
    );
    assert_eq!(&png[1..4], b"PNG");
    let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
    assert!(width > 0);

    assert!(last_tool_text(&requests[2]).contains("Typed \"Ada\" into [1]"));
    let options = last_tool_text(&requests[3]);
    assert!(options.contains("2: Green (value \"green\")"), "{options}");
    assert!(last_tool_text(&requests[4]).contains("Selected \"Green\" in [2]"));
    let (state, _) = closing(&requests[4]);
    assert!(
        state.contains("[2] <select name=\"colour\"> Green (4 options)"),
        "{state}"
    );
    let clicked = last_tool_text(&requests[5]);
    assert!(
        clicked.contains("Clicked [3] <button> Place order")
            && clicked.contains("/order?name=Ada&colour=green"),
        "{clicked}"
    );

    // extract_content: the page as markdown, and the model forced to the extraction tool.
    let extraction = &requests[6];
    assert_eq!(
        extraction.body["tool_choice"]["function"]["name"],
        "record_extraction"
    );
    let asked = extraction.last_user_text().unwrap();
    assert!(
        asked.contains("Goal: the order number")
            && asked.contains("Your order number is **KITE-GREEN-3**."),
        "{asked}"
    );
    let extracted = last_tool_text(&requests[7]);
    assert!(extracted.contains("KITE-GREEN-3"), "{extracted}");
}

fn base64_decode(s: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = vec![];
    let (mut acc, mut bits) = (0u32, 0);
    for c in s.bytes().filter(|c| *c != b'=') {
        acc = (acc << 6) | ALPHABET.iter().position(|a| *a == c).expect("base64") as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_driver_fails_the_action_in_flight_and_the_next_one_works() {
    let mut driver = Chromedriver::start();
    let site = TestSite::start().await;
    let server = ScriptedLlm::start().await;
    server.push_all([
        browse(json!({"action": "go_to_url", "url": site.url("/whoami/first")})),
        // In flight when the driver dies: this page never finishes loading.
        browse(json!({"action": "go_to_url", "url": site.url("/slow")})),
        browse(json!({"action": "go_to_url", "url": site.url("/whoami/second")})),
        done("survived"),
    ]);
    let dir = Scratch::new("browser-kill");
    let rt = Runtime::builder()
        .config(browser_config(&server, &dir, &driver, &[]))
        .start()
        .await
        .unwrap();
    let flow = run_single(&rt, "browse through a driver crash").await;
    site.wait_for_hit("/hang").await;
    let port = driver.port;
    driver.kill();
    // The same endpoint comes back, as a process manager would bring it back.
    let _restarted = Chromedriver::start_on(port);
    let outcome = flow.outcome().await;
    rt.shutdown().await;
    assert_completed(&outcome);
    let requests = server.requests();
    let lost = last_tool_text(&requests[2]);
    assert!(
        lost.starts_with("Error: go_to_url:") && lost.contains("fresh browser"),
        "{lost}"
    );
    let again = last_tool_text(&requests[3]);
    assert!(
        again.starts_with("Opened") && again.contains("Page of second"),
        "{again}"
    );
    let (state, _) = closing(&requests[3]);
    assert!(
        state.contains("tab_id 0: Page of second") && !state.contains("tab_id 1"),
        "{state}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_tab_is_reported_and_a_fresh_browser_follows() {
    let driver = Chromedriver::start();
    let site = TestSite::start().await;
    let server = ScriptedLlm::start().await;
    server.push_all([
        browse(json!({"action": "go_to_url", "url": site.url("/slow")})),
        browse(json!({"action": "go_to_url", "url": site.url("/form")})),
        done("recovered"),
    ]);
    let dir = Scratch::new("browser-crash");
    let rt = Runtime::builder()
        .config(browser_config(&server, &dir, &driver, &[]))
        .start()
        .await
        .unwrap();
    let flow = run_single(&rt, "survive a tab crash").await;
    site.wait_for_hit("/hang").await;
    // The tab's renderer dies while its page loads, as when a page crashes it.
    let renderers = driver.group_members("--type=renderer");
    assert!(!renderers.is_empty(), "the tab has a renderer process");
    for pid in renderers {
        let _ = std::process::Command::new("kill")
            .args(["-SEGV", &pid.to_string()])
            .status();
    }
    let outcome = flow.outcome().await;
    rt.shutdown().await;
    assert_completed(&outcome);
    let requests = server.requests();
    let crashed = last_tool_text(&requests[1]);
    assert!(
        crashed.contains("crashed") && crashed.contains("fresh browser"),
        "{crashed}"
    );
    let again = last_tool_text(&requests[2]);
    assert!(
        again.starts_with("Opened") && again.contains("Order form"),
        "{again}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_flows_browse_at_once_and_see_only_their_own_pages() {
    let driver = Chromedriver::start();
    let site = TestSite::start().await;
    let server = ScriptedLlm::start().await;
    server.push_for(
        "flow alpha",
        [
            browse(json!({"action": "go_to_url", "url": site.url("/whoami/alpha")})),
            browse(json!({"action": "open_tab", "url": site.url("/whoami/alpha-two")})),
            browse(json!({"action": "switch_tab", "tab_id": 0})),
            done("alpha done"),
        ],
    );
    server.push_for(
        "flow beta",
        [
            browse(json!({"action": "go_to_url", "url": site.url("/whoami/beta")})),
            browse(json!({"action": "scroll_down"})),
            browse(json!({"action": "go_to_url", "url": site.url("/whoami/beta-two")})),
            done("beta done"),
        ],
    );
    let dir = Scratch::new("browser-two");
    let rt = Runtime::builder()
        .config(browser_config(&server, &dir, &driver, &[]))
        .start()
        .await
        .unwrap();
    let alpha = run_single(&rt, "flow alpha: browse").await;
    let beta = run_single(&rt, "flow beta: browse").await;
    let (a, b) = tokio::join!(alpha.outcome(), beta.outcome());
    rt.shutdown().await;
    assert_completed(&a);
    assert_completed(&b);
    let states = |who: &str| -> Vec<String> {
        server
            .requests()
            .iter()
            .filter(|r| {
                r.messages()
                    .iter()
                    .any(|m| m["content"].as_str().is_some_and(|c| c.contains(who)))
            })
            .map(|r| closing(r).0)
            .filter(|s| s.contains("Current browser state"))
            .collect()
    };
    let (alpha, beta) = (states("flow alpha"), states("flow beta"));
    assert_eq!((alpha.len(), beta.len()), (3, 3));
    for s in &alpha {
        assert!(s.contains("Page of alpha") && !s.contains("beta"), "{s}");
    }
    assert!(
        alpha[1].contains("tab_id 1: Page of alpha-two") && alpha[1].contains("(current)"),
        "{}",
        alpha[1]
    );
    assert!(alpha[2].contains("Title: Page of alpha\n"), "{}", alpha[2]);
    for s in &beta {
        assert!(
            s.contains("Page of beta") && !s.contains("alpha") && !s.contains("tab_id 1"),
            "{s}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_pages_tabs_and_a_page_that_never_loads() {
    let driver = Chromedriver::start();
    let site = TestSite::start().await;
    let server = ScriptedLlm::start().await;
    server.push_all([
        browse(json!({"action": "go_to_url", "url": site.url("/links")})),
        // Index 1: the link that opens the form in a new tab.
        browse(json!({"action": "click_element", "index": 1})),
        browse(json!({"action": "close_tab"})),
        browse(json!({"action": "click_element", "index": 2})),
        browse(json!({"action": "scroll_down", "scroll_amount": 500})),
        browse(json!({"action": "scroll_to_text", "text": "secret word"})),
        browse(json!({"action": "scroll_to_text", "text": "no such words here"})),
        browse(json!({"action": "click_element", "index": 99})),
        browse(json!({"action": "go_back"})),
        browse(json!({"action": "send_keys", "keys": "End"})),
        browse(json!({"action": "go_to_url", "url": site.url("/slow")})),
        browse(json!({"action": "go_to_url", "url": "file:///etc/passwd"})),
        browse(json!({"action": "switch_tab", "tab_id": 5})),
        done("explored"),
    ]);
    let dir = Scratch::new("browser-long");
    let config = browser_config(
        &server,
        &dir,
        &driver,
        &[
            // Long enough for the test site's pages on a loaded machine; /slow never loads.
            ("browser.page_load_timeout_secs", "5"),
            ("agents.manus.max_steps", "20"),
        ],
    );
    let rt = Runtime::builder().config(config).start().await.unwrap();
    let outcome = run_single(&rt, "explore the test site")
        .await
        .outcome()
        .await;
    rt.shutdown().await;
    assert_completed(&outcome);
    let r = server.requests();
    let obs = |n: usize| last_tool_text(&r[n]);
    assert!(
        obs(2).contains("opened a new tab (tab_id 1)"),
        "{}\n(the page it clicked on, after {}:\n{})",
        obs(2),
        obs(1),
        closing(&r[1]).0
    );
    let (state, _) = closing(&r[2]);
    assert!(
        state.contains("Title: Order form") && state.contains("tab_id 1: Order form"),
        "{state}"
    );
    assert!(
        obs(3).contains("Closed the tab") && obs(3).contains("now on tab 0"),
        "{}",
        obs(3)
    );
    let (state, _) = closing(&r[4]);
    assert!(
        state.contains("Title: Long page") && state.contains("0 px above"),
        "{state}"
    );
    assert!(obs(5).contains("Scrolled down 500 px"), "{}", obs(5));
    let (state, _) = closing(&r[5]);
    assert!(state.contains("500 px above"), "{state}");
    assert_eq!(obs(6), "Scrolled to \"secret word\"");
    assert!(
        obs(7).starts_with("Error:") && obs(7).contains("is not on the page"),
        "{}",
        obs(7)
    );
    assert!(
        obs(8).starts_with("Error:") && obs(8).contains("no element [99]"),
        "{}",
        obs(8)
    );
    assert!(
        obs(9).contains("Went back to") && obs(9).contains("/links"),
        "{}",
        obs(9)
    );
    assert_eq!(obs(10), "Pressed End");
    let slow = obs(11);
    assert!(
        slow.starts_with("Error:") && slow.contains("did not finish loading within 5 s"),
        "{slow}"
    );
    let (state, _) = closing(&r[11]);
    assert!(
        state.contains("Title: Slow page"),
        "the page is usable as far as it loaded: {state}"
    );
    assert!(obs(12).contains("not a web address"), "{}", obs(12));
    assert!(obs(13).contains("there is no tab 5"), "{}", obs(13));
}

// ─── web_search and crawl against local servers ─────────────────────────────────────────

mod engines {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    use axum::Router;
    use axum::extract::{Path, Query, State};
    use axum::http::{HeaderMap, StatusCode};
    use axum::response::{Html, IntoResponse, Response};
    use axum::routing::{get, post};
    use serde_json::json;

    /// Local servers speaking SearxNG's JSON API, Brave's API and DuckDuckGo's HTML page,
    /// plus the result pages. Each engine can be told to fail its next N requests.
    #[derive(Default)]
    pub struct Engines {
        pub log: Mutex<Vec<String>>,
        pub fail_searxng: AtomicUsize,
        pub fail_duckduckgo: AtomicUsize,
    }

    pub async fn start() -> (String, Arc<Engines>, tokio::task::JoinHandle<()>) {
        let state = Arc::new(Engines::default());
        let app = Router::new()
            .route("/searxng/search", get(searxng))
            .route("/brave", get(brave))
            .route("/ddg", post(duckduckgo))
            .route("/page/{n}", get(page))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        (base, state, task)
    }

    fn failing(counter: &AtomicUsize) -> bool {
        counter
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    async fn searxng(
        State(s): State<Arc<Engines>>,
        headers: HeaderMap,
        Query(q): Query<HashMap<String, String>>,
    ) -> Response {
        s.log.lock().unwrap().push(format!("searxng {}", q["q"]));
        if failing(&s.fail_searxng) || q.get("format").map(String::as_str) != Some("json") {
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        }
        let host = headers["host"].to_str().unwrap().to_string();
        axum::Json(json!({"query": q["q"], "results": [
            {"url": format!("http://{host}/page/1"), "title": "Kites at SearxNG", "content": "A page about kites."},
            {"url": format!("http://{host}/page/2"), "title": "More kites", "content": "Another one."}
        ]}))
        .into_response()
    }

    async fn brave(
        State(s): State<Arc<Engines>>,
        headers: HeaderMap,
        Query(q): Query<HashMap<String, String>>,
    ) -> Response {
        s.log
            .lock()
            .unwrap()
            .push(format!("brave {} count={}", q["q"], q["count"]));
        if headers
            .get("x-subscription-token")
            .and_then(|v| v.to_str().ok())
            != Some("brave-test-key")
        {
            return StatusCode::UNAUTHORIZED.into_response();
        }
        axum::Json(json!({"type": "search", "web": {"results": [
            {"title": "Brave <strong>kites</strong>", "url": "https://kites.test/brave", "description": "Kites via <strong>Brave</strong>."}
        ]}}))
        .into_response()
    }

    async fn duckduckgo(
        State(s): State<Arc<Engines>>,
        headers: HeaderMap,
        body: String,
    ) -> Response {
        s.log.lock().unwrap().push(format!("duckduckgo {body}"));
        if failing(&s.fail_duckduckgo) {
            return StatusCode::SERVICE_UNAVAILABLE.into_response();
        }
        let host = headers["host"].to_str().unwrap().to_string();
        let target = format!("http%3A%2F%2F{}%2Fpage%2F1", host.replace(':', "%3A"));
        Html(format!(
            "<html><body><div class=\"result results_links result--ad\"><a class=\"result__a\" href=\"https://duckduckgo.com/y.js?ad=1\">An ad</a></div>\
             <div class=\"result\"><h2 class=\"result__title\"><a rel=\"nofollow\" class=\"result__a\" href=\"//duckduckgo.com/l/?uddg={target}&amp;rut=x\">Kites &amp; <b>more</b></a></h2>\
             <a class=\"result__snippet\" href=\"#\">Everything about <b>kites</b>.</a></div></body></html>"
        ))
        .into_response()
    }

    async fn page(Path(n): Path<u32>) -> Html<String> {
        Html(format!(
            "<html><head><title>Kite page {n}</title></head><body><h1>Kite page {n}</h1>\
             <p>Delta kites fly in light wind.</p><a href=\"/page/1\">one</a> <a href=\"/page/2\">two</a></body></html>"
        ))
    }
}

mod web_tools {
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    use manus_rt::engine::tools::web::search::{Engine, SearchSettings};
    use manus_rt::engine::tools::{ToolCtx, ToolSettings, make_tool};
    use serde_json::{Value, json};

    use super::engines;
    use crate::support::scenario::Scratch;

    fn settings(base: &str, engines: Vec<Engine>, max_retries: u32) -> ToolSettings {
        ToolSettings {
            search: Arc::new(SearchSettings {
                engines,
                searxng_url: Some(format!("{base}/searxng")),
                brave_url: format!("{base}/brave"),
                brave_api_key: None,
                duckduckgo_url: format!("{base}/ddg"),
                max_retries,
                retry_delay: Duration::ZERO,
                lang: "en".into(),
                country: "us".into(),
                timeout: Duration::from_secs(10),
            }),
            ..ToolSettings::default()
        }
    }

    async fn call(tool: &str, settings: &ToolSettings, args: Value) -> Result<String, String> {
        let dir = Scratch::new("web-tools");
        let ctx = ToolCtx {
            flow_id: "web".into(),
            agent: "manus".into(),
            workspace: dir.path().to_path_buf(),
            flow: None,
            sandbox: None,
            browser: None,
            llm: None,
            memory: None,
            step: None,
        };
        let mut t = make_tool(tool, settings).unwrap();
        t.call(args, &ctx).await.map(|o| o.text).map_err(|e| e.0)
    }

    #[tokio::test]
    async fn each_engine_is_read_in_its_own_format() {
        let (base, _state, task) = engines::start().await;
        let searx = call(
            "web_search",
            &settings(&base, vec![Engine::Searxng], 0),
            json!({"query": "kites"}),
        )
        .await
        .unwrap();
        assert!(
            searx.starts_with("Results for \"kites\" (searxng):"),
            "{searx}"
        );
        assert!(
            searx.contains("1. Kites at SearxNG\n   http://127.0.0.1")
                && searx.contains("A page about kites."),
            "{searx}"
        );

        let mut brave = settings(&base, vec![Engine::Brave], 0);
        Arc::get_mut(&mut brave.search).unwrap().brave_api_key = Some("brave-test-key".into());
        let out = call(
            "web_search",
            &brave,
            json!({"query": "kites", "num_results": 3}),
        )
        .await
        .unwrap();
        assert!(
            out.contains("1. Brave kites\n   https://kites.test/brave\n   Kites via Brave."),
            "{out}"
        );

        let ddg = call(
            "web_search",
            &settings(&base, vec![Engine::Duckduckgo], 0),
            json!({"query": "kites", "fetch_content": true}),
        )
        .await
        .unwrap();
        assert!(
            ddg.contains("1. Kites & more\n   http://127.0.0.1"),
            "{ddg}"
        );
        assert!(
            ddg.contains("Everything about kites.") && !ddg.contains("An ad"),
            "{ddg}"
        );
        assert!(
            ddg.contains("Content:\n# Kite page 1\n\nDelta kites fly in light wind."),
            "{ddg}"
        );

        let bad = call(
            "web_search",
            &settings(&base, vec![Engine::Searxng], 0),
            json!({"query": "kites", "num_results": 0}),
        )
        .await
        .unwrap_err();
        assert!(
            bad.contains("`num_results` must be between 1 and 20"),
            "{bad}"
        );
        task.abort();
    }

    #[tokio::test]
    async fn engines_fall_back_in_order_and_retry_a_bounded_number_of_rounds() {
        let (base, state, task) = engines::start().await;
        let order = vec![Engine::Searxng, Engine::Brave, Engine::Duckduckgo];
        // SearxNG always fails, Brave has no key, DuckDuckGo fails its first request only.
        state.fail_searxng.store(usize::MAX, Ordering::SeqCst);
        state.fail_duckduckgo.store(1, Ordering::SeqCst);
        let out = call(
            "web_search",
            &settings(&base, order.clone(), 1),
            json!({"query": "kites"}),
        )
        .await
        .unwrap();
        assert!(
            out.starts_with("Results for \"kites\" (duckduckgo):"),
            "{out}"
        );
        let log = state.log.lock().unwrap().clone();
        assert_eq!(
            log,
            [
                "searxng kites",
                "duckduckgo q=kites&kl=us-en",
                "searxng kites",
                "duckduckgo q=kites&kl=us-en"
            ],
            "each round tries the engines in order; brave is skipped without a key"
        );

        state.fail_duckduckgo.store(usize::MAX, Ordering::SeqCst);
        let err = call(
            "web_search",
            &settings(&base, order, 0),
            json!({"query": "kites"}),
        )
        .await
        .unwrap_err();
        assert!(
            err.contains("every search engine failed (1 round)"),
            "{err}"
        );
        assert!(
            err.contains("searxng: HTTP 500")
                && err.contains("brave: no API key")
                && err.contains("duckduckgo: HTTP 503"),
            "{err}"
        );
        task.abort();
    }

    #[tokio::test]
    async fn crawl_returns_markdown_with_counts_and_refuses_other_schemes() {
        let (base, _state, task) = engines::start().await;
        let s = ToolSettings::default();
        let out = call(
            "crawl",
            &s,
            json!({"urls": [format!("{base}/page/2"), "file:///etc/passwd", "ftp://127.0.0.1/x"], "timeout": 10}),
        )
        .await
        .unwrap();
        assert!(
            out.contains(&format!("## {base}/page/2 — Kite page 2\nwords: ")),
            "{out}"
        );
        assert!(
            out.contains("links: 2") && out.contains(&format!("[one]({base}/page/1)")),
            "{out}"
        );
        assert!(out.contains("## file:///etc/passwd\nerror: `file:///etc/passwd` was refused: only http:// and https://"), "{out}");
        assert!(
            out.contains("ftp://127.0.0.1/x\nerror:") && !out.contains("root:"),
            "{out}"
        );
        let err = call("crawl", &s, json!({"urls": ["file:///etc/passwd"]}))
            .await
            .unwrap_err();
        assert!(
            err.contains("no page could be fetched") && err.contains("refused"),
            "{err}"
        );
        let err = call("crawl", &s, json!({"urls": 3})).await.unwrap_err();
        assert!(err.contains("`urls` must be a list of URLs"), "{err}");
        task.abort();
    }
}

/// Issue 6's browser spans: run the CLI with traces on; the browser's own span is a child of
/// the tool call that asked for it, in the flow's one trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_action_is_a_span_under_its_tool_call() {
    let driver = Chromedriver::start();
    let site = TestSite::start().await;
    let server = ScriptedLlm::start().await;
    server.push_all([
        browse(json!({"action": "go_to_url", "url": site.url("/form")})),
        done("opened the form"),
    ]);
    let otlp = support::otlp::OtlpReceiver::start().await;
    let dir = Scratch::new("browser-spans");
    let mut overrides: Vec<(&str, String)> = browser_overrides(&driver);
    overrides.push(("telemetry.otlp_endpoint", format!("{:?}", otlp.endpoint())));
    let pairs: Vec<(&str, &str)> = overrides.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let config = dir.write_config(&config_with(&server, &dir.workspace(), &pairs));
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_manus-rt"))
        .current_dir(dir.path())
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .arg("--config")
        .arg(&config)
        .args(["run", "open the form"])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let spans = otlp.spans();
    let named = |name: &str| {
        spans.iter().find(|s| s.name == name).unwrap_or_else(|| {
            panic!(
                "no span `{name}` among {:?}",
                spans.iter().map(|s| &s.name).collect::<Vec<_>>()
            )
        })
    };
    let browser = named("browser go_to_url");
    let tool = named("execute_tool browser_use");
    assert_eq!(
        browser.parent_span_id, tool.span_id,
        "the tool call is its parent"
    );
    assert_eq!(browser.trace_id, tool.trace_id);
    assert_eq!(browser.attr("manus.browser.action"), Some("go_to_url"));
    assert!(
        spans.iter().all(|s| s.trace_id == tool.trace_id),
        "one trace"
    );
}

/// `[browser] webdriver_urls`: two chromedrivers (as two hosts would run them); the two
/// flows' browsers go one to each (the fewest browsers first), and when one endpoint stops,
/// its flow is told its browser was lost and goes on in a fresh one on the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browsers_spread_over_two_webdrivers_and_move_when_one_stops() {
    let mut first = Chromedriver::start();
    let second = Chromedriver::start();
    let site = TestSite::start().await;
    let server = ScriptedLlm::start().await;
    // Each flow holds its browser until the test has looked where both are and stopped
    // one endpoint (however long the first flow takes to open its page).
    let looked = Gate::new();
    for who in ["alpha", "beta"] {
        server.push_for(
            &format!("flow {who}"),
            [
                browse(json!({"action": "go_to_url", "url": site.url(&format!("/whoami/{who}"))})),
                browse(json!({"action": "go_to_url", "url": site.url(&format!("/whoami/{who}-two"))}))
                    .held_by(&looked),
                browse(json!({"action": "go_to_url", "url": site.url(&format!("/whoami/{who}-three"))})),
                done(&format!("{who} done")),
            ],
        );
    }
    let dir = Scratch::new("browser-pool");
    let urls = format!("[\"{}\", \"{}\"]", first.url(), second.url());
    let rt = Runtime::builder()
        .config(browser_config(
            &server,
            &dir,
            &first,
            &[
                ("browser.webdriver_url", ""),
                ("browser.webdriver_urls", &urls),
                // A held answer is not a model that stopped answering.
                ("llm.timeout_secs", "120"),
            ],
        ))
        .start()
        .await
        .unwrap();
    let alpha = run_single(&rt, "flow alpha: browse").await;
    let beta = run_single(&rt, "flow beta: browse").await;
    // Once both have opened their first page (its result reached the model), each has a
    // browser, one on each endpoint.
    let opened = |who: &str| {
        let text = format!("Page of {who}");
        server.tool_results().iter().any(|t| t.contains(&text))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !(opened("alpha") && opened("beta")) {
        assert!(
            std::time::Instant::now() < deadline,
            "the flows did not open their pages"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        !first.group_members("--user-data-dir").is_empty()
            && !second.group_members("--user-data-dir").is_empty(),
        "the browsers did not spread over both endpoints: {:?} / {:?}",
        first.group_members("--user-data-dir"),
        second.group_members("--user-data-dir")
    );
    first.kill();
    looked.open();
    let (a, b) = tokio::join!(alpha.outcome(), beta.outcome());
    rt.shutdown().await;
    assert_completed(&a);
    assert_completed(&b);
    let results = server.tool_results();
    let lost: Vec<&String> = results
        .iter()
        .filter(|t| t.contains("the browser was lost"))
        .collect();
    assert!(
        !lost.is_empty(),
        "no flow was told of its lost browser: {results:#?}"
    );
    assert!(
        lost.iter()
            .all(|t| t.contains(&second.url()) && t.contains(&first.url())),
        "{lost:?}"
    );
    // The moved flow's next action worked, on the endpoint left.
    assert!(results.iter().any(|t| t.contains("-three")), "{results:?}");
}
