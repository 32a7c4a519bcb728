//! Against a real model server (llama.cpp's `llama-server` with SmolLM2-135M-Instruct, see
//! `support::llama`): the protocol, not the model's wit. The history of native tool calls
//! is taken as sent; the server's own errors reach the caller clearly and are not retried
//! as if they were transient.

use manus_actors::llm::{
    CallMode, ChatRequest, FunctionCall, LazyHttp, LlmClient, LlmErrorKind, Message, ToolCall,
    ToolChoice, ToolSet, ToolSpec,
};
use manus_rt::config::Config;
use serde_json::json;

use crate::support::llama;
use crate::support::scenario::{Scratch, probe_says};

fn client(url: &str, extra: &str) -> LlmClient {
    let text = llama::config_text(url, extra, "");
    let config = Config::from_text(&text, "llama-test", None).unwrap();
    LlmClient::new(config.llm["default"].clone(), LazyHttp::default(), None)
}

fn weather_tool() -> ToolSet {
    ToolSet::new(vec![
        ToolSpec {
            name: "get_weather".into(),
            description: "Get the current weather for a city.".into(),
            parameters: json!({
                "type": "object",
                "properties": {"city": {"type": "string", "description": "The city's name"}},
                "required": ["city"]
            }),
            variants: None,
        },
        ToolSpec {
            name: "finish".into(),
            description: "Say the task is done.".into(),
            parameters: json!({
                "type": "object",
                "properties": {"status": {"type": "string", "enum": ["success", "failure"]}},
                "required": ["status"]
            }),
            variants: None,
        },
    ])
}

/// An assistant turn that called `get_weather` for Paris, and the call's result.
fn weather_called() -> (Message, Message) {
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
    (made, result)
}

/// The call `answer` carries is one of the offered tools with the arguments its schema
/// demands.
fn assert_one_valid_call(answer: &manus_actors::llm::ChatResponse) {
    let calls = &answer.message.tool_calls;
    assert_eq!(calls.len(), 1, "{:?}", answer.message);
    let args: serde_json::Value = serde_json::from_str(&calls[0].function.arguments).unwrap();
    match calls[0].function.name.as_str() {
        "get_weather" => assert!(args["city"].is_string(), "{args}"),
        "finish" => assert!(
            args["status"] == "success" || args["status"] == "failure",
            "{args}"
        ),
        other => panic!("a call of a tool never offered: {other}"),
    }
}

/// SmolLM2-135M does not write native tool calls on its own (tested: plain text at
/// temperature 0 with and without `tool_choice`), so the history of one is built here: the
/// server must take an assistant turn with `tool_calls` and its `tool` result as we send
/// them, alongside the tool schemas, and answer the turn after them.
#[tokio::test]
async fn a_native_tool_call_history_is_taken_by_the_server() {
    let Some(url) = llama::url() else { return };
    let client = client(&url, "tool_calls = \"native\"");
    let tools = weather_tool();
    let system = Message::system("You are a helpful assistant. Use the tools you are given.");
    let ask = Message::user("What is the weather in Paris?");
    let (made, result) = weather_called();
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

#[tokio::test]
async fn the_constrained_mode_gets_a_well_formed_call_every_round() {
    let Some(url) = llama::url() else { return };
    let client = client(&url, "tool_calls = \"constrained\"");
    let system = Message::system("You are a helpful assistant.");
    for question in [
        "What is the weather in Paris?",
        "Tell me a joke.",
        "We are done here.",
    ] {
        let ask = Message::user(question);
        let answer = client
            .chat(&ChatRequest {
                messages: vec![&system, &ask],
                tools: weather_tool(),
                tool_choice: ToolChoice::Auto,
            })
            .await
            .expect("the server takes a JSON schema");
        assert_one_valid_call(&answer);
    }
    assert_eq!(client.call_mode(), CallMode::Constrained);
}

/// The tools whose arguments are a tagged enum (the browser's `action`, the editor's
/// `command`, the plan's `command`): in constrained mode SmolLM2 is held to one variant at a
/// time with that variant's own required arguments, so over many rounds of asking for each
/// kind of action no call lacks what its variant needs (it once sent `send_keys` without
/// `keys`, when held only to the flat schema, where `keys` is optional).
#[tokio::test]
async fn constrained_calls_of_tagged_tools_carry_their_variants_arguments() {
    use manus_rt::engine::tools::{ToolSettings, make_tool};
    let Some(url) = llama::url() else { return };
    let client = client(&url, "tool_calls = \"constrained\"");
    let settings = ToolSettings::default();
    let specs: Vec<ToolSpec> = ["browser_use", "str_replace_editor", "planning"]
        .iter()
        .map(|name| make_tool(name, &settings).unwrap().spec())
        .collect();
    assert!(specs.iter().all(|s| s.variants.is_some()));
    let system = Message::system("You are an agent. Act with the tools you are given.");
    let (mut checked, mut cut_off) = (0, 0);
    let mut called = std::collections::BTreeSet::new();
    for (tool, asks) in [
        (
            "browser_use",
            &[
                "Type hello into the search box.",
                "Press the Enter key.",
                "Click the first link.",
                "Go to https://example.com.",
                "Scroll down the page.",
                "Type my name, Ada, into the form.",
            ][..],
        ),
        (
            "str_replace_editor",
            &[
                "Create the file notes.txt containing hi.",
                "Replace cat with dog in pets.txt.",
                "Insert the line END after line 3 of notes.txt.",
                "Show me the file notes.txt.",
            ][..],
        ),
        (
            "planning",
            &[
                "Mark step 2 of the plan as completed.",
                "Make the plan named bread the active one.",
                "Delete the plan named bread.",
            ][..],
        ),
    ] {
        let offered = ToolSet::new(specs.iter().filter(|s| s.name == tool).cloned().collect());
        for ask in asks {
            let ask = Message::user(*ask);
            let answer = client
                .chat(&ChatRequest {
                    messages: vec![&system, &ask],
                    tools: offered.clone(),
                    tool_choice: ToolChoice::Auto,
                })
                .await
                .expect("the server takes the per-variant schema");
            let calls = &answer.message.tool_calls;
            if calls.is_empty() && answer.finish_reason.as_deref() == Some("length") {
                // Held to the schema, the model may still fill an array until max_tokens:
                // an unfinished answer, no call (the agent says so to the model).
                cut_off += 1;
                continue;
            }
            let [call] = &calls[..] else {
                panic!("not one call: {:?}", answer.message)
            };
            assert_eq!(call.function.name, tool);
            let args: serde_json::Value = serde_json::from_str(&call.function.arguments).unwrap();
            println!("{tool}: {args}");
            let variants = offered[0].variants.as_ref().unwrap();
            if let Err(why) = fits_a_variant(variants, &args) {
                panic!("{tool}: {args} {why}");
            }
            checked += 1;
            called.insert(tool);
        }
    }
    println!(
        "{checked} constrained calls of tagged tools, each with its variant's arguments; \
         {cut_off} answers cut off at max_tokens"
    );
    // The browser's and the editor's answers are short; a plan's may fill an array until
    // it is cut off (whether it does varies with the server's batching).
    assert!(
        called.contains("browser_use") && called.contains("str_replace_editor"),
        "a tool was never called: {called:?}"
    );
}

/// Whether `args` is one of `variants` (`{"anyOf": [...]}`, each closed, its tag a `const`):
/// the variant its tag names, with each argument that variant requires and no other.
fn fits_a_variant(variants: &serde_json::Value, args: &serde_json::Value) -> Result<(), String> {
    let given = args.as_object().ok_or("is not an object")?;
    let chosen = variants["anyOf"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| {
            v["properties"]
                .as_object()
                .unwrap()
                .iter()
                .any(|(k, p)| p.get("const").is_some() && given.get(k) == p.get("const"))
        })
        .ok_or("names no variant")?;
    for needed in chosen["required"].as_array().unwrap() {
        let needed = needed.as_str().unwrap();
        if !given.contains_key(needed) {
            return Err(format!("lacks `{needed}`, which its variant requires"));
        }
    }
    match given
        .keys()
        .find(|k| chosen["properties"].get(k.as_str()).is_none())
    {
        Some(other) => Err(format!("has `{other}`, which its variant does not take")),
        None => Ok(()),
    }
}

/// SmolLM2 answers a native tool turn in plain text: `auto` asks again constrained, says
/// so, and stays there for the rest of the run.
#[tokio::test]
async fn auto_moves_on_when_the_model_answers_a_tool_turn_in_text() {
    let Some(url) = llama::url() else { return };
    let client = client(&url, "tool_calls = \"auto\"");
    assert_eq!(client.call_mode(), CallMode::Native);
    let ask = Message::user("What is the weather in Paris?");
    let answer = client
        .chat(&ChatRequest {
            messages: vec![&ask],
            tools: weather_tool(),
            tool_choice: ToolChoice::Auto,
        })
        .await
        .unwrap();
    assert_one_valid_call(&answer);
    assert_eq!(client.call_mode(), CallMode::Constrained);
}

/// The text mode: tools described in the prompt, the earlier call and its result written
/// as text; the server (which sees no tools) takes it, and whatever the model wrote is read
/// as text or as calls of offered tools.
#[tokio::test]
async fn the_text_mode_sends_no_tool_roles_and_reads_what_comes_back() {
    let Some(url) = llama::url() else { return };
    let client = client(&url, "tool_calls = \"text\"");
    let ask = Message::user("What is the weather in Paris? Then finish.");
    let (made, result) = weather_called();
    let answer = client
        .chat(&ChatRequest {
            messages: vec![&ask, &made, &result],
            tools: weather_tool(),
            tool_choice: ToolChoice::Auto,
        })
        .await
        .expect("a server that sees no tools takes the text form");
    for c in &answer.message.tool_calls {
        assert!(
            c.function.name == "get_weather"
                || c.function.name == "finish"
                || c.function.name.starts_with("<unreadable tool call"),
            "{c:?}"
        );
    }
    assert!(answer.usage.completion_tokens > 0);
}

/// `run-flow` on the real server in each mode ends with statuses that say what happened:
/// the exit code follows the flow's status and every step ended; in the constrained mode
/// every round was a call, so no step ends "never confirmed".
#[tokio::test(flavor = "multi_thread")]
async fn run_flow_in_each_tool_call_mode_ends_with_honest_statuses() {
    let Some(url) = llama::url() else { return };
    let runs = ["native", "text", "constrained", "auto"].map(|mode| {
        let url = url.clone();
        tokio::spawn(async move {
            let dir = Scratch::new(&format!("llama-flow-{mode}"));
            let extra = format!(
                "[runtime]\nworkspace = {:?}\n",
                dir.workspace().display().to_string()
            );
            let config = dir.write_config(&llama::config_text(
                &url,
                &format!("tool_calls = \"{mode}\""),
                &extra,
            ));
            let started = std::time::Instant::now();
            let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_manus-rt"))
                .current_dir(dir.path())
                .env_remove("OPENAI_API_KEY")
                .env_remove("RUST_LOG")
                .kill_on_drop(true)
                .arg("--config")
                .arg(&config)
                .args([
                    "run-flow",
                    "Write the word hello into the file hello.txt",
                    "--json",
                ])
                .output()
                .await
                .unwrap();
            let outcome: serde_json::Value =
                serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
                    panic!(
                        "{mode}: no outcome ({e}); stderr:\n{}",
                        String::from_utf8_lossy(&out.stderr)
                    )
                });
            let wrote = dir.workspace().join("hello.txt").exists();
            println!(
                "llama-server, tool_calls = {mode}: {} in {:.1}s, {} model calls, hello.txt {}",
                outcome["status"],
                started.elapsed().as_secs_f64(),
                outcome["usage"]["calls"],
                if wrote { "written" } else { "absent" }
            );
            (mode, out.status.code(), outcome, wrote)
        })
    });
    for run in runs {
        let (mode, code, outcome, _) = run.await.unwrap();
        let status = outcome["status"].as_str().unwrap();
        assert_eq!(
            code == Some(0),
            status == "completed",
            "{mode}: exit {code:?}, {outcome}"
        );
        for step in outcome["plan"]["steps"].as_array().unwrap() {
            let s = step["status"].as_str().unwrap();
            assert!(
                ["completed", "failed", "blocked"].contains(&s),
                "{mode}: {step}"
            );
            // A completed step is one the model ended with `terminate` success; whether a
            // 135M model tells the truth there is its wit, not the runtime's: `wrote` is
            // printed above, not asserted.
            if mode == "constrained" {
                assert!(
                    !step["notes"]
                        .as_str()
                        .unwrap_or("")
                        .contains("never confirmed"),
                    "{step}"
                );
            }
        }
    }
}

/// A text-only model's server refuses an image with a 500: that is no transient error to
/// retry, and the message says which setting to change.
#[tokio::test]
async fn an_image_sent_to_a_text_only_model_is_refused_once_and_named() {
    let Some(url) = llama::url() else { return };
    let client = client(&url, "max_retries = 3");
    // A 1x1 PNG.
    let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
    let look = Message::user_with_images(
        "What is in this picture?",
        [format!("data:image/png;base64,{png}")],
    );
    let request = |m| ChatRequest {
        messages: vec![m],
        tools: ToolSet::default(),
        tool_choice: ToolChoice::Auto,
    };
    let e = client.chat(&request(&look)).await.unwrap_err();
    assert_eq!(e.kind, LlmErrorKind::ImagesUnsupported, "{}", e.message);
    assert!(e.message.contains("vision = false"), "{}", e.message);
    assert!(!e.message.contains("gave up"), "retried: {}", e.message);
    // The same request without its image goes through.
    let text = look.without_images();
    assert_eq!(text.text(), "What is in this picture?");
    client.chat(&request(&text)).await.unwrap();
}

/// The real server streams: the text arrives in pieces that make the whole answer, and
/// the usage of the last chunk is read.
#[tokio::test]
async fn a_real_streamed_answer_arrives_in_pieces_that_make_the_whole() {
    let Some(url) = llama::url() else { return };
    let client = client(&url, "");
    let ask = Message::user("Write two sentences about the sea.");
    let heard = std::sync::Mutex::new(Vec::<String>::new());
    let answer = client
        .chat_with(
            &ChatRequest {
                messages: vec![&ask],
                tools: ToolSet::default(),
                tool_choice: ToolChoice::Auto,
            },
            &|piece| heard.lock().unwrap().push(piece.to_string()),
        )
        .await
        .unwrap();
    let heard = heard.into_inner().unwrap();
    assert!(heard.len() > 3, "{heard:?}");
    assert_eq!(heard.concat(), answer.message.text());
    assert!(answer.usage.prompt_tokens > 0 && answer.usage.completion_tokens > 0);
    assert!(answer.finish_reason.is_some());
}

/// `config check --probe` against the real server: it answers and streams; the tiny model
/// ignores native tools but follows a JSON schema, so constrained is recommended; a
/// text-only model refuses images.
#[tokio::test]
async fn the_probe_tells_what_the_real_server_supports() {
    let Some(url) = llama::url() else { return };
    let dir = Scratch::new("llama-probe");
    let config = dir.write_config(&llama::config_text(&url, "", ""));
    let lines = [
        "OpenAI-compatible model smollm2",
        "answers        yes",
        "streaming      yes",
        "tool calls     ignored",
        "JSON schema    yes",
        "images         refused",
        "recommended: [llm] tool_calls = \"constrained\" (now: \"auto\")",
    ];
    probe_says(&dir, &config, &lines).await;
}

/// The wire APIs besides Chat Completions that llama-server serves.
const OTHER_APIS: [&str; 2] = ["anthropic", "openai-responses"];

/// The config text for the server's endpoint of `api` (Anthropic's base URL is the bare
/// host, as its SDKs take it).
fn api_config(api: &str, url: &str, llm_extra: &str, extra: &str) -> String {
    match api {
        "anthropic" => llama::anthropic_config_text(url, llm_extra, extra),
        _ => llama::config_text_for(api, url, llm_extra, extra),
    }
}

/// A client of the server's endpoint of `api`.
fn api_client(api: &str, url: &str, extra: &str) -> LlmClient {
    let config = Config::from_text(&api_config(api, url, extra, ""), "llama-api-test", None);
    LlmClient::new(
        config.unwrap().llm["default"].clone(),
        LazyHttp::default(),
        None,
    )
}

/// Over Anthropic's Messages API (`/v1/messages`) and OpenAI's Responses API
/// (`/v1/responses`), streamed and whole: the server takes the system prompt, the tools, a
/// call and its result as each API writes them (`tool_use`/`tool_result` blocks;
/// `function_call`/`function_call_output` items), answers the turn after them, and its
/// usage (prompt-cache reads among the input) is counted.
#[tokio::test]
async fn the_messages_and_responses_apis_take_a_tool_history_and_count_usage() {
    let Some(url) = llama::url() else { return };
    let system = Message::system("You are a helpful assistant. Use the tools you are given.");
    let ask = Message::user("What is the weather in Paris?");
    let (made, result) = weather_called();
    for (api, stream) in OTHER_APIS
        .into_iter()
        .flat_map(|api| [(api, true), (api, false)])
    {
        let client = api_client(api, &url, &format!("stream = {stream}"));
        let heard = std::sync::Mutex::new(Vec::<String>::new());
        let answer = client
            .chat_with(
                &ChatRequest {
                    messages: vec![&system, &ask, &made, &result],
                    tools: weather_tool(),
                    tool_choice: ToolChoice::Auto,
                },
                &|piece| heard.lock().unwrap().push(piece.to_string()),
            )
            .await
            .unwrap_or_else(|e| panic!("{api}, stream = {stream}: {e}"));
        let heard = heard.into_inner().unwrap();
        assert_eq!(
            heard.concat(),
            answer.message.text(),
            "{api}, stream = {stream}"
        );
        if stream {
            assert!(heard.len() > 1, "{api}: not streamed: {heard:?}");
        }
        assert!(
            !answer.id.is_empty() && !answer.model.is_empty(),
            "{api}: {answer:?}"
        );
        assert!(answer.finish_reason.is_some(), "{answer:?}");
        let u = answer.usage;
        assert!(u.prompt_tokens > 0 && u.completion_tokens > 0, "{u:?}");
        assert!(u.cache_read_tokens <= u.prompt_tokens, "{u:?}");
    }
}

/// A text-only model's server refuses an image sent as an Anthropic image block or a
/// Responses input image, once and named, as over Chat Completions.
#[tokio::test]
async fn an_image_sent_over_the_other_apis_to_a_text_only_model_is_refused_once() {
    let Some(url) = llama::url() else { return };
    for api in OTHER_APIS {
        let client = api_client(api, &url, "max_retries = 3");
        let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
        let look = Message::user_with_images(
            "What is in this picture?",
            [format!("data:image/png;base64,{png}")],
        );
        let e = client
            .chat(&ChatRequest {
                messages: vec![&look],
                tools: ToolSet::default(),
                tool_choice: ToolChoice::Auto,
            })
            .await
            .unwrap_err();
        assert_eq!(
            e.kind,
            LlmErrorKind::ImagesUnsupported,
            "{api}: {}",
            e.message
        );
        assert!(!e.message.contains("gave up"), "retried: {}", e.message);
    }
}

/// `run-flow` over the Messages API and the Responses API with tools (described in text:
/// SmolLM2 writes no native calls, and llama-server's endpoints for these APIs take no JSON
/// schema) ends with an honest status, its model calls counted; recorded with `--record`,
/// the run replays from its cassette to the same outcome without the server. (The replay
/// profile carries the recording's `max_tokens`: a step whose answers were cut off reports
/// that limit, and the run's summary is asked about the report.)
#[tokio::test(flavor = "multi_thread")]
async fn a_flow_over_the_other_apis_runs_and_its_recording_replays() {
    let Some(url) = llama::url() else { return };
    let runs = OTHER_APIS.map(|api| tokio::spawn(flow_recorded_and_replayed(api, url.clone())));
    for run in runs {
        run.await.unwrap();
    }
}

async fn flow_recorded_and_replayed(api: &'static str, url: String) {
    let dir = Scratch::new(&format!("llama-{api}-flow"));
    let otlp = crate::support::otlp::OtlpReceiver::start().await;
    let extra = format!(
        "[runtime]\nworkspace = {:?}\n",
        dir.workspace().display().to_string()
    );
    let traced = format!(
        "{extra}\n[telemetry]\notlp_endpoint = \"{}\"\n",
        otlp.endpoint()
    );
    let config = dir.write_config(&api_config(api, &url, "tool_calls = \"text\"", &traced));
    let cassette = dir.path().join("recorded.jsonl");
    let task = "Write the word hello into the file hello.txt";
    let run = |config: std::path::PathBuf, record: bool| {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_manus-rt"));
        cmd.current_dir(dir.path())
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("OPENAI_API_KEY")
            .env_remove("RUST_LOG")
            .kill_on_drop(true)
            .arg("--config")
            .arg(config)
            .args(["run-flow", task, "--json"]);
        if record {
            cmd.arg("--record").arg(&cassette);
        }
        cmd.output()
    };
    let out = run(config, true).await.unwrap();
    let outcome: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no outcome ({e}); stderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let status = outcome["status"].as_str().unwrap();
    assert_eq!(
        out.status.code() == Some(0),
        status == "completed",
        "{outcome}"
    );
    let calls = outcome["usage"]["calls"].as_u64().unwrap();
    assert!(calls > 0 && outcome["usage"]["prompt_tokens"].as_u64() > Some(0));
    // Every model call's span names the provider.
    let chats: Vec<_> = otlp
        .spans()
        .into_iter()
        .filter(|s| s.name.starts_with("chat "))
        .collect();
    // (The run's end-of-run notes are a call of their own, not in the flow's usage.)
    assert!(chats.len() as u64 >= calls, "{api}: {} spans", chats.len());
    let provider = if api == "anthropic" {
        "anthropic"
    } else {
        "openai"
    };
    for c in &chats {
        assert_eq!(c.attr("gen_ai.provider.name"), Some(provider), "{api}");
    }
    let recorded = std::fs::read_to_string(&cassette).unwrap();
    assert!(recorded.lines().count() as u64 >= calls, "a line per call");
    assert!(
        recorded
            .lines()
            .all(|l| l.contains(&format!("\"api\":\"{api}\""))),
        "{recorded}"
    );

    std::fs::remove_file(dir.workspace().join("hello.txt")).ok();
    let replay = dir.write_config(&format!(
        "[llm]\napi_type = \"replay\"\ncassette = {:?}\nmax_tokens = {}\n\n[agents.manus]\nprofile = \"manus\"\n\
         max_steps = 4\ntools = [\"str_replace_editor\", \"terminate\"]\n\n\
         [flow]\nmax_step_retries = 0\n{extra}\n",
        cassette.display().to_string(),
        llama::MAX_TOKENS
    ));
    let again = run(replay, false).await.unwrap();
    let replayed: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap_or_else(|e| {
        panic!(
            "no outcome ({e}); stderr:\n{}",
            String::from_utf8_lossy(&again.stderr)
        )
    });
    assert_eq!(replayed["status"], outcome["status"], "{api}: {replayed}");
    println!("llama-server over {api}: {status}, {calls} model calls, replayed the same");
    assert_eq!(replayed["usage"]["calls"], outcome["usage"]["calls"]);
    assert_eq!(
        replayed["usage"]["completion_tokens"],
        outcome["usage"]["completion_tokens"]
    );
    // The same plan and steps, but for how long they took.
    let steps = |o: &serde_json::Value| -> Vec<serde_json::Value> {
        let mut steps = o["plan"]["steps"].as_array().unwrap().clone();
        steps.iter_mut().for_each(|s| s["elapsed_ms"] = 0.into());
        steps
    };
    assert_eq!(steps(&replayed), steps(&outcome), "{api}");
}

/// `config check --probe` over the Messages and Responses APIs: the server answers and
/// streams, and refuses images.
#[tokio::test]
async fn the_probe_works_over_the_other_apis() {
    let Some(url) = llama::url() else { return };
    for (api, label) in OTHER_APIS
        .into_iter()
        .zip(["Anthropic Messages", "OpenAI Responses"])
    {
        let dir = Scratch::new(&format!("llama-{api}-probe"));
        let config = dir.write_config(&api_config(api, &url, "", ""));
        let model = format!("{label} model smollm2");
        let lines = [
            &model[..],
            "answers        yes",
            "streaming      yes",
            "images         refused",
        ];
        probe_says(&dir, &config, &lines).await;
    }
}
