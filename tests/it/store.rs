//! The run store and resume, end to end: the real binary is killed with SIGKILL after step
//! 2 of 4 and `manus-rt resume` finishes the flow without redoing or losing anything, on
//! SQLite and on PostgreSQL (a real server: test.sh starts one and sets
//! MANUS_TEST_POSTGRES_URL); a replayed run resumes reproducibly from its cassette; a
//! runtime shut down mid-flow leaves its run for `Runtime::interrupted_runs` and `resume`;
//! bad input (unknown run, finished run, unreachable store) gets clear errors; and the
//! store's thread yields the CPU to flows.

use crate::support;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use manus_rt::engine::plan::StepStatus;
use manus_rt::store::{RunStatus, RunStore, StoreUrl, StoredRun};
use manus_rt::{Config, FlowEvent, FlowStatus, Runtime, RuntimeError, SubmitOptions};
use serde_json::{Value, json};
use support::llm_server::{Recorded, Reply, ScriptedLlm};
use support::scenario::{
    Scratch, config_with, done, manus_cli as manus, plan_reply, postgres_database,
};
use tokio::io::AsyncReadExt;

/// Generous bound on any wait, so a hang fails the test instead of stalling it.
const GUARD: Duration = Duration::from_secs(90);

const TASK: &str = "Write four notes, one per step.";
const STEPS: [&str; 4] = [
    "[MANUS] Write note one",
    "[MANUS] Write note two",
    "[MANUS] Write note three",
    "[MANUS] Write note four",
];

/// Run the command to its end (within the guard).
async fn finish(mut cmd: tokio::process::Command) -> Output {
    tokio::time::timeout(GUARD, cmd.output())
        .await
        .expect("manus-rt finished within the guard time")
        .expect("manus-rt ran")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Poll the store until `ready` holds for the only run in it, while `child` (which writes
/// it) runs; the run.
async fn wait_for_run(
    store: &RunStore,
    child: &mut tokio::process::Child,
    what: &str,
    ready: impl Fn(&StoredRun) -> bool,
) -> StoredRun {
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        let runs = store.list(10).await.unwrap();
        if let Some(run) = runs.first().filter(|r| ready(r)) {
            return run.clone();
        }
        if let Some(status) = child.try_wait().unwrap() {
            let mut stderr = String::new();
            if let Some(mut pipe) = child.stderr.take() {
                let _ = pipe.read_to_string(&mut stderr).await;
            }
            panic!("manus-rt ended ({status}) before the store showed {what}:\n{stderr}");
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the store never showed {what}: {runs:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn step_completed(run: &StoredRun, step: usize) -> bool {
    run.plan
        .as_ref()
        .is_some_and(|p| p.steps[step].status == manus_rt::engine::plan::StepStatus::Completed)
}

/// SIGKILL the child by its pid and reap it.
async fn kill_hard(child: &mut tokio::process::Child) {
    // SIGKILL, to its pid.
    child.start_kill().expect("the child is running");
    let status = child.wait().await.unwrap();
    assert!(!status.success(), "killed: {status:?}");
}

/// Run a 4-step flow with `run-flow`, kill it after step 2 (step index 1) completed while
/// step 3 waits on the model, then `resume` it: check that nothing is redone or lost.
async fn kill_and_resume(store_url: &str) {
    let server = ScriptedLlm::start().await;
    let dir = Scratch::new("store-kill");
    let config = dir.write_config(&config_with(
        &server,
        &dir.workspace(),
        &[("store.url", &format!("\"{store_url}\""))],
    ));
    server.push_all([
        plan_reply(&STEPS),
        done("note one written"),
        done("note two written"),
        // Step 3's model call never comes back before the kill.
        done("never heard").delay(600_000),
    ]);
    let mut child = manus(&dir, &config, &["run-flow", TASK]).spawn().unwrap();
    let store = RunStore::open(&StoreUrl::parse(store_url).unwrap())
        .await
        .unwrap();
    let before = wait_for_run(&store, &mut child, "step 2 completed", |r| {
        step_completed(r, 1)
    })
    .await;
    let deadline = tokio::time::Instant::now() + GUARD;
    while server.request_count() < 4 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "step 3 never asked the model"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // While its process lives, the run is not anyone else's to resume.
    let busy = finish(manus(&dir, &config, &["resume", &before.id])).await;
    assert_eq!(busy.status.code(), Some(2));
    assert!(
        text(&busy.stderr).contains("is running in another process"),
        "{}",
        text(&busy.stderr)
    );
    kill_hard(&mut child).await;
    let pre_kill = server.requests();
    assert_eq!(pre_kill[3].step(), Some(2));

    let interrupted = store.interrupted().await.unwrap();
    assert_eq!(
        interrupted
            .iter()
            .map(|(id, _)| id.as_str())
            .collect::<Vec<_>>(),
        [before.id.as_str()],
        "the killed run is interrupted"
    );
    let listed = finish(manus(&dir, &config, &["runs", "list"])).await;
    assert!(
        text(&listed.stdout)
            .lines()
            .any(|l| l.starts_with(&before.id) && l.contains(" interrupted ")),
        "{}",
        text(&listed.stdout)
    );

    server.push_all([
        done("note three written"),
        done("note four written"),
        Reply::text("Four notes written."),
    ]);
    let out = finish(manus(&dir, &config, &["resume", &before.id, "--json"])).await;
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "resume failed:\n{stderr}");
    assert!(
        stderr.contains("step(s) 2 were running at the interruption and start over"),
        "{stderr}"
    );
    let outcome: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(outcome["status"], "completed", "{outcome:#}");
    assert_eq!(outcome["flow_id"], before.id.as_str());
    let statuses: Vec<&str> = outcome["plan"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["completed"; 4]);
    // Three calls before the kill were answered (plan, steps 1 and 2), three after; each
    // reports 15 tokens. The call cut by the kill reported nothing.
    assert_eq!(outcome["usage"]["calls"], 6, "{outcome:#}");
    assert_eq!(outcome["usage"]["prompt_tokens"], 60);
    assert_eq!(outcome["usage"]["completion_tokens"], 30);
    assert_eq!(outcome["plan"]["steps"][0]["notes"], "note one written");

    // Nothing done before the kill was asked again: no planning, no step 1 or 2.
    let after: Vec<Recorded> = server.requests().split_off(pre_kill.len());
    let steps: Vec<Option<usize>> = after.iter().map(|r| r.step()).collect();
    assert_eq!(
        steps,
        [Some(2), Some(3), None],
        "{:#?}",
        after
            .iter()
            .map(|r| r.first_user_text())
            .collect::<Vec<_>>()
    );
    assert!(
        after[2].first_user_text().contains("Write four notes"),
        "the last call is the summary"
    );
    assert!(
        !after
            .iter()
            .any(|r| r.tool_names().contains(&"planning".to_string()))
    );
    // Step 3 was asked exactly as before the kill: the same plan, statuses and notes.
    assert_eq!(after[0].first_user_text(), pre_kill[3].first_user_text());

    // The record: completed, every event once and in order, memories of every step.
    let run = store.get(&before.id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    let events = store.events(&before.id).await.unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (0..events.len() as u64).collect::<Vec<_>>());
    let finished: Vec<usize> = events
        .iter()
        .filter_map(|e| match &e.event {
            FlowEvent::StepFinished { step, .. } => Some(*step),
            _ => None,
        })
        .collect();
    assert_eq!(finished, [0, 1, 2, 3], "each step finished once");
    assert!(events.iter().any(|e| matches!(
        &e.event,
        FlowEvent::Resumed { rerun, .. } if rerun == &[2]
    )));
    let memories = store.memories(&before.id).await.unwrap();
    assert_eq!(
        memories
            .iter()
            .map(|m| (m.step, m.attempt))
            .collect::<Vec<_>>(),
        [(0, 1), (1, 1), (2, 1), (3, 1)]
    );
    assert!(
        memories[3]
            .messages
            .iter()
            .any(|m| m.text() == "note four written")
    );

    // Finished runs and unknown ids are refused, plainly.
    let again = finish(manus(&dir, &config, &["resume", &before.id])).await;
    assert_eq!(again.status.code(), Some(2));
    assert!(
        text(&again.stderr).contains("already ended (completed): there is nothing to resume"),
        "{}",
        text(&again.stderr)
    );
    let unknown = finish(manus(&dir, &config, &["resume", "no-such-run"])).await;
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        text(&unknown.stderr).contains("no run `no-such-run`"),
        "{}",
        text(&unknown.stderr)
    );
    let shown = finish(manus(&dir, &config, &["runs", "show", &before.id])).await;
    let shown = text(&shown.stdout);
    assert!(shown.contains("completed · 4/4 steps completed"), "{shown}");
    assert!(shown.contains("step 3 attempt 1 (manus)"), "{shown}");
    store.close().await;
}

#[tokio::test]
async fn sigkill_after_step_two_then_resume_on_sqlite() {
    let dir = Scratch::new("store-sqlite");
    let db = dir.path().join("kill.db");
    kill_and_resume(&format!("sqlite://{}", db.display())).await;
}

/// A graph plan killed with two steps in flight: `resume` starts both over, at once, and
/// never asks for the completed first step again; the join then sees both steps' notes.
#[tokio::test]
async fn sigkill_with_two_steps_in_flight_then_resume_runs_both_again() {
    let server = ScriptedLlm::start().await;
    let dir = Scratch::new("store-kill-graph");
    let db = dir.path().join("graph.db");
    let store_url = format!("sqlite://{}", db.display());
    let config = dir.write_config(&config_with(
        &server,
        &dir.workspace(),
        &[("store.url", &format!("\"{store_url}\""))],
    ));
    let job = |i: usize| format!("Your job now is step {i} only");
    server.push_all([
        Reply::tool(
            "planning",
            json!({"command": "create", "plan_id": "test-plan", "title": "Graph",
                "steps": ["[MANUS] Write note one",
                          {"text": "[MANUS] Write note two", "depends_on": [0]},
                          {"text": "[MANUS] Write note three", "depends_on": [0]},
                          {"text": "[MANUS] Join the notes", "depends_on": [1, 2]}]}),
        ),
        Reply::text("Notes joined."),
    ]);
    server.push_for(&job(0), [done("note one written")]);
    // Before the kill, steps 1 and 2 wait on the model; after it, they answer.
    for i in [1, 2] {
        server.push_for(
            &job(i),
            [
                done("never heard").delay(600_000),
                done(&format!("note {} written", i + 1)).delay(300),
            ],
        );
    }
    server.push_for(&job(3), [done("notes joined")]);
    let mut child = manus(&dir, &config, &["run-flow", TASK]).spawn().unwrap();
    let store = RunStore::open(&StoreUrl::parse(&store_url).unwrap())
        .await
        .unwrap();
    let before = wait_for_run(&store, &mut child, "steps 1 and 2 running", |r| {
        r.plan.as_ref().is_some_and(|p| {
            p.steps[0].status == StepStatus::Completed
                && p.steps[1].status == StepStatus::InProgress
                && p.steps[2].status == StepStatus::InProgress
        })
    })
    .await;
    let deadline = tokio::time::Instant::now() + GUARD;
    while server
        .requests()
        .iter()
        .filter(|r| r.step().is_some_and(|s| s > 0))
        .count()
        < 2
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "steps 1 and 2 never both asked the model"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    kill_hard(&mut child).await;
    let pre_kill = server.requests().len();

    let out = finish(manus(&dir, &config, &["resume", &before.id, "--json"])).await;
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "resume failed:\n{stderr}");
    assert!(
        stderr.contains("step(s) 1, 2 were running at the interruption and start over"),
        "{stderr}"
    );
    let outcome: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(outcome["status"], "completed", "{outcome:#}");
    let after: Vec<Recorded> = server.requests().split_off(pre_kill);
    let mut steps: Vec<Option<usize>> = after.iter().map(|r| r.step()).collect();
    steps[..2].sort();
    assert_eq!(
        steps,
        [Some(1), Some(2), Some(3), None],
        "step 0 is not asked again"
    );
    assert!(
        after[0].overlaps(&after[1]),
        "the two restarted steps ran at once"
    );
    let join = after[2].first_user_text();
    assert!(
        join.contains("- step 1: note 2 written") && join.contains("- step 2: note 3 written"),
        "{join}"
    );
    let events = store.events(&before.id).await.unwrap();
    assert!(events.iter().any(|e| matches!(
        &e.event,
        FlowEvent::Resumed { rerun, .. } if rerun == &[1, 2]
    )));
    store.close().await;
}

#[tokio::test]
async fn sigkill_after_step_two_then_resume_on_postgres() {
    if let Some(url) = postgres_database() {
        kill_and_resume(&url).await;
    }
}

#[tokio::test]
async fn an_unreachable_store_is_a_clear_error_at_start() {
    let server = ScriptedLlm::start().await;
    let dir = Scratch::new("store-down");
    let config = dir.write_config(&config_with(
        &server,
        &dir.workspace(),
        &[("store.url", "\"postgres://manus:secret@127.0.0.1:1/runs\"")],
    ));
    let out = finish(manus(&dir, &config, &["run-flow", TASK])).await;
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("run store postgres://manus@127.0.0.1/runs: cannot connect"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("secret"),
        "no password in messages: {stderr}"
    );
    assert_eq!(server.request_count(), 0, "no flow started");
}

/// The store's thread runs in the idle scheduling class, so flows get the CPU first when
/// both want it.
#[tokio::test]
async fn the_store_thread_yields_the_cpu_to_flows() {
    let dir = Scratch::new("store-nice");
    let store = RunStore::open(&StoreUrl::Sqlite(dir.workspace().join("runs.db")))
        .await
        .unwrap();
    support::threads::assert_in_idle_class("run-store");
    store.close().await;
}

/// Record a full run, replay it and kill the replay while step 3 runs a tool, then resume
/// the replay: it picks the cassette up at step 3 and ends as the recorded run did.
#[tokio::test]
async fn a_replayed_run_resumes_reproducibly_from_its_cassette() {
    let server = ScriptedLlm::start().await;
    let dir = Scratch::new("store-replay");
    std::fs::create_dir_all(dir.workspace()).unwrap();
    let gate = dir.workspace().join("go");
    std::fs::write(&gate, "").unwrap();
    let wait_for_gate = json!({"command": "while [ ! -e go ]; do sleep 0.1; done; echo through"});
    server.push_all([
        plan_reply(&STEPS),
        done("note one written"),
        done("note two written"),
        Reply::tool("bash", wait_for_gate),
        done("note three written after the gate"),
        done("note four written"),
        Reply::text("Four notes written, one waited for its gate."),
    ]);
    let recording = dir.write_config(&config_with(&server, &dir.workspace(), &[]));
    let cassette = dir.path().join("run.jsonl");
    let cassette_arg = cassette.display().to_string();
    let recorded = finish(manus(
        &dir,
        &recording,
        &["run-flow", TASK, "--json", "--record", &cassette_arg],
    ))
    .await;
    assert!(recorded.status.success(), "{}", text(&recorded.stderr));
    let recorded: Value = serde_json::from_slice(&recorded.stdout).unwrap();

    // The replay, on a store of its own, stopped at the gate and killed there.
    std::fs::remove_file(&gate).unwrap();
    let db = dir.path().join("replay.db");
    let replay = dir.write_config(&config_with(
        &server,
        &dir.workspace(),
        &[
            ("llm.api_type", "\"replay\""),
            ("llm.cassette", &format!("\"{cassette_arg}\"")),
            ("store.url", &format!("\"sqlite://{}\"", db.display())),
        ],
    ));
    let requests_before = server.request_count();
    let mut child = manus(&dir, &replay, &["run-flow", TASK]).spawn().unwrap();
    let store = RunStore::open(&StoreUrl::Sqlite(db.clone())).await.unwrap();
    let run = wait_for_run(&store, &mut child, "step 2 completed", |r| {
        step_completed(r, 1)
    })
    .await;
    let deadline = tokio::time::Instant::now() + GUARD;
    while !store
        .events(&run.id)
        .await
        .unwrap()
        .iter()
        .any(|e| matches!(&e.event, FlowEvent::ToolCalled { step: 2, tool, .. } if tool == "bash"))
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "step 3 never called bash"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    kill_hard(&mut child).await;

    std::fs::write(&gate, "").unwrap();
    let out = finish(manus(&dir, &replay, &["resume", &run.id, "--json"])).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let resumed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        server.request_count(),
        requests_before,
        "replay asks no model"
    );
    assert_eq!(resumed["status"], "completed");
    assert_eq!(resumed["summary"], recorded["summary"]);
    for i in 0..4 {
        assert_eq!(
            resumed["plan"]["steps"][i]["notes"], recorded["plan"]["steps"][i]["notes"],
            "step {i}"
        );
    }
    store.close().await;
}

/// The processes, other than this one, whose command line names a path in `dir` or whose
/// working directory is in it: a `manus-rt` run there and all it started. Zombies (already
/// ended, not yet reaped) have neither, and are not counted.
fn processes_in(dir: &Path) -> Vec<(i32, String)> {
    let named = format!("{}/", dir.display());
    let me = std::process::id() as i32;
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me)
        .filter_map(|pid| {
            let line = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let line = String::from_utf8_lossy(&line).replace('\0', " ");
            let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok();
            (line.contains(&named) || cwd.is_some_and(|c| c.starts_with(dir)))
                .then_some((pid, line))
        })
        .collect()
}

/// Issue 37: `run-flow` SIGKILLed while a `bash` call and a `python_execute` call run (two
/// steps of a graph at once), each with a process left running in the background, leaves
/// nothing behind: within a few seconds no process runs in the test's folder. The tools'
/// watchers hold the read end of a pipe only the runtime writes to, and end their trees
/// when it hangs up.
#[tokio::test]
async fn a_killed_run_leaves_no_tool_process_behind() {
    let server = ScriptedLlm::start().await;
    let dir = Scratch::new("store-kill-tools");
    let ws = dir.workspace();
    std::fs::create_dir_all(&ws).unwrap();
    let config = dir.write_config(&config_with(&server, &ws, &[]));
    server.push_all([Reply::tool(
        "planning",
        json!({"command": "create", "plan_id": "test-plan", "title": "Two tools at once",
            // A graph whose steps need nothing: both run at once.
            "steps": [{"text": "[MANUS] Run the shell job", "depends_on": []},
                      {"text": "[MANUS] Run the Python job", "depends_on": []}]}),
    )]);
    server.push_for(
        &support::scenario::job(0),
        [Reply::tool(
            "bash",
            json!({"command": "sleep 600 & touch bash-started; sleep 600"}),
        )],
    );
    server.push_for(
        &support::scenario::job(1),
        [Reply::tool(
            "python_execute",
            json!({"code": "import pathlib, subprocess, time\n\
                subprocess.Popen(['sleep', '600'])\n\
                pathlib.Path('python-started').touch()\n\
                time.sleep(600)\n"}),
        )],
    );
    let mut child = manus(&dir, &config, &["run-flow", TASK]).spawn().unwrap();
    let deadline = tokio::time::Instant::now() + GUARD;
    while !(ws.join("bash-started").exists() && ws.join("python-started").exists()) {
        if let Some(status) = child.try_wait().unwrap() {
            let mut stderr = String::new();
            if let Some(mut pipe) = child.stderr.take() {
                let _ = pipe.read_to_string(&mut stderr).await;
            }
            panic!("manus-rt ended ({status}) before both tools ran:\n{stderr}");
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the tools never both started: {:?}",
            server.requests().len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let running = processes_in(dir.path());
    let sleeping = running.iter().filter(|(_, l)| l == "sleep 600 ").count();
    assert_eq!(
        sleeping, 3,
        "a sleep per tool and one in the background: {running:#?}"
    );
    // The agent's kept Python interpreter runs the cell.
    assert!(
        running
            .iter()
            .any(|(_, l)| l.contains("manus-rt's cell runner")),
        "{running:#?}"
    );

    kill_hard(&mut child).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut left = processes_in(dir.path());
    while !left.is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        left = processes_in(dir.path());
    }
    for (pid, _) in &left {
        // SIGKILL, to each leftover's pid, so a failure leaves nothing behind either.
        // SAFETY: kill takes two integers.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    assert!(left.is_empty(), "left running after the kill: {left:#?}");
}

/// A runtime on the scripted server, recording in the scratch directory's store.
async fn runtime(server: &ScriptedLlm, dir: &Scratch) -> Runtime {
    let text = config_with(server, &dir.workspace(), &[]);
    let config = Config::from_text(&text, "test.toml", None).unwrap();
    Runtime::builder().config(config).start().await.unwrap()
}

/// What `manus-rt serve` does on start-up, through the library: a runtime shut down
/// mid-flow leaves the run interrupted; the next runtime finds it and resumes it.
#[tokio::test]
async fn a_runtime_shut_down_mid_flow_leaves_a_run_the_next_one_resumes() {
    let server = ScriptedLlm::start().await;
    let dir = Scratch::new("store-restart");
    server.push_all([
        plan_reply(&STEPS[..2]),
        done("note one written"),
        done("cut short").delay(600_000),
    ]);
    let first = runtime(&server, &dir).await;
    let mut flow = first.submit(TASK, SubmitOptions::default()).await.unwrap();
    let id = flow.id.clone();
    loop {
        match tokio::time::timeout(GUARD, flow.next_event())
            .await
            .unwrap()
        {
            Some(FlowEvent::StepStarted { step: 1, .. }) => break,
            Some(FlowEvent::FlowFinished { outcome }) => panic!("finished early: {outcome:?}"),
            _ => {}
        }
    }
    while server.request_count() < 3 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.shutdown().await;

    server.push_all([done("note two written"), Reply::text("Two notes.")]);
    let second = runtime(&server, &dir).await;
    assert_eq!(second.interrupted_runs().await.unwrap(), vec![id.clone()]);
    let outcome = second.resume(&id).await.unwrap().outcome().await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{outcome:?}");
    assert_eq!(outcome.plan.steps[1].notes, "note two written");
    assert!(second.interrupted_runs().await.unwrap().is_empty());
    assert!(matches!(
        second.resume(&id).await,
        Err(RuntimeError::RunEnded { .. })
    ));
    assert!(matches!(
        second.resume("nope").await,
        Err(RuntimeError::UnknownRun(_))
    ));
    second.shutdown().await;
}

/// A run interrupted while the planner waited on the model is planned again on resume, and
/// says so.
#[tokio::test]
async fn a_run_interrupted_while_planning_plans_again() {
    let server = ScriptedLlm::start().await;
    let dir = Scratch::new("store-planning");
    server.push(plan_reply(&STEPS[..1]).delay(600_000));
    let first = runtime(&server, &dir).await;
    let flow = first.submit(TASK, SubmitOptions::default()).await.unwrap();
    while server.request_count() < 1 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.shutdown().await;

    server.push_all([
        plan_reply(&STEPS[..1]),
        done("note one written"),
        Reply::text("One note."),
    ]);
    let second = runtime(&server, &dir).await;
    let mut resumed = second.resume(&flow.id).await.unwrap();
    let mut saw = vec![];
    while let Some(e) = tokio::time::timeout(GUARD, resumed.next_event())
        .await
        .unwrap()
    {
        match e {
            FlowEvent::Resumed { plan: None, .. } => saw.push("resumed while planning"),
            FlowEvent::PlanCreated { .. } => saw.push("planned"),
            FlowEvent::FlowFinished { outcome } => {
                assert_eq!(outcome.status, FlowStatus::Completed, "{outcome:?}");
                break;
            }
            _ => {}
        }
    }
    assert_eq!(saw, ["resumed while planning", "planned"]);
    assert_eq!(server.request_count(), 4, "the planning call is made again");
    second.shutdown().await;
}

/// Issue 24, item 6: `Runtime::submit` returns once the run's row is committed: another
/// connection to the same database finds each run the moment its submit returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submitted_run_is_committed_before_submit_returns() {
    let server = ScriptedLlm::start().await;
    server.set_fallback(Some(plan_reply(&["[MANUS] Wait"]).delay(600_000)));
    let dir = Scratch::new("store-durable");
    let rt = runtime(&server, &dir).await;
    let reader = RunStore::open(&StoreUrl::Sqlite(dir.workspace().with_file_name("runs.db")))
        .await
        .unwrap();
    for n in 0..5 {
        let flow = rt
            .submit(&format!("Durable task {n}"), SubmitOptions::default())
            .await
            .unwrap();
        let row = reader.get(&flow.id).await.unwrap();
        assert_eq!(
            row.map(|r| (r.task, r.status)),
            Some((format!("Durable task {n}"), RunStatus::Running)),
            "run {n} is committed when submit returns"
        );
    }
    reader.close().await;
    rt.shutdown().await;
}

/// Issue 24, item 8: a runtime started with `[store] keep_runs` prunes the ended runs past
/// it in the background, and leaves the run an earlier runtime left interrupted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_prunes_ended_runs_and_keeps_the_interrupted_one() {
    let server = ScriptedLlm::start().await;
    let dir = Scratch::new("store-retention");
    let first = runtime(&server, &dir).await;
    let single = SubmitOptions {
        mode: manus_rt::FlowMode::Single,
        ..Default::default()
    };
    let mut ended = vec![];
    for n in 0..3 {
        server.push(done(&format!("note {n} written")));
        let flow = first
            .submit(&format!("Write note {n}"), single.clone())
            .await
            .unwrap();
        let outcome = tokio::time::timeout(GUARD, flow.outcome()).await.unwrap();
        assert_eq!(outcome.status, FlowStatus::Completed, "{outcome:?}");
        ended.push(outcome.flow_id);
    }
    server.push(done("cut short").delay(600_000));
    let cut = first.submit("Write a long note", single).await.unwrap();
    while server.request_count() < 4 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cut_id = cut.id.clone();
    first.shutdown().await;

    let text = config_with(&server, &dir.workspace(), &[("store.keep_runs", "1")]);
    let config = Config::from_text(&text, "test.toml", None).unwrap();
    let second = Runtime::builder().config(config).start().await.unwrap();
    let store = second.store().unwrap();
    let deadline = tokio::time::Instant::now() + GUARD;
    let left = loop {
        let left: Vec<String> = store
            .list(100)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect();
        if left.len() <= 2 || tokio::time::Instant::now() > deadline {
            break left;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        left,
        [cut_id.clone(), ended[2].clone()],
        "the interrupted run and the newest ended one"
    );
    assert!(store.events(&ended[0]).await.unwrap().is_empty());
    assert_eq!(second.interrupted_runs().await.unwrap(), [cut_id]);
    second.shutdown().await;
}

/// `manus-rt runs prune`: with no bound anywhere it refuses (exit 2) and deletes nothing;
/// with `--keep-runs 1` it deletes the older ended runs, names them with `--json`, and keeps
/// the newest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_prune_deletes_the_older_ended_runs() {
    let server = ScriptedLlm::start().await;
    let dir = Scratch::new("store-prune-cli");
    let rt = runtime(&server, &dir).await;
    let single = SubmitOptions {
        mode: manus_rt::FlowMode::Single,
        ..Default::default()
    };
    let mut ended = vec![];
    for n in 0..3 {
        server.push(done(&format!("note {n} written")));
        let flow = rt
            .submit(&format!("Write note {n}"), single.clone())
            .await
            .unwrap();
        let outcome = tokio::time::timeout(GUARD, flow.outcome()).await.unwrap();
        assert_eq!(outcome.status, FlowStatus::Completed, "{outcome:?}");
        ended.push(outcome.flow_id);
    }
    rt.shutdown().await;
    let config = dir.path().join("config.toml");
    std::fs::write(&config, config_with(&server, &dir.workspace(), &[])).unwrap();

    let out = finish(manus(&dir, &config, &["runs", "prune"])).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("nothing to prune"),
        "{}",
        text(&out.stderr)
    );

    let out = finish(manus(
        &dir,
        &config,
        &["runs", "prune", "--keep-runs", "1", "--json"],
    ))
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut pruned: Vec<String> = serde_json::from_slice(&out.stdout).unwrap();
    pruned.sort();
    let mut older = ended[..2].to_vec();
    older.sort();
    assert_eq!(pruned, older);

    let out = finish(manus(&dir, &config, &["runs", "list", "--json"])).await;
    let left: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = left.iter().filter_map(|r| r["id"].as_str()).collect();
    assert_eq!(ids, [ended[2].as_str()]);

    let out = finish(manus(&dir, &config, &["runs", "prune", "--keep-runs", "0"])).await;
    assert_eq!(
        out.status.code(),
        Some(2),
        "clap refuses 0: {}",
        text(&out.stderr)
    );
}

/// Issue 37, items 3 and 6, against a PostgreSQL server of the test's own: flows that
/// finish while the store is down (stopped outright) end `completed` in it by themselves
/// once it is back; with the server frozen (SIGSTOP), readiness says 503 within seconds
/// and a request that reads the store answers 503 within its bound, while liveness stays
/// 200; thawed, the service is ready again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flows_converge_after_a_store_outage_and_a_frozen_store_bounds_requests() {
    use support::cluster::{PrivatePostgres, any_flow};
    use support::service::Service;
    if support::scenario::postgres_database().is_none() {
        return; // no PostgreSQL on this machine (test.sh installs one)
    }
    // The PostgreSQL client blocks: off the runtime's own threads.
    let mut pg = tokio::task::block_in_place(PrivatePostgres::start);
    let server = ScriptedLlm::start().await;
    server.set_recording(false);
    server.set_responder(Some(any_flow(1.5)));
    let dir = Scratch::new("store-outage");
    let url = format!("\"{}\"", pg.url);
    let text = support::scenario::config_with(&server, &dir.workspace(), &[("store.url", &url)]);
    let svc = Service::start(&dir, &text).await;
    let mut ids = vec![];
    for i in 0..3 {
        ids.push(svc.submit(&format!("outage flow {i}")).await);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Down for longer than the flows take to finish.
    tokio::task::block_in_place(|| pg.stop());
    let (status, _) = svc.get("/readyz").await;
    assert_eq!(status, 503, "not ready while the store is down");
    tokio::time::sleep(Duration::from_secs(8)).await;
    tokio::task::block_in_place(|| pg.restart());
    let statuses = || {
        let mut db = postgres::Client::connect(&pg.url, postgres::NoTls).unwrap();
        ids.iter()
            .map(|id| {
                db.query_one("SELECT status FROM manus_runs WHERE id = $1", &[id])
                    .map(|r| r.get::<_, String>(0))
                    .unwrap_or_default()
            })
            .collect::<Vec<_>>()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let converged = loop {
        let now = tokio::task::block_in_place(statuses);
        if now.iter().all(|s| s == "completed") {
            break now;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the runs never converged after the outage: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(converged.len(), 3);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = svc.get("/readyz").await;
        if status == 200 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not ready after the outage: {body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    pg.signal_all("-STOP");
    let asked = std::time::Instant::now();
    let (status, body) = svc.get("/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert!(asked.elapsed() < Duration::from_secs(10));
    let (status, _) = svc.get("/healthz").await;
    assert_eq!(status, 200, "liveness is not readiness");
    // A submission is acknowledged only once its run is committed: refused, in bounded time.
    let submitted = svc
        .http
        .post(svc.url("/v1/flows"))
        .json(&serde_json::json!({"task": "while frozen"}))
        .send();
    let r = tokio::time::timeout(Duration::from_secs(40), submitted)
        .await
        .expect("a request on a frozen store is answered, not left hanging")
        .unwrap();
    assert_eq!(r.status(), 503, "{}", r.text().await.unwrap());
    pg.signal_all("-CONT");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while svc.get("/readyz").await.0 != 200 {
        assert!(std::time::Instant::now() < deadline, "never ready again");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
