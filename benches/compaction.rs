//! Memory compaction: the tokens a long step sends to the model, with and without it.
//!
//! The step is `scenario::long_step`: 60 rounds whose tool outputs add up to far more than
//! the model's input limit, a fact planted in the first output, recalled at the end. It runs
//! three ways: keeping everything (no caps), dropping the oldest rounds at the memory's
//! token cap (`memory_tokens`, today's default behaviour), and compacting at half of it
//! (`compact_at = 0.5`). For each, the bench counts the input tokens of every request the
//! agent sent (with the model's tokenizer, from the requests the scripted server received)
//! and prints the total, the largest request, and whether the planted fact is in the last
//! request (kept all along, or read back with `recall`).
//!
//! `cargo bench --bench compaction` prints the figures; it asserts nothing.

#[path = "../tests/support/mod.rs"]
mod support;

use manus_rt::engine::llm::Message;
use manus_rt::engine::llm::tokens::{count_messages, encoding_for};
use manus_rt::{Config, FlowMode, Runtime, SubmitOptions};
use support::llm_server::{Reply, ScriptedLlm};
use support::scenario::{FACT, Scratch, config_with, long_step};

struct Figures {
    status: String,
    requests: usize,
    /// The compaction summaries' own calls, and their input tokens.
    summary_calls: usize,
    summary_tokens: usize,
    total: usize,
    largest: usize,
    fact_reached: bool,
}

async fn one(name: &str, overrides: &[(&str, &str)]) -> Figures {
    let server = ScriptedLlm::start().await;
    let (_, responder) = long_step(Reply::text(
        "Ran seq many times; the first output (recall r1) named the ledger file.",
    ));
    server.set_responder(Some(responder));
    let dir = Scratch::new(name);
    let mut all = vec![("agents.manus.max_steps", "60"), ("llm.max_retries", "0")];
    all.extend_from_slice(overrides);
    let text = config_with(&server, &dir.workspace(), &all);
    let config = Config::from_text(&text, "bench", None).expect("bench config");
    let rt = Runtime::builder().config(config).start().await.unwrap();
    let options = SubmitOptions {
        mode: FlowMode::Single,
        ..Default::default()
    };
    let flow = rt.submit("work through the ledger", options).await.unwrap();
    let outcome = flow.outcome().await;
    rt.shutdown().await;
    let bpe = encoding_for("gpt-4o-mini");
    let tokens = |r: &support::llm_server::Recorded| {
        let messages: Vec<Message> = r
            .messages()
            .iter()
            .filter_map(|m| serde_json::from_value(m.clone()).ok())
            .collect();
        count_messages(bpe, &messages.iter().collect::<Vec<_>>())
    };
    let (agent, summaries): (Vec<_>, Vec<_>) = server
        .requests()
        .into_iter()
        .partition(|r| !r.tool_names().is_empty());
    let sizes: Vec<usize> = agent.iter().map(tokens).collect();
    Figures {
        status: format!("{:?}", outcome.status),
        requests: agent.len(),
        summary_calls: summaries.len(),
        summary_tokens: summaries.iter().map(tokens).sum(),
        total: sizes.iter().sum(),
        largest: sizes.iter().copied().max().unwrap_or(0),
        fact_reached: agent
            .last()
            .is_some_and(|r| r.body.to_string().contains(FACT)),
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let runs = [
        (
            "keep everything (no message or token cap)",
            vec![
                ("agents.manus.memory_tokens", "10000000"),
                ("agents.manus.memory_messages", "100000"),
            ],
        ),
        (
            "drop oldest rounds at memory_tokens 4,000",
            vec![("agents.manus.memory_tokens", "4000")],
        ),
        (
            "compact at 0.5 of memory_tokens 4,000",
            vec![
                ("agents.manus.memory_tokens", "4000"),
                ("agents.manus.compact_at", "0.5"),
            ],
        ),
    ];
    println!(
        "compaction: one 60-round step, ~800-token tool outputs, a fact planted in round 1 and recalled in round 59"
    );
    for (name, overrides) in runs {
        let f = one("bench-compaction", &overrides).await;
        println!(
            "  {name:<44} {:>3} requests {:>9} input tokens, largest {:>6}; {:>2} summary calls {:>6} tokens; fact in the last request: {} ({})",
            f.requests,
            f.total,
            f.largest,
            f.summary_calls,
            f.summary_tokens,
            f.fact_reached,
            f.status
        );
    }
}
