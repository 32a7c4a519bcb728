//! Against a real model server (llama.cpp's `llama-server` with SmolLM2-135M-Instruct, see
//! `support::llama`): the protocol, not the model's wit. The history of native tool calls
//! is taken as sent; the server's own errors reach the caller clearly and are not retried
//! as if they were transient.

use std::sync::Arc;

use manus_actors::llm::{
    ChatRequest, FunctionCall, LazyHttp, LlmClient, LlmErrorKind, Message, ToolCall, ToolChoice,
    ToolSet, ToolSpec,
};
use manus_rt::config::Config;
use serde_json::json;

use crate::support::llama;

fn client(url: &str, extra: &str) -> LlmClient {
    let config = Config::from_text(&llama::config_text(url, extra), "llama-test", None).unwrap();
    LlmClient::new(config.llm["default"].clone(), LazyHttp::default(), None)
}

fn weather_tool() -> ToolSet {
    ToolSet::new(vec![ToolSpec {
        name: "get_weather".into(),
        description: "Get the current weather for a city.".into(),
        parameters: json!({
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city's name"}},
            "required": ["city"]
        }),
    }])
}

/// SmolLM2-135M does not write native tool calls on its own (tested: plain text at
/// temperature 0 with and without `tool_choice`), so the history of one is built here: the
/// server must take an assistant turn with `tool_calls` and its `tool` result as we send
/// them, alongside the tool schemas, and answer the turn after them.
#[tokio::test]
async fn a_native_tool_call_history_is_taken_by_the_server() {
    let Some(url) = llama::url() else { return };
    let client = client(&url, "");
    let tools = weather_tool();
    let system = Message::system("You are a helpful assistant. Use the tools you are given.");
    let ask = Message::user("What is the weather in Paris?");
    let call = ToolCall {
        id: "call_1".into(),
        kind: "function".into(),
        function: FunctionCall {
            name: "get_weather".into(),
            arguments: json!({"city": "Paris"}).to_string(),
        },
    };
    let mut made = Message::assistant("");
    made.tool_calls = vec![call.clone()];
    let result = Message::tool(&call, "Sunny, 21 degrees.");
    let answer = client
        .chat(&ChatRequest {
            messages: vec![&system, &ask, &made, &result],
            tools,
            tool_choice: ToolChoice::Auto,
        })
        .await
        .expect("the server accepts the tool call's history");
    assert!(answer.finish_reason.is_some(), "{answer:?}");
    assert!(answer.usage.prompt_tokens > 0 && answer.usage.completion_tokens > 0);
}

#[tokio::test]
async fn a_request_beyond_the_servers_context_is_refused_clearly_and_not_retried() {
    let Some(url) = llama::url() else { return };
    let client = client(&url, "max_retries = 3");
    // Far beyond the server's context (test.sh starts it with 8192 tokens per slot).
    let long = Message::user("word ".repeat(40_000));
    let e = client
        .chat(&ChatRequest {
            messages: vec![&long],
            tools: ToolSet::default(),
            tool_choice: ToolChoice::Auto,
        })
        .await
        .expect_err("the server cannot take the request");
    assert_eq!(e.kind, LlmErrorKind::BadRequest, "{}", e.message);
    assert!(
        e.message.contains("context"),
        "the server's reason is lost: {}",
        e.message
    );
    assert!(!e.message.contains("gave up"), "retried: {}", e.message);
}
