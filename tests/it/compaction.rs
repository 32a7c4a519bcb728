//! Memory compaction on a long step, in-process against the scripted model: a 60-round
//! step whose tool outputs add up to more than three times the model's input limit
//! completes with every request under that limit (the client refuses any request over
//! `max_input_tokens`, which would fail the step); old outputs become stubs that `recall`
//! reads back in full, so a fact planted in the first output reaches the request that
//! needs it; the middle rounds are folded into the model's summary; a tool call is never
//! parted from its result; and a summary call that fails falls back to dropping old rounds,
//! never to an error.

use crate::support;

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use manus_rt::{Config, FlowEvent, FlowMode, FlowStatus, Runtime, SubmitOptions};
use support::llm_server::{Recorded, Reply, ScriptedLlm};
use support::scenario::{FACT, ROUNDS, Scratch, config_with, last_tool_text, long_step};

async fn run(
    server: &ScriptedLlm,
    name: &str,
    extra: &[(&str, &str)],
) -> (Vec<FlowEvent>, manus_rt::FlowOutcome) {
    let dir = Scratch::new(name);
    let rounds = ROUNDS.to_string();
    let mut overrides = vec![
        ("llm.max_input_tokens", "6000"),
        ("llm.max_retries", "0"),
        ("agents.manus.max_steps", rounds.as_str()),
        ("agents.manus.memory_tokens", "4000"),
        ("agents.manus.compact_at", "0.5"),
    ];
    overrides.extend_from_slice(extra);
    let text = config_with(server, &dir.workspace(), &overrides);
    let config = Config::from_text(&text, "test", None).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let rt = Runtime::builder().config(config).start().await.unwrap();
    let options = SubmitOptions {
        mode: FlowMode::Single,
        ..Default::default()
    };
    let mut flow = rt.submit("work through the ledger", options).await.unwrap();
    let mut events = vec![];
    let outcome = tokio::time::timeout(Duration::from_secs(120), async {
        while let Some(e) = flow.next_event().await {
            events.push(e);
        }
        flow.outcome().await
    })
    .await
    .expect("the flow ended in time");
    rt.shutdown().await;
    (events, outcome)
}

/// Every tool message of a request follows the assistant message that made its call.
fn pairs_whole(r: &Recorded) {
    let mut asked: HashSet<String> = HashSet::new();
    for m in r.messages() {
        if m["role"] == "assistant" {
            asked = m["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["id"].as_str().map(str::to_string))
                .collect();
        }
        if m["role"] == "tool" {
            let id = m["tool_call_id"].as_str().unwrap_or_default();
            assert!(asked.contains(id), "a result without its call: {m}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_step_stays_within_the_limit_and_keeps_what_it_found() {
    let server = ScriptedLlm::start().await;
    server.set_recording(true);
    let (rounds, responder) = long_step(Reply::text(
        "Ran seq many times; the first output (recall r1) named the ledger file.",
    ));
    server.set_responder(Some(responder));
    // The summaries come from a cheaper profile of their own.
    let cheap = [
        ("llm.cheap.model", "\"cheap-model\""),
        ("agents.manus.compact_llm", "\"cheap\""),
    ];
    let (events, outcome) = run(&server, "compact-long", &cheap).await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    assert_eq!(rounds.load(Ordering::SeqCst), ROUNDS);
    let all = server.requests();
    let agent: Vec<&Recorded> = all.iter().filter(|r| !r.tool_names().is_empty()).collect();
    assert_eq!(agent.len(), ROUNDS);
    let summaries: Vec<&Recorded> = all.iter().filter(|r| r.tool_names().is_empty()).collect();
    assert!(!summaries.is_empty());
    assert!(summaries.iter().all(|r| r.model() == Some("cheap-model")));
    assert!(agent.iter().all(|r| r.model() == Some("gpt-4o-mini")));
    for r in &agent {
        pairs_whole(r);
    }
    // The outputs, in full, were more than three times the limit.
    let outputs: usize = agent.iter().map(|r| last_tool_text(r).len()).sum();
    assert!(outputs > 3 * 6000, "outputs of {outputs} bytes");
    // The recall brought the first output back, whole, to the request after it.
    let last = agent.last().unwrap();
    assert!(
        last_tool_text(last).contains(FACT),
        "{}",
        last_tool_text(last)
    );
    // Outputs were pruned and the middle folded into the model's summary.
    let compacted: Vec<(usize, usize, usize, usize)> = events
        .iter()
        .filter_map(|e| match e {
            FlowEvent::Compacted {
                tokens_before,
                tokens_after,
                pruned,
                folded,
                ..
            } => Some((*tokens_before, *tokens_after, *pruned, *folded)),
            _ => None,
        })
        .collect();
    assert!(compacted.iter().any(|c| c.2 > 0), "{compacted:?}");
    assert!(compacted.iter().any(|c| c.3 > 0), "{compacted:?}");
    assert!(compacted.iter().all(|c| c.1 <= c.0), "{compacted:?}");
    let summary_seen = agent.iter().any(|r| {
        r.messages().iter().any(|m| {
            m["content"]
                .as_str()
                .is_some_and(|t| t.contains("the first output (recall r1)"))
        })
    });
    assert!(
        summary_seen,
        "the summary is in the requests after the fold"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_summary_falls_back_to_dropping_old_rounds() {
    let server = ScriptedLlm::start().await;
    let (_, responder) = long_step(Reply::status(500));
    server.set_responder(Some(responder));
    let (events, outcome) = run(&server, "compact-no-summary", &[]).await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    assert!(
        server.requests().iter().any(|r| r.tool_names().is_empty()),
        "a summary was asked for, and failed"
    );
    assert!(
        events
            .iter()
            .all(|e| !matches!(e, FlowEvent::Compacted { folded, .. } if *folded > 0))
    );
    for r in server
        .requests()
        .iter()
        .filter(|r| !r.tool_names().is_empty())
    {
        pairs_whole(r);
    }
}

/// A finished step's notes longer than the plan view shows: the agent has them summarised,
/// the next step's prompt carries the summary (with the number planted in the middle of the
/// notes) instead of the notes cut to their ends, the plan keeps the notes whole, and a
/// `Compacted` event with `notes` says so. When the summary call fails, the next step sees
/// the notes cut and the flow still completes.
#[tokio::test(flavor = "multi_thread")]
async fn long_notes_are_summarised_for_later_steps() {
    for summary_works in [true, false] {
        let server = ScriptedLlm::start().await;
        let long_notes = format!(
            "{} The invoice total is 73,912.40 EUR. {}",
            "Checked the ledger row by row. ".repeat(60),
            "Every row reconciled. ".repeat(60)
        );
        let brief = "ledger.csv reconciled; the invoice total is 73,912.40 EUR.";
        server.push_all([
            support::scenario::plan_reply(&[
                "[MANUS] reconcile ledger.csv",
                "[MANUS] write the invoice",
            ]),
            Reply::tool("terminate", serde_json::json!({"status": "success"}))
                .with_text(&long_notes),
            if summary_works {
                Reply::text(brief)
            } else {
                Reply::status(400)
            },
            Reply::tool("terminate", serde_json::json!({"status": "success"}))
                .with_text("invoice written"),
            Reply::text("All done."),
        ]);
        let dir = Scratch::new("long-notes");
        let text = config_with(&server, &dir.workspace(), &[("llm.max_retries", "0")]);
        let config = Config::from_text(&text, "test", None).unwrap();
        let rt = Runtime::builder().config(config).start().await.unwrap();
        let mut flow = rt
            .submit("reconcile and invoice", SubmitOptions::default())
            .await
            .unwrap();
        let mut events = vec![];
        while let Some(e) = flow.next_event().await {
            events.push(e);
        }
        let outcome = flow.outcome().await;
        rt.shutdown().await;
        assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
        assert_eq!(
            outcome.plan.steps[0].notes,
            long_notes.trim(),
            "the plan keeps the notes whole"
        );
        let second = server
            .requests()
            .into_iter()
            .find(|r| r.first_user_text().contains("Your job now is step 1 only"))
            .unwrap()
            .first_user_text();
        let briefed = events.iter().any(|e| {
            matches!(
                e,
                FlowEvent::Compacted {
                    notes: true,
                    step: 0,
                    ..
                }
            )
        });
        if summary_works {
            assert!(second.contains(brief), "{second}");
            assert!(!second.contains("characters cut"), "{second}");
            assert!(briefed);
        } else {
            // Cut to its ends, the notes lose the number in their middle.
            assert!(
                second.contains("characters cut") && !second.contains("73,912.40"),
                "{second}"
            );
            assert!(!briefed);
        }
    }
}
