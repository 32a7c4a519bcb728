//! The provider seam's adapters against wire-faithful scripted servers, for what
//! llama-server cannot show (`tests/it/llama.rs` has the real server): Anthropic's thinking
//! signatures sent back verbatim, prompt-cache marks and the reads and writes counted and
//! priced, a recorded Anthropic run replayed to the same answers, and its credentials; and
//! Gemini altogether (thought signatures, the schema subset, safety blocks, replay). That
//! the scripted servers speak the providers' real wire shapes is checked against the
//! providers' official SDKs in `tests/it/provider_sdks.rs`.

use std::sync::Arc;

use manus_actors::llm::{
    Cassette, ChatRequest, ChatResponse, LazyHttp, LlmClient, LlmErrorKind, LlmSettings, Message,
    Recorder, ReplayFrom, ToolChoice, ToolSet, ToolSpec,
};
use manus_rt::config::Config;
use serde_json::{Value, json};

use crate::support::anthropic_server::{KEY, ScriptedAnthropic};
use crate::support::gemini_server::{self, Answer, ScriptedGemini};
use crate::support::scenario::{Scratch, probe_says};

/// The settings of an Anthropic profile at `server`, with `extra` in its `[llm]` table.
fn settings(server: &ScriptedAnthropic, extra: &str) -> Arc<LlmSettings> {
    let text = format!(
        "[llm]\napi_type = \"anthropic\"\nbase_url = \"{}\"\nmodel = \"claude-test\"\n\
         api_key = \"{KEY}\"\nmax_retries = 0\n{extra}\n\n[agents.manus]\n",
        server.url()
    );
    Config::from_text(&text, "anthropic-test", None)
        .unwrap()
        .llm["default"]
        .clone()
}

fn client(server: &ScriptedAnthropic, extra: &str) -> LlmClient {
    LlmClient::new(settings(server, extra), LazyHttp::default(), None)
}

fn weather() -> ToolSet {
    ToolSet::new(vec![ToolSpec {
        name: "get_weather".into(),
        description: "Get the current weather for a city.".into(),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"}},
            "required": ["city"]}),
        variants: None,
    }])
}

const THOUGHT: &str = "The user wants the weather in Paris; get_weather tells it.";

/// The script of a two-turn tool loop with thinking: a thought and a call, then the answer.
fn script_tool_loop(server: &ScriptedAnthropic) {
    server.push(
        vec![
            json!({"type": "thinking", "thinking": THOUGHT}),
            json!({"type": "tool_use", "id": "toolu_01", "name": "get_weather",
                "input": {"city": "Paris"}}),
        ],
        "tool_use",
    );
    server.push(
        vec![json!({"type": "text", "text": "It is sunny in Paris."})],
        "end_turn",
    );
}

/// Run the loop: ask, take the call (its message through a JSON round trip, as a run's
/// memory keeps it), answer it; both responses.
async fn tool_loop(client: &LlmClient) -> Result<(ChatResponse, ChatResponse), String> {
    tool_loop_with(client, weather()).await
}

async fn tool_loop_with(
    client: &LlmClient,
    tools: ToolSet,
) -> Result<(ChatResponse, ChatResponse), String> {
    let system = Message::system("You are a helpful assistant.");
    let ask = Message::user("What is the weather in Paris?");
    let request = |messages| ChatRequest {
        messages,
        tools: tools.clone(),
        tool_choice: ToolChoice::Auto,
    };
    let first = client
        .chat(&request(vec![&system, &ask]))
        .await
        .map_err(|e| e.message)?;
    let kept: Message =
        serde_json::from_str(&serde_json::to_string(&first.message).unwrap()).unwrap();
    let result = Message::tool(&first.message.tool_calls[0], "Sunny, 21 degrees.");
    let second = client
        .chat(&request(vec![&system, &ask, &kept, &result]))
        .await
        .map_err(|e| e.message)?;
    Ok((first, second))
}

/// A thinking block comes back with its signature exactly as issued, whole and streamed;
/// the server refuses the turn otherwise (as Anthropic does), so a lost or altered
/// signature fails this test.
#[tokio::test]
async fn a_thinking_signature_is_sent_back_verbatim() {
    for stream in [false, true] {
        let server = ScriptedAnthropic::start().await;
        script_tool_loop(&server);
        let client = client(
            &server,
            &format!("stream = {stream}\nthinking_tokens = 2048"),
        );
        let (first, second) = tool_loop(&client)
            .await
            .unwrap_or_else(|e| panic!("stream = {stream}: {e}"));
        assert_eq!(first.message.reasoning_content.as_deref(), Some(THOUGHT));
        assert_eq!(first.finish_reason.as_deref(), Some("tool_calls"));
        let call = &first.message.tool_calls[0];
        assert_eq!(
            (call.id.as_str(), call.function.name.as_str()),
            ("toolu_01", "get_weather")
        );
        let args: Value = serde_json::from_str(&call.function.arguments).unwrap();
        assert_eq!(args, json!({"city": "Paris"}));
        assert_eq!(second.message.text(), "It is sunny in Paris.");
        assert_eq!(second.finish_reason.as_deref(), Some("stop"));

        let requests = server.requests();
        let asked = &requests[0];
        assert_eq!(
            asked["thinking"],
            json!({"type": "enabled", "budget_tokens": 2048})
        );
        assert!(asked.get("temperature").is_none(), "{asked}");
        assert_eq!(asked["max_tokens"], 4096 + 2048);
        let sent = &requests[1]["messages"];
        let signature = server.signature_of(THOUGHT).unwrap();
        assert_eq!(
            sent[1]["content"][0],
            json!({"type": "thinking", "thinking": THOUGHT, "signature": signature}),
            "stream = {stream}: {sent}"
        );
        assert_eq!(sent[1]["content"][1]["type"], "tool_use");
        assert_eq!(
            sent[2]["content"][0],
            json!({"type": "tool_result", "tool_use_id": "toolu_01",
                "content": "Sunny, 21 degrees."})
        );
    }
}

/// A long system prompt and tool list are marked for the prompt cache (on by default); the
/// first call writes the cache, the next reads it, and both are counted and priced from the
/// price table (cache reads at a tenth of the input price, writes at 1.25 times, unless
/// set). Off, or for a short prompt, nothing is marked.
#[tokio::test]
async fn the_prompt_cache_is_marked_and_its_reads_and_writes_are_counted_and_priced() {
    let long = Message::system(format!(
        "You are a careful assistant. {}",
        "Follow the house rules. ".repeat(300)
    ));
    let short = Message::system("Be brief.");
    let ask = Message::user("Hello?");
    let prices = "input_price_per_mtok = 3.0\noutput_price_per_mtok = 15.0\nstream = false";
    let request = |system| ChatRequest {
        messages: vec![system, &ask],
        tools: weather(),
        tool_choice: ToolChoice::Auto,
    };
    let server = ScriptedAnthropic::start().await;
    let cached = client(&server, prices);
    let mut usages = vec![];
    for _ in 0..2 {
        server.push(vec![json!({"type": "text", "text": "Hi."})], "end_turn");
        usages.push(cached.chat(&request(&long)).await.unwrap().usage);
    }
    let sent = &server.requests()[0];
    assert_eq!(
        sent["system"][0]["cache_control"],
        json!({"type": "ephemeral"})
    );
    assert_eq!(
        sent["tools"][0]["cache_control"],
        json!({"type": "ephemeral"})
    );
    let (wrote, read) = (usages[0], usages[1]);
    assert!(
        wrote.cache_write_tokens >= 1024 && wrote.cache_read_tokens == 0,
        "{wrote:?}"
    );
    assert_eq!(read.cache_read_tokens, wrote.cache_write_tokens, "{read:?}");
    assert_eq!(read.cache_write_tokens, 0);
    assert_eq!(
        wrote.prompt_tokens, read.prompt_tokens,
        "the same prompt, counted whole"
    );
    for u in [wrote, read] {
        let plain = u.prompt_tokens - u.cache_read_tokens - u.cache_write_tokens;
        let expected = (plain as f64 * 3.0
            + u.cache_read_tokens as f64 * 0.3
            + u.cache_write_tokens as f64 * 3.75
            + u.completion_tokens as f64 * 15.0)
            / 1e6;
        assert!((u.cost - expected).abs() < 1e-12, "{u:?} vs {expected}");
    }
    assert!(
        read.cost < wrote.cost,
        "a cache read costs less than a write"
    );

    for (extra, system) in [
        (format!("{prices}\nprompt_cache = false"), &long),
        (prices.to_string(), &short),
    ] {
        let server = ScriptedAnthropic::start().await;
        server.push(vec![json!({"type": "text", "text": "Hi."})], "end_turn");
        let usage = client(&server, &extra)
            .chat(&request(system))
            .await
            .unwrap()
            .usage;
        let sent = server.requests()[0].to_string();
        assert!(!sent.contains("cache_control"), "{extra}: {sent}");
        assert_eq!((usage.cache_read_tokens, usage.cache_write_tokens), (0, 0));
    }
}

/// A recorded Anthropic run replays: the cassette names the API, and the replayed answers
/// (text, calls, thinking with its signature, usage) are the recorded ones.
#[tokio::test]
async fn a_recorded_anthropic_run_replays_the_same_answers() {
    let dir = Scratch::new("anthropic-record");
    let path = dir.path().join("run.jsonl");
    for stream in [false, true] {
        let server = ScriptedAnthropic::start().await;
        script_tool_loop(&server);
        let recorder = Recorder::create(&path).unwrap();
        let live = LlmClient::new(
            settings(
                &server,
                &format!("stream = {stream}\nthinking_tokens = 1024"),
            ),
            LazyHttp::default(),
            Some(recorder),
        );
        let (a, b) = tool_loop(&live).await.unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.lines().all(|l| l.ends_with(",\"api\":\"anthropic\"}")),
            "{text}"
        );
        let cassette = Arc::new(Cassette::load(&path).unwrap());
        let mut replay = LlmClient::new(
            Arc::new(LlmSettings::replay("default", cassette)),
            LazyHttp::default(),
            None,
        );
        manus_actors::llm::rewind([&mut replay], ReplayFrom::Start);
        let (ra, rb) = tool_loop(&replay).await.unwrap();
        for (live, again) in [(a, ra), (b, rb)] {
            assert_eq!(
                serde_json::to_string(&again.message).unwrap(),
                serde_json::to_string(&live.message).unwrap(),
                "stream = {stream}"
            );
            assert_eq!(again.usage.prompt_tokens, live.usage.prompt_tokens);
            assert_eq!(again.usage.completion_tokens, live.usage.completion_tokens);
            assert_eq!(again.finish_reason, live.finish_reason);
        }
    }
}

/// The key goes in `x-api-key`, beside `anthropic-version`; a wrong one is refused as the
/// credentials, once, naming the setting.
#[tokio::test]
async fn a_wrong_key_is_refused_as_the_credentials() {
    let server = ScriptedAnthropic::start().await;
    let text = format!(
        "[llm]\napi_type = \"anthropic\"\nbase_url = \"{}\"\nmodel = \"m\"\napi_key = \"wrong\"\n\n\
         [agents.manus]\n",
        server.url()
    );
    let settings = Config::from_text(&text, "t", None).unwrap().llm["default"].clone();
    let hi = Message::user("hi");
    let e = LlmClient::new(settings, LazyHttp::default(), None)
        .chat(&ChatRequest {
            messages: vec![&hi],
            tools: ToolSet::default(),
            tool_choice: ToolChoice::Auto,
        })
        .await
        .unwrap_err();
    assert_eq!(e.kind, LlmErrorKind::Auth, "{}", e.message);
    assert!(e.message.contains("invalid x-api-key"), "{}", e.message);
    assert_eq!(server.requests().len(), 1);
}

fn gemini_client(server: &ScriptedGemini, extra: &str, recorder: Option<Recorder>) -> LlmClient {
    let text = format!(
        "[llm]\napi_type = \"gemini\"\nbase_url = \"{}\"\nmodel = \"gemini-test\"\n\
         api_key = \"{}\"\nmax_retries = 0\n{extra}\n\n[agents.manus]\n",
        server.url(),
        gemini_server::KEY
    );
    let settings = Config::from_text(&text, "gemini-test", None).unwrap().llm["default"].clone();
    LlmClient::new(settings, LazyHttp::default(), recorder)
}

/// A tool whose schema holds what Gemini's declarations refuse as written (`const`, a type
/// list with null, `additionalProperties`, `$schema`): converted or left out, so the server
/// takes it.
fn strict_weather() -> ToolSet {
    ToolSet::new(vec![ToolSpec {
        name: "get_weather".into(),
        description: "Get the current weather for a city.".into(),
        parameters: json!({"$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object", "additionalProperties": false,
            "properties": {"city": {"type": "string"}, "unit": {"const": "celsius"},
                "days": {"type": ["integer", "null"]}},
            "required": ["city"]}),
        variants: None,
    }])
}

fn script_gemini_loop(server: &ScriptedGemini) {
    server.push(Answer::Parts(vec![
        json!({"text": THOUGHT, "thought": true}),
        json!({"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}),
    ]));
    server.push(Answer::Parts(vec![
        json!({"text": "It is sunny in Paris."}),
    ]));
}

/// A `functionCall` part goes back with its `thoughtSignature` exactly as issued, whole and
/// streamed (the server refuses the turn otherwise, as Gemini 3 does), the tool's schema is
/// cut to the subset Gemini takes, the result goes as a `functionResponse`, and the usage
/// counts the thinking as output.
#[tokio::test]
async fn a_gemini_thought_signature_is_sent_back_verbatim() {
    for stream in [false, true] {
        let server = ScriptedGemini::start().await;
        script_gemini_loop(&server);
        let client = gemini_client(&server, &format!("stream = {stream}"), None);
        let (first, second) = tool_loop_with(&client, strict_weather())
            .await
            .unwrap_or_else(|e| panic!("stream = {stream}: {e}"));
        assert_eq!(first.message.reasoning_content.as_deref(), Some(THOUGHT));
        assert_eq!(first.finish_reason.as_deref(), Some("tool_calls"));
        let args: Value =
            serde_json::from_str(&first.message.tool_calls[0].function.arguments).unwrap();
        assert_eq!(args, json!({"city": "Paris"}));
        assert_eq!(second.message.text(), "It is sunny in Paris.");
        assert_eq!(second.finish_reason.as_deref(), Some("stop"));
        assert!(first.usage.prompt_tokens > 0 && first.usage.completion_tokens > 7);

        let requests = server.requests();
        let method = if stream {
            "gemini-test:streamGenerateContent"
        } else {
            "gemini-test:generateContent"
        };
        assert_eq!(requests[0].0, method);
        let params = &requests[0].1["tools"][0]["functionDeclarations"][0]["parameters"];
        assert_eq!(params["properties"]["unit"], json!({"enum": ["celsius"]}));
        assert_eq!(
            params["properties"]["days"],
            json!({"type": "integer", "nullable": true})
        );
        let sent = &requests[1].1["contents"];
        let signature = &server.signatures()[0];
        assert_eq!(
            sent[1]["parts"][1],
            json!({"functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
                "thoughtSignature": signature}),
            "stream = {stream}: {sent}"
        );
        assert_eq!(
            sent[2]["parts"][0],
            json!({"functionResponse": {"name": "get_weather",
                "response": {"content": "Sunny, 21 degrees."}}})
        );
        assert_eq!(
            requests[1].1["systemInstruction"]["parts"][0]["text"],
            "You are a helpful assistant."
        );
    }
}

/// A prompt or an answer Gemini blocks is a clear failure naming the reason, not an empty
/// answer.
#[tokio::test]
async fn a_gemini_safety_block_is_a_clear_failure() {
    for (stream, answer, says) in [
        (
            false,
            Answer::Blocked("SAFETY"),
            "Gemini blocked the prompt (SAFETY)",
        ),
        (
            true,
            Answer::Blocked("SAFETY"),
            "Gemini blocked the prompt (SAFETY)",
        ),
        (
            false,
            Answer::Withheld("SAFETY"),
            "Gemini blocked the answer (SAFETY: HARM_CATEGORY_DANGEROUS_CONTENT)",
        ),
        (
            true,
            Answer::Withheld("SAFETY"),
            "Gemini blocked the answer (SAFETY: HARM_CATEGORY_DANGEROUS_CONTENT)",
        ),
    ] {
        let server = ScriptedGemini::start().await;
        server.push(answer);
        let hi = Message::user("hi");
        let e = gemini_client(&server, &format!("stream = {stream}"), None)
            .chat(&ChatRequest {
                messages: vec![&hi],
                tools: ToolSet::default(),
                tool_choice: ToolChoice::Auto,
            })
            .await
            .unwrap_err();
        assert!(e.message.contains(says), "stream = {stream}: {}", e.message);
    }
}

/// A recorded Gemini run replays the same answers, signatures and all.
#[tokio::test]
async fn a_recorded_gemini_run_replays_the_same_answers() {
    let dir = Scratch::new("gemini-record");
    let path = dir.path().join("run.jsonl");
    for stream in [false, true] {
        let server = ScriptedGemini::start().await;
        script_gemini_loop(&server);
        let recorder = Recorder::create(&path).unwrap();
        let live = gemini_client(&server, &format!("stream = {stream}"), Some(recorder));
        let (a, b) = tool_loop_with(&live, strict_weather()).await.unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.lines().all(|l| l.ends_with(",\"api\":\"gemini\"}")),
            "{text}"
        );
        let cassette = Arc::new(Cassette::load(&path).unwrap());
        let mut replay = LlmClient::new(
            Arc::new(LlmSettings::replay("default", cassette)),
            LazyHttp::default(),
            None,
        );
        manus_actors::llm::rewind([&mut replay], ReplayFrom::Start);
        let (ra, rb) = tool_loop_with(&replay, strict_weather()).await.unwrap();
        for (live, again) in [(a, ra), (b, rb)] {
            assert_eq!(
                serde_json::to_string(&again.message).unwrap(),
                serde_json::to_string(&live.message).unwrap(),
                "stream = {stream}"
            );
            assert_eq!(again.usage.total(), live.usage.total());
        }
    }
}

/// The constrained tool-call mode over the Messages and Gemini APIs: the one-call schema
/// goes in each API's own structured-output field (Anthropic's `output_config.format`,
/// Gemini's `generationConfig.responseJsonSchema`), by variant for a tool whose arguments
/// are a tagged enum, with no native tools beside it; the call is read from the answer's
/// text.
#[tokio::test]
async fn constrained_calls_ask_each_api_for_the_schema_in_its_own_field() {
    use manus_rt::engine::tools::{ToolSettings, make_tool};
    let editor = make_tool("str_replace_editor", &ToolSettings::default())
        .unwrap()
        .spec();
    let variants = editor.variants.clone().unwrap();
    let tools = ToolSet::new(vec![editor]);
    let call = json!({"name": "str_replace_editor",
        "arguments": {"command": "view", "path": "a.txt"}});
    let ask = Message::user("Show me a.txt.");
    let request = ChatRequest {
        messages: vec![&ask],
        tools,
        tool_choice: ToolChoice::Auto,
    };
    let read = |answer: ChatResponse| {
        assert!(answer.calls_in_text);
        let [made] = &answer.message.tool_calls[..] else {
            panic!("{:?}", answer.message)
        };
        assert_eq!(made.function.name, "str_replace_editor");
        let args: Value = serde_json::from_str(&made.function.arguments).unwrap();
        assert_eq!(args, call["arguments"]);
    };

    let anthropic = ScriptedAnthropic::start().await;
    anthropic.push(
        vec![json!({"type": "text", "text": call.to_string()})],
        "end_turn",
    );
    let answer = client(&anthropic, "tool_calls = \"constrained\"")
        .chat(&request)
        .await
        .unwrap();
    read(answer);
    let sent = &anthropic.requests()[0];
    assert_eq!(sent["output_config"]["format"]["type"], "json_schema");
    let schema = &sent["output_config"]["format"]["schema"];
    assert_eq!(schema["properties"]["arguments"], variants, "{schema}");
    assert!(sent.get("tools").is_none(), "{sent}");

    let gemini = ScriptedGemini::start().await;
    gemini.push(Answer::Parts(vec![json!({"text": call.to_string()})]));
    let answer = gemini_client(&gemini, "tool_calls = \"constrained\"", None)
        .chat(&request)
        .await
        .unwrap();
    read(answer);
    let (_, sent) = &gemini.requests()[0];
    let generation = &sent["generationConfig"];
    assert_eq!(generation["responseMimeType"], "application/json");
    // The same variants, each `const` as a one-value `enum`.
    let sent_schema = &generation["responseJsonSchema"];
    assert!(
        !sent_schema.to_string().contains("\"const\""),
        "{sent_schema}"
    );
    assert_eq!(
        sent_schema["properties"]["name"]["enum"],
        json!(["str_replace_editor"])
    );
    let sent_variants = sent_schema["properties"]["arguments"]["anyOf"]
        .as_array()
        .unwrap();
    let ours = variants["anyOf"].as_array().unwrap();
    assert_eq!(sent_variants.len(), ours.len());
    for (sent, ours) in sent_variants.iter().zip(ours) {
        let command = &ours["properties"]["command"]["const"];
        assert_eq!(
            sent["properties"]["command"]["enum"],
            json!([command]),
            "{sent}"
        );
        assert_eq!(sent["required"], ours["required"], "{sent}");
        assert_eq!(sent["additionalProperties"], false, "{sent}");
    }
    assert!(sent.get("tools").is_none(), "{sent}");
}

/// `config check --probe` over the Gemini API: each question is asked in Gemini's words
/// and its answer read (a whole answer, a streamed one, a `functionCall`, a call held to
/// the `responseJsonSchema`, a picture taken).
#[tokio::test]
async fn the_probe_works_over_gemini() {
    let server = ScriptedGemini::start().await;
    let call = json!({"name": "get_weather", "arguments": {"city": "Paris"}});
    for parts in [
        vec![json!({"text": "Hello there."})],
        vec![json!({"text": "Hello there, streamed."})],
        vec![json!({"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}})],
        vec![json!({"text": call.to_string()})],
        vec![json!({"text": "Red."})],
    ] {
        server.push(Answer::Parts(parts));
    }
    let dir = Scratch::new("gemini-probe");
    let config = dir.write_config(&format!(
        "[llm]\napi_type = \"gemini\"\nbase_url = \"{}\"\nmodel = \"gemini-test\"\n\
         api_key = \"{}\"\n\n[agents.manus]\n",
        server.url(),
        gemini_server::KEY
    ));
    let lines = [
        "answers        yes",
        "streaming      yes",
        "tool calls     yes",
        "JSON schema    yes",
        "images         accepted",
    ];
    probe_says(&dir, &config, &lines).await;
    let asked = server.requests();
    assert_eq!(asked.len(), 5);
    assert!(
        asked[1].0.contains("streamGenerateContent"),
        "{:?}",
        asked[1].0
    );
    assert!(asked[3].1["generationConfig"]["responseJsonSchema"].is_object());
}
