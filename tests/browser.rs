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
