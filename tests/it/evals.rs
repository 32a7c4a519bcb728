//! `manus-rt eval`: the shipped suite passes offline from its recorded cassettes (the
//! regression gate), a changed trajectory or a wrong answer fails its case and says why,
//! two reports compare, a bad case file is named with its line, and against the real
//! llama-server a tiny model's failures are reported as failures, not as errors of the
//! harness. The ignored test re-records the suite's cassettes from each case's script.json.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::support::llama;
use crate::support::llm_server::{Reply, ScriptedLlm};
use crate::support::scenario::Scratch;

const BIN: &str = env!("CARGO_BIN_EXE_manus-rt");

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn suite() -> PathBuf {
    repo().join("evals/basic")
}

/// `manus-rt --config CONFIG eval ARGS… --out DIR/runs`, from `dir`.
fn eval(dir: &Scratch, config: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .current_dir(dir.path())
        .arg("--config")
        .arg(config)
        .arg("eval")
        .args(args)
        .arg("--out")
        .arg(dir.path().join("runs"))
        .output()
        .unwrap()
}

/// The `--json` report of an eval, with its stderr for messages.
fn report(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no report ({e}); stderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Copy the case `name` of the shipped suite into `to` (its files, site and cassette too).
fn copy_case(name: &str, to: &Path) {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), &target).unwrap();
            }
        }
    }
    copy(&suite().join(name), &to.join(name));
}

#[test]
fn the_basic_suite_passes_offline_from_its_cassettes() {
    let dir = Scratch::new("eval-basic");
    let config = repo().join("config/eval-replay.toml");
    let out = eval(
        &dir,
        &config,
        &[suite().to_str().unwrap(), "--json", "--parallel", "2"],
    );
    let report = report(&out);
    let failed: Vec<String> = report["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["passed"] != true)
        .map(|r| format!("{}: {} {}", r["case"], r["error"], r["verdicts"]))
        .collect();
    assert!(failed.is_empty(), "failed runs:\n{}", failed.join("\n"));
    assert_eq!(out.status.code(), Some(0));
    let cases = report["cases"].as_array().unwrap().len();
    assert!((15..=25).contains(&cases), "{cases} cases");
    assert_eq!(report["totals"]["pass_at_1"], 1.0);
    // Every run was a real flow: model calls answered from the cassette, tools that ran.
    for run in report["runs"].as_array().unwrap() {
        assert!(run["model_calls"].as_u64().unwrap() >= 2, "{run}");
        assert!(!run["tool_calls"].as_array().unwrap().is_empty(), "{run}");
    }
}

/// The suite as a gate: a case whose expected trajectory the run does not follow fails,
/// with the calls made; a wrong expected answer fails the answer check; neither is an
/// error of the harness. The two reports then compare.
#[test]
fn a_changed_trajectory_fails_its_case_and_says_why() {
    let dir = Scratch::new("eval-gate");
    let cases = dir.path().join("suite");
    copy_case("loan_payment", &cases);
    let config = repo().join("config/eval-replay.toml");
    let good = eval(&dir, &config, &[cases.to_str().unwrap(), "--json"]);
    assert_eq!(
        good.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&good.stderr)
    );
    std::fs::write(dir.path().join("good.json"), &good.stdout).unwrap();

    let case_toml = cases.join("loan_payment/case.toml");
    let text = std::fs::read_to_string(&case_toml).unwrap();
    let broken = format!(
        "{text}\n[[checks]]\nkind = \"trajectory\"\nmatch = \"exact\"\ntools = [\"bash\", \"terminate\"]\n\n\
         [[checks]]\nkind = \"answer\"\nmatches = \"(?i)no payment at all\"\n"
    );
    std::fs::write(&case_toml, broken).unwrap();
    let bad = eval(&dir, &config, &[cases.to_str().unwrap(), "--json"]);
    assert_eq!(bad.status.code(), Some(1));
    let report = report(&bad);
    let run = &report["runs"][0];
    assert_eq!(run["passed"], false);
    assert!(run.get("error").is_none(), "{run}");
    assert_eq!(run["status"], "completed");
    let verdict = |name: &str| {
        run["verdicts"]
            .as_array()
            .unwrap()
            .iter()
            .rfind(|v| v["check"] == name)
            .cloned()
            .unwrap()
    };
    let trajectory = verdict("trajectory");
    assert_eq!(trajectory["passed"], false);
    let detail = trajectory["detail"].as_str().unwrap();
    assert!(
        detail.contains("expected exactly: bash, terminate") && detail.contains("the calls were"),
        "{detail}"
    );
    assert_eq!(verdict("answer")["passed"], false);
    std::fs::write(dir.path().join("bad.json"), &bad.stdout).unwrap();

    // The table says the same to a person.
    let table = eval(&dir, &config, &[cases.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.contains("✗ trajectory (run 1): expected exactly"),
        "{text}"
    );
    assert!(text.contains("0 of 1 runs passed"), "{text}");

    let compared = Command::new(BIN)
        .current_dir(dir.path())
        .args(["eval", "--compare", "good.json", "bad.json"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&compared.stdout);
    assert!(
        compared.status.success(),
        "{}",
        String::from_utf8_lossy(&compared.stderr)
    );
    assert!(
        text.contains("WORSE") && text.contains("0 case(s) better, 1 worse"),
        "{text}"
    );
}

#[test]
fn a_bad_case_file_is_named_with_its_line() {
    let dir = Scratch::new("eval-bad-case");
    let case = dir.path().join("suite/broken");
    std::fs::create_dir_all(&case).unwrap();
    std::fs::write(
        case.join("case.toml"),
        "task = \"t\"\n\n[[checks]]\nkind = \"trajectory\"\nmatch = \"sometimes\"\ntools = [\"bash\"]\n",
    )
    .unwrap();
    let config = repo().join("config/eval-replay.toml");
    let out = eval(&dir, &config, &[dir.path().join("suite").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("case.toml")
            && stderr.contains("line 3")
            && stderr.contains(
                "unknown variant `sometimes`, expected one of `exact`, `in_order`, `any_order`"
            ),
        "{stderr}"
    );
}

/// Against the real llama-server, a tiny model's runs are made and judged: each has a
/// status, model calls and verdicts, and passes exactly when its checks do; none is an error
/// of the harness.
#[test]
fn a_tiny_models_failures_are_failures_not_harness_errors() {
    let Some(url) = llama::url() else { return };
    let dir = Scratch::new("eval-llama");
    let config = dir.write_config(&llama::config_text(&url, "", "[store]\nenabled = false\n"));
    let out = eval(
        &dir,
        &config,
        &[
            suite().to_str().unwrap(),
            "--case",
            "create_file",
            "--case",
            "single_agent",
            "--json",
        ],
    );
    let report = report(&out);
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{report}");
    for run in runs {
        assert!(run.get("error").is_none(), "{run}");
        assert!(run["model_calls"].as_u64().unwrap() >= 1, "{run}");
        assert!(run["input_tokens"].as_u64().unwrap() > 0, "{run}");
        assert!(!run["status"].as_str().unwrap().is_empty(), "{run}");
        let verdicts = run["verdicts"].as_array().unwrap();
        let all = verdicts.iter().all(|v| v["passed"] == true);
        assert_eq!(run["passed"], all, "{run}");
    }
    let passed = runs.iter().all(|r| r["passed"] == true);
    assert_eq!(out.status.code(), Some(if passed { 0 } else { 1 }));
    assert!(
        report["models"][0].as_str().unwrap().contains("smollm2"),
        "{report}"
    );
}

/// One reply of a script.json: `{"text"}`, `{"tool", "args", "text"?}` or `{"calls", "text"?}`,
/// with an optional `"usage": [prompt, completion]`.
fn reply_of(v: &Value) -> Reply {
    let text = v["text"].as_str();
    let mut reply = if let Some(tool) = v["tool"].as_str() {
        Reply::tool(tool, v["args"].clone())
    } else if let Some(calls) = v["calls"].as_array() {
        Reply::tools(
            calls
                .iter()
                .map(|c| (c[0].as_str().unwrap(), c[1].clone()))
                .collect(),
        )
    } else {
        Reply::text(text.expect("a reply with no text, tool or calls"))
    };
    if let Some(t) = text
        && (v.get("tool").is_some() || v.get("calls").is_some())
    {
        reply = reply.with_text(t);
    }
    if let Some([p, c]) = v["usage"].as_array().map(Vec::as_slice) {
        reply = reply.usage(p.as_u64().unwrap(), c.as_u64().unwrap());
    }
    reply
}

/// Re-record every case of evals/basic that has a script.json, through the real runtime
/// and tools, with the suite's own config pointed at the scripted server:
/// `cargo test --test it -- --ignored record_eval_cassettes` (`EVAL_CASE=name` for one).
#[tokio::test(flavor = "multi_thread")]
#[ignore]
async fn record_eval_cassettes() {
    let only = std::env::var("EVAL_CASE").ok();
    let mut names: Vec<String> = std::fs::read_dir(suite())
        .unwrap()
        .flatten()
        .filter(|e| e.path().join("script.json").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| only.as_ref().is_none_or(|o| o == n))
        .collect();
    names.sort();
    assert!(!names.is_empty(), "no case to record");
    for name in names {
        let script: Value = serde_json::from_str(
            &std::fs::read_to_string(suite().join(&name).join("script.json")).unwrap(),
        )
        .unwrap();
        let server = ScriptedLlm::start().await;
        if let Some(steps) = script["steps"].as_object() {
            for (key, replies) in steps {
                server.push_for(key, replies.as_array().unwrap().iter().map(reply_of));
            }
        }
        server.push_all(script["replies"].as_array().unwrap().iter().map(reply_of));
        let dir = Scratch::new(&format!("eval-record-{name}"));
        let mut config: toml::Table =
            std::fs::read_to_string(repo().join("config/eval-replay.toml"))
                .unwrap()
                .parse()
                .unwrap();
        config.insert(
            "llm".into(),
            toml::toml! {
                api_type = "openai"
                model = "scripted"
                api_key = "none"
                max_retries = 0
            }
            .into(),
        );
        config["llm"]
            .as_table_mut()
            .unwrap()
            .insert("base_url".into(), server.base_url().into());
        let config = dir.write_config(&config.to_string());
        let out = tokio::process::Command::new(BIN)
            .current_dir(dir.path())
            .arg("--config")
            .arg(&config)
            .args([
                "eval",
                suite().to_str().unwrap(),
                "--record",
                "--json",
                "--case",
                &name,
            ])
            .arg("--out")
            .arg(dir.path().join("runs"))
            .output()
            .await
            .unwrap();
        let report = report(&out);
        let run = report["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["case"] == name.as_str())
            .cloned()
            .unwrap();
        assert_eq!(
            run["passed"], true,
            "{name} did not pass while recording: {run}"
        );
        let left = server.remaining() + server.remaining_keyed();
        assert_eq!(left, 0, "{name}: script replies left unasked");
    }
}
