//! Conversations (threads of runs), end to end against the scripted model server: a flow
//! completes, then follow-up turns over the CLI (`run-flow --continue`, `chat`), the HTTP
//! route, A2A (the official a2a-sdk client, same contextId) and the runtime API each see
//! the earlier turns' results in their model requests and edit the same workspace file; a
//! turn killed mid-way resumes with its history; bad follow-ups get clear errors.

use crate::support;

use std::time::Duration;

use manus_rt::engine::plan::StepStatus;
use manus_rt::store::{RunStore, StoreUrl};
use serde_json::{Value, json};
use support::llm_server::{Recorded, Reply, ScriptedLlm};
use support::scenario::{Scratch, config_with, done, manus_cli as manus, plan_reply};
use support::service::Service;
use tokio::io::AsyncWriteExt;

const GUARD: Duration = Duration::from_secs(90);

const FIRST: &str = "Write report.txt saying the colour is red";

/// The first turn: one step writes report.txt, the summary says what it holds.
fn first_turn() -> Vec<Reply> {
    vec![
        plan_reply(&["[MANUS] Write report.txt"]),
        Reply::tool(
            "str_replace_editor",
            json!({"command": "create", "path": "report.txt", "file_text": "colour: red\n"}),
        ),
        done("report.txt says red."),
        Reply::text("report.txt now says the colour is red."),
    ]
}

/// A follow-up turn: one step changes the colour in report.txt from `from` to `to`.
fn recolour(from: &str, to: &str) -> Vec<Reply> {
    vec![
        plan_reply(&["[MANUS] Recolour report.txt"]),
        Reply::tool(
            "str_replace_editor",
            json!({"command": "str_replace", "path": "report.txt", "old_str": from, "new_str": to}),
        ),
        done(&format!("report.txt says {to}.")),
        Reply::text(&format!("report.txt now says the colour is {to}.")),
    ]
}

/// The requests of the turn whose task is `task`: its planning call and its steps' calls
/// (their first user message names the task as the one to do now).
fn turn_requests(server: &ScriptedLlm, task: &str) -> Vec<Recorded> {
    let planning =
        format!("Task (this turn; plan only what it asks, building on what was done): {task}");
    let step = format!("The overall task: {task}");
    server
        .requests()
        .into_iter()
        .filter(|r| {
            let first = r.first_user_text();
            first.contains(&planning) || first.contains(&step)
        })
        .collect()
}

/// Each of the turn's planning and step requests shows the earlier turns' `facts`.
fn saw_earlier(server: &ScriptedLlm, task: &str, facts: &[&str]) {
    let requests = turn_requests(server, task);
    assert!(
        requests.len() >= 2,
        "the turn `{task}` made {} requests with its history; all requests:\n{:#?}",
        requests.len(),
        server
            .requests()
            .iter()
            .map(|r| r.first_user_text())
            .collect::<Vec<_>>()
    );
    for r in &requests {
        let first = r.first_user_text();
        for fact in facts {
            assert!(first.contains(fact), "`{fact}` is not in:\n{first}");
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `run-flow ARGS… --json` to a completed end: the flow's id.
async fn run_flow(dir: &Scratch, config: &std::path::Path, args: &[&str]) -> String {
    let mut full = vec!["run-flow"];
    full.extend_from_slice(args);
    full.push("--json");
    let out = tokio::time::timeout(GUARD, manus(dir, config, &full).output())
        .await
        .expect("run-flow ended")
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let outcome: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("stdout is not the outcome ({e}):\n{}", text(&out.stdout));
    });
    outcome["flow_id"].as_str().unwrap().to_string()
}

/// `run-flow`, then `run-flow --continue` and `chat --continue` with lines on stdin: each
/// turn plans knowing the earlier ones and edits the same file; the store links them as
/// turns 0, 1, 2 of one thread; a follow-up to an unknown run is refused.
#[tokio::test(flavor = "multi_thread")]
async fn follow_ups_over_the_cli_see_the_earlier_turns_and_edit_the_same_file() {
    let server = ScriptedLlm::start().await;
    let dir = Scratch::new("threads-cli");
    let config = dir.write_config(&config_with(&server, &dir.workspace(), &[]));
    let report = dir.workspace().join("report.txt");

    server.push_all(first_turn());
    let first = run_flow(&dir, &config, &[FIRST]).await;
    assert_eq!(std::fs::read_to_string(&report).unwrap(), "colour: red\n");

    server.push_all(recolour("red", "blue"));
    let second = run_flow(&dir, &config, &["--continue", &first, "Now make it blue"]).await;
    assert_ne!(second, first);
    assert_eq!(std::fs::read_to_string(&report).unwrap(), "colour: blue\n");
    saw_earlier(
        &server,
        "Now make it blue",
        &[
            &format!("Turn 0: {FIRST}"),
            "Answer given: report.txt now says the colour is red.",
            "report.txt says red.",
        ],
    );

    server.push_all(recolour("blue", "green"));
    let mut chat = manus(&dir, &config, &["chat", "--continue", &second]);
    chat.stdin(std::process::Stdio::piped());
    let mut child = chat.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(b"Now make it green\n/exit\n")
        .await
        .unwrap();
    drop(stdin);
    let out = tokio::time::timeout(GUARD, child.wait_with_output())
        .await
        .expect("the chat ended")
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&report).unwrap(), "colour: green\n");
    saw_earlier(
        &server,
        "Now make it green",
        &[
            &format!("Turn 0: {FIRST}"),
            "Turn 1: Now make it blue",
            "Answer given: report.txt now says the colour is blue.",
        ],
    );

    let store = RunStore::open(&StoreUrl::Sqlite(dir.workspace().with_file_name("runs.db")))
        .await
        .unwrap();
    let turns = store.turns(&first).await.unwrap();
    let numbered: Vec<(u32, &str)> = turns.iter().map(|(n, r)| (*n, r.task.as_str())).collect();
    assert_eq!(
        numbered,
        [
            (0, FIRST),
            (1, "Now make it blue"),
            (2, "Now make it green")
        ]
    );
    assert_eq!(store.turn_of(&second).await.unwrap().thread, first);
    store.close().await;
    let shown = manus(&dir, &config, &["runs", "show", &second])
        .output()
        .await
        .unwrap();
    let shown = text(&shown.stdout);
    assert!(
        shown.contains(&format!("conversation {first}: this is turn 1 of 3")),
        "{shown}"
    );

    let out = manus(
        &dir,
        &config,
        &["run-flow", "--continue", "no-such-run", "x"],
    )
    .output()
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("no run `no-such-run`"),
        "{}",
        text(&out.stderr)
    );
}

/// A follow-up turn killed mid-step (SIGKILL of `run-flow --continue`) is resumed by
/// `manus-rt resume` with its history (the resumed step's requests still show the first
/// turn) and finishes the edit; while it is interrupted, no further turn may start.
#[tokio::test(flavor = "multi_thread")]
async fn a_follow_up_killed_mid_turn_resumes_with_the_earlier_turns() {
    let server = ScriptedLlm::start().await;
    let dir = Scratch::new("threads-resume");
    let config = dir.write_config(&config_with(&server, &dir.workspace(), &[]));
    server.push_all(first_turn());
    let first = run_flow(&dir, &config, &[FIRST]).await;

    // The follow-up's step never hears back before the kill.
    let mut turn = recolour("red", "blue");
    let cut = turn.remove(1).delay(600_000);
    server.push_all([turn.remove(0), cut]);
    let mut child = manus(
        &dir,
        &config,
        &["run-flow", "--continue", &first, "Now make it blue"],
    )
    .spawn()
    .unwrap();
    // Killed once the store has the step running (its writes are batched), while its
    // model call waits.
    let store = RunStore::open(&StoreUrl::Sqlite(dir.workspace().with_file_name("runs.db")))
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + GUARD;
    let second = loop {
        let turns = store.turns(&first).await.unwrap();
        let running = turns.get(1).filter(|(_, run)| {
            run.plan
                .as_ref()
                .is_some_and(|p| p.steps[0].status == StepStatus::InProgress)
        });
        if let Some((1, run)) = running
            && turn_requests(&server, "Now make it blue").len() >= 2
        {
            break run.id.clone();
        }
        assert!(tokio::time::Instant::now() < deadline, "the step never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    store.close().await;
    child.start_kill().unwrap();
    assert!(!child.wait().await.unwrap().success());
    // The thread's last turn has not ended: no next turn until it is resumed.
    let refused = manus(
        &dir,
        &config,
        &["run-flow", "--continue", &first, "and then?"],
    )
    .output()
    .await
    .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    let said = text(&refused.stderr);
    assert!(
        said.contains(&format!("has a turn that has not ended (run {second})"))
            && said.contains(&format!("manus-rt resume {second}")),
        "{said}"
    );

    let before = turn_requests(&server, "Now make it blue").len();
    server.push_all([
        Reply::tool(
            "str_replace_editor",
            json!({"command": "str_replace", "path": "report.txt", "old_str": "red", "new_str": "blue"}),
        ),
        done("report.txt says blue."),
        Reply::text("report.txt now says the colour is blue."),
    ]);
    let out = tokio::time::timeout(GUARD, manus(&dir, &config, &["resume", &second]).output())
        .await
        .expect("resume ended")
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(dir.workspace().join("report.txt")).unwrap(),
        "colour: blue\n"
    );
    let resumed = &turn_requests(&server, "Now make it blue")[before..];
    assert!(!resumed.is_empty(), "the resumed step made no request");
    for r in resumed {
        assert!(
            r.first_user_text()
                .contains("Answer given: report.txt now says the colour is red."),
            "{}",
            r.first_user_text()
        );
    }
}

/// `chat`: Ctrl-C while a turn runs cancels that turn, not the chat; the next line is the
/// conversation's next turn, which knows the last one was cancelled.
#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_in_a_chat_cancels_the_turn_and_the_chat_goes_on() {
    let server = ScriptedLlm::start().await;
    let dir = Scratch::new("threads-chat");
    let config = dir.write_config(&config_with(&server, &dir.workspace(), &[]));
    server.push_all([
        plan_reply(&["[MANUS] Wait for the build"]),
        Reply::tool("bash", json!({"command": "sleep 60"})),
    ]);
    server.push_all(first_turn());
    let mut chat = manus(&dir, &config, &["chat"]);
    chat.stdin(std::process::Stdio::piped());
    let mut child = chat.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(format!("Wait for the build\n{FIRST}\n/exit\n").as_bytes())
        .await
        .unwrap();
    drop(stdin);
    // Once the step's command runs (its call was answered), Ctrl-C.
    let deadline = tokio::time::Instant::now() + GUARD;
    while server.request_count() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the step never asked"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pid = child.id().unwrap().to_string();
    let sent = tokio::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .await
        .unwrap();
    assert!(sent.success());
    let out = tokio::time::timeout(GUARD, child.wait_with_output())
        .await
        .expect("the chat ended")
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(dir.workspace().join("report.txt")).unwrap(),
        "colour: red\n"
    );
    let store = RunStore::open(&StoreUrl::Sqlite(dir.workspace().with_file_name("runs.db")))
        .await
        .unwrap();
    let runs = store.list(10).await.unwrap();
    let first = runs
        .iter()
        .find(|r| r.task == "Wait for the build")
        .unwrap();
    let turns = store.turns(&first.id).await.unwrap();
    let statuses: Vec<(u32, &str)> = turns.iter().map(|(n, r)| (*n, r.status.as_str())).collect();
    assert_eq!(statuses, [(0, "cancelled"), (1, "completed")]);
    store.close().await;
    saw_earlier(
        &server,
        FIRST,
        &["Turn 0: Wait for the build\nIt ended cancelled"],
    );
}

/// Wait until flow `id` of `svc` has ended; its document.
async fn ended(svc: &Service, id: &str) -> Value {
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        let (code, flow) = svc.get(&format!("/v1/flows/{id}")).await;
        assert_eq!(code, 200, "{flow}");
        if flow["finished"] == json!(true) {
            return flow;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{id} never ended: {flow}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Over HTTP: `POST /v1/flows/{id}/follow-up` starts the next turn, `GET /v1/threads/{id}`
/// lists the turns from any of them; over A2A, the official SDK's client sends a message
/// with the first task's contextId and no taskId, and the new task is the thread's next
/// turn in the same context. Each turn sees the earlier ones and edits the same file.
#[tokio::test(flavor = "multi_thread")]
async fn follow_ups_over_http_and_a2a_continue_the_same_thread() {
    let python = std::env::var("MANUS_TEST_MCP_PYTHON").unwrap_or_else(|_| {
        panic!("MANUS_TEST_MCP_PYTHON is not set: run the suite with scripts/test.sh, which installs the A2A SDK")
    });
    let client = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/a2a_client.py");
    let server = ScriptedLlm::start().await;
    let dir = Scratch::new("threads-http");
    let svc = Service::start(&dir, &config_with(&server, &dir.workspace(), &[])).await;
    let report = dir.workspace().join("report.txt");

    server.push_all(first_turn());
    let first = svc.submit(FIRST).await;
    assert_eq!(ended(&svc, &first).await["status"], json!("completed"));

    server.push_all(recolour("red", "blue"));
    let r = svc
        .http
        .post(svc.url(&format!("/v1/flows/{first}/follow-up")))
        .json(&json!({"task": "Now make it blue"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let second = r.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(ended(&svc, &second).await["status"], json!("completed"));
    assert_eq!(std::fs::read_to_string(&report).unwrap(), "colour: blue\n");
    saw_earlier(
        &server,
        "Now make it blue",
        &["Answer given: report.txt now says the colour is red."],
    );

    server.push_all(recolour("blue", "green"));
    let out = tokio::process::Command::new(&python)
        .arg(&client)
        .arg(&svc.base)
        .args(["--timeout", "60", "--text", "Now make it green"])
        .args(["--context", &first])
        .output()
        .await
        .unwrap();
    let lines: Vec<Value> = text(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let last = lines.last().cloned().unwrap_or_default();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{lines:#?}\n{}",
        text(&out.stderr)
    );
    assert_eq!(last["context_id"], json!(first), "{last}");
    let third = last["task_id"].as_str().unwrap().to_string();
    assert!(third != first && third != second, "{last}");
    assert_eq!(std::fs::read_to_string(&report).unwrap(), "colour: green\n");
    saw_earlier(
        &server,
        "Now make it green",
        &[
            "Turn 1: Now make it blue",
            "Answer given: report.txt now says the colour is blue.",
        ],
    );

    let (code, thread) = svc.get(&format!("/v1/threads/{third}")).await;
    assert_eq!(code, 200, "{thread}");
    assert_eq!(thread["id"], json!(first));
    let turns: Vec<(u64, &str, &str)> = thread["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["turn"].as_u64().unwrap(),
                t["id"].as_str().unwrap(),
                t["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        turns,
        [
            (0, first.as_str(), "completed"),
            (1, second.as_str(), "completed"),
            (2, third.as_str(), "completed"),
        ]
    );

    // A follow-up to a run that is not there, and one with no task.
    let r = svc
        .http
        .post(svc.url("/v1/flows/nope/follow-up"))
        .json(&json!({"task": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let r = svc
        .http
        .post(svc.url(&format!("/v1/flows/{first}/follow-up")))
        .json(&json!({"task": " "}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    assert_eq!(svc.get("/v1/threads/nope").await.0, 404);
}

/// Traces: each turn is a trace of its own whose root span names the thread and the turn
/// (`manus.thread.id`, `manus.thread.turn`), so a tracing backend finds a conversation's
/// turns by the thread's id.
#[tokio::test(flavor = "multi_thread")]
async fn each_turn_is_a_trace_linked_to_its_thread() {
    let server = ScriptedLlm::start().await;
    let otlp = support::otlp::OtlpReceiver::start().await;
    let dir = Scratch::new("threads-otel");
    let endpoint = format!("\"{}\"", otlp.endpoint());
    let config = dir.write_config(&config_with(
        &server,
        &dir.workspace(),
        &[("telemetry.otlp_endpoint", &endpoint)],
    ));
    server.push_all(first_turn());
    server.push_all(recolour("red", "blue"));
    let first = run_flow(&dir, &config, &[FIRST]).await;
    let second = run_flow(&dir, &config, &["--continue", &first, "Now make it blue"]).await;
    let spans = otlp.spans();
    let roots: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "invoke_workflow planning_flow")
        .collect();
    assert_eq!(roots.len(), 2);
    let root_of = |id: &str| {
        *roots
            .iter()
            .find(|s| s.attr("manus.flow.id") == Some(id))
            .unwrap_or_else(|| panic!("no trace of {id}"))
    };
    let (a, b) = (root_of(&first), root_of(&second));
    assert_ne!(a.trace_id, b.trace_id, "one trace per turn");
    assert_eq!(
        (a.attr("manus.thread.id"), a.int("manus.thread.turn")),
        (Some(first.as_str()), Some(0))
    );
    assert_eq!(
        (b.attr("manus.thread.id"), b.int("manus.thread.turn")),
        (Some(first.as_str()), Some(1))
    );
}
