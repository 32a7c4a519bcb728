//! The shipped example: `run-flow` on the embedded defaults replays the recorded cassette
//! through the real tools and completes. The ignored test re-records that cassette.

use crate::support;

use std::process::Command;

use support::llm_server::ScriptedLlm;
use support::scenario::{EXAMPLE_TASK, NO_MODELS_NEARBY, Scratch, config_text, example_script};

const BIN: &str = env!("CARGO_BIN_EXE_manus-rt");

#[test]
fn embedded_default_replays_the_example_flow() {
    // No config/ here: the binary falls back to its embedded example config and cassette.
    let dir = Scratch::new("embedded");
    let out = Command::new(BIN)
        .current_dir(dir.path())
        .env_remove("OPENAI_API_KEY")
        .envs(NO_MODELS_NEARBY)
        .args(["run-flow", EXAMPLE_TASK, "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stderr:\n{stderr}");
    assert!(
        stderr.contains("replayed from a recorded cassette"),
        "{stderr}"
    );
    let outcome: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(outcome["status"], "completed");
    let steps = outcome["plan"]["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2);
    assert_eq!(steps[0]["agent"], "manus");
    assert_eq!(steps[1]["agent"], "data_analysis");
    // The tools really ran: the script and its output are on disk.
    let primes = std::fs::read_to_string(dir.path().join("workspace/primes.txt")).unwrap();
    let nums: Vec<u32> = primes
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!((nums.len(), nums.iter().sum::<u32>()), (25, 1060));
}

#[test]
fn the_replay_refuses_a_different_task() {
    let dir = Scratch::new("embedded-other");
    let out = Command::new(BIN)
        .current_dir(dir.path())
        .env_remove("OPENAI_API_KEY")
        .envs(NO_MODELS_NEARBY)
        .args(["run-flow", "Book me a flight"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("recorded for") && stderr.contains("real model"),
        "{stderr}"
    );
}

/// Regenerate config/cassettes/example-flow.jsonl:
/// `cargo test --test it -- --ignored record_example_cassette`
#[tokio::test(flavor = "multi_thread")]
#[ignore]
async fn record_example_cassette() {
    let server = ScriptedLlm::start().await;
    server.push_all(example_script());
    let dir = Scratch::new("record");
    let config = dir.write_config(&config_text(&server, &dir.workspace(), ""));
    let cassette = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("config/cassettes/example-flow.jsonl");
    let out = tokio::process::Command::new(BIN)
        .current_dir(dir.path())
        .arg("--config")
        .arg(&config)
        .args(["run-flow", EXAMPLE_TASK, "--record"])
        .arg(&cassette)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let body = std::fs::read_to_string(&cassette).unwrap();
    let header = "# The example flow of the README. These model answers were scripted for the example (tests/support/scenario.rs)\n\
                  # and recorded by manus-rt --record; replaying them runs the real tools. Regenerate with:\n\
                  # cargo test --test it -- --ignored record_example_cassette\n";
    std::fs::write(&cassette, format!("{header}{body}")).unwrap();
}
