//! Self-check of the scripted OpenAI-compatible server in `tests/support/llm_server.rs`,
//! driven with raw HTTP/1.1 over a TCP socket so it depends on no HTTP client crate.

use crate::support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::llm_server::{Reply, Request, ScriptedLlm};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct RawResponse {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl RawResponse {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("response body is not JSON ({e}): {}", self.body))
    }
}

/// Sends one `POST` with `Connection: close` and reads the whole response.
async fn post(addr: SocketAddr, target: &str, headers: &[(&str, &str)], body: &str) -> RawResponse {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let mut request = format!(
        "POST {target} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).await.expect("write");

    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
        .await
        .expect("response within 10s")
        .expect("read");
    let raw = String::from_utf8(raw).expect("utf-8 response");
    let (head, body) = raw.split_once("\r\n\r\n").expect("header/body separator");
    let mut lines = head.split("\r\n");
    let status_line = lines.next().expect("status line");
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect::<Vec<_>>();
    assert!(
        !headers
            .iter()
            .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked")),
        "test client does not decode chunked bodies"
    );
    RawResponse {
        status,
        headers,
        body: body.to_owned(),
    }
}

fn chat_body() -> String {
    json!({
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "You are a test agent."},
            {"role": "user", "content": "first question"},
            {"role": "assistant", "content": "first answer"},
            {"role": "user", "content": [{"type": "text", "text": "second "}, {"type": "text", "text": "question"}]}
        ],
        "tools": [
            {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}},
            {"type": "function", "function": {"name": "terminate", "parameters": {"type": "object"}}}
        ],
        "tool_choice": "auto",
        "max_tokens": 256,
        "temperature": 0.0
    })
    .to_string()
}

#[tokio::test]
async fn tool_reply_comes_back_in_wire_shape_and_request_is_recorded() {
    let llm = ScriptedLlm::start().await;
    assert!(llm.base_url().starts_with("http://127.0.0.1:"));
    assert!(llm.base_url().ends_with("/v1"));
    llm.push(Reply::tool("bash", json!({"command": "ls -la"})).usage(120, 30));
    assert_eq!(llm.remaining(), 1);

    let resp = post(
        llm.addr(),
        "/v1/chat/completions",
        &[("Authorization", "Bearer sk-test")],
        &chat_body(),
    )
    .await;
    assert_eq!(resp.status, 200, "body: {}", resp.body);
    assert!(
        resp.header("content-type")
            .unwrap()
            .starts_with("application/json")
    );
    let v = resp.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "gpt-test");
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert!(v["created"].as_u64().unwrap() > 0);
    let choice = &v["choices"][0];
    assert_eq!(choice["index"], 0);
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["role"], "assistant");
    assert!(choice["message"]["content"].is_null());
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["id"], "call_1");
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "bash");
    let args = call["function"]["arguments"]
        .as_str()
        .expect("arguments is a string");
    assert_eq!(
        serde_json::from_str::<Value>(args).unwrap(),
        json!({"command": "ls -la"})
    );
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150})
    );
    assert_eq!(llm.remaining(), 0);

    let reqs = llm.requests();
    assert_eq!(reqs.len(), 1);
    let r = &reqs[0];
    assert_eq!(r.path, "/v1/chat/completions");
    assert_eq!(r.query, None);
    assert_eq!(r.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(r.header("Content-Type"), Some("application/json"));
    assert_eq!(r.model(), Some("gpt-test"));
    assert_eq!(r.messages().len(), 4);
    assert_eq!(r.last_user_text().as_deref(), Some("second question"));
    assert_eq!(r.system_text().as_deref(), Some("You are a test agent."));
    assert_eq!(r.tool_names(), vec!["bash", "terminate"]);
    assert_eq!(r.body["tool_choice"], "auto");
    assert_eq!(r.body["max_tokens"], 256);
}

#[tokio::test]
async fn text_multi_tool_and_raw_replies_with_unique_call_ids() {
    let llm = ScriptedLlm::start().await;
    llm.push_all([
        Reply::text("all done"),
        Reply::tools(vec![
            ("bash", json!({"command": "pwd"})),
            ("terminate", json!({"status": "success"})),
        ])
        .with_text("running two tools"),
        Reply::tool_raw("bash", "{\"command\": \"unterminated"),
    ]);
    assert_eq!(llm.remaining(), 3);
    let body = chat_body();

    let v = post(llm.addr(), "/v1/chat/completions", &[], &body)
        .await
        .json();
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(v["choices"][0]["message"]["content"], "all done");
    assert!(v["choices"][0]["message"].get("tool_calls").is_none());
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})
    );

    let v = post(llm.addr(), "/v1/chat/completions", &[], &body)
        .await
        .json();
    let msg = &v["choices"][0]["message"];
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(msg["content"], "running two tools");
    let calls = msg["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0]["id"], "call_1");
    assert_eq!(calls[1]["id"], "call_2");
    assert_eq!(calls[1]["function"]["name"], "terminate");

    let v = post(llm.addr(), "/v1/chat/completions", &[], &body)
        .await
        .json();
    let call = &v["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["id"], "call_3");
    assert_eq!(
        call["function"]["arguments"],
        "{\"command\": \"unterminated"
    );
    assert_eq!(llm.requests().len(), 3);
}

#[tokio::test]
async fn status_429_carries_retry_after_and_error_body() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::status(429).retry_after(7));
    let resp = post(llm.addr(), "/v1/chat/completions", &[], &chat_body()).await;
    assert_eq!(resp.status, 429);
    assert_eq!(resp.header("retry-after"), Some("7"));
    let v = resp.json();
    assert_eq!(v["error"]["type"], "rate_limit_error");
    assert_eq!(v["error"]["code"], "rate_limit_exceeded");
    assert!(v["error"]["message"].is_string());
    assert_eq!(llm.requests().len(), 1, "errored requests are recorded too");
}

#[tokio::test]
async fn exhausted_script_gives_500_then_fallback_is_served() {
    let llm = ScriptedLlm::start().await;
    let resp = post(llm.addr(), "/v1/chat/completions", &[], &chat_body()).await;
    assert_eq!(resp.status, 500);
    assert_eq!(resp.json()["error"]["message"], "script exhausted");
    assert_eq!(llm.requests().len(), 1);

    llm.set_fallback(Some(Reply::tool("terminate", json!({"status": "success"}))));
    for expected_id in ["call_1", "call_2"] {
        let v = post(llm.addr(), "/v1/chat/completions", &[], &chat_body())
            .await
            .json();
        assert_eq!(
            v["choices"][0]["message"]["tool_calls"][0]["id"],
            expected_id
        );
    }
    assert_eq!(llm.remaining(), 0);
    llm.set_fallback(None);
    let resp = post(llm.addr(), "/v1/chat/completions", &[], &chat_body()).await;
    assert_eq!(resp.status, 500);
    assert_eq!(llm.requests().len(), 4);
}

#[tokio::test]
async fn azure_path_records_deployment_query_and_api_key() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::text("hello from azure"));
    let body = json!({"messages": [{"role": "user", "content": "hi"}]}).to_string();
    let resp = post(
        llm.addr(),
        "/openai/deployments/gpt4o-prod/chat/completions?api-version=2024-06-01",
        &[("api-key", "azure-secret")],
        &body,
    )
    .await;
    assert_eq!(resp.status, 200, "body: {}", resp.body);
    let v = resp.json();
    assert_eq!(v["choices"][0]["message"]["content"], "hello from azure");
    assert_eq!(v["model"], "gpt4o-prod");
    let r = &llm.requests()[0];
    assert_eq!(r.path, "/openai/deployments/gpt4o-prod/chat/completions");
    assert_eq!(r.query.as_deref(), Some("api-version=2024-06-01"));
    assert_eq!(r.header("api-key"), Some("azure-secret"));
    assert_eq!(r.last_user_text().as_deref(), Some("hi"));
    assert_eq!(r.system_text(), None);
    assert!(r.tool_names().is_empty());
    assert!(llm.root_url().starts_with("http://127.0.0.1:"));
}

#[tokio::test]
async fn delay_and_unknown_path() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::text("slow").delay(150));
    let started = Instant::now();
    let resp = post(llm.addr(), "/v1/chat/completions", &[], &chat_body()).await;
    assert_eq!(resp.status, 200);
    assert!(started.elapsed() >= Duration::from_millis(150));

    let resp = post(llm.addr(), "/v1/v1/chat/completions", &[], "{}").await;
    assert_eq!(resp.status, 404);
    assert_eq!(resp.json()["error"]["type"], "not_found_error");
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[1].path, "/v1/v1/chat/completions");
}

/// The hold observer is told once per answer, with the request, and a hold of at least the
/// delay and no longer than the client waited.
#[tokio::test]
async fn the_hold_observer_is_told_once_per_answer() {
    let llm = ScriptedLlm::start().await;
    let holds: Arc<Mutex<Vec<(String, Duration)>>> = Arc::default();
    let told = holds.clone();
    llm.set_hold_observer(Some(Arc::new(move |req: &Request, held: Duration| {
        let text = String::from_utf8_lossy(req.raw()).into_owned();
        told.lock().unwrap().push((text, held));
    })));
    llm.push(Reply::text("slow").delay(120));
    let started = Instant::now();
    let resp = post(llm.addr(), "/v1/chat/completions", &[], &chat_body()).await;
    let waited = started.elapsed();
    assert_eq!(resp.status, 200);
    let holds = holds.lock().unwrap().clone();
    assert_eq!(holds.len(), 1, "{holds:?}");
    let (body, held) = &holds[0];
    assert_eq!(body, &chat_body());
    assert!(
        *held >= Duration::from_millis(120) && *held <= waited,
        "held {held:?}, the client waited {waited:?}"
    );
}

/// Calls held at once are each answered at their own deadline, whatever order they came in:
/// a call that arrives later but is due sooner goes out first, and no call is left waiting.
#[tokio::test]
async fn held_calls_are_answered_in_deadline_order() {
    let llm = ScriptedLlm::start().await;
    // Arriving in this order, each due before the one before it.
    let delays = [240u64, 160, 80];
    llm.push_all(delays.map(|ms| Reply::text(&ms.to_string()).delay(ms)));
    let started = Instant::now();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for _ in delays {
        let tx = tx.clone();
        let addr = llm.addr();
        tokio::spawn(async move {
            let resp = post(addr, "/v1/chat/completions", &[], &chat_body()).await;
            let _ = tx.send((resp.json(), started.elapsed()));
        });
        // So they arrive in order.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(tx);
    let mut answered = vec![];
    while let Some((answer, waited)) = rx.recv().await {
        let ms: u64 = answer["choices"][0]["message"]["content"]
            .as_str()
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("unexpected answer {answer}"));
        assert!(
            waited >= Duration::from_millis(ms),
            "due after {ms} ms, answered after {waited:?}"
        );
        answered.push((ms, waited));
    }
    let order: Vec<u64> = answered.iter().map(|&(ms, _)| ms).collect();
    // Answered in deadline order, each no sooner than due: not together when the last one
    // was due (then the order would be arrival order, 240 first).
    assert_eq!(order, [80, 160, 240]);

    // A burst of calls with a handful of deadlines: every one is answered.
    let n = 60;
    llm.push_all((0..n).map(|i| Reply::text("ok").delay(20 + (i % 4) * 5)));
    let body = chat_body();
    let calls = (0..n).map(|_| post(llm.addr(), "/v1/chat/completions", &[], &body));
    let statuses: Vec<u16> = futures_util::future::join_all(calls)
        .await
        .iter()
        .map(|r| r.status)
        .collect();
    assert_eq!(statuses, vec![200; n as usize]);
}

#[tokio::test]
async fn drop_stops_the_server() {
    let llm = ScriptedLlm::start().await;
    let addr = llm.addr();
    drop(llm);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "listener still open after drop"
    );
}
