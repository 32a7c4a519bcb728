//! Plans as graphs, in-process against the scripted model server: independent steps' model
//! calls overlap in time (read from the server's own request log), a step that needs others
//! starts only after they completed and sees their notes, a failing step leads to a revised
//! plan whose new steps finish the flow (completed steps never asked again), a step whose
//! dependency failed is blocked, a bad dependency graph goes back to the model once and then
//! falls back to running in order, `max_parallel_steps` bounds a flow, and cancelling stops
//! every running step.

use crate::support;

use std::time::Duration;

use manus_rt::engine::plan::StepStatus;
use manus_rt::{Config, FlowEvent, FlowHandle, FlowOutcome, FlowStatus, Runtime, SubmitOptions};
use serde_json::{Value, json};
use support::llm_server::{Recorded, Reply, ScriptedLlm};
use support::scenario::{Scratch, config_with, done, give_up, job, requests_of};

/// Generous bound so a broken flow fails the test instead of hanging it.
const GUARD: Duration = Duration::from_secs(60);

/// How long each step's model call takes: long enough that calls made one after another
/// cannot overlap by accident of scheduling.
const THINK_MS: u64 = 400;

async fn start(server: &ScriptedLlm, dir: &Scratch, overrides: &[(&str, &str)]) -> Runtime {
    let text = config_with(server, &dir.workspace(), overrides);
    let config = Config::from_text(&text, "test", None).unwrap_or_else(|e| panic!("{e}\n{text}"));
    Runtime::builder().config(config).start().await.unwrap()
}

async fn drive(mut flow: FlowHandle) -> (Vec<FlowEvent>, FlowOutcome) {
    tokio::time::timeout(GUARD, async move {
        let mut events = vec![];
        while let Some(e) = flow.next_event().await {
            events.push(e);
        }
        (events, flow.outcome().await)
    })
    .await
    .expect("the flow ended within the guard time")
}

/// A `planning` create call with these steps (strings or `{text, depends_on}` objects).
fn graph_plan(steps: Value) -> Reply {
    Reply::tool(
        "planning",
        json!({"command": "create", "plan_id": "test-plan", "title": "Graph", "steps": steps}),
    )
}

/// The planner's requests that asked for a revision.
fn revisions(all: &[Recorded]) -> Vec<Recorded> {
    all.iter()
        .filter(|r| r.first_user_text().contains("Revise the plan"))
        .cloned()
        .collect()
}

fn statuses(o: &FlowOutcome) -> Vec<StepStatus> {
    o.plan.steps.iter().map(|s| s.status).collect()
}

const FAN_OUT: [&str; 5] = [
    "[MANUS] set up the folder",
    "[MANUS] read source A",
    "[MANUS] read source B",
    "[DATA_ANALYSIS] read source C",
    "[MANUS] compare the three",
];

fn fan_out_plan() -> Reply {
    graph_plan(json!([
        FAN_OUT[0],
        {"text": FAN_OUT[1], "depends_on": [0]},
        {"text": FAN_OUT[2], "depends_on": ["0"]},
        {"text": FAN_OUT[3], "depends_on": [0]},
        {"text": FAN_OUT[4], "depends_on": [1, 2, 3]},
    ]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn independent_steps_run_at_once_and_a_join_waits_for_them() {
    let server = ScriptedLlm::start().await;
    server.push_all([fan_out_plan(), Reply::text("compared")]);
    for i in 0..5 {
        server.push_for(&job(i), [done(&format!("finding {i}")).delay(THINK_MS)]);
    }
    let dir = Scratch::new("graph-fan-out");
    let rt = start(&server, &dir, &[]).await;
    let flow = rt.submit("compare three sources", SubmitOptions::default());
    let (events, outcome) = drive(flow.await.unwrap()).await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    assert!(
        statuses(&outcome)
            .iter()
            .all(|s| *s == StepStatus::Completed)
    );

    let all = server.requests();
    let one = |i| {
        let rs = requests_of(&all, i);
        assert_eq!(rs.len(), 1, "step {i} was asked once");
        rs.into_iter().next().unwrap()
    };
    let steps: Vec<Recorded> = (0..5).map(one).collect();
    // The three independent steps were with the model at the same time, pair by pair.
    for (a, b) in [(1, 2), (1, 3), (2, 3)] {
        assert!(
            steps[a].overlaps(&steps[b]),
            "steps {a} and {b} should overlap in time"
        );
    }
    // Each began only after what it needs was answered.
    for i in 1..4 {
        assert!(
            steps[i].arrived > steps[0].answered_at(),
            "step {i} began before step 0 ended"
        );
    }
    for i in 1..4 {
        assert!(
            steps[4].arrived > steps[i].answered_at(),
            "the join began before step {i} ended"
        );
    }
    // The join saw what the three found.
    let prompt = steps[4].first_user_text();
    assert!(
        prompt.contains("builds on what these steps found"),
        "{prompt}"
    );
    for i in 1..4 {
        assert!(
            prompt.contains(&format!("- step {i}: finding {i}")),
            "{prompt}"
        );
    }
    // The events show several steps running at once, each named.
    let mut running = 0usize;
    let mut most = 0usize;
    for e in &events {
        match e {
            FlowEvent::StepStarted { .. } => running += 1,
            FlowEvent::StepFinished { .. } => running -= 1,
            _ => {}
        }
        most = most.max(running);
    }
    assert_eq!(most, 3, "three steps ran at once");
    let calls: Vec<Option<usize>> = events
        .iter()
        .filter_map(|e| match e {
            FlowEvent::LlmCalled { step, .. } => Some(*step),
            _ => None,
        })
        .collect();
    assert_eq!(
        calls.iter().filter(|s| s.is_none()).count(),
        2,
        "plan and summary"
    );
    assert_eq!(
        calls.iter().filter(|s| s.is_some()).count(),
        5,
        "one per step"
    );
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_parallel_steps_bounds_a_flow() {
    let server = ScriptedLlm::start().await;
    server.push_all([fan_out_plan(), Reply::text("compared")]);
    for i in 0..5 {
        server.push_for(&job(i), [done(&format!("finding {i}")).delay(THINK_MS)]);
    }
    let dir = Scratch::new("graph-bounded");
    let rt = start(&server, &dir, &[("flow.max_parallel_steps", "1")]).await;
    let flow = rt.submit("compare three sources", SubmitOptions::default());
    let (_, outcome) = drive(flow.await.unwrap()).await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    let all = server.requests();
    let steps: Vec<Recorded> = (0..5).map(|i| requests_of(&all, i).remove(0)).collect();
    for a in 0..5 {
        for b in a + 1..5 {
            assert!(
                !steps[a].overlaps(&steps[b]),
                "steps {a} and {b} overlapped"
            );
        }
    }
    rt.shutdown().await;
}

/// Step 1 fails for good; step 2, which needs it, is blocked; the planner asks for a
/// revision, showing what failed and why; the new steps run and the flow completes. Step 0,
/// completed before, is never asked again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_step_leads_to_a_revised_plan_whose_steps_finish_the_flow() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        graph_plan(json!([
            "[MANUS] make the folder",
            {"text": "[MANUS] download the table from the primary site", "depends_on": [0]},
            {"text": "[MANUS] chart the table", "depends_on": [1]},
        ])),
        // The revision: replace steps 1 and 2 with a mirror download and the chart.
        Reply::tool(
            "planning",
            json!({"command": "update", "plan_id": "test-plan", "steps": [
                {"text": "[MANUS] download the table from the mirror", "depends_on": [0]},
                {"text": "[MANUS] chart the mirrored table", "depends_on": [3]},
            ]}),
        ),
        Reply::text("charted from the mirror"),
    ]);
    server.push_for(&job(0), [done("folder made")]);
    server.push_for(
        &job(1),
        [give_up("the primary site answers 503 Service Unavailable")],
    );
    server.push_for(&job(3), [done("mirror table saved")]);
    server.push_for(&job(4), [done("chart saved")]);
    let dir = Scratch::new("graph-replan");
    let rt = start(
        &server,
        &dir,
        &[
            ("flow.on_step_failure", "\"replan\""),
            ("flow.max_step_retries", "0"),
        ],
    )
    .await;
    let flow = rt.submit("chart the table", SubmitOptions::default());
    let (events, outcome) = drive(flow.await.unwrap()).await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    assert_eq!(outcome.plan.revision, 1);
    assert_eq!(
        statuses(&outcome),
        [
            StepStatus::Completed,
            StepStatus::Failed,
            StepStatus::Blocked,
            StepStatus::Completed,
            StepStatus::Completed
        ]
    );
    let replaced: Vec<Option<u32>> = outcome.plan.steps.iter().map(|s| s.replaced_in).collect();
    assert_eq!(replaced, [None, Some(1), Some(1), None, None]);

    let all = server.requests();
    assert_eq!(
        requests_of(&all, 0).len(),
        1,
        "completed step 0 never ran again"
    );
    assert_eq!(requests_of(&all, 1).len(), 1);
    assert!(requests_of(&all, 2).is_empty(), "blocked step 2 never ran");
    // The revision request showed what was done, what failed and why.
    let asked = revisions(&all);
    assert_eq!(asked.len(), 1);
    let text = asked[0].first_user_text();
    assert!(
        text.contains("step 1 ended failed: the primary site answers 503"),
        "{text}"
    );
    assert!(text.contains("0. [✓] [MANUS] make the folder"), "{text}");
    assert!(text.contains("numbered from 3"), "{text}");
    // The mirror step saw step 0's notes; the chart step the mirror's.
    let mirror = requests_of(&all, 3)[0].first_user_text();
    assert!(mirror.contains("- step 0: folder made"), "{mirror}");
    assert!(mirror.contains("(replaced in revision 1)"), "{mirror}");

    let blocked: Vec<(usize, usize)> = events
        .iter()
        .filter_map(|e| match e {
            FlowEvent::StepBlocked { step, needs, .. } => Some((*step, *needs)),
            _ => None,
        })
        .collect();
    assert_eq!(blocked, [(2, 1)]);
    let revised = events
        .iter()
        .find_map(|e| match e {
            FlowEvent::PlanRevised {
                previous,
                plan,
                reason,
            } => Some((previous.clone(), plan.clone(), reason.clone())),
            _ => None,
        })
        .expect("a PlanRevised event");
    assert_eq!(revised.0.steps.len(), 3);
    assert_eq!(revised.0.revision, 0);
    assert_eq!(revised.1.steps.len(), 5);
    assert!(revised.2.contains("503"), "{}", revised.2);
    rt.shutdown().await;

    // The run store keeps both versions, and `runs show` lists the revision.
    let config = dir.write_config(&config_with(&server, &dir.workspace(), &[]));
    let shown = std::process::Command::new(env!("CARGO_BIN_EXE_manus-rt"))
        .arg("--config")
        .arg(&config)
        .args(["runs", "show", &outcome.flow_id])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("completed · 3/3 steps completed"), "{shown}");
    assert!(
        shown.contains("revision 1: step(s) 1, 2 replaced by 3, 4 — after: step 1 ended failed"),
        "{shown}"
    );
    assert!(
        shown.contains(
            "1. [✗] [MANUS] download the table from the primary site (replaced in revision 1)"
        ),
        "{shown}"
    );
}

/// With no revisions left, a failed step ends the flow `failed`, saying so; a step that
/// needed it is blocked, and an independent one still runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_last_revision_the_flow_fails_honestly() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        graph_plan(json!([
            {"text": "[MANUS] fetch", "depends_on": []},
            {"text": "[MANUS] use it", "depends_on": [0]},
            {"text": "[MANUS] unrelated", "depends_on": []},
        ])),
        Reply::text("partly done"),
    ]);
    server.push_for(&job(0), [give_up("not found")]);
    server.push_for(&job(2), [done("unrelated done")]);
    let dir = Scratch::new("graph-no-replans");
    let rt = start(
        &server,
        &dir,
        &[
            ("flow.on_step_failure", "\"replan\""),
            ("flow.max_replans", "0"),
            ("flow.max_step_retries", "0"),
        ],
    )
    .await;
    let flow = rt.submit("fetch and use", SubmitOptions::default());
    let (_, outcome) = drive(flow.await.unwrap()).await;
    assert_eq!(outcome.status, FlowStatus::Failed);
    assert!(
        outcome.reason.contains("step 0 failed, step 1 blocked")
            && outcome.reason.contains("0 of 0 revisions"),
        "{}",
        outcome.reason
    );
    assert_eq!(
        statuses(&outcome),
        [
            StepStatus::Failed,
            StepStatus::Blocked,
            StepStatus::Completed
        ]
    );
    assert!(revisions(&server.requests()).is_empty());
    rt.shutdown().await;
}

/// A plan whose steps need each other in a cycle goes back to the model with the reason;
/// the corrected plan runs as a graph.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cyclic_plan_goes_back_to_the_model_once() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        graph_plan(json!([
            {"text": "[MANUS] a", "depends_on": [1]},
            {"text": "[MANUS] b", "depends_on": [0]},
        ])),
        graph_plan(json!([
            {"text": "[MANUS] a", "depends_on": []},
            {"text": "[MANUS] b", "depends_on": []},
        ])),
        Reply::text("both done"),
    ]);
    server.push_for(&job(0), [done("a done").delay(THINK_MS)]);
    server.push_for(&job(1), [done("b done").delay(THINK_MS)]);
    let dir = Scratch::new("graph-cycle");
    let rt = start(&server, &dir, &[]).await;
    let flow = rt.submit("do a and b", SubmitOptions::default());
    let (_, outcome) = drive(flow.await.unwrap()).await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    let all = server.requests();
    // The second planning request carries the refusal as the planning call's result.
    let second = &all[1];
    let tool_text = support::scenario::last_tool_text(second);
    assert!(
        tool_text.contains("refused") && tool_text.contains("cycle"),
        "{tool_text}"
    );
    assert!(outcome.plan.is_graph());
    let (a, b) = (&requests_of(&all, 0)[0], &requests_of(&all, 1)[0]);
    assert!(
        a.overlaps(b),
        "the corrected plan's independent steps ran at once"
    );
    rt.shutdown().await;
}

/// Refused twice (a step that needs itself, then one that needs a step that does not
/// exist), the plan's steps run one at a time, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_refused_twice_runs_in_order() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        graph_plan(json!([
            {"text": "[MANUS] a", "depends_on": [0]},
            {"text": "[MANUS] b", "depends_on": []},
        ])),
        graph_plan(json!([
            {"text": "[MANUS] a", "depends_on": []},
            {"text": "[MANUS] b", "depends_on": [7]},
        ])),
        Reply::text("both done"),
    ]);
    server.push_for(&job(0), [done("a done").delay(THINK_MS)]);
    server.push_for(&job(1), [done("b done").delay(THINK_MS)]);
    let dir = Scratch::new("graph-fallback");
    let rt = start(&server, &dir, &[]).await;
    let flow = rt.submit("do a and b", SubmitOptions::default());
    let (_, outcome) = drive(flow.await.unwrap()).await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    assert!(
        !outcome.plan.is_graph(),
        "the fallback names no dependencies"
    );
    let all = server.requests();
    assert!(
        support::scenario::last_tool_text(&all[1]).contains("depends on itself"),
        "{}",
        support::scenario::last_tool_text(&all[1])
    );
    let planning_calls = all
        .iter()
        .filter(|r| r.first_user_text().starts_with("Task:"))
        .count();
    assert_eq!(planning_calls, 3, "two planning calls and the summary");
    let (a, b) = (&requests_of(&all, 0)[0], &requests_of(&all, 1)[0]);
    assert!(
        !a.overlaps(b) && b.arrived > a.answered_at(),
        "in order, one at a time"
    );
    rt.shutdown().await;
}

/// Cancelling a flow with two steps in flight stops both at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_every_running_step() {
    let server = ScriptedLlm::start().await;
    server.push_all([graph_plan(json!([
        {"text": "[MANUS] slow one", "depends_on": []},
        {"text": "[MANUS] slow two", "depends_on": []},
    ]))]);
    let never = 2 * GUARD.as_millis() as u64;
    server.push_for(&job(0), [done("never").delay(never)]);
    server.push_for(&job(1), [done("never").delay(never)]);
    let dir = Scratch::new("graph-cancel");
    let rt = start(&server, &dir, &[]).await;
    let mut flow = rt
        .submit("two slow things", SubmitOptions::default())
        .await
        .unwrap();
    let mut started = 0;
    while started < 2 {
        match tokio::time::timeout(GUARD, flow.next_event())
            .await
            .unwrap()
        {
            Some(FlowEvent::StepStarted { .. }) => started += 1,
            Some(_) => {}
            None => panic!("the flow ended before both steps started"),
        }
    }
    flow.cancel();
    let (_, outcome) = drive(flow).await;
    assert_eq!(outcome.status, FlowStatus::Cancelled);
    for s in &outcome.plan.steps {
        assert_eq!(s.status, StepStatus::Failed);
        assert!(s.notes.starts_with("stopped:"), "{}", s.notes);
    }
    rt.shutdown().await;
}

/// With `review_after_each_step`, the planner shows the model the plan after every
/// completed step: it may keep it (no call) or replace the steps not yet started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_after_each_step_may_keep_or_change_the_rest() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        graph_plan(json!(["[MANUS] look", "[MANUS] measure", "[MANUS] guess"])),
        Reply::text("KEEP"),
        Reply::tool(
            "planning",
            json!({"command": "update", "plan_id": "test-plan",
                   "steps": ["[MANUS] compute from the measurement"]}),
        ),
        Reply::text("computed"),
    ]);
    server.push_for(&job(0), [done("it is a box")]);
    server.push_for(&job(1), [done("the box is 3 m wide")]);
    server.push_for(&job(3), [done("area 9 m²")]);
    let dir = Scratch::new("graph-review");
    let rt = start(&server, &dir, &[("flow.review_after_each_step", "true")]).await;
    let flow = rt.submit("size the box", SubmitOptions::default());
    let (_, outcome) = drive(flow.await.unwrap()).await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    assert_eq!(outcome.plan.revision, 1);
    assert_eq!(outcome.plan.steps[2].replaced_in, Some(1));
    assert_eq!(outcome.plan.steps[2].status, StepStatus::NotStarted);
    assert_eq!(outcome.plan.steps[3].status, StepStatus::Completed);
    let all = server.requests();
    let reviews: Vec<String> = all
        .iter()
        .map(|r| r.first_user_text())
        .filter(|t| t.contains("answer with the one word KEEP"))
        .collect();
    assert_eq!(reviews.len(), 2, "after steps 0 and 1; none after the last");
    assert!(
        reviews[0].contains("step 0 completed: it is a box"),
        "{}",
        reviews[0]
    );
    assert!(
        reviews[1].contains("step 1 completed: the box is 3 m wide"),
        "{}",
        reviews[1]
    );
    assert!(
        requests_of(&all, 2).is_empty(),
        "the replaced step never ran"
    );
    rt.shutdown().await;
}

/// A spent budget stops every step in flight, not only the one whose call spent it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_budget_stops_every_running_step() {
    let server = ScriptedLlm::start().await;
    server.push_all([graph_plan(json!([
        {"text": "[MANUS] quick", "depends_on": []},
        {"text": "[MANUS] slow", "depends_on": []},
    ]))]);
    let never = 2 * GUARD.as_millis() as u64;
    // Step 0's first answer spends past the budget while step 1 still waits on the model.
    server.push_for(
        &job(0),
        [Reply::tool("bash", json!({"command": "echo hi"}))
            .usage(5_000, 5_000)
            .delay(THINK_MS)],
    );
    server.push_for(&job(1), [done("never").delay(never)]);
    let dir = Scratch::new("graph-budget");
    let rt = start(&server, &dir, &[("flow.max_tokens", "1000")]).await;
    let flow = rt.submit("two at once", SubmitOptions::default());
    let (_, outcome) = drive(flow.await.unwrap()).await;
    assert_eq!(
        outcome.status,
        FlowStatus::BudgetExceeded,
        "{}",
        outcome.reason
    );
    for s in &outcome.plan.steps {
        assert_eq!(s.status, StepStatus::Failed, "{s:?}");
    }
    assert!(
        outcome.plan.steps[1].notes.starts_with("stopped:"),
        "{}",
        outcome.plan.steps[1].notes
    );
    rt.shutdown().await;
}
