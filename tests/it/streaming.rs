//! Streamed model answers against the scripted server speaking the event-stream form real
//! servers send: pieces assembled into the answer and heard as they come, a slow but
//! steady stream kept while a silent server is given up on with the setting to change, and
//! a server that answers whole still understood.

use std::sync::Mutex;

use manus_actors::llm::{
    ChatRequest, LazyHttp, LlmClient, LlmErrorKind, Message, ToolChoice, ToolSet,
};
use manus_rt::config::Config;
use serde_json::json;

use crate::support::llm_server::{Reply, ScriptedLlm};
use crate::support::scenario::{Scratch, config_with, done};

fn client(server: &ScriptedLlm, extra: &str) -> LlmClient {
    let text = format!(
        "[llm]\nbase_url = \"{}\"\nmodel = \"m\"\napi_key = \"k\"\n{extra}\n[agents.manus]\nprofile = \"manus\"\n",
        server.base_url()
    );
    let config = Config::from_text(&text, "streaming-test", None).unwrap();
    LlmClient::new(config.llm["default"].clone(), LazyHttp::default(), None)
}

async fn ask(
    client: &LlmClient,
    heard: &Mutex<Vec<String>>,
) -> Result<manus_actors::llm::ChatResponse, manus_actors::llm::LlmError> {
    let hi = Message::user("hi");
    let req = ChatRequest {
        messages: vec![&hi],
        tools: ToolSet::default(),
        tool_choice: ToolChoice::Auto,
    };
    client
        .chat_with(&req, &|piece| heard.lock().unwrap().push(piece.to_string()))
        .await
}

#[tokio::test]
async fn a_streamed_answer_is_assembled_and_heard_piece_by_piece() {
    let server = ScriptedLlm::start().await;
    let text = "Grüße: the file is written, all 12 lines.";
    server.push(
        Reply::tool("bash", json!({"command": "printf 'é%.0s' 1 2 3 > out.txt"}))
            .with_text(text)
            .usage(31, 17),
    );
    let heard = Mutex::new(vec![]);
    let answer = ask(&client(&server, ""), &heard).await.unwrap();
    let heard = heard.into_inner().unwrap();
    assert!(heard.len() > 5, "{heard:?}");
    assert_eq!(heard.concat(), text);
    assert_eq!(answer.message.text(), text);
    let call = &answer.message.tool_calls[0];
    assert_eq!(call.function.name, "bash");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&call.function.arguments).unwrap(),
        json!({"command": "printf 'é%.0s' 1 2 3 > out.txt"})
    );
    assert_eq!(
        (answer.usage.prompt_tokens, answer.usage.completion_tokens),
        (31, 17)
    );
    let sent = &server.requests()[0].body;
    assert_eq!(sent["stream"], true);
    assert_eq!(sent["stream_options"]["include_usage"], true);
}

#[tokio::test]
async fn a_slow_steady_stream_is_kept_and_a_silent_server_is_given_up_on() {
    let server = ScriptedLlm::start().await;
    // 1 s between pieces at most; the answer takes several seconds in all.
    let client = client(&server, "timeout_secs = 1\nmax_retries = 0");
    let steady = "a slow model that keeps writing";
    server.push(Reply::text(steady).chunk_gap(300));
    let heard = Mutex::new(vec![]);
    let answer = ask(&client, &heard)
        .await
        .expect("a steady stream is not abandoned");
    assert_eq!(answer.message.text(), steady);

    server.push(Reply::text("too late").delay(3_000));
    let e = ask(&client, &Mutex::new(vec![])).await.unwrap_err();
    assert_eq!(e.kind, LlmErrorKind::Network);
    assert!(e.message.contains("[llm] timeout_secs"), "{}", e.message);
}

#[tokio::test]
async fn a_server_that_answers_whole_is_read_whole() {
    let server = ScriptedLlm::start().await;
    server.set_whole_only(true);
    server.push(Reply::text("whole"));
    let heard = Mutex::new(vec![]);
    let answer = ask(&client(&server, ""), &heard).await.unwrap();
    assert_eq!(answer.message.text(), "whole");
    assert_eq!(heard.into_inner().unwrap(), ["whole"]);
    // And `stream = false` asks for a whole answer.
    server.set_whole_only(false);
    server.push(Reply::text("asked whole"));
    let answer = ask(&client(&server, "stream = false"), &Mutex::new(vec![]))
        .await
        .unwrap();
    assert_eq!(answer.message.text(), "asked whole");
    assert!(server.requests()[1].body.get("stream").is_none());
}

/// A flow asked for live text gets the model's words as `TextDelta`s of its step, in
/// order, ahead of the whole text's `Thought`; one not asking gets none, and the run store
/// keeps none either way.
#[tokio::test(flavor = "multi_thread")]
async fn live_text_reaches_only_flows_that_ask_and_is_not_stored() {
    use manus_rt::{FlowEvent, FlowMode, Runtime, SubmitOptions};
    let server = ScriptedLlm::start().await;
    let words = "Writing the greeting now; it goes into hello.txt, as asked by the step.";
    let dir = Scratch::new("deltas");
    let config =
        Config::from_text(&config_with(&server, &dir.workspace(), &[]), "deltas", None).unwrap();
    let rt = Runtime::builder().config(config).start().await.unwrap();
    for deltas in [true, false] {
        server.push(done(words));
        let options = SubmitOptions {
            mode: FlowMode::Single,
            deltas,
            ..Default::default()
        };
        let mut flow = rt.submit("Greet", options).await.unwrap();
        let (mut live, mut thought) = (String::new(), None);
        while let Some(e) = flow.next_event().await {
            match e {
                FlowEvent::TextDelta { step, text, .. } => {
                    assert_eq!(step, 0);
                    assert!(thought.is_none(), "a delta after the whole text");
                    live.push_str(&text);
                }
                FlowEvent::Thought { text, .. } => thought = Some(text),
                _ => {}
            }
        }
        assert_eq!(thought.as_deref(), Some(words));
        assert_eq!(live, if deltas { words } else { "" });
        let stored = rt.store().unwrap().events(&flow.id).await.unwrap();
        assert!(
            stored
                .iter()
                .any(|e| matches!(e.event, FlowEvent::Thought { .. }))
        );
        assert!(
            !stored
                .iter()
                .any(|e| matches!(e.event, FlowEvent::TextDelta { .. })),
            "a live piece of text was stored"
        );
    }
}

/// A local server goes on computing an answer its client gave up on: a timed-out request
/// to one is not sent again behind it (a hosted API's is).
#[tokio::test]
async fn a_timed_out_request_to_a_local_server_is_not_sent_again() {
    let server = ScriptedLlm::start().await;
    for (kind, sent) in [("llamacpp", 1), ("openai", 2)] {
        server.push_all([
            Reply::text("late").delay(2_500),
            Reply::text("late").delay(2_500),
        ]);
        let before = server.request_count();
        let extra = format!("api_type = \"{kind}\"\ntimeout_secs = 1\nmax_retries = 1");
        let e = ask(&client(&server, &extra), &Mutex::new(vec![]))
            .await
            .unwrap_err();
        assert!(e.message.contains("[llm] timeout_secs"), "{}", e.message);
        assert_eq!(
            server.request_count() - before,
            sent,
            "{kind}: {}",
            e.message
        );
        // Let the abandoned answers go before the next round.
        tokio::time::sleep(std::time::Duration::from_secs(3)).await;
        while server.remaining() > 0 {
            let _ = ask(&client(&server, ""), &Mutex::new(vec![])).await;
        }
    }
}
