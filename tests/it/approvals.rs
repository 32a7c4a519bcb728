//! Approvals: a tool call a rule names stops its step before the tool runs; the flow's
//! other steps go on; a decision (approve, approve with other arguments, reject with a
//! reason) lets the step go on from where it stopped, the call running exactly once or
//! its rejection reaching the model as the call's result (checked at the scripted server);
//! an unanswered request is decided by `[approvals] timeout_secs`. From the command line: a
//! run no one can approve for stops with exit code 3, `approvals list|approve` decide it in
//! the store, and `resume` goes on.

use crate::support;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use manus_rt::engine::plan::StepStatus;
use manus_rt::engine::protocol::Decision;
use manus_rt::store::{RunStore, StoreUrl};
use manus_rt::{Config, FlowEvent, FlowHandle, FlowOutcome, FlowStatus, Runtime, SubmitOptions};
use serde_json::json;
use support::llm_server::{Reply, ScriptedLlm};
use support::scenario::{Scratch, config_with, done, job, last_tool_text, requests_of};

const GUARD: Duration = Duration::from_secs(60);
const BIN: &str = env!("CARGO_BIN_EXE_manus-rt");

/// `bash` calls whose command holds `rm -rf` or appends to a file need approval.
const RULE: (&str, &str) = (
    "approvals.tools.bash",
    r#"{ matches = "rm -rf|>>", argument = "command" }"#,
);

fn two_steps() -> Reply {
    Reply::tool(
        "planning",
        json!({"command": "create", "plan_id": "test-plan", "title": "Two", "steps": [
            {"text": "[MANUS] count into tally.txt", "depends_on": []},
            {"text": "[MANUS] say hello", "depends_on": []},
        ]}),
    )
}

fn bash(command: &str) -> Reply {
    Reply::tool("bash", json!({"command": command}))
}

async fn start(server: &ScriptedLlm, dir: &Scratch, extra: &[(&str, &str)]) -> Runtime {
    let mut overrides = vec![RULE];
    overrides.extend_from_slice(extra);
    let text = config_with(server, &dir.workspace(), &overrides);
    let config = Config::from_text(&text, "test", None).unwrap_or_else(|e| panic!("{e}\n{text}"));
    Runtime::builder().config(config).start().await.unwrap()
}

/// Read events until `stop` says so; the events read.
async fn until(flow: &mut FlowHandle, stop: impl Fn(&FlowEvent) -> bool) -> Vec<FlowEvent> {
    let mut seen = vec![];
    loop {
        let e = tokio::time::timeout(GUARD, flow.next_event())
            .await
            .expect("an event within the guard time")
            .expect("the flow had not ended");
        let last = stop(&e);
        seen.push(e);
        if last {
            return seen;
        }
    }
}

async fn outcome(mut flow: FlowHandle) -> FlowOutcome {
    tokio::time::timeout(GUARD, async move {
        while flow.next_event().await.is_some() {}
        flow.outcome().await
    })
    .await
    .expect("the flow ended within the guard time")
}

fn decision(approve: bool, arguments: Option<&str>, reason: Option<&str>) -> Decision {
    Decision {
        approve,
        arguments: arguments.map(str::to_string),
        reason: reason.map(str::to_string),
        by: "tester".into(),
        at_ms: 0,
    }
}

/// The tool result step 0's second model request carried: what the model read after the
/// call that waited.
fn after_the_wait(server: &ScriptedLlm) -> String {
    let again = requests_of(&server.requests(), 0)
        .into_iter()
        .nth(1)
        .expect("step 0 asked the model again");
    last_tool_text(&again)
}

fn tally(workspace: &Path) -> String {
    std::fs::read_to_string(workspace.join("tally.txt")).unwrap_or_default()
}

/// The matching call waits; the independent step finishes meanwhile; approved with other
/// arguments, the edited command runs once and the model is told of the edit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_matching_call_waits_while_other_steps_finish_then_runs_once_as_edited() {
    let server = ScriptedLlm::start().await;
    server.push_all([two_steps(), Reply::text("done")]);
    server.push_for(&job(0), [bash("echo one >> tally.txt"), done("counted")]);
    server.push_for(&job(1), [done("hello")]);
    let dir = Scratch::new("approve-edit");
    let rt = start(&server, &dir, &[]).await;
    let mut flow = rt
        .submit("count and greet", SubmitOptions::default())
        .await
        .unwrap();
    // The request, and the other step finishing: in either order, both while this waits.
    let mut request = None;
    let mut other_done = false;
    while request.is_none() || !other_done {
        match until(&mut flow, |_| true).await.pop() {
            Some(FlowEvent::ApprovalRequested {
                id,
                step,
                tool,
                why,
                ..
            }) => request = Some((id, step, tool, why)),
            Some(FlowEvent::StepFinished {
                step: 1, status, ..
            }) => {
                assert_eq!(status, StepStatus::Completed);
                assert_eq!(
                    tally(&dir.workspace()),
                    "",
                    "nothing ran before the decision"
                );
                other_done = true;
            }
            _ => {}
        }
    }
    let (id, step, tool, why) = request.unwrap();
    assert_eq!((step, tool.as_str()), (Some(0), "bash"));
    assert!(why.contains("command match"), "{why}");
    assert_eq!(
        tally(&dir.workspace()),
        "",
        "nothing ran before the decision"
    );
    flow.decide(
        id,
        decision(
            true,
            Some(r#"{"command": "echo edited >> tally.txt"}"#),
            None,
        ),
    )
    .await
    .unwrap();
    let o = outcome(flow).await;
    assert_eq!(o.status, FlowStatus::Completed, "{}", o.reason);
    assert_eq!(
        tally(&dir.workspace()),
        "edited\n",
        "the edited command ran once"
    );
    let result = after_the_wait(&server);
    assert!(
        result.contains("tester approved this call with its arguments changed"),
        "{result}"
    );
    rt.shutdown().await;
}

/// Issue 37, item 1: a run interrupted after an approved call ran, while its step waited
/// on the model, is stored with that step in progress and none awaiting approval. Resumed,
/// the step goes on from the approval: the model reads that the call already ran, the call
/// does not run again, and no one is asked again. (Resume looked for paused steps only when
/// one awaited approval, so such a step started over and asked for the same call again.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_interrupted_after_an_approved_call_ran_goes_on_past_it() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        Reply::tool(
            "planning",
            json!({"command": "create", "plan_id": "test-plan", "title": "One", "steps": [
                {"text": "[MANUS] count into tally.txt", "depends_on": []},
            ]}),
        ),
        Reply::text("Counted."),
    ]);
    // The model call after the approved call never comes back before the interruption;
    // the next one (after the resume) ends the step.
    server.push_for(
        &job(0),
        [
            bash("echo once >> tally.txt"),
            done("cut short").delay(600_000),
            done("counted"),
        ],
    );
    let dir = Scratch::new("approve-interrupted");
    let first = start(&server, &dir, &[]).await;
    let mut flow = first
        .submit("count", SubmitOptions::default())
        .await
        .unwrap();
    let run = flow.id.clone();
    let seen = until(&mut flow, |e| {
        matches!(e, FlowEvent::ApprovalRequested { .. })
    })
    .await;
    let Some(FlowEvent::ApprovalRequested { id, .. }) = seen.last().cloned() else {
        unreachable!()
    };
    assert!(flow.decide(id, decision(true, None, None)).await.unwrap());
    until(&mut flow, |e| matches!(e, FlowEvent::ToolFinished { .. })).await;
    tokio::time::timeout(GUARD, async {
        while requests_of(&server.requests(), 0).len() < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the step asked the model again after the call");
    first.shutdown().await;
    assert_eq!(tally(&dir.workspace()), "once\n");
    let store = RunStore::open(&StoreUrl::Sqlite(dir.workspace().with_file_name("runs.db")))
        .await
        .unwrap();
    let stored = store.get(&run).await.unwrap().unwrap();
    store.close().await;
    let step = &stored.plan.as_ref().unwrap().steps[0];
    assert_eq!(
        (step.status, step.attempts),
        (StepStatus::InProgress, 1),
        "stored as it stood at the interruption"
    );

    let second = start(&server, &dir, &[]).await;
    let mut resumed = second.resume(&run).await.unwrap();
    let events = until(&mut resumed, |e| {
        matches!(e, FlowEvent::FlowFinished { .. })
    })
    .await;
    let o = outcome(resumed).await;
    let rerun = events.iter().find_map(|e| match e {
        FlowEvent::Resumed { rerun, .. } => Some(rerun.clone()),
        _ => None,
    });
    assert_eq!(rerun, Some(vec![]), "the step did not start over");
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, FlowEvent::ApprovalRequested { .. })),
        "no one was asked again: {events:?}"
    );
    assert_eq!(
        o.status,
        FlowStatus::Completed,
        "{}: {:?}",
        o.reason,
        o.plan.steps[0].notes
    );
    assert_eq!(tally(&dir.workspace()), "once\n", "the call ran once");
    let step_requests = requests_of(&server.requests(), 0);
    assert_eq!(
        step_requests.len(),
        3,
        "the step's model calls: the call, the cut one, one more"
    );
    let told = last_tool_text(&step_requests[2]);
    assert!(
        told.contains("this call was approved and ran before the run was interrupted"),
        "{told}"
    );
    second.shutdown().await;
}

/// A rejection's reason is what the model reads as the call's result; the command never
/// runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejection_reason_reaches_the_model() {
    let server = ScriptedLlm::start().await;
    server.push_all([two_steps(), Reply::text("done")]);
    server.push_for(
        &job(0),
        [bash("rm -rf build && echo x >> tally.txt"), done("skipped")],
    );
    server.push_for(&job(1), [done("hello")]);
    let dir = Scratch::new("approve-reject");
    let rt = start(&server, &dir, &[]).await;
    let mut flow = rt
        .submit("count and greet", SubmitOptions::default())
        .await
        .unwrap();
    let seen = until(&mut flow, |e| {
        matches!(e, FlowEvent::ApprovalRequested { .. })
    })
    .await;
    let Some(FlowEvent::ApprovalRequested { id, .. }) = seen.last().cloned() else {
        unreachable!()
    };
    assert!(
        flow.decide(id, decision(false, None, Some("not on this machine")))
            .await
            .unwrap()
    );
    let o = outcome(flow).await;
    assert_eq!(o.status, FlowStatus::Completed, "{}", o.reason);
    assert_eq!(
        tally(&dir.workspace()),
        "",
        "the rejected command never ran"
    );
    let result = after_the_wait(&server);
    assert!(
        result.contains("Not run: tester rejected this call. Their reason: not on this machine"),
        "{result}"
    );
    rt.shutdown().await;
}

/// An unanswered request is rejected after `[approvals] timeout_secs`, saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_request_is_decided_by_its_timeout() {
    let server = ScriptedLlm::start().await;
    server.push_all([two_steps(), Reply::text("done")]);
    server.push_for(&job(0), [bash("echo x >> tally.txt"), done("skipped")]);
    server.push_for(&job(1), [done("hello")]);
    let dir = Scratch::new("approve-timeout");
    let rt = start(&server, &dir, &[("approvals.timeout_secs", "1")]).await;
    let flow = rt
        .submit("count and greet", SubmitOptions::default())
        .await
        .unwrap();
    let o = outcome(flow).await;
    assert_eq!(o.status, FlowStatus::Completed, "{}", o.reason);
    assert_eq!(tally(&dir.workspace()), "");
    let result = after_the_wait(&server);
    assert!(result.contains("no one decided within 1s"), "{result}");
    rt.shutdown().await;
}

/// A bad pattern is a config error naming the file's line and the key.
#[test]
fn a_bad_pattern_is_a_config_error_with_its_line() {
    let text = "[llm]\napi_type = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\nmodel = \"m\"\napi_key = \"k\"\n\n[agents.manus]\nprofile = \"manus\"\n\n[approvals.tools]\nbash = { matches = \"rm (-rf\" }\n";
    let e = Config::from_text(text, "approvals.toml", None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("approvals.toml:11")
            && e.contains("[approvals.tools] bash")
            && e.contains("regular expression"),
        "{e}"
    );
    let text = text.replace("{ matches = \"rm (-rf\" }", "\"sometimes\"");
    let e = Config::from_text(&text, "approvals.toml", None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("use \"always\", \"never\""), "{e}");
}

/// No one at a terminal: the run stops with exit code 3 once the other step is done; the
/// request is listed and approved from another command; `resume` runs the call once and
/// finishes the flow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_no_one_can_approve_stops_with_code_3_and_resumes_once_approved() {
    let server = ScriptedLlm::start().await;
    server.push_all([two_steps(), Reply::text("done")]);
    server.push_for(&job(0), [bash("echo once >> tally.txt"), done("counted")]);
    server.push_for(&job(1), [done("hello")]);
    let dir = Scratch::new("approve-cli");
    let config = dir.write_config(&config_with(&server, &dir.workspace(), &[RULE]));
    let cli = |args: &[&str]| {
        let mut cmd = tokio::process::Command::new(BIN);
        cmd.current_dir(dir.path())
            .env("USER", "ana")
            .stdin(Stdio::null())
            .arg("--config")
            .arg(&config)
            .args(args);
        cmd
    };
    let out = cli(&["run-flow", "count and greet", "--json"])
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("waits for approval of 1 tool call(s)"),
        "{stderr}"
    );
    assert_eq!(tally(&dir.workspace()), "");
    let listed = cli(&["approvals", "list", "--json"])
        .output()
        .await
        .unwrap();
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    let run = listed[0]["run"].as_str().unwrap().to_string();
    assert_eq!(listed[0]["approval"]["tool"], "bash");
    assert_eq!(listed[0]["approval"]["id"], 1);
    let ok = cli(&["approvals", "approve", &run, "1"])
        .output()
        .await
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let again = cli(&["approvals", "approve", &run, "1"])
        .output()
        .await
        .unwrap();
    assert_eq!(again.status.code(), Some(2), "a request is decided once");
    let out = cli(&["resume", &run, "--json"]).output().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    let o: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(o["status"], "completed", "{o:#}");
    assert_eq!(
        tally(&dir.workspace()),
        "once\n",
        "the approved call ran exactly once"
    );
    assert!(stderr.contains("approved by ana"), "{stderr}");
    assert_eq!(
        requests_of(&server.requests(), 0).len(),
        2,
        "the model was not asked again for the paused call"
    );
}

/// `[flow] plan_approval`: no step starts before a person signs the plan off; signed
/// off, the steps run; refused, the flow fails saying who refused and why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_sign_off_blocks_every_step_until_approved() {
    for approve in [true, false] {
        let server = ScriptedLlm::start().await;
        server.push_all([two_steps(), Reply::text("done")]);
        server.push_for(&job(0), [done("zero")]);
        server.push_for(&job(1), [done("one")]);
        let dir = Scratch::new("approve-plan");
        let rt = start(&server, &dir, &[("flow.plan_approval", "true")]).await;
        let mut flow = rt
            .submit("count and greet", SubmitOptions::default())
            .await
            .unwrap();
        let seen = until(&mut flow, |e| {
            matches!(e, FlowEvent::ApprovalRequested { .. })
        })
        .await;
        let Some(FlowEvent::ApprovalRequested {
            id,
            step,
            tool,
            arguments,
            ..
        }) = seen.last().cloned()
        else {
            unreachable!()
        };
        assert_eq!((step, tool.as_str()), (None, "plan"));
        assert!(arguments.contains("say hello"), "{arguments}");
        // Nothing runs while the plan waits: the planning call is the only request.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(server.request_count(), 1);
        assert!(
            !seen
                .iter()
                .any(|e| matches!(e, FlowEvent::StepStarted { .. }))
        );
        let reason = (!approve).then_some("too broad");
        assert!(
            flow.decide(id, decision(approve, None, reason))
                .await
                .unwrap()
        );
        let o = outcome(flow).await;
        if approve {
            assert_eq!(o.status, FlowStatus::Completed, "{}", o.reason);
        } else {
            assert_eq!(o.status, FlowStatus::Failed);
            assert_eq!(o.reason, "tester did not sign the plan off: too broad");
            assert_eq!(server.request_count(), 2, "no step ran; only the summary");
        }
        rt.shutdown().await;
    }
}

/// A run still running in one process is approved from another terminal: the decision
/// goes through the run store, and the running flow goes on with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_terminal_approves_a_running_flow_through_the_store() {
    let server = ScriptedLlm::start().await;
    server.push_all([two_steps(), Reply::text("done")]);
    server.push_for(&job(0), [bash("echo far >> tally.txt"), done("counted")]);
    server.push_for(&job(1), [done("hello")]);
    let dir = Scratch::new("approve-elsewhere");
    let text = config_with(&server, &dir.workspace(), &[RULE]);
    let path = dir.write_config(&text);
    let config = Config::from_text(&text, "test", None).unwrap();
    let rt = Runtime::builder().config(config).start().await.unwrap();
    let mut flow = rt
        .submit("count and greet", SubmitOptions::default())
        .await
        .unwrap();
    let seen = until(&mut flow, |e| {
        matches!(e, FlowEvent::ApprovalRequested { .. })
    })
    .await;
    let Some(FlowEvent::ApprovalRequested { id, .. }) = seen.last().cloned() else {
        unreachable!()
    };
    // The request reaches the store's log shortly after the event.
    let listed = tokio::time::timeout(GUARD, async {
        loop {
            let out = tokio::process::Command::new(BIN)
                .arg("--config")
                .arg(&path)
                .args(["approvals", "list", "--json"])
                .output()
                .await
                .unwrap();
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            if v.as_array().is_some_and(|a| !a.is_empty()) {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the request is listed");
    assert_eq!(listed[0]["run"], flow.id.as_str());
    let out = tokio::process::Command::new(BIN)
        .env("USER", "bo")
        .arg("--config")
        .arg(&path)
        .args(["approvals", "approve", &flow.id, &id.to_string()])
        .output()
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("the process running it goes on"), "{said}");
    // Issue 37, item 9: one table, one winner. A rejection made here after the approval
    // recorded from the other terminal loses, even before that approval reaches the flow.
    let late = flow
        .decide(id, decision(false, None, Some("too late")))
        .await
        .unwrap();
    assert!(!late, "the first decision recorded stands");
    let rest = until(&mut flow, |e| {
        matches!(e, FlowEvent::ApprovalDecided { .. })
    })
    .await;
    let Some(FlowEvent::ApprovalDecided { decision, .. }) = rest.last() else {
        unreachable!()
    };
    assert_eq!(decision.by, "bo");
    let o = outcome(flow).await;
    assert_eq!(o.status, FlowStatus::Completed, "{}", o.reason);
    assert_eq!(tally(&dir.workspace()), "far\n");
    rt.shutdown().await;
}
