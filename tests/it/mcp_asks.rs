//! What MCP servers ask of our client while a call runs, against the reference server
//! `@modelcontextprotocol/server-everything` and, where it lacks a case, a server written
//! with the official Python SDK (tests/peers/mcp_asking_server.py): elicitation answered,
//! re-asked, declined, cancelled, with no person, and across a SIGKILL of the service;
//! sampling allowed (counted in the flow's usage), denied and held for approval; the
//! workspace as the root; resources listed and read; progress as flow events and a
//! cancelled step's call cancelled at the server; a multi-round-trip call (2026-07-28)
//! whose input-required result is asked and the call sent again.

use crate::mcp::{mcp_config, mcp_config_text, peer_server_script, peers};
use crate::support;

use std::process::Stdio;
use std::time::Duration;

use manus_rt::{FlowEvent, FlowHandle, FlowStatus};
use serde_json::{Value, json};
use support::llm_server::{Reply, ScriptedLlm};
use support::scenario::{Scratch, done, observation, start_single};
use support::service::Service;

const BIN: &str = env!("CARGO_BIN_EXE_manus-rt");

fn everything() -> Value {
    let (everything, _) = peers();
    json!({"everything": {"command": "node", "args": [everything, "stdio"]}})
}

fn asking_peer(notes: &std::path::Path) -> Value {
    let (_, python) = peers();
    let script = peer_server_script().with_file_name("mcp_asking_server.py");
    json!({"asking": {"command": python, "args": [script], "env": {"MANUS_PEER_NOTES": notes}}})
}

/// The flow's events up to the first that `stop` picks, which is returned.
async fn until(flow: &mut FlowHandle, stop: impl Fn(&FlowEvent) -> bool) -> FlowEvent {
    tokio::time::timeout(Duration::from_secs(90), async {
        loop {
            let e = flow.next_event().await.expect("the flow goes on");
            if let FlowEvent::FlowFinished { outcome } = &e {
                panic!(
                    "the flow ended first: {:?} {}",
                    outcome.status, outcome.reason
                );
            }
            if stop(&e) {
                return e;
            }
        }
    })
    .await
    .expect("the event came")
}

/// The next question's id, text and form.
async fn question(flow: &mut FlowHandle) -> (u64, String, Option<Value>) {
    match until(flow, |e| matches!(e, FlowEvent::Question { .. })).await {
        FlowEvent::Question {
            id, inquire, form, ..
        } => (id, inquire, form),
        _ => unreachable!(),
    }
}

const ELICIT: &str = "mcp_everything_trigger-elicitation-request";

/// The reference server's form is shown with its schema; an answer that does not meet it
/// is asked again with the reason; a good one reaches the server as accepted content.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elicitation_is_asked_checked_and_answered() {
    let server = ScriptedLlm::start().await;
    server.push_all([Reply::tool(ELICIT, json!({})), done("filled in")]);
    let dir = Scratch::new("mcp-elicit-answer");
    let (rt, mut flow) = start_single(mcp_config(&server, &dir, everything()), "fill it in").await;
    let (id, inquire, form) = question(&mut flow).await;
    assert!(
        inquire.contains("MCP server `everything` asks: Please provide inputs"),
        "{inquire}"
    );
    let form = form.expect("the schema is shown");
    assert_eq!(form["properties"]["name"]["type"], "string", "{form}");
    flow.answer(id, r#"{"name": "Ada", "integer": 500}"#);
    let (again, inquire, _) = question(&mut flow).await;
    assert!(again > id);
    assert!(
        inquire.contains("`integer`: must be from 1 to 100"),
        "{inquire}"
    );
    flow.answer(
        again,
        r#"{"name": "Ada Lovelace", "integer": 42, "check": true, "email": "ada@example.org"}"#,
    );
    let outcome = flow.outcome().await;
    rt.shutdown().await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    let seen = observation(&server, 0);
    assert!(
        seen.contains("User provided the requested information")
            && seen.contains("Name: Ada Lovelace")
            && seen.contains("Favorite Integer: 42"),
        "{seen}"
    );
}

/// Decline and cancel both reach the server as such.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elicitation_can_be_declined_or_cancelled() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        Reply::tool(ELICIT, json!({})),
        Reply::tool(ELICIT, json!({})),
        done("refused twice"),
    ]);
    let dir = Scratch::new("mcp-elicit-decline");
    let (rt, mut flow) = start_single(mcp_config(&server, &dir, everything()), "refuse").await;
    let (id, ..) = question(&mut flow).await;
    flow.answer(id, "decline: I would rather not say");
    let (id, ..) = question(&mut flow).await;
    flow.answer(id, "Cancel");
    let outcome = flow.outcome().await;
    rt.shutdown().await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    let declined = observation(&server, 0);
    assert!(declined.contains("User declined"), "{declined}");
    assert!(
        declined.contains("I would rather not say"),
        "the reason travels in _meta: {declined}"
    );
    let cancelled = observation(&server, 1);
    assert!(cancelled.contains("User cancelled"), "{cancelled}");
}

/// A URL elicitation shows the URL and waits; `done` completes it, anything else declines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_elicitation_shows_the_url_and_waits_for_done() {
    let server = ScriptedLlm::start().await;
    let open = |url: &str| {
        Reply::tool(
            "mcp_everything_trigger-url-elicitation",
            json!({"url": url, "message": "Sign in to continue."}),
        )
    };
    server.push_all([
        open("https://example.org/sign-in"),
        open("https://example.org/other"),
        done("visited"),
    ]);
    let dir = Scratch::new("mcp-elicit-url");
    let (rt, mut flow) = start_single(mcp_config(&server, &dir, everything()), "sign in").await;
    let (id, inquire, form) = question(&mut flow).await;
    assert!(form.is_none());
    assert!(
        inquire.contains("open https://example.org/sign-in")
            && inquire.contains("Sign in to continue."),
        "{inquire}"
    );
    flow.answer(id, "done");
    let (id, ..) = question(&mut flow).await;
    flow.answer(id, "not now");
    let outcome = flow.outcome().await;
    rt.shutdown().await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    let completed = observation(&server, 0);
    assert!(
        completed.contains("User completed the URL elicitation flow"),
        "{completed}"
    );
    let declined = observation(&server, 1);
    assert!(
        declined.contains("User declined to open the URL") && declined.contains("not now"),
        "{declined}"
    );
}

/// `manus-rt run --on-approval reject` with no terminal: the form is declined, saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_person_an_elicitation_is_declined_with_a_reason() {
    let server = ScriptedLlm::start().await;
    server.push_all([Reply::tool(ELICIT, json!({})), done("no one answered")]);
    let dir = Scratch::new("mcp-elicit-nobody");
    let config = dir.write_config(&mcp_config_text(&server, &dir, everything(), &[]));
    let out = tokio::process::Command::new(BIN)
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .arg("--config")
        .arg(&config)
        .args(["run", "fill it in", "--on-approval", "reject", "--json"])
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let seen = observation(&server, 0);
    assert!(
        seen.contains("User declined") && seen.contains("no one could be asked"),
        "{seen}"
    );
}

/// Issue 41: the service is SIGKILLed while an MCP server's question waits; started again,
/// it resumes the run, the step calls the server again, the question is asked again (a new
/// number), answered over HTTP, and the flow completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elicitation_waiting_across_a_sigkill_is_asked_again_and_answered() {
    let server = ScriptedLlm::start().await;
    server.push_all([Reply::tool(ELICIT, json!({}))]);
    let dir = Scratch::new("mcp-elicit-sigkill");
    let text = mcp_config_text(&server, &dir, everything(), &[]);
    let mut svc = Service::start(&dir, &text).await;
    let id = svc.submit_single("fill it in").await;
    let asked = svc.events(&id, None, |kind, _| kind == "question").await;
    let first = asked.last().unwrap().2.clone();
    assert!(first["form"]["properties"]["name"].is_object(), "{first}");
    // Let the store write the question, then kill.
    tokio::time::sleep(Duration::from_millis(500)).await;
    svc.kill().await;

    server.push_all([Reply::tool(ELICIT, json!({})), done("filled in after all")]);
    let again = Service::start(&dir, &text).await;
    let open = tokio::time::timeout(Duration::from_secs(90), async {
        loop {
            let (_, flow) = again.get(&format!("/v1/flows/{id}")).await;
            if flow["questions"].as_array().is_some_and(|q| !q.is_empty()) {
                return flow["questions"].clone();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the resumed flow asks again");
    assert_eq!(open.as_array().unwrap().len(), 1, "{open}");
    assert!(open[0]["id"].as_u64() > first["id"].as_u64(), "{open}");
    assert!(open[0]["form"]["properties"]["name"].is_object(), "{open}");
    // A2A shows the question as input-required, with the schema.
    let task: Value = again
        .http
        .post(again.url("/a2a"))
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": id}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let status = &task["result"]["status"];
    assert_eq!(status["state"], "TASK_STATE_INPUT_REQUIRED", "{task}");
    let said = status["message"]["parts"][0]["text"].as_str().unwrap_or("");
    assert!(
        said.contains("MCP server `everything` asks") && said.contains("JSON schema"),
        "{task}"
    );
    let r = again
        .http
        .post(again.url(&format!("/v1/flows/{id}/answers")))
        .json(&json!({"question_id": open[0]["id"], "text": "{\"name\": \"Grace Hopper\"}"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let events = again.events(&id, None, |_, _| false).await;
    assert_eq!(events.last().unwrap().2["outcome"]["status"], "completed");
    let requests = server.requests();
    let seen = support::scenario::last_tool_text(requests.last().unwrap());
    assert!(seen.contains("Name: Grace Hopper"), "{seen}");
}

const SAMPLE: &str = "mcp_everything_trigger-sampling-request";

/// Run one sampling request of the reference server under `[mcp] sampling = rule`, the
/// model's sampling answer scripted as `answer`; the flow, still running.
async fn sampling_flow(
    server: &ScriptedLlm,
    dir: &Scratch,
    rule: &str,
) -> (manus_rt::Runtime, FlowHandle) {
    let rule = format!("{rule:?}");
    let text = mcp_config_text(server, dir, everything(), &[("mcp.sampling", &rule)]);
    let config = manus_rt::Config::from_text(&text, "mcp-test", None).unwrap();
    start_single(config, "sample").await
}

/// Allowed, the server's sampling request runs on the flow's model: its tokens count in
/// the flow's usage and the server gets the model's text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_sampling_request_runs_on_the_flows_model_and_counts() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        Reply::tool(SAMPLE, json!({"prompt": "a word for joy", "maxTokens": 20})).usage(10, 5),
        Reply::text("elation").usage(700, 300),
        done("sampled").usage(10, 5),
    ]);
    let dir = Scratch::new("mcp-sampling-allow");
    let (rt, flow) = sampling_flow(&server, &dir, "allow").await;
    let outcome = flow.outcome().await;
    rt.shutdown().await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let asked = &requests[1];
    assert_eq!(
        asked.messages()[0]["content"],
        "You are a helpful test server."
    );
    assert!(
        asked.messages()[1]["content"]
            .as_str()
            .unwrap()
            .contains("a word for joy")
    );
    assert!(
        observation(&server, 1).contains("elation"),
        "{}",
        observation(&server, 1)
    );
    assert_eq!(
        (outcome.usage.prompt_tokens, outcome.usage.completion_tokens),
        (720, 310),
        "the sampling call counts in the flow's usage"
    );
}

/// Denied (the default), the server hears why and no model call is made for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_is_refused_by_deny() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        Reply::tool(SAMPLE, json!({"prompt": "a word for joy"})),
        done("refused"),
    ]);
    let dir = Scratch::new("mcp-sampling-deny");
    let outcome = {
        let (rt, flow) = start_single(mcp_config(&server, &dir, everything()), "sample").await;
        let o = flow.outcome().await;
        rt.shutdown().await;
        o
    };
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    assert_eq!(server.requests().len(), 2, "no model call for the server");
    let seen = observation(&server, 0);
    assert!(seen.contains("[mcp] sampling = \"deny\""), "{seen}");
}

/// With "approve", the request waits as an approval request of the step; no model call is
/// made until a person approves, then it runs and counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_under_approve_waits_for_a_person() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        Reply::tool(SAMPLE, json!({"prompt": "a word for joy"})),
        Reply::text("elation").usage(700, 300),
        done("sampled"),
    ]);
    let dir = Scratch::new("mcp-sampling-approve");
    let (rt, mut flow) = sampling_flow(&server, &dir, "approve").await;
    let asked = until(&mut flow, |e| {
        matches!(e, FlowEvent::ApprovalRequested { .. })
    })
    .await;
    let FlowEvent::ApprovalRequested {
        id,
        tool,
        arguments,
        step,
        ..
    } = asked
    else {
        unreachable!()
    };
    assert_eq!(tool, "mcp_sampling");
    assert_eq!(step, Some(0));
    assert!(arguments.contains("a word for joy"), "{arguments}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(server.requests().len(), 1, "held: no model call yet");
    let decision = manus_rt::engine::protocol::Decision::now(true, None, None, "ana");
    assert!(flow.decide(id, decision).await.unwrap());
    let outcome = flow.outcome().await;
    rt.shutdown().await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    assert_eq!(server.requests().len(), 3);
    assert!(observation(&server, 1).contains("elation"));
    assert!(outcome.usage.prompt_tokens >= 700, "{:?}", outcome.usage);
}

/// The reference server asks for the roots: it is given the flow's workspace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workspace_is_offered_as_the_root() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        Reply::tool("mcp_everything_get-roots-list", json!({})),
        done("listed"),
    ]);
    let dir = Scratch::new("mcp-roots");
    let (rt, flow) = start_single(mcp_config(&server, &dir, everything()), "roots").await;
    let outcome = flow.outcome().await;
    rt.shutdown().await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    let seen = observation(&server, 0);
    let root = reqwest::Url::from_directory_path(dir.workspace()).unwrap();
    assert!(
        seen.contains("(1 total)") && seen.contains(root.as_str()),
        "{root}: {seen}"
    );
}

/// The model lists the reference server's resources and templates, reads a text one, a
/// text blob and one past the agent's `max_observe`, which is cut like any tool result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_are_listed_and_read_within_the_tool_result_limit() {
    let server = ScriptedLlm::start().await;
    let read = |uri: &str| Reply::tool("mcp_everything_resources", json!({"uri": uri}));
    server.push_all([
        Reply::tool("mcp_everything_resources", json!({})),
        read("demo://resource/dynamic/text/7"),
        read("demo://resource/dynamic/blob/3"),
        read("demo://resource/static/document/structure.md"),
        read("demo://resource/nowhere"),
        done("read them"),
    ]);
    let dir = Scratch::new("mcp-resources");
    let (rt, flow) = start_single(mcp_config(&server, &dir, everything()), "read").await;
    let outcome = flow.outcome().await;
    rt.shutdown().await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    let first = &server.requests()[0];
    assert!(
        first
            .tool_names()
            .contains(&"mcp_everything_resources".to_string())
    );
    let listed = observation(&server, 0);
    assert!(
        listed.contains("demo://resource/static/document/structure.md")
            && listed.contains("demo://resource/dynamic/text/{resourceId}"),
        "{listed}"
    );
    let text = observation(&server, 1);
    assert!(
        text.contains("Resource 7: This is a plaintext resource"),
        "{text}"
    );
    let blob = observation(&server, 2);
    assert!(blob.contains("Resource 3: This is a base64 blob"), "{blob}");
    let long = observation(&server, 3);
    assert!(long.contains("characters cut"), "{long}");
    let missing = observation(&server, 4);
    assert!(
        missing.starts_with("Error:") && missing.contains("demo://resource/nowhere"),
        "{missing}"
    );
}

/// The reference server's long operation reports progress: each report is a flow event
/// of the calling step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_notifications_become_flow_events() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        Reply::tool(
            "mcp_everything_trigger-long-running-operation",
            json!({"duration": 1, "steps": 3}),
        ),
        done("waited"),
    ]);
    let dir = Scratch::new("mcp-progress");
    let (rt, mut flow) = start_single(mcp_config(&server, &dir, everything()), "wait").await;
    let mut seen = vec![];
    let outcome = loop {
        match flow.next_event().await.expect("events until the end") {
            FlowEvent::ToolProgress {
                progress,
                total,
                step,
                call_id,
                ..
            } => {
                assert_eq!(step, Some(0));
                assert!(call_id.is_some());
                seen.push((progress, total));
            }
            FlowEvent::FlowFinished { outcome } => break outcome,
            _ => {}
        }
    };
    rt.shutdown().await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    assert_eq!(seen, [(1.0, Some(3.0)), (2.0, Some(3.0)), (3.0, Some(3.0))]);
}

/// A flow cancelled while a long MCP call runs cancels the call at the server (the Python
/// SDK server notes the cancellation it received).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_step_cancels_the_servers_call() {
    let server = ScriptedLlm::start().await;
    server.push_all([Reply::tool("mcp_asking_slow", json!({"seconds": 60}))]);
    let dir = Scratch::new("mcp-cancel");
    let notes = dir.path().join("notes.txt");
    let config = mcp_config(&server, &dir, asking_peer(&notes));
    let (rt, mut flow) = start_single(config, "count slowly").await;
    let e = until(&mut flow, |e| matches!(e, FlowEvent::ToolProgress { .. })).await;
    let FlowEvent::ToolProgress { message, .. } = e else {
        unreachable!()
    };
    assert_eq!(message.as_deref(), Some("second 1 of 60"));
    flow.cancel();
    let outcome = flow.outcome().await;
    assert_eq!(outcome.status, FlowStatus::Cancelled, "{}", outcome.reason);
    let noted = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if let Ok(text) = std::fs::read_to_string(&notes)
                && !text.is_empty()
            {
                return text;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the server heard the cancellation");
    rt.shutdown().await;
    assert_eq!(noted, "cancelled 60\n");
}

/// A server speaking 2026-07-28 answers a call with an input-required result (the Python
/// SDK does, for a tool whose argument is elicited): the question reaches the person as any
/// elicitation does, and the call is sent again with the answer, which the tool then gets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_round_trip_call_is_asked_and_sent_again() {
    let server = ScriptedLlm::start().await;
    server.push_all([Reply::tool("mcp_asking_paint", json!({})), done("painted")]);
    let dir = Scratch::new("mcp-mrtr");
    let notes = dir.path().join("notes.txt");
    let config = mcp_config(&server, &dir, asking_peer(&notes));
    let (rt, mut flow) = start_single(config, "paint the wall").await;
    let (id, inquire, form) = question(&mut flow).await;
    assert!(
        inquire.contains("Which colour should the wall be?"),
        "{inquire}"
    );
    assert_eq!(form.expect("the schema")["required"], json!(["colour"]));
    flow.answer(id, "teal");
    let outcome = flow.outcome().await;
    rt.shutdown().await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    assert!(
        observation(&server, 0).contains("painted teal"),
        "{}",
        observation(&server, 0)
    );
    // The session speaks 2026-07-28, so the SDK asked by an input-required result (a
    // standalone request on older protocols); the call came again with the answer.
    let rounds = std::fs::read_to_string(&notes).unwrap();
    assert_eq!(
        rounds, "paint round 2026-07-28\npaint round 2026-07-28\n",
        "one round asked, the next brought the answer"
    );
}
