//! The browser against real Chromium (scripts/test.sh installs Debian's chromium and
//! chromium-driver; each test starts its own chromedriver on 127.0.0.1): an agent browses,
//! fills a form and extracts a value, and the model is shown the element menu and a
//! screenshot; a killed driver or a crashed tab fails the action in flight and the next one
//! works on a fresh browser; concurrent flows never see each other's pages. Also the search
//! engines against local servers speaking each engine's format, and `crawl`.

mod support;

use manus_rt::{Config, FlowHandle, FlowMode, FlowOutcome, FlowStatus, Runtime, SubmitOptions};
use serde_json::{Value, json};
use support::browser::{Chromedriver, TestSite, browser_overrides};
use support::llm_server::{Recorded, ScriptedLlm};
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
    Config::parse(
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
            ("browser.page_load_timeout_secs", "2"),
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
    assert!(obs(2).contains("opened a new tab (tab_id 1)"), "{}", obs(2));
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
        slow.starts_with("Error:") && slow.contains("did not finish loading within 2 s"),
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
