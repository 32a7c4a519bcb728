//! The scripted provider servers checked against the providers' official Python SDKs
//! (PyPI `anthropic`, `google-genai`, `openai`, pinned in scripts/test.sh): each SDK drives
//! its server as a user would (tests/peers/provider_sdks.py), validating every answer and
//! stream event against its own models, so a server that drifts from the real wire shapes
//! fails here rather than passing the adapters' tests (tests/it/providers.rs and the many
//! tests on the OpenAI-shaped server) on shapes no real provider sends. Each test checks what
//! the SDK read against what was scripted (thinking signatures, tool calls, cache counts,
//! thought-signature bytes, a safety block), a stream assembled against the whole answer, and
//! that the server took the SDK's own requests (its key and version headers, its paths, the
//! signatures it sent back).

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::anthropic_server::{self, ScriptedAnthropic};
use crate::support::gemini_server::{self, Answer, ScriptedGemini};
use crate::support::llm_server::{Reply, ScriptedLlm};

const THOUGHT: &str = "The user wants the weather in Paris; get_weather tells it.";

/// Runs tests/peers/provider_sdks.py for `provider` against `base_url`; its calls' summaries.
/// The script runs with an empty environment, so no proxy, key or API-version variable of
/// the machine's steers the SDKs, and is killed if it outlives the (generous) timeout.
async fn drive(provider: &str, base_url: &str, key: &str) -> Vec<Value> {
    let python = std::env::var("MANUS_TEST_MCP_PYTHON").unwrap_or_else(|_| {
        panic!(
            "MANUS_TEST_MCP_PYTHON is not set: run the suite with scripts/test.sh, which \
             installs the provider SDKs"
        )
    });
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/provider_sdks.py");
    let run = tokio::process::Command::new(python)
        .arg(script)
        .args([provider, base_url, key])
        .env_clear()
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .unwrap_or_else(|_| panic!("{provider}: the SDK script ran over 120 s"))
        .unwrap();
    let said = || {
        format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    assert!(out.status.success(), "{provider}: {}", said());
    let report: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", said()));
    report["calls"].as_array().cloned().unwrap()
}

/// Anthropic's SDK reads thinking blocks with the signature the server issued, the tool use,
/// the stop reason and the cache counts (written by the first call, read by the next), the
/// same whole and streamed (events in the API's order, as `text/event-stream`), and the text
/// answer to the tool's result the same whole and streamed; the server takes the SDK's
/// headers and the thinking block it sends back.
#[tokio::test]
async fn the_anthropic_sdk_reads_the_scripted_server() {
    let server = ScriptedAnthropic::start().await;
    let call = vec![
        json!({"type": "thinking", "thinking": THOUGHT}),
        json!({"type": "tool_use", "id": "toolu_01", "name": "get_weather",
            "input": {"city": "Paris"}}),
    ];
    server.push(call.clone(), "tool_use");
    server.push(call, "tool_use");
    for _ in 0..2 {
        server.push(
            vec![json!({"type": "text", "text": "It is sunny in Paris."})],
            "end_turn",
        );
    }
    let calls = drive("anthropic", &server.url(), anthropic_server::KEY).await;
    let signature = server.signature_of(THOUGHT).unwrap();
    let (whole, streamed, answer) = (&calls[0], &calls[1], &calls[2]);
    assert_eq!(
        whole["content"],
        json!([{"type": "thinking", "thinking": THOUGHT, "signature": signature},
            {"type": "tool_use", "id": "toolu_01", "name": "get_weather",
                "input": {"city": "Paris"}}]),
        "{whole}"
    );
    assert_eq!(whole["stop_reason"], "tool_use");
    assert_eq!(
        (&whole["role"], &whole["model"]),
        (&json!("assistant"), &json!("claude-test"))
    );
    for (name, value) in ["content", "stop_reason", "model", "role"].map(|k| (k, &whole[k])) {
        assert_eq!(&streamed[name], value, "streamed {name}: {streamed}");
    }
    let written = whole["usage"]["cache_creation_input_tokens"]
        .as_u64()
        .unwrap();
    assert!(written >= 1024, "{whole}");
    assert_eq!(whole["usage"]["cache_read_input_tokens"], 0);
    assert_eq!(streamed["usage"]["cache_read_input_tokens"], written);
    assert_eq!(streamed["usage"]["cache_creation_input_tokens"], 0);
    assert!(streamed["usage"]["input_tokens"].as_u64().unwrap() > 0);
    assert_eq!(
        streamed["usage"]["output_tokens"],
        whole["usage"]["output_tokens"]
    );
    assert!(
        streamed["content_type"]
            .as_str()
            .unwrap()
            .starts_with("text/event-stream"),
        "{streamed}"
    );
    // The raw events in the API's order (the SDK adds its own between them), each run of
    // deltas as one.
    let mut raw: Vec<&str> = streamed["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .filter(|t| t.starts_with("message_") || t.starts_with("content_block_"))
        .collect();
    raw.dedup();
    let block = [
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
    ];
    let expected: Vec<&str> = [&["message_start"][..], &block, &block]
        .concat()
        .into_iter()
        .chain(["message_delta", "message_stop"])
        .collect();
    assert_eq!(raw, expected);
    for derived in ["thinking", "signature", "input_json"] {
        assert!(
            streamed["events"]
                .as_array()
                .unwrap()
                .contains(&json!(derived)),
            "{streamed}"
        );
    }
    assert_eq!(
        answer["content"],
        json!([{"type": "text", "text": "It is sunny in Paris."}])
    );
    assert_eq!(answer["stop_reason"], "end_turn");
    for name in ["content", "stop_reason"] {
        assert_eq!(
            calls[3][name], answer[name],
            "streamed {name}: {}",
            calls[3]
        );
    }
    assert!(
        calls[3]["events"]
            .as_array()
            .unwrap()
            .contains(&json!("text"))
    );

    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    assert_eq!(requests[1]["stream"], true);
    assert_eq!(
        requests[0]["system"][0]["cache_control"],
        json!({"type": "ephemeral"})
    );
    assert_eq!(
        requests[2]["messages"][1]["content"][0],
        json!({"type": "thinking", "thinking": THOUGHT, "signature": signature})
    );
    assert_eq!(
        requests[2]["messages"][2]["content"][0]["tool_use_id"],
        "toolu_01"
    );
    assert_eq!(requests[3]["messages"], requests[2]["messages"]);
}

/// Google's SDK reads the function call and its `thought_signature` as the bytes the server
/// issued (base64 on the wire), the thought, the usage and the finish reason, the same whole
/// and streamed; it sends the signature back so the server takes it; and it sees a blocked
/// prompt as blocked (`prompt_feedback.block_reason`, no candidates, no text) and a withheld
/// answer as one (finish reason `SAFETY`, the blocking rating, no text).
#[tokio::test]
async fn the_gemini_sdk_reads_the_scripted_server() {
    let server = ScriptedGemini::start().await;
    let call = || {
        Answer::Parts(vec![
            json!({"text": THOUGHT, "thought": true}),
            json!({"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}),
        ])
    };
    server.push(call());
    server.push(call());
    server.push(Answer::Parts(vec![
        json!({"text": "It is sunny in Paris."}),
    ]));
    server.push(Answer::Blocked("SAFETY"));
    server.push(Answer::Withheld("SAFETY"));
    let calls = drive("gemini", &server.url(), gemini_server::KEY).await;
    let signatures = server.signatures();
    let (whole, streamed, answer, blocked) = (&calls[0], &calls[1], &calls[2], &calls[3]);
    assert_eq!(
        whole["parts"],
        json!([{"text": THOUGHT, "thought": true},
            {"function_call": {"name": "get_weather", "args": {"city": "Paris"}},
                "thought_signature": signatures[0]}]),
        "{whole}"
    );
    assert_eq!(whole["finish_reason"], "STOP");
    let usage = &whole["usage"];
    assert_eq!(usage["thoughts_token_count"], 7);
    assert!(usage["prompt_token_count"].as_u64().unwrap() > 0, "{whole}");
    assert_eq!(
        usage["total_token_count"].as_u64().unwrap(),
        [
            "prompt_token_count",
            "candidates_token_count",
            "thoughts_token_count"
        ]
        .iter()
        .map(|k| usage[k].as_u64().unwrap())
        .sum::<u64>()
    );
    assert!(streamed["chunks"].as_u64().unwrap() > 1, "{streamed}");
    assert_eq!(
        streamed["parts"],
        json!([{"text": THOUGHT, "thought": true},
            {"function_call": {"name": "get_weather", "args": {"city": "Paris"}},
                "thought_signature": signatures[1]}]),
        "{streamed}"
    );
    assert_eq!(streamed["finish_reason"], "STOP");
    assert_eq!(answer["text"], "It is sunny in Paris.");
    assert_eq!(blocked["block_reason"], "SAFETY");
    assert_eq!(blocked["candidates"], Value::Null);
    assert_eq!(blocked["text"], Value::Null);
    let withheld = &calls[4];
    assert_eq!(withheld["finish_reason"], "SAFETY");
    assert_eq!(withheld["parts"], json!([]));
    assert_eq!(withheld["text"], "");
    assert_eq!(
        withheld["safety_ratings"],
        json!([{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH",
            "blocked": true}])
    );

    let requests = server.requests();
    let methods: Vec<&str> = requests.iter().map(|(m, _)| m.as_str()).collect();
    assert_eq!(
        methods,
        [
            "gemini-test:generateContent",
            "gemini-test:streamGenerateContent",
            "gemini-test:generateContent",
            "gemini-test:generateContent",
            "gemini-test:streamGenerateContent"
        ]
    );
    let sent = &requests[2].1["contents"];
    let back = sent[1]["parts"][1]["thoughtSignature"].as_str().unwrap();
    assert_eq!(
        gemini_server::signature_bytes(back),
        gemini_server::signature_bytes(&signatures[0]),
        "{sent}"
    );
    assert_eq!(
        sent[2]["parts"][0]["functionResponse"]["name"],
        "get_weather"
    );
    assert_eq!(
        requests[0].1["tools"][0]["functionDeclarations"][0]["name"],
        "get_weather"
    );
}

/// OpenAI's SDK reads the scripted chat completions, whole and streamed, with tool calls,
/// finish reasons and usage (streamed only when asked for), and assembles a stream to the
/// whole answer; the server records its bearer key and path.
#[tokio::test]
async fn the_openai_sdk_reads_the_scripted_server() {
    let server = ScriptedLlm::start().await;
    let call = || Reply::tool("get_weather", json!({"city": "Paris"})).usage(40, 9);
    let answer = || Reply::text("It is sunny in Paris.").usage(55, 7);
    server.push_all([call(), call(), answer(), answer(), answer()]);
    let calls = drive("openai", &server.base_url(), "sk-test").await;
    // Streamed without asking for usage: none comes, as from OpenAI.
    let unasked = &calls[4];
    assert_eq!(unasked["usage"], Value::Null, "{unasked}");
    assert_eq!(unasked["content"], calls[3]["content"]);
    for (i, c) in calls[..4].iter().enumerate() {
        let calling = i < 2;
        let expected = if calling {
            json!({"content": null, "finish_reason": "tool_calls",
                "usage": {"prompt_tokens": 40, "completion_tokens": 9, "total_tokens": 49}})
        } else {
            json!({"content": "It is sunny in Paris.", "finish_reason": "stop",
                "usage": {"prompt_tokens": 55, "completion_tokens": 7, "total_tokens": 62}})
        };
        for key in ["content", "finish_reason", "usage"] {
            assert_eq!(c[key], expected[key], "call {i} {key}: {c}");
        }
        let tools = c["tool_calls"].as_array().unwrap();
        assert_eq!(tools.len(), usize::from(calling), "call {i}: {c}");
        if calling {
            assert_eq!(tools[0]["name"], "get_weather");
            let args: Value =
                serde_json::from_str(tools[0]["arguments"].as_str().unwrap()).unwrap();
            assert_eq!(args, json!({"city": "Paris"}));
        }
        if i % 2 == 1 {
            assert!(c["chunks"].as_u64().unwrap() > 2, "{c}");
            assert!(
                c["content_type"]
                    .as_str()
                    .unwrap()
                    .starts_with("text/event-stream")
            );
        }
    }
    let requests = server.requests();
    assert_eq!(requests.len(), 5);
    for r in &requests {
        assert_eq!(r.path, "/v1/chat/completions");
        assert_eq!(r.header("authorization"), Some("Bearer sk-test"));
    }
    assert_eq!(requests[1].body["stream"], true);
    let id = calls[0]["tool_calls"][0]["id"].as_str().unwrap();
    let sent = &requests[2].body["messages"];
    assert_eq!(sent[1]["tool_calls"][0]["id"], id, "{sent}");
    assert_eq!(sent[2]["tool_call_id"], id);
}
