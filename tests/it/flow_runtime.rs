//! The library in-process: `Runtime` + `FlowHandle` against the scripted model server.
//! Covers tag routing and the planner's fallbacks, the agent's handling of bad tool calls,
//! round limits and stuck loops, model-call retries and auth failures, step retries and
//! `on_step_failure`, workspace confinement, `ask_human` answers, cancellation, step and
//! flow timeouts (and that they kill the running command), the input-token budget, the
//! Azure wire shape, and isolation between flows. Every case checks what was sent to the
//! model as well as what happened.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use manus_rt::engine::plan::StepStatus;
use manus_rt::{
    Config, FlowEvent, FlowHandle, FlowMode, FlowOutcome, FlowStatus, Runtime, SubmitOptions,
};
use serde_json::json;
use support::llm_server::{Recorded, Reply, Request, ScriptedLlm};
use support::scenario::{Scratch, config_with, done, give_up, last_tool_text, line_of, plan_reply};

const MANUS_TOOLS: [&str; 8] = [
    "python_execute",
    "bash",
    "str_replace_editor",
    "browser_use",
    "web_search",
    "crawl",
    "ask_human",
    "terminate",
];
const DATA_TOOLS: [&str; 5] = [
    "python_execute",
    "str_replace_editor",
    "data_visualization",
    "data_report",
    "terminate",
];

/// Generous bound so a broken flow fails the test instead of hanging it.
const GUARD: Duration = Duration::from_secs(60);

/// A model answer or command that outlasts GUARD: a test that ends within GUARD did not wait
/// for it (an outcome, not a stopwatch, on a loaded machine).
const NEVER_MS: u64 = 2 * GUARD.as_millis() as u64;

async fn start(server: &ScriptedLlm, dir: &Scratch, overrides: &[(&str, &str)]) -> Runtime {
    let text = config_with(server, &dir.workspace(), overrides);
    let config = Config::from_text(&text, "test", None).unwrap_or_else(|e| panic!("{e}\n{text}"));
    Runtime::builder().config(config).start().await.unwrap()
}

/// Read every event (answering nothing) and the outcome.
async fn drive(mut flow: FlowHandle) -> (Vec<FlowEvent>, FlowOutcome) {
    tokio::time::timeout(GUARD, async move {
        let mut events = vec![];
        while let Some(e) = flow.next_event().await {
            events.push(e);
        }
        let outcome = flow.outcome().await;
        (events, outcome)
    })
    .await
    .expect("the flow ended within the guard time")
}

async fn submit(rt: &Runtime, task: &str, options: SubmitOptions) -> FlowHandle {
    rt.submit(task, options).await.expect("submit")
}

async fn run(rt: &Runtime, task: &str) -> (Vec<FlowEvent>, FlowOutcome) {
    drive(submit(rt, task, SubmitOptions::default()).await).await
}

/// `(step, agent, attempt)` of every StepStarted, in order.
fn started(events: &[FlowEvent]) -> Vec<(usize, String, u32)> {
    events
        .iter()
        .filter_map(|e| match e {
            FlowEvent::StepStarted {
                step,
                agent,
                attempt,
                ..
            } => Some((*step, agent.clone(), *attempt)),
            _ => None,
        })
        .collect()
}

fn finished(events: &[FlowEvent]) -> Vec<(usize, StepStatus, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            FlowEvent::StepFinished {
                step,
                status,
                summary,
                ..
            } => Some((*step, *status, summary.clone())),
            _ => None,
        })
        .collect()
}

fn names(r: &Recorded) -> Vec<String> {
    r.tool_names()
}

fn all_text(r: &Recorded) -> String {
    r.body.to_string()
}

// ─── Routing and planning ──────────────────────────────────────────────────────────────

/// A runtime's planning thread, where planners make their model calls, is in the idle
/// scheduling class, and a flow still plans, runs and summarises through it.
#[tokio::test]
async fn planning_runs_on_a_thread_in_the_idle_class() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        plan_reply(&["[MANUS] note it"]),
        done("noted"),
        Reply::text("all done"),
    ]);
    let dir = Scratch::new("planning-thread");
    let rt = start(&server, &dir, &[]).await;
    let (_, outcome) = run(&rt, "note it").await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    assert_eq!(outcome.summary, "all done");
    support::threads::assert_in_idle_class("planning");
    rt.shutdown().await;
}

/// A final summary that degenerates into one sentence said over and over is cut after its
/// first saying, and the cut is marked.
#[tokio::test]
async fn a_summary_that_repeats_itself_is_cut_and_marked() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        plan_reply(&["[MANUS] note it"]),
        done("noted"),
        Reply::text(&format!(
            "The note is written. {}",
            "It is in notes.txt. ".repeat(40)
        )),
    ]);
    let dir = Scratch::new("summary-repeats");
    let rt = start(&server, &dir, &[]).await;
    let (_, outcome) = run(&rt, "note it").await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    assert!(
        outcome
            .summary
            .starts_with("The note is written. It is in notes.txt.\n\n[the summary then said this sentence 39 more time(s)"),
        "{}",
        outcome.summary
    );
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_agent_plan_is_routed_by_tags() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        plan_reply(&[
            "[MANUS] Write hello.txt containing a greeting",
            "[DATA_ANALYSIS] Check what hello.txt says",
        ]),
        Reply::tool(
            "str_replace_editor",
            json!({"command": "create", "path": "hello.txt", "file_text": "hello world\n"}),
        )
        .with_text("Writing the file."),
        done("hello.txt is written."),
        Reply::tool(
            "str_replace_editor",
            json!({"command": "view", "path": "hello.txt"}),
        ),
        done("hello.txt says hello world."),
        Reply::text("Wrote hello.txt and checked it."),
    ]);
    let dir = Scratch::new("tags");
    let rt = start(&server, &dir, &[]).await;
    let (events, outcome) = run(&rt, "Write a greeting to hello.txt and check it").await;
    rt.shutdown().await;

    assert_eq!(outcome.status, FlowStatus::Completed, "{outcome:#?}");
    // A step's own events all come after its StepStarted.
    let mut begun = std::collections::HashSet::new();
    for e in &events {
        match e {
            FlowEvent::StepStarted { step, .. } => {
                begun.insert(*step);
            }
            FlowEvent::Thought { step, .. }
            | FlowEvent::ToolCalled { step, .. }
            | FlowEvent::ToolFinished { step, .. }
            | FlowEvent::StepMemory { step, .. }
            | FlowEvent::StepFinished { step, .. } => {
                assert!(begun.contains(step), "{e:?} came before its StepStarted");
            }
            _ => {}
        }
    }
    let reqs = server.requests();
    assert_eq!(reqs.len(), 6, "planner + 2 + 2 + summary");
    for r in &reqs {
        assert_eq!(r.header("authorization"), Some("Bearer test-key"));
        assert_eq!(r.header("content-type"), Some("application/json"));
    }

    // The planner is offered only `planning`, and told about both agents.
    assert_eq!(names(&reqs[0]), ["planning"]);
    let sys = reqs[0].system_text().unwrap();
    assert!(
        sys.contains("[MANUS]") && sys.contains("[DATA_ANALYSIS]"),
        "{sys}"
    );
    assert!(
        reqs[0]
            .last_user_text()
            .unwrap()
            .contains("Write a greeting to hello.txt")
    );

    // Step 0 runs on manus with its tools; step 1 on data_analysis with its own (no bash).
    for r in &reqs[1..3] {
        assert_eq!(names(r), MANUS_TOOLS);
        assert!(r.system_text().unwrap().contains("You are manus"));
    }
    for r in &reqs[3..5] {
        assert_eq!(names(r), DATA_TOOLS);
        assert!(!names(r).contains(&"bash".to_string()));
        assert!(r.system_text().unwrap().contains("You are data_analysis"));
    }
    // The tag is stripped from the step the agent is given; the plan shows both steps.
    let step1 = reqs[3].messages()[1]["content"].as_str().unwrap();
    assert!(
        step1.contains("Your job now is step 1 only: Check what hello.txt says"),
        "{step1}"
    );
    // Step 1 sees step 0's outcome in the plan view.
    assert!(step1.contains("hello.txt is written."), "{step1}");
    // The agent saw the file's content through the editor.
    assert!(
        last_tool_text(&reqs[4]).contains("hello world"),
        "{}",
        last_tool_text(&reqs[4])
    );
    // The summary call offers no tools.
    assert!(names(&reqs[5]).is_empty());

    assert_eq!(
        started(&events),
        [(0, "manus".into(), 1), (1, "data_analysis".into(), 1)]
    );
    assert!(matches!(
        events.first(),
        Some(FlowEvent::FlowStarted { .. })
    ));
    assert!(matches!(
        events.last(),
        Some(FlowEvent::FlowFinished { .. })
    ));
    let plan = outcome.plan;
    assert_eq!(plan.steps.len(), 2);
    assert!(
        plan.steps
            .iter()
            .all(|s| s.status == StepStatus::Completed && s.attempts == 1)
    );
    assert_eq!(plan.steps[0].agent.as_deref(), Some("manus"));
    assert_eq!(plan.steps[1].agent.as_deref(), Some("data_analysis"));
    assert_eq!(outcome.summary, "Wrote hello.txt and checked it.");
    assert_eq!(
        std::fs::read_to_string(dir.workspace().join("hello.txt")).unwrap(),
        "hello world\n"
    );

    // Usage adds up every call the model served.
    assert_eq!(outcome.usage.calls, reqs.len() as u64);
    assert_eq!(outcome.usage.prompt_tokens, 10 * reqs.len() as u64);
    let llm_events = events
        .iter()
        .filter(|e| matches!(e, FlowEvent::LlmCalled { .. }))
        .count();
    assert_eq!(llm_events, reqs.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untagged_and_unknown_tags_go_to_the_primary_agent() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        plan_reply(&["Say hello", "[ROBOT] Wave at the user"]),
        done("Said hello."),
        done("Waved."),
        Reply::text("Said hello and waved."),
    ]);
    let dir = Scratch::new("primary");
    let rt = start(&server, &dir, &[]).await;
    let (events, outcome) = run(&rt, "Greet the user").await;
    rt.shutdown().await;

    assert_eq!(outcome.status, FlowStatus::Completed, "{outcome:#?}");
    // data_analysis is first in the pool (name order): the primary, manus, must still win.
    assert_eq!(
        started(&events),
        [(0, "manus".into(), 1), (1, "manus".into(), 1)]
    );
    let reqs = server.requests();
    assert_eq!(reqs.len(), 4);
    assert_eq!(names(&reqs[1]), MANUS_TOOLS);
    assert_eq!(names(&reqs[2]), MANUS_TOOLS);
    assert!(reqs[2].system_text().unwrap().contains("You are manus"));
    let prompt = reqs[2].messages()[1]["content"].as_str().unwrap();
    assert!(prompt.contains("step 1 only: Wave at the user"), "{prompt}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_numbered_list_in_plain_text_becomes_the_plan() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        Reply::text(
            "Here is my plan:\n1. [MANUS] Make a.txt\n2. [DATA_ANALYSIS] Check a.txt\nThat is all.",
        ),
        done("Made a.txt."),
        done("a.txt is fine."),
        Reply::text("Made and checked a.txt."),
    ]);
    let dir = Scratch::new("textplan");
    let rt = start(&server, &dir, &[]).await;
    let (events, outcome) = run(&rt, "Make a.txt and check it").await;
    rt.shutdown().await;

    assert_eq!(outcome.status, FlowStatus::Completed, "{outcome:#?}");
    let created = events.iter().find_map(|e| match e {
        FlowEvent::PlanCreated { plan } => Some(plan.clone()),
        _ => None,
    });
    let texts: Vec<String> = created
        .expect("PlanCreated")
        .steps
        .iter()
        .map(|s| s.text.clone())
        .collect();
    assert_eq!(texts, ["[MANUS] Make a.txt", "[DATA_ANALYSIS] Check a.txt"]);
    assert_eq!(
        started(&events),
        [(0, "manus".into(), 1), (1, "data_analysis".into(), 1)]
    );
    assert_eq!(server.request_count(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_text_without_a_list_becomes_one_step_with_the_task() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        Reply::text("Sure, I can do that."),
        done("Done."),
        Reply::text("Done."),
    ]);
    let dir = Scratch::new("oneplan");
    let rt = start(&server, &dir, &[]).await;
    let task = "Tidy the workspace";
    let (events, outcome) = run(&rt, task).await;
    rt.shutdown().await;

    assert_eq!(outcome.status, FlowStatus::Completed, "{outcome:#?}");
    let texts: Vec<&str> = outcome.plan.steps.iter().map(|s| s.text.as_str()).collect();
    assert_eq!(texts, [task]);
    assert_eq!(started(&events), [(0, "manus".into(), 1)]);
    let prompt = server.requests()[1].messages()[1]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(prompt.contains(&format!("step 0 only: {task}")), "{prompt}");
}

// ─── Bad tool calls, round limits, stuck loops ─────────────────────────────────────────

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_tool_arguments_are_reported_to_the_model() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        plan_reply(&["[MANUS] List the files"]),
        Reply::tool_raw("bash", "{not json"),
        Reply::tool("bash", json!({"command": "echo listed"})),
        done("Listed."),
        Reply::text("Listed the files."),
    ]);
    let dir = Scratch::new("badjson");
    let rt = start(&server, &dir, &[]).await;
    let (events, outcome) = run(&rt, "List the files").await;
    rt.shutdown().await;

    let reqs = server.requests();
    assert_eq!(reqs.len(), 5);
    let obs = last_tool_text(&reqs[2]);
    assert!(
        obs.contains("not valid JSON") && obs.contains("bash"),
        "{obs}"
    );
    assert!(obs.starts_with("Error:"), "{obs}");
    // The malformed call stays in the history as the model sent it, paired with its result.
    let asst = &reqs[2].messages()[reqs[2].messages().len() - 3];
    assert_eq!(asst["tool_calls"][0]["function"]["arguments"], "{not json");
    assert!(last_tool_text(&reqs[3]).contains("listed"));
    let failed_bash = events
        .iter()
        .any(|e| matches!(e, FlowEvent::ToolFinished { tool, ok: false, .. } if tool == "bash"));
    assert!(failed_bash);
    assert_eq!(outcome.status, FlowStatus::Completed, "{outcome:#?}");
}

/// Plain text does not complete a step: the model is told once to call `terminate`, and a
/// `terminate` with success after that completes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_text_is_nudged_and_terminate_then_completes_the_step() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        plan_reply(&["[MANUS] Write the note"]),
        Reply::text("The note is written."),
        done("Wrote the note."),
        Reply::text("The note is written."),
    ]);
    let dir = Scratch::new("textnudge");
    let rt = start(&server, &dir, &[("flow.max_step_retries", "0")]).await;
    let (events, outcome) = run(&rt, "Write the note").await;
    rt.shutdown().await;

    assert_eq!(outcome.status, FlowStatus::Completed, "{outcome:#?}");
    assert_eq!(
        finished(&events),
        [(0, StepStatus::Completed, "Wrote the note.".to_string())]
    );
    let reqs = server.requests();
    assert_eq!(reqs.len(), 4, "planner + 2 rounds + summary");
    let first = reqs[1].last_user_text().unwrap();
    assert!(
        !first.contains("plain text"),
        "no nudge before any reply: {first}"
    );
    let nudged = reqs[2].last_user_text().unwrap();
    assert!(
        nudged.contains("without calling a tool")
            && nudged.contains("`terminate`")
            && nudged.contains("status success")
            && nudged.contains("status failure")
            && nudged.contains("continue with the next tool call"),
        "{nudged}"
    );
}

/// Plain text twice, the second time after the nudge, fails the step as never confirmed,
/// whatever the text claims, and the flow with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_text_twice_fails_the_step_as_never_confirmed() {
    let server = ScriptedLlm::start().await;
    let refusal = "I could not do this; nothing was written";
    server.push_all([
        plan_reply(&["[MANUS] Write the note"]),
        Reply::text(refusal),
        Reply::text(refusal),
        Reply::text("Nothing was written."),
    ]);
    let dir = Scratch::new("textfail");
    let rt = start(&server, &dir, &[("flow.max_step_retries", "0")]).await;
    let (events, outcome) = run(&rt, "Write the note").await;
    rt.shutdown().await;

    assert_eq!(outcome.status, FlowStatus::Failed, "{outcome:#?}");
    let ended = finished(&events);
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert_eq!(ended[0].1, StepStatus::Failed);
    let notes = &outcome.plan.steps[0].notes;
    assert_eq!(outcome.plan.steps[0].status, StepStatus::Failed);
    assert!(notes.starts_with("never confirmed"), "{notes}");
    assert!(
        notes.contains("plain text without calling `terminate`"),
        "{notes}"
    );
    assert!(notes.contains(refusal), "the last words are kept: {notes}");
    assert_eq!(server.request_count(), 4, "planner + 2 rounds + summary");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_tool_is_refused_with_the_list_of_tools() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        plan_reply(&["[DATA_ANALYSIS] Browse the web"]),
        Reply::tool("browser_use", json!({"url": "http://127.0.0.1:9/"})),
        // data_analysis does not hold bash either.
        Reply::tool("bash", json!({"command": "echo hi"})),
        give_up("I have no browser."),
        Reply::text("No browser available."),
    ]);
    let dir = Scratch::new("unknowntool");
    let rt = start(&server, &dir, &[("flow.max_step_retries", "0")]).await;
    let (_, outcome) = run(&rt, "Browse the web").await;
    rt.shutdown().await;

    let reqs = server.requests();
    assert_eq!(reqs.len(), 5);
    let obs = last_tool_text(&reqs[2]);
    assert!(
        obs.contains("there is no tool named `browser_use`"),
        "{obs}"
    );
    assert!(obs.contains(&DATA_TOOLS.join(", ")), "{obs}");
    let obs = last_tool_text(&reqs[3]);
    assert!(obs.contains("there is no tool named `bash`"), "{obs}");
    assert_eq!(outcome.plan.steps[0].status, StepStatus::Failed);
    assert_eq!(outcome.status, FlowStatus::Failed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_that_never_terminates_fails_at_max_steps() {
    let server = ScriptedLlm::start().await;
    server.push(plan_reply(&["[MANUS] Count forever"]));
    // More distinct rounds than max_steps = 6 allows; the summary call takes one of the rest.
    for i in 1..=8 {
        server.push(
            Reply::tool("bash", json!({"command": format!("echo {i}")}))
                .with_text(&format!("Counting {i}.")),
        );
    }
    let dir = Scratch::new("maxsteps");
    let rt = start(&server, &dir, &[("flow.max_step_retries", "0")]).await;
    let (events, outcome) = run(&rt, "Count forever").await;
    rt.shutdown().await;

    let reqs = server.requests();
    let agent_calls = reqs.iter().filter(|r| names(r) == MANUS_TOOLS).count();
    assert_eq!(agent_calls, 6, "exactly max_steps rounds");
    assert_eq!(reqs.len(), 8, "planner + 6 rounds + summary");
    assert!(
        last_tool_text(&reqs[6]).contains('5'),
        "{}",
        last_tool_text(&reqs[6])
    );
    let step = &outcome.plan.steps[0];
    assert_eq!(step.status, StepStatus::Failed);
    assert!(step.notes.contains("max_steps"), "{}", step.notes);
    assert!(
        step.notes.contains("Counting 6."),
        "the last words are kept: {}",
        step.notes
    );
    assert_eq!(
        finished(&events).len(),
        1,
        "no retry with max_step_retries = 0"
    );
    assert_eq!(outcome.status, FlowStatus::Failed, "{outcome:#?}");
    assert_ne!(outcome.status, FlowStatus::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_reply_is_nudged_then_blocked() {
    let server = ScriptedLlm::start().await;
    server.push(plan_reply(&["[MANUS] Look at the files"]));
    let same = Reply::tool("bash", json!({"command": "ls"})).with_text("Let me look at the files.");
    server.push_all(std::iter::repeat_n(same, 4));
    server.push(Reply::text("The agent got stuck."));
    let dir = Scratch::new("stuck");
    let rt = start(&server, &dir, &[("flow.max_step_retries", "0")]).await;
    let (events, outcome) = run(&rt, "Look at the files").await;
    rt.shutdown().await;

    let reqs = server.requests();
    assert_eq!(reqs.len(), 6, "planner + 4 rounds + summary");
    for r in &reqs[1..4] {
        assert!(
            !r.last_user_text().unwrap().contains("same response"),
            "{:?}",
            r.last_user_text()
        );
    }
    let nudge = reqs[4].last_user_text().unwrap();
    assert!(nudge.contains("same response"), "{nudge}");
    assert_eq!(finished(&events)[0].1, StepStatus::Blocked);
    let step = &outcome.plan.steps[0];
    assert_eq!(step.status, StepStatus::Blocked);
    assert!(step.notes.contains("repeating"), "{}", step.notes);
    assert_eq!(outcome.status, FlowStatus::Failed);
}

// ─── Model-call failures ───────────────────────────────────────────────────────────────

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_with_retry_after_is_retried() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        Reply::status(429).retry_after(1),
        plan_reply(&["[MANUS] Do it"]),
        done("Did it."),
        Reply::text("Did it."),
    ]);
    let dir = Scratch::new("429");
    let rt = start(&server, &dir, &[]).await;
    let (_, outcome) = run(&rt, "Do it").await;
    rt.shutdown().await;

    assert_eq!(outcome.status, FlowStatus::Completed, "{outcome:#?}");
    let reqs = server.requests();
    assert_eq!(reqs.len(), 4);
    assert_eq!(
        reqs[0].body, reqs[1].body,
        "the retry resends the same request"
    );
    assert_eq!(names(&reqs[1]), ["planning"]);
    // The rejected attempt is not a served call.
    assert_eq!(outcome.usage.calls, 3);
    // Retry-After: 1 was honoured (a lower bound, not a speed check).
    assert!(outcome.elapsed_ms >= 1000, "{}", outcome.elapsed_ms);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_401_fails_the_flow_without_retrying() {
    let server = ScriptedLlm::start().await;
    server.push(Reply::status(401));
    server.set_fallback(Some(Reply::status(401)));
    let dir = Scratch::new("401");
    let rt = start(&server, &dir, &[]).await;
    let (events, outcome) = run(&rt, "Do it").await;
    rt.shutdown().await;

    assert_eq!(outcome.status, FlowStatus::Failed);
    assert!(outcome.reason.contains("api_key"), "{}", outcome.reason);
    assert!(outcome.reason.contains("401"), "{}", outcome.reason);
    assert_eq!(server.request_count(), 1, "no retry after 401");
    assert!(started(&events).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiny_input_budget_fails_before_sending() {
    let server = ScriptedLlm::start().await;
    server.set_fallback(Some(Reply::text("should not be asked")));
    let dir = Scratch::new("budget");
    let rt = start(&server, &dir, &[("llm.max_input_tokens", "50")]).await;
    let (_, outcome) = run(&rt, "Do it").await;
    rt.shutdown().await;

    assert_eq!(outcome.status, FlowStatus::Failed);
    assert!(
        outcome.reason.contains("max_input_tokens"),
        "{}",
        outcome.reason
    );
    assert!(outcome.reason.contains("50"), "{}", outcome.reason);
    assert_eq!(server.request_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_requests_use_the_deployment_path_and_api_key_header() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        plan_reply(&["[MANUS] Do it"]),
        done("Did it."),
        Reply::text("Did it."),
    ]);
    let dir = Scratch::new("azure");
    let overrides = [
        ("llm.api_type", "\"azure\""),
        ("llm.base_url", &format!("\"{}\"", server.root_url())),
        ("llm.api_version", "\"2024-06-01\""),
        ("llm.api_key", "\"azure-secret\""),
    ];
    let rt = start(&server, &dir, &overrides).await;
    let (_, outcome) = run(&rt, "Do it").await;
    rt.shutdown().await;

    assert_eq!(outcome.status, FlowStatus::Completed, "{outcome:#?}");
    let reqs = server.requests();
    assert_eq!(reqs.len(), 3);
    for r in &reqs {
        assert_eq!(r.path, "/openai/deployments/gpt-4o-mini/chat/completions");
        assert_eq!(r.query.as_deref(), Some("api-version=2024-06-01"));
        assert_eq!(r.header("api-key"), Some("azure-secret"));
        assert_eq!(r.header("authorization"), None);
    }
}

// ─── Step failures and retries ─────────────────────────────────────────────────────────

fn failing_then_ok_script() -> Vec<Reply> {
    vec![
        plan_reply(&["[MANUS] Do the impossible", "[MANUS] Do the possible"]),
        give_up("It cannot be done."),
        give_up("It still cannot be done."),
        done("Did the possible."),
        Reply::text("One step failed, one completed."),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_step_is_retried_once_then_the_flow_continues() {
    let server = ScriptedLlm::start().await;
    server.push_all(failing_then_ok_script());
    let dir = Scratch::new("continue");
    let rt = start(&server, &dir, &[("flow.on_step_failure", "\"continue\"")]).await;
    let (events, outcome) = run(&rt, "Try both").await;
    rt.shutdown().await;

    assert_eq!(
        started(&events),
        [
            (0, "manus".into(), 1),
            (0, "manus".into(), 2),
            (1, "manus".into(), 1)
        ]
    );
    let fin: Vec<(usize, StepStatus)> =
        finished(&events).iter().map(|(i, s, _)| (*i, *s)).collect();
    assert_eq!(
        fin,
        [
            (0, StepStatus::Failed),
            (0, StepStatus::Failed),
            (1, StepStatus::Completed)
        ]
    );
    let steps = &outcome.plan.steps;
    assert_eq!(
        (steps[0].status, steps[0].attempts),
        (StepStatus::Failed, 2)
    );
    assert_eq!(steps[0].notes, "It still cannot be done.");
    assert_eq!(steps[1].status, StepStatus::Completed);
    assert_eq!(outcome.status, FlowStatus::Failed);
    assert!(
        outcome.reason.contains("step 0 failed"),
        "{}",
        outcome.reason
    );
    // The retry starts from a clean memory: no trace of the first attempt's reply.
    let reqs = server.requests();
    assert_eq!(reqs.len(), 5);
    assert_eq!(reqs[2].messages().len(), 3, "{:#?}", reqs[2].messages());
    // What the first attempt ended with reaches the retry only through the plan's notes.
    let prompt = reqs[2].messages()[1]["content"].as_str().unwrap();
    assert!(prompt.contains("Notes: It cannot be done."), "{prompt}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_step_failure_stop_ends_the_flow_at_the_failed_step() {
    let server = ScriptedLlm::start().await;
    server.push_all(failing_then_ok_script());
    let dir = Scratch::new("stop");
    let rt = start(&server, &dir, &[("flow.on_step_failure", "\"stop\"")]).await;
    let (events, outcome) = run(&rt, "Try both").await;
    rt.shutdown().await;

    assert_eq!(
        started(&events),
        [(0, "manus".into(), 1), (0, "manus".into(), 2)]
    );
    assert_eq!(outcome.status, FlowStatus::Failed);
    assert!(
        outcome.reason.contains("on_step_failure"),
        "{}",
        outcome.reason
    );
    assert_eq!(outcome.plan.steps[1].status, StepStatus::NotStarted);
    assert_eq!(outcome.plan.steps[1].attempts, 0);
    let reqs = server.requests();
    // planner, two attempts, summary: "Did the possible." was never asked for.
    assert_eq!(reqs.len(), 4);
    assert!(names(&reqs[3]).is_empty(), "the last call is the summary");
    // The summary call took the reply scripted for step 1; only the final text is left.
    assert_eq!(server.remaining(), 1);
}

// ─── Tools: workspace, questions ───────────────────────────────────────────────────────

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_editor_refuses_paths_outside_the_workspace() {
    let dir = Scratch::new("escape");
    let outside = dir.path().join("outside.txt");
    let server = ScriptedLlm::start().await;
    server.push_all([
        plan_reply(&["[MANUS] Write files"]),
        Reply::tool(
            "str_replace_editor",
            json!({"command": "create", "path": "../escape.txt", "file_text": "x"}),
        ),
        Reply::tool(
            "str_replace_editor",
            json!({"command": "create", "path": outside.display().to_string(), "file_text": "x"}),
        ),
        Reply::tool(
            "str_replace_editor",
            json!({"command": "create", "path": "inside.txt", "file_text": "ok"}),
        ),
        done("Wrote inside.txt only."),
        Reply::text("Done."),
    ]);
    let rt = start(&server, &dir, &[]).await;
    let (_, outcome) = run(&rt, "Write files").await;
    rt.shutdown().await;

    let reqs = server.requests();
    assert_eq!(reqs.len(), 6);
    for (i, what) in [(2, "../escape.txt"), (3, "outside.txt")] {
        let obs = last_tool_text(&reqs[i]);
        assert!(
            obs.starts_with("Error:")
                && obs.contains("outside the workspace")
                && obs.contains(what),
            "{obs}"
        );
    }
    assert!(!dir.path().join("escape.txt").exists());
    assert!(!outside.exists());
    assert_eq!(
        std::fs::read_to_string(dir.workspace().join("inside.txt")).unwrap(),
        "ok"
    );
    assert_eq!(outcome.status, FlowStatus::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_human_is_answered_through_the_flow_handle() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        plan_reply(&["[MANUS] Paint the fence in the user's colour"]),
        Reply::tool("ask_human", json!({"inquire": "Which colour?"})),
        done("Painted it."),
        Reply::text("Painted the fence."),
    ]);
    let dir = Scratch::new("ask");
    let rt = start(&server, &dir, &[]).await;
    let mut flow = submit(&rt, "Paint the fence", SubmitOptions::default()).await;
    let mut questions = vec![];
    let outcome = tokio::time::timeout(GUARD, async {
        while let Some(e) = flow.next_event().await {
            if let FlowEvent::Question {
                id, agent, inquire, ..
            } = e
            {
                questions.push((agent, inquire));
                flow.answer(id, "blue");
            }
        }
        flow.outcome().await
    })
    .await
    .unwrap();
    rt.shutdown().await;

    assert_eq!(
        questions,
        [("manus".to_string(), "Which colour?".to_string())]
    );
    let reqs = server.requests();
    assert_eq!(reqs.len(), 4);
    let obs = last_tool_text(&reqs[2]);
    assert!(obs.contains("blue"), "{obs}");
    assert_eq!(outcome.status, FlowStatus::Completed);
}

// ─── Cancellation and timeouts ─────────────────────────────────────────────────────────

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_a_flow_waiting_on_the_model() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        plan_reply(&["[MANUS] Think slowly"]),
        Reply::tool("bash", json!({"command": "touch too-late.txt"})).delay(NEVER_MS),
    ]);
    server.set_fallback(Some(Reply::text("summary")));
    let dir = Scratch::new("cancel");
    let rt = start(&server, &dir, &[]).await;
    let mut flow = submit(&rt, "Think slowly", SubmitOptions::default()).await;
    let mut events = vec![];
    let outcome = tokio::time::timeout(GUARD, async {
        while let Some(e) = flow.next_event().await {
            if let FlowEvent::StepStarted { .. } = e {
                // Cancel once the agent's request is at the (slow) model.
                while server.request_count() < 2 {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                flow.cancel();
            }
            events.push(e);
        }
        flow.outcome().await
    })
    .await
    .unwrap();
    let reqs_at_end = server.request_count();
    rt.shutdown().await;

    assert_eq!(outcome.status, FlowStatus::Cancelled, "{outcome:#?}");
    assert!(outcome.reason.contains("cancelled"), "{}", outcome.reason);
    // The flow did not wait for the delayed answer: the agent never got it.
    let agent_answered = events
        .iter()
        .any(|e| matches!(e, FlowEvent::LlmCalled { agent, .. } if agent != "planner"));
    assert!(!agent_answered);
    let step = &outcome.plan.steps[0];
    assert_eq!(step.status, StepStatus::Failed);
    assert!(step.notes.contains("cancelled"), "{}", step.notes);
    // No summary call on cancel: planner + the pending agent request only.
    assert_eq!(reqs_at_end, 2);
    assert!(!dir.workspace().join("too-late.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_past_its_timeout_fails_and_the_flow_goes_on() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        plan_reply(&["[MANUS] Wait a long time", "[MANUS] Finish up"]),
        Reply::tool("bash", json!({"command": "sleep 5"})),
        done("Finished."),
        Reply::text("The wait timed out; finished up."),
    ]);
    let dir = Scratch::new("steptimeout");
    let rt = start(
        &server,
        &dir,
        &[
            ("flow.step_timeout_secs", "1"),
            ("flow.max_step_retries", "0"),
        ],
    )
    .await;
    let (events, outcome) = run(&rt, "Wait, then finish").await;
    rt.shutdown().await;

    let fin = finished(&events);
    assert_eq!(fin.len(), 2, "{fin:?}");
    assert_eq!((fin[0].0, fin[0].1), (0, StepStatus::Failed));
    assert!(fin[0].2.contains("step_timeout_secs"), "{}", fin[0].2);
    assert_eq!((fin[1].0, fin[1].1), (1, StepStatus::Completed));
    assert_eq!(outcome.plan.steps[0].status, StepStatus::Failed);
    assert!(
        outcome.plan.steps[0].notes.contains("timeout"),
        "{}",
        outcome.plan.steps[0].notes
    );
    assert_eq!(outcome.plan.steps[1].status, StepStatus::Completed);
    assert_eq!(outcome.status, FlowStatus::Failed);
    assert_eq!(server.request_count(), 4);
    // The second step ran on a fresh replica: its request holds no trace of the sleep.
    let reqs = server.requests();
    assert!(!all_text(&reqs[2]).contains("sleep 5"));
}

/// A finished flow, completed or cancelled, leaves no task behind: its step and flow
/// timeouts end with it. Left asleep for `step_timeout_secs` and `flow_timeout_secs`, each
/// would hold its planner's memory that long, and a busy service would grow by every flow
/// of the last hour.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_flow_leaves_no_task_behind() {
    let server = ScriptedLlm::start().await;
    let dir = Scratch::new("no-task-behind");
    let rt = start(&server, &dir, &[]).await;
    let alive = || {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    };
    let script = || {
        [
            plan_reply(&["[MANUS] First half", "[MANUS] Second half"]),
            done("First half done."),
            done("Second half done."),
            Reply::text("Both halves are done."),
        ]
    };
    // The first flow opens the model connections the others reuse.
    server.push_all(script());
    assert_eq!(run(&rt, "Warm up").await.1.status, FlowStatus::Completed);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = alive();
    for i in 0..5 {
        server.push_all(script());
        let (_, outcome) = run(&rt, &format!("Flow {i}")).await;
        assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    }
    // And one cancelled while its step waits on the model.
    server.push_all([
        plan_reply(&["[MANUS] Think slowly"]),
        done("Too late.").delay(1000),
    ]);
    let mut flow = submit(&rt, "Flow 5", SubmitOptions::default()).await;
    let cancelled = tokio::time::timeout(GUARD, async {
        while let Some(e) = flow.next_event().await {
            if let FlowEvent::StepStarted { .. } = e {
                flow.cancel();
            }
        }
        flow.outcome().await
    })
    .await
    .unwrap();
    assert_eq!(
        cancelled.status,
        FlowStatus::Cancelled,
        "{}",
        cancelled.reason
    );
    // Stopping actors takes a moment, and the model server holds the cancelled call's
    // answer for a second; timeouts left asleep would never go.
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive() > before && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        alive() <= before,
        "{} tasks alive after six more flows, {before} before them",
        alive()
    );
    rt.shutdown().await;
}

// ─── Several flows on one runtime ──────────────────────────────────────────────────────

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_flows_share_no_memory() {
    let server = ScriptedLlm::start().await;
    for (file, marker) in [
        ("alpha.txt", "ALPHA-MARKER-7731"),
        ("beta.txt", "BETA-MARKER-1377"),
    ] {
        server.push_all([
            plan_reply(&[&format!("[MANUS] Write {file}")]),
            Reply::tool(
                "str_replace_editor",
                json!({"command": "create", "path": file, "file_text": marker}),
            )
            .with_text(&format!("Writing {marker}")),
            done(&format!("Wrote {file}.")),
            Reply::text(&format!("Wrote {file}.")),
        ]);
    }
    let dir = Scratch::new("sequential");
    let rt = start(&server, &dir, &[]).await;
    let (_, first) = run(&rt, "Write alpha.txt").await;
    let (_, second) = run(&rt, "Write beta.txt").await;
    rt.shutdown().await;

    assert_eq!(first.status, FlowStatus::Completed, "{first:#?}");
    assert_eq!(second.status, FlowStatus::Completed, "{second:#?}");
    assert_ne!(first.flow_id, second.flow_id);
    assert_eq!(
        std::fs::read_to_string(dir.workspace().join("alpha.txt")).unwrap(),
        "ALPHA-MARKER-7731"
    );
    assert_eq!(
        std::fs::read_to_string(dir.workspace().join("beta.txt")).unwrap(),
        "BETA-MARKER-1377"
    );

    let reqs = server.requests();
    assert_eq!(reqs.len(), 8);
    // The second flow's planner and first agent request know nothing of the first flow.
    for r in &reqs[4..6] {
        let body = all_text(r);
        assert!(!body.contains("alpha") && !body.contains("ALPHA"), "{body}");
    }
    assert_eq!(
        reqs[5].messages().len(),
        3,
        "system, step, next-step prompt: {:#?}",
        reqs[5].messages()
    );
    assert_eq!(first.usage.calls, 4);
    assert_eq!(second.usage.calls, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_flows_each_get_their_own_agents() {
    let server = ScriptedLlm::start().await;
    // One reply per flow, interchangeable: each agent writes a file named after its own
    // shell's pid and PID namespace (each host shell has its own, where it runs as PID 2),
    // then terminates.
    let reply = Reply::tools(vec![
        (
            "bash",
            json!({"command": "echo $$ > \"shell-$$-$(readlink /proc/self/ns/pid | tr -dc 0-9).txt\""}),
        ),
        ("terminate", json!({"status": "success"})),
    ])
    .with_text("Wrote my file.")
    .delay(300);
    server.push_all([reply.clone(), reply]);
    let dir = Scratch::new("concurrent");
    let rt = start(&server, &dir, &[]).await;
    let single = SubmitOptions {
        mode: FlowMode::Single,
        ..Default::default()
    };
    let a = submit(&rt, "Task A: write a file", single.clone()).await;
    let b = submit(&rt, "Task B: write a file", single).await;
    assert_ne!(a.id, b.id);
    let ((_, oa), (_, ob)) = tokio::join!(drive(a), drive(b));
    rt.shutdown().await;

    assert_eq!(oa.status, FlowStatus::Completed, "{oa:#?}");
    assert_eq!(ob.status, FlowStatus::Completed, "{ob:#?}");
    let reqs = server.requests();
    assert_eq!(
        reqs.len(),
        2,
        "one call per flow, no planner in single mode"
    );
    let mut tasks: Vec<&str> = reqs
        .iter()
        .map(|r| {
            let body = all_text(r);
            match (body.contains("Task A"), body.contains("Task B")) {
                (true, false) => "A",
                (false, true) => "B",
                _ => panic!("a request mixes the flows: {body}"),
            }
        })
        .collect();
    tasks.sort();
    assert_eq!(tasks, ["A", "B"]);
    let files: Vec<String> = std::fs::read_dir(dir.workspace())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("shell-"))
        .collect();
    assert_eq!(files.len(), 2, "each flow has its own shell: {files:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_waiting_for_a_replica_is_queued_not_timed_out() {
    let server = ScriptedLlm::start().await;
    // Each flow's single step is one model call held 2 s. With one replica the second
    // flow's step waits for the first: 4 s after it was sent, past the 3 s step timeout,
    // which counts only from when a replica takes the step. (The hold is long enough that
    // the second flow may be submitted up to a second after the first, on a busy machine,
    // and still wait over a second.)
    server.push_all([
        done("Done A or B.").delay(2000),
        done("Done A or B.").delay(2000),
    ]);
    let dir = Scratch::new("queued");
    let rt = start(
        &server,
        &dir,
        &[
            ("agents.manus.replicas", "1"),
            ("flow.step_timeout_secs", "3"),
            ("flow.max_step_retries", "0"),
        ],
    )
    .await;
    let single = SubmitOptions {
        mode: FlowMode::Single,
        ..Default::default()
    };
    let a = submit(&rt, "Task A", single.clone()).await;
    let b = submit(&rt, "Task B", single).await;
    let ((ea, oa), (eb, ob)) = tokio::join!(drive(a), drive(b));
    rt.shutdown().await;

    assert_eq!(oa.status, FlowStatus::Completed, "{oa:#?}");
    assert_eq!(ob.status, FlowStatus::Completed, "{ob:#?}");
    let timing = |events: &[FlowEvent]| {
        let queued = events.iter().find_map(|e| match e {
            FlowEvent::StepStarted { queued_ms, .. } => Some(*queued_ms),
            _ => None,
        });
        let ran = events.iter().find_map(|e| match e {
            FlowEvent::StepFinished { elapsed_ms, .. } => Some(*elapsed_ms),
            _ => None,
        });
        (queued.expect("StepStarted"), ran.expect("StepFinished"))
    };
    let (mut first, mut second) = (timing(&ea), timing(&eb));
    if first.0 > second.0 {
        std::mem::swap(&mut first, &mut second);
    }
    assert!(
        second.0 >= 1_000,
        "the second step waited for the replica: {second:?}"
    );
    assert!(first.0 < 1_000, "the first step did not: {first:?}");
    // Each step ran for its model's 2 s at least; the second one's time excludes its wait
    // (counted with it, it would be the wait plus those 2 s).
    assert!(
        first.1 >= 2_000 && second.1 >= 2_000,
        "{first:?} {second:?}"
    );
    assert!(
        second.1 < second.0 + 2_000,
        "the second step's time includes its wait: {second:?} (queued, ran)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planner_replicas_bound_the_planning_calls_in_flight() {
    let server = ScriptedLlm::start().await;
    // Planning calls, by flow: when each arrived and was answered.
    let spans: Arc<Mutex<Vec<(Instant, Instant)>>> = Arc::default();
    let seen = spans.clone();
    server.set_hold_observer(Some(Arc::new(move |req: &Request, held: Duration| {
        let planning = req.json()["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["function"]["name"] == "planning"));
        if planning {
            let now = Instant::now();
            seen.lock().unwrap().push((now - held, now));
        }
    })));
    for task in ["Task A", "Task B"] {
        server.push_for(task, [plan_reply(&["[MANUS] Do it"]).delay(500)]);
    }
    server.set_fallback(Some(done("Done.")));
    let dir = Scratch::new("planner-replicas");
    let rt = start(&server, &dir, &[("flow.planner_replicas", "1")]).await;
    let a = submit(&rt, "Task A", SubmitOptions::default()).await;
    let b = submit(&rt, "Task B", SubmitOptions::default()).await;
    let ((_, oa), (_, ob)) = tokio::join!(drive(a), drive(b));
    rt.shutdown().await;

    assert_eq!(oa.status, FlowStatus::Completed, "{oa:#?}");
    assert_eq!(ob.status, FlowStatus::Completed, "{ob:#?}");
    let mut spans = spans.lock().unwrap().clone();
    assert_eq!(spans.len(), 2, "two planning calls");
    spans.sort();
    assert!(
        spans[1].0 >= spans[0].1,
        "the second planning call was sent only after the first was answered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runtimes_can_start_flows_in_the_same_second() {
    let (server_a, server_b) = (ScriptedLlm::start().await, ScriptedLlm::start().await);
    for server in [&server_a, &server_b] {
        // The planner call is slow, so each flow is still running when the other starts.
        server.push_all([
            plan_reply(&["[MANUS] Do it"]).delay(1500),
            done("Did it."),
            Reply::text("Did it."),
        ]);
    }
    let (dir_a, dir_b) = (Scratch::new("two-rt-a"), Scratch::new("two-rt-b"));
    let rt_a = start(&server_a, &dir_a, &[]).await;
    let rt_b = start(&server_b, &dir_b, &[]).await;
    // Both first flows get ids from the same second: wait for a fresh second if this one
    // is nearly over (clock alignment, not a speed check).
    let into_second = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_millis();
    if into_second > 500 {
        tokio::time::sleep(Duration::from_millis(1010 - into_second as u64)).await;
    }
    let a = rt_a.submit("Do it", SubmitOptions::default()).await;
    let b = rt_b.submit("Do it", SubmitOptions::default()).await;
    let a = a.expect("runtime A starts its flow");
    let b =
        b.unwrap_or_else(|e| panic!("runtime B cannot start a flow while runtime A runs one: {e}"));
    let ((_, oa), (_, ob)) = tokio::join!(drive(a), drive(b));
    rt_a.shutdown().await;
    rt_b.shutdown().await;
    assert_eq!(oa.status, FlowStatus::Completed, "{oa:#?}");
    assert_eq!(ob.status, FlowStatus::Completed, "{ob:#?}");
}

/// Whether a process whose command line is exactly `cmdline` (arguments space-joined) runs.
fn process_running(cmdline: &str) -> bool {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .any(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|raw| {
                    String::from_utf8_lossy(&raw)
                        .trim_end_matches('\0')
                        .replace('\0', " ")
                        == cmdline
                })
                .unwrap_or(false)
        })
}

/// Wait (up to `within`) for no process with this command line to be left.
async fn gone(cmdline: &str, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while process_running(cmdline) {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_timeout_kills_the_running_command() {
    // An odd duration names this test's process; bash_timeout_secs (20) is far off.
    let cmdline = "sleep 29.4173";
    let server = ScriptedLlm::start().await;
    server.push_all([
        plan_reply(&["[MANUS] Wait"]),
        Reply::tool("bash", json!({"command": cmdline})),
        Reply::text("Timed out."),
    ]);
    let dir = Scratch::new("timeout-kill");
    let rt = start(
        &server,
        &dir,
        &[
            ("flow.step_timeout_secs", "1"),
            ("flow.max_step_retries", "0"),
        ],
    )
    .await;
    let mut flow = submit(&rt, "Wait", SubmitOptions::default()).await;
    let mut saw_running = false;
    let outcome = tokio::time::timeout(GUARD, async {
        while let Some(e) = flow.next_event().await {
            if let FlowEvent::ToolCalled { .. } = e {
                // Give the shell a moment to start the command, then check it is there.
                saw_running = started_within_5s(cmdline).await;
            }
        }
        flow.outcome().await
    })
    .await
    .unwrap();
    assert_eq!(outcome.plan.steps[0].status, StepStatus::Failed);
    assert!(saw_running, "the command never started");
    assert!(
        gone(cmdline, Duration::from_secs(10)).await,
        "`{cmdline}` outlived its timed-out step"
    );
    rt.shutdown().await;
}

/// Wait (up to 5 s) for a process with this command line to appear; true if it did.
async fn started_within_5s(cmdline: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !process_running(cmdline) {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_kills_the_running_command() {
    let cmdline = "sleep 29.8231";
    let server = ScriptedLlm::start().await;
    server.push_all([
        plan_reply(&["[MANUS] Wait"]),
        Reply::tool("bash", json!({"command": cmdline})),
    ]);
    let dir = Scratch::new("cancel-kill");
    let rt = start(&server, &dir, &[]).await;
    let mut flow = submit(&rt, "Wait", SubmitOptions::default()).await;
    let mut saw_running = false;
    let outcome = tokio::time::timeout(GUARD, async {
        while let Some(e) = flow.next_event().await {
            if let FlowEvent::ToolCalled { .. } = e {
                saw_running = started_within_5s(cmdline).await;
                flow.cancel();
            }
        }
        flow.outcome().await
    })
    .await
    .unwrap();
    assert_eq!(outcome.status, FlowStatus::Cancelled);
    assert!(saw_running, "the command never started");
    assert!(
        gone(cmdline, Duration::from_secs(10)).await,
        "`{cmdline}` outlived its cancelled flow"
    );
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flow_timeout_ends_a_flow_whose_step_runs_on() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        plan_reply(&["[MANUS] Wait"]),
        Reply::tool(
            "bash",
            json!({"command": format!("sleep {}", NEVER_MS / 1000)}),
        ),
    ]);
    server.set_fallback(Some(Reply::text("fallback")));
    let dir = Scratch::new("flowtimeout");
    // Long enough that planning ends first on a loaded machine: the step is what runs on.
    let rt = start(&server, &dir, &[("flow.flow_timeout_secs", "4")]).await;
    let (events, outcome) = run(&rt, "Wait").await;
    rt.shutdown().await;

    assert_eq!(outcome.status, FlowStatus::TimedOut, "{outcome:#?}");
    assert!(
        outcome.reason.contains("flow_timeout_secs (4s)"),
        "{}",
        outcome.reason
    );
    assert_eq!(outcome.plan.steps[0].status, StepStatus::Failed);
    assert!(
        outcome.plan.steps[0].notes.contains("flow_timeout_secs"),
        "{}",
        outcome.plan.steps[0].notes
    );
    // The step was stopped mid-command (a command longer than GUARD, which `run` would
    // have hit had the flow waited for it): it never reported back.
    assert!(finished(&events).is_empty());
}

/// Every timeout key of the config, at the longest it allows (a week, in seconds).
const TIMEOUT_KEYS: [&str; 8] = [
    "tools.bash_timeout_secs",
    "tools.python_timeout_secs",
    "tools.ask_timeout_secs",
    "flow.step_timeout_secs",
    "flow.flow_timeout_secs",
    "mcp.call_timeout_secs",
    "mcp.connect_timeout_secs",
    "llm.timeout_secs",
];
const LONGEST_TIMEOUT: &str = "604800";

/// Timeouts at the longest the config allows run a flow, and so do settings built by hand
/// with `Duration::MAX` (the engine adds no configured duration to the clock unchecked);
/// a second more, or `i64::MAX`, is refused at the line that says it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_longest_timeouts_run_a_flow_and_longer_ones_are_refused() {
    let dir = Scratch::new("longest-timeouts");
    let longest: Vec<(&str, &str)> = TIMEOUT_KEYS.iter().map(|k| (*k, LONGEST_TIMEOUT)).collect();
    for hand_built in [false, true] {
        let server = ScriptedLlm::start().await;
        server.push_all([
            plan_reply(&["[MANUS] Say hi"]),
            Reply::tool("bash", json!({"command": "echo said-hi"})),
            done("Said hi."),
            Reply::text("Said hi."),
        ]);
        let text = config_with(&server, &dir.workspace(), &longest);
        let mut config = Config::from_text(&text, "test", None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.tools.bash_timeout, Duration::from_secs(604_800));
        if hand_built {
            config.tools.bash_timeout = Duration::MAX;
            config.tools.python_timeout = Duration::MAX;
            config.tools.ask_timeout = Duration::MAX;
            config.flow.step_timeout = Duration::MAX;
            config.flow.flow_timeout = Duration::MAX;
        }
        let rt = Runtime::builder().config(config).start().await.unwrap();
        let (_, outcome) = run(&rt, "Say hi").await;
        rt.shutdown().await;
        assert_eq!(outcome.status, FlowStatus::Completed, "{outcome:#?}");
        assert!(
            last_tool_text(&server.requests()[2]).contains("said-hi"),
            "hand built: {hand_built}"
        );
    }
    let server = ScriptedLlm::start().await;
    for key in TIMEOUT_KEYS {
        for bad in ["604801", "9223372036854775807", "0"] {
            let text = config_with(&server, &dir.workspace(), &[(key, bad)]);
            let e = Config::from_text(&text, "test", None).unwrap_err();
            let name = key.rsplit('.').next().unwrap_or(key);
            assert_eq!(
                e.line,
                Some(line_of(&text, &format!("{name} = {bad}"))),
                "{e}"
            );
            assert!(
                e.to_string().contains(&format!(
                    "{name} = {bad} is out of range: use 1 to 604800 seconds"
                )),
                "{e}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_during_planning_is_prompt() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        plan_reply(&["[MANUS] Do it"]).delay(NEVER_MS),
        done("Did it."),
        Reply::text("Did it."),
    ]);
    let dir = Scratch::new("cancel-planning");
    let rt = start(&server, &dir, &[]).await;
    let mut flow = submit(&rt, "Do it", SubmitOptions::default()).await;
    let mut events = vec![];
    let outcome = tokio::time::timeout(GUARD, async {
        while let Some(e) = flow.next_event().await {
            if let FlowEvent::FlowStarted { .. } = e {
                flow.cancel();
            }
            events.push(e);
        }
        flow.outcome().await
    })
    .await
    .unwrap();
    rt.shutdown().await;
    assert_eq!(outcome.status, FlowStatus::Cancelled);
    assert!(
        started(&events).is_empty(),
        "a step started after the flow was cancelled: {:?}",
        started(&events)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flow_timeout_covers_planning() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        plan_reply(&["[MANUS] Do it"]).delay(NEVER_MS),
        done("Did it."),
        Reply::text("Did it."),
    ]);
    let dir = Scratch::new("timeout-planning");
    let rt = start(&server, &dir, &[("flow.flow_timeout_secs", "1")]).await;
    let (events, outcome) = run(&rt, "Do it").await;
    rt.shutdown().await;
    assert_eq!(outcome.status, FlowStatus::TimedOut);
    assert!(
        started(&events).is_empty(),
        "a step started after the flow timed out: {:?}",
        started(&events)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_counts_the_calls_of_a_timed_out_step() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        plan_reply(&["[MANUS] Wait"]),
        Reply::tool("bash", json!({"command": "sleep 5"})),
        Reply::text("Timed out."),
    ]);
    let dir = Scratch::new("timeout-usage");
    let rt = start(
        &server,
        &dir,
        &[
            ("flow.step_timeout_secs", "1"),
            ("flow.max_step_retries", "0"),
        ],
    )
    .await;
    let (events, outcome) = run(&rt, "Wait").await;
    rt.shutdown().await;
    let llm_calls = events
        .iter()
        .filter(|e| matches!(e, FlowEvent::LlmCalled { .. }))
        .count() as u64;
    assert_eq!(server.request_count(), 3);
    assert_eq!(llm_calls, 3, "the events report every call");
    assert_eq!(
        outcome.plan.steps[0].usage.calls, 1,
        "the step made one call"
    );
    assert_eq!(
        outcome.usage.calls, 3,
        "the flow's usage misses the timed-out step's call"
    );
}
