//! Forks (issue 39 item 3), end to end against the scripted model server: a 3-step run
//! whose steps write files with bash, forked at step 2 over the CLI, makes no model call
//! for steps 0 and 1 (the server's log shows only step 2's calls and the summary), rebuilds
//! their files in the fork's fresh workspace, runs step 2 live, reports the 4 answers it
//! replayed and the one tool result that differs (a file read whose content is not there);
//! the same over HTTP (`POST /v1/flows/{id}/fork` on `manus-rt serve`); and bad input
//! (unknown run, step out of range, a run still running) gets clear errors. For embedders,
//! `Runtime::fork` of a code-mode run replays its recorded cells: they run again for real.

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use support::llm_server::{Reply, ScriptedLlm};
use support::scenario::{Scratch, config_with, done, manus_cli as manus, plan_reply};
use support::service::Service;

const GUARD: Duration = Duration::from_secs(90);
const TASK: &str = "Write three files, one per step.";
const STEPS: [&str; 3] = [
    "[MANUS] Write a.txt",
    "[MANUS] Write b.txt from input.txt",
    "[MANUS] Write c.txt",
];

fn bash(command: &str) -> Reply {
    Reply::tool("bash", json!({ "command": command }))
}

/// The original run's answers: each step one bash call and a `terminate`, step 1's call
/// reading `input.txt`, which only the original workspace has.
fn recorded_script() -> Vec<Reply> {
    vec![
        plan_reply(&STEPS),
        bash("echo one > a.txt"),
        done("a.txt written"),
        bash("echo two > b.txt; cat input.txt"),
        done("b.txt written"),
        bash("echo three > c.txt"),
        done("c.txt written"),
        Reply::text("Three files written."),
    ]
}

/// Step 2 live in the fork, then the summary.
fn live_script() -> Vec<Reply> {
    vec![
        bash("echo three-again > c.txt"),
        done("c.txt written again"),
        Reply::text("Three files written, the last one again."),
    ]
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

async fn finish(mut cmd: tokio::process::Command) -> std::process::Output {
    tokio::time::timeout(GUARD, cmd.output())
        .await
        .expect("manus-rt finished within the guard time")
        .expect("manus-rt ran")
}

fn read(dir: &std::path::Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name))
        .unwrap_or_else(|e| panic!("{name} in {}: {e}", dir.display()))
}

/// `manus-rt fork RUN --at-step AT --workspace WS --json`, finished: its outcome, after
/// checking it succeeded, and its stderr.
async fn fork_into(
    dir: &Scratch,
    config: &std::path::Path,
    run: &str,
    at: &str,
    ws: &std::path::Path,
) -> (Value, String) {
    let ws = ws.to_str().unwrap();
    let args = ["fork", run, "--at-step", at, "--workspace", ws, "--json"];
    let out = finish(manus(dir, config, &args)).await;
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    (serde_json::from_slice(&out.stdout).unwrap(), stderr)
}

/// The steps the requests after the first `from` were made for (`None`: the planner's).
fn steps_asked(server: &ScriptedLlm, from: usize) -> Vec<Option<usize>> {
    server.requests()[from..].iter().map(|r| r.step()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fork_replays_the_steps_before_it_without_the_model_and_runs_its_step_live() {
    let server = ScriptedLlm::start().await;
    let dir = Scratch::new("fork-cli");
    std::fs::create_dir_all(dir.workspace()).unwrap();
    std::fs::write(dir.workspace().join("input.txt"), "original input\n").unwrap();
    let config = dir.write_config(&config_with(&server, &dir.workspace(), &[]));
    server.push_all(recorded_script());
    let out = finish(manus(&dir, &config, &["run-flow", TASK, "--json"])).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let outcome: Value = serde_json::from_slice(&out.stdout).unwrap();
    let original = outcome["flow_id"].as_str().unwrap().to_string();
    let before = server.request_count();
    assert_eq!(before, 8);

    // Bad input first: nothing is started and nothing is asked of the model.
    let unknown = finish(manus(
        &dir,
        &config,
        &["fork", "no-such-run", "--at-step", "1"],
    ))
    .await;
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        text(&unknown.stderr).contains("no run `no-such-run`"),
        "{}",
        text(&unknown.stderr)
    );
    let far = finish(manus(&dir, &config, &["fork", &original, "--at-step", "3"])).await;
    assert_eq!(far.status.code(), Some(2));
    assert!(
        text(&far.stderr).contains("has no step 3 to fork at; its steps are 0, 1, 2"),
        "{}",
        text(&far.stderr)
    );
    assert_eq!(server.request_count(), before);

    let forked_ws = dir.path().join("forked");
    server.push_all(live_script());
    let (forked, stderr) = fork_into(&dir, &config, &original, "2", &forked_ws).await;
    assert_eq!(forked["status"], "completed", "{forked:#}");
    let fork_id = forked["flow_id"].as_str().unwrap();
    assert_ne!(fork_id, original);
    // No model call for steps 0 and 1: only step 2's two calls and the summary.
    assert_eq!(steps_asked(&server, before), [Some(2), Some(2), None]);
    assert_eq!(forked["usage"]["calls"], 3, "{forked:#}");
    // Steps 0 and 1 rebuilt their files for real; step 2 ran live.
    assert_eq!(read(&forked_ws, "a.txt"), "one\n");
    assert_eq!(read(&forked_ws, "b.txt"), "two\n");
    assert_eq!(read(&forked_ws, "c.txt"), "three-again\n");
    assert_eq!(
        read(&dir.workspace(), "c.txt"),
        "three\n",
        "the original workspace is untouched"
    );
    // The report: 2 steps' 4 answers replayed, and the read of input.txt, which the fresh
    // workspace does not have, differs from the record.
    assert!(
        stderr.contains("4 recorded answer(s) replayed, 1 tool result(s) differ from the record"),
        "{stderr}"
    );
    let diff = stderr
        .lines()
        .find(|l| l.contains("step 1: round 1 bash"))
        .unwrap_or_else(|| panic!("no differing result reported:\n{stderr}"));
    assert!(
        diff.contains("original input") && diff.contains("input.txt"),
        "{diff}"
    );
    assert_eq!(forked["plan"]["steps"][0]["notes"], "a.txt written");
    // The plain event lines say so as it happens.
    assert!(
        stderr.contains(&format!("[fork] of run {original}: steps before 2 replay"))
            && stderr.contains("[step 0] manus: 2 recorded answer(s) replayed, no model call; every tool result as recorded"),
        "{stderr}"
    );

    // `runs show` names where the fork came from and what its replay gave.
    let shown = finish(manus(&dir, &config, &["runs", "show", fork_id])).await;
    let shown = text(&shown.stdout);
    assert!(
        shown.contains(&format!("forked from run {original} at step 2"))
            && shown.contains("4 recorded answer(s) replayed, 1 tool result(s) differ"),
        "{shown}"
    );

    // A workspace that is not empty is not a fresh one.
    let taken = finish(manus(
        &dir,
        &config,
        &[
            "fork",
            &original,
            "--at-step",
            "1",
            "--workspace",
            forked_ws.to_str().unwrap(),
        ],
    ))
    .await;
    assert_eq!(taken.status.code(), Some(2));
    assert!(
        text(&taken.stderr).contains("it is not empty"),
        "{}",
        text(&taken.stderr)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fork_over_http_runs_beside_the_workspace_and_bad_requests_get_4xx() {
    let server = ScriptedLlm::start().await;
    let dir = Scratch::new("fork-http");
    let config = config_with(&server, &dir.workspace(), &[]);
    let service = Service::start(&dir, &config).await;
    std::fs::write(dir.workspace().join("input.txt"), "original input\n").unwrap();
    server.push_all(recorded_script());
    let original = service.submit(TASK).await;
    service
        .events(&original, None, |kind, _| kind == "flow_finished")
        .await;
    let before = server.request_count();
    let http = reqwest::Client::new();
    let post = |id: &str, body: Value| {
        http.post(service.url(&format!("/v1/flows/{id}/fork")))
            .json(&body)
            .send()
    };

    let r = post("no-such-run", json!({"at_step": 1})).await.unwrap();
    assert_eq!(r.status(), 404);
    assert!(r.text().await.unwrap().contains("no run `no-such-run`"));
    let r = post(&original, json!({"at_step": 9})).await.unwrap();
    assert_eq!(r.status(), 422);
    assert!(r.text().await.unwrap().contains("its steps are 0, 1, 2"));
    let r = post(&original, json!({"step": 1})).await.unwrap();
    assert_eq!(r.status(), 422, "an unknown field");

    // A run still running cannot be forked: hold its step's model call.
    let gate = support::llm_server::Gate::new();
    server.push_all([plan_reply(&["[MANUS] Wait"]), done("waited").held_by(&gate)]);
    let running = service.submit("Wait.").await;
    let deadline = tokio::time::Instant::now() + GUARD;
    while server.request_count() < before + 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the held step never asked"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = post(&running, json!({"at_step": 0})).await.unwrap();
    assert_eq!(r.status(), 409);
    assert!(
        r.text()
            .await
            .unwrap()
            .contains("is running: only a finished run")
    );
    server.push(Reply::text("Waited."));
    gate.open();
    service
        .events(&running, None, |kind, _| kind == "flow_finished")
        .await;
    let before = server.request_count();

    server.push_all(live_script());
    let r = post(
        &original,
        json!({"at_step": 2, "step_text": "[MANUS] Write c.txt again"}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 201);
    let fork_id = r.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let events = service
        .events(&fork_id, None, |kind, _| kind == "flow_finished")
        .await;
    let forked = events
        .iter()
        .find(|(_, k, _)| k == "forked")
        .expect("a forked event");
    assert_eq!(forked.2["from"], original.as_str());
    let replayed: u64 = events
        .iter()
        .filter(|(_, k, _)| k == "step_replayed")
        .map(|(_, _, v)| v["answers"].as_u64().unwrap())
        .sum();
    assert_eq!(replayed, 4);
    assert_eq!(steps_asked(&server, before), [Some(2), Some(2), None]);
    assert!(
        server.requests()[before]
            .first_user_text()
            .contains("Write c.txt again"),
        "step 2's text was edited"
    );
    let workspace = std::path::PathBuf::from(forked.2["workspace"].as_str().unwrap());
    assert_eq!(
        workspace.parent().unwrap().file_name().unwrap(),
        "workspace-forks",
        "{}",
        workspace.display()
    );
    assert_eq!(read(&workspace, "a.txt"), "one\n");
    assert_eq!(read(&workspace, "c.txt"), "three-again\n");
    // Its files are served from its own workspace.
    let file = http
        .get(service.url(&format!("/v1/flows/{fork_id}/files/c.txt")))
        .send()
        .await
        .unwrap();
    assert_eq!(file.status(), 200);
    assert_eq!(file.text().await.unwrap(), "three-again\n");
    let (status, doc) = service.get(&format!("/v1/flows/{fork_id}")).await;
    assert_eq!(status, 200);
    assert_eq!(doc["status"], "completed", "{doc:#}");
}

fn cell(code: &str) -> Reply {
    Reply::text(&format!("```python\n{code}\n```"))
}

/// `Runtime::fork` of a code-mode run: step 0's recorded cells (a bash call and a file
/// written by Python itself) run again in the fork's workspace with no model call, and
/// step 1 runs live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_fork_replays_a_code_mode_step_by_running_its_cells_again() {
    use manus_rt::{Config, FlowEvent, FlowStatus, ForkOptions, Runtime, SubmitOptions};
    let server = ScriptedLlm::start().await;
    server.push_all([
        plan_reply(&["[MANUS] Write a.txt and b.txt", "[MANUS] Write c.txt"]),
        cell("bash('echo one > a.txt')\nopen('b.txt', 'w').write('two')\nprint('written')"),
        cell("terminate(status='success')"),
        cell("open('c.txt', 'w').write('three')"),
        cell("terminate(status='success')"),
        Reply::text("Three files written."),
    ]);
    let dir = Scratch::new("fork-code");
    let text = config_with(
        &server,
        &dir.workspace(),
        &[("agents.manus.action", "\"code\"")],
    );
    let config = Config::from_text(&text, "fork-code", None).unwrap();
    let rt = Runtime::builder().config(config).start().await.unwrap();
    let flow = rt.submit(TASK, SubmitOptions::default()).await.unwrap();
    let original = flow.id.clone();
    let outcome = flow.outcome().await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    let before = server.request_count();

    server.push_all([
        cell("open('c.txt', 'w').write('three again')"),
        cell("terminate(status='success')"),
        Reply::text("Three files written, the last again."),
    ]);
    let forked_ws = dir.path().join("forked");
    let options = ForkOptions {
        at_step: 1,
        workspace: Some(forked_ws.clone()),
        ..Default::default()
    };
    let mut fork = rt.fork(&original, options).await.unwrap();
    let mut replayed = vec![];
    let mut forked_from = None;
    while let Some(e) = fork.next_event().await {
        match e {
            FlowEvent::Forked { from, at_step, .. } => forked_from = Some((from, at_step)),
            FlowEvent::StepReplayed {
                step,
                answers,
                differed,
                ..
            } => replayed.push((step, answers, differed.len())),
            _ => {}
        }
    }
    let outcome = fork.outcome().await;
    rt.shutdown().await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    assert_eq!(forked_from, Some((original, 1)));
    assert_eq!(
        replayed,
        [(0, 2, 0)],
        "both cells replayed, each result as recorded"
    );
    assert_eq!(steps_asked(&server, before), [Some(1), Some(1), None]);
    assert_eq!(read(&forked_ws, "a.txt"), "one\n");
    assert_eq!(read(&forked_ws, "b.txt"), "two");
    assert_eq!(read(&forked_ws, "c.txt"), "three again");
}

/// A fork killed (SIGKILL) while it replays step 0 goes on with `manus-rt resume`: in its
/// own workspace, step 0 replayed again from the record and step 1 replayed too, with no
/// model call for either, and step 2 live.
#[tokio::test(flavor = "multi_thread")]
async fn an_interrupted_fork_resumes_in_its_workspace_and_goes_on_replaying() {
    use manus_rt::engine::plan::StepStatus;
    use manus_rt::store::{RunStore, StoreUrl};
    let server = ScriptedLlm::start().await;
    let dir = Scratch::new("fork-resume");
    std::fs::create_dir_all(dir.workspace()).unwrap();
    // Step 0's call waits for `go`, which only the original workspace has at first.
    std::fs::write(dir.workspace().join("go"), "").unwrap();
    let config = dir.write_config(&config_with(&server, &dir.workspace(), &[]));
    server.push_all([
        plan_reply(&STEPS),
        bash("while [ ! -f go ]; do sleep 0.1; done; echo one > a.txt"),
        done("a.txt written"),
        bash("echo two > b.txt"),
        done("b.txt written"),
        bash("echo three > c.txt"),
        done("c.txt written"),
        Reply::text("Three files written."),
    ]);
    let out = finish(manus(&dir, &config, &["run-flow", TASK, "--json"])).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let original = serde_json::from_slice::<Value>(&out.stdout).unwrap()["flow_id"]
        .as_str()
        .unwrap()
        .to_string();
    let before = server.request_count();

    let forked_ws = dir.path().join("forked");
    let ws = forked_ws.to_str().unwrap();
    let args = ["fork", &original, "--at-step", "2", "--workspace", ws];
    let mut child = manus(&dir, &config, &args).spawn().unwrap();
    let url = format!("sqlite://{}", dir.path().join("runs.db").display());
    let store = RunStore::open(&StoreUrl::parse(&url).unwrap())
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + GUARD;
    let fork_id = loop {
        let runs = store.list(10).await.unwrap();
        let waiting = runs.iter().find(|r| {
            r.id != original
                && r.plan
                    .as_ref()
                    .is_some_and(|p| p.steps[0].status == StepStatus::InProgress)
        });
        if let Some(run) = waiting {
            break run.id.clone();
        }
        assert!(child.try_wait().unwrap().is_none(), "the fork ended early");
        assert!(
            tokio::time::Instant::now() < deadline,
            "the fork never replayed step 0: {runs:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // SIGKILL, to its pid.
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    std::fs::write(forked_ws.join("go"), "").unwrap();

    server.push_all(live_script());
    let out = finish(manus(&dir, &config, &["resume", &fork_id, "--json"])).await;
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let outcome: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(outcome["status"], "completed", "{outcome:#}");
    assert_eq!(
        steps_asked(&server, before),
        [Some(2), Some(2), None],
        "{stderr}"
    );
    assert!(
        stderr.contains("[step 0] manus: 2 recorded answer(s) replayed")
            && stderr.contains("[step 1] manus: 2 recorded answer(s) replayed"),
        "{stderr}"
    );
    assert_eq!(read(&forked_ws, "a.txt"), "one\n");
    assert_eq!(read(&forked_ws, "b.txt"), "two\n");
    assert_eq!(read(&forked_ws, "c.txt"), "three-again\n");
    assert!(
        !dir.workspace().join("b.txt").exists() || read(&dir.workspace(), "c.txt") == "three\n"
    );
}

/// A run whose calls were worded (constrained mode) and whose step 0 ended with success
/// before acting, held once by the nudge: forked at step 1, step 0 replays the hold from
/// the record (the record goes on after that call), so its file is written again, every
/// tool result is as recorded, and no model is asked for it.
#[tokio::test(flavor = "multi_thread")]
async fn a_fork_replays_a_held_terminate_as_the_run_held_it() {
    let worded = |name: &str, args: Value| {
        Reply::text(&json!({"name": name, "arguments": args}).to_string())
    };
    let success = || worded("terminate", json!({"status": "success"}));
    let server = ScriptedLlm::start().await;
    let dir = Scratch::new("fork-held");
    let overrides = [("llm.tool_calls", "\"constrained\"")];
    let config = dir.write_config(&config_with(&server, &dir.workspace(), &overrides));
    server.push_all([
        worded(
            "planning",
            json!({"command": "create", "plan_id": "p", "title": "Two files",
                "steps": ["[MANUS] Write a.txt", "[MANUS] Write b.txt"]}),
        ),
        success(),
        worded("bash", json!({"command": "echo one > a.txt"})),
        success(),
        worded("bash", json!({"command": "echo two > b.txt"})),
        success(),
        Reply::text("Two files written."),
    ]);
    let out = finish(manus(
        &dir,
        &config,
        &["run-flow", "Write two files", "--json"],
    ))
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let outcome: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(outcome["usage"]["calls"], 7, "{outcome:#}");
    let original = outcome["flow_id"].as_str().unwrap().to_string();
    let before = server.request_count();

    let forked_ws = dir.path().join("forked");
    server.push_all([
        worded("bash", json!({"command": "echo two-again > b.txt"})),
        success(),
        Reply::text("Two files written, the last one again."),
    ]);
    let (forked, stderr) = fork_into(&dir, &config, &original, "1", &forked_ws).await;
    assert_eq!(forked["status"], "completed", "{forked:#}");
    assert_eq!(steps_asked(&server, before), [Some(1), Some(1), None]);
    assert_eq!(read(&forked_ws, "a.txt"), "one\n");
    assert_eq!(read(&forked_ws, "b.txt"), "two-again\n");
    assert!(
        stderr.contains(
            "[step 0] manus: 3 recorded answer(s) replayed, no model call; every tool result as recorded"
        ),
        "{stderr}"
    );
}
