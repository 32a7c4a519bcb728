//! `manus-rt mcp-server` against the official Python SDK's client beyond plain tool calls
//! (tests/peers/mcp_server_features.py): both protocol eras (the initialize handshake over
//! stdio, the stateless 2026-07-28 core over HTTP), every tool's output schema and a
//! structured result the SDK checks against it, the workspace's files as resources (read,
//! refused outside the workspace, through a link, or above the size limit), progress
//! notifications from a call that runs a few seconds, and a call the client cancels, which
//! stops what it was running.

use crate::support;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use support::llm_server::ScriptedLlm;
use support::scenario::{Scratch, config_with, free_port, listening_soon};

use super::mcp::peers;

const BIN: &str = env!("CARGO_BIN_EXE_manus-rt");

/// A workspace with a text file, a binary file in a folder, a file above the resource
/// size limit (4 MiB) and a link to a file outside.
fn fill(dir: &Scratch) {
    let ws = dir.workspace();
    std::fs::create_dir_all(ws.join("sub")).unwrap();
    std::fs::write(ws.join("a.txt"), "hello\n").unwrap();
    std::fs::write(ws.join("sub/b.bin"), [0u8, 0xff, 1]).unwrap();
    std::fs::write(ws.join("big.dat"), vec![b'x'; 5_000_000]).unwrap();
    std::fs::write(dir.path().join("secret.txt"), "not yours\n").unwrap();
    std::os::unix::fs::symlink(dir.path().join("secret.txt"), ws.join("link")).unwrap();
}

/// Run the features check in `mode` against `target`; its JSON report.
async fn features(mode: &str, target: &[&str]) -> Value {
    let (_, python) = peers();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/mcp_server_features.py");
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(python)
            .arg(script)
            .arg(mode)
            .args(target)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the features check finished")
    .unwrap();
    assert!(
        out.status.success(),
        "features check failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn assert_features(report: &Value, workspace: &Path) {
    // Every tool declares the structured result, and a call gives one.
    let schemas = report["output_schemas"].as_object().unwrap();
    assert_eq!(schemas.len(), 4, "{report}");
    for (tool, schema) in schemas {
        assert_eq!(
            schema["required"],
            serde_json::json!(["ok", "output", "elapsed_ms"]),
            "{tool}: {schema}"
        );
    }
    assert_eq!(report["structured"]["ok"], true, "{report}");
    assert_eq!(report["structured"]["output"], "structured", "{report}");
    assert!(report["structured"]["elapsed_ms"].is_u64(), "{report}");
    assert_eq!(report["text"], "structured");

    // A three-second call reports, at least twice, how long it has run.
    let progress = report["progress"].as_array().unwrap();
    assert!(progress.len() >= 2, "{report}");
    assert!(
        progress[0]["message"]
            .as_str()
            .unwrap()
            .starts_with("`bash` has run for"),
        "{report}"
    );
    let values: Vec<f64> = progress
        .iter()
        .map(|p| p["progress"].as_f64().unwrap())
        .collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");

    // The files, and only they, nearest first; the link is not among them.
    let root = workspace.canonicalize().unwrap();
    let names: Vec<&str> = report["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a.txt", "big.dat", "sub/b.bin"], "{report}");
    assert_eq!(
        report["resources"][0]["uri"],
        format!("file://{}/a.txt", root.display())
    );
    assert_eq!(report["resources"][1]["size"], 5_000_000);
    let read = &report["read"];
    assert_eq!(read["a.txt"]["text"], "hello\n", "{report}");
    assert_eq!(read["sub/b.bin"]["blob"], "AP8B", "{report}");
    assert_eq!(read["sub/b.bin"]["mime"], "application/octet-stream");
    assert!(
        read["big.dat"]["error"]
            .as_str()
            .unwrap()
            .contains("is 5000000 bytes; resources are read up to 4194304 bytes"),
        "{report}"
    );
    let outside = &report["outside"];
    for label in ["passwd", "dotdot"] {
        assert!(
            outside[label]
                .as_str()
                .unwrap()
                .contains("is outside the workspace"),
            "{label}: {report}"
        );
    }
    assert!(
        outside["link"].as_str().unwrap().contains("symbolic link"),
        "{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_client_gets_schemas_resources_and_progress_over_stdio() {
    let llm = ScriptedLlm::start().await;
    let dir = Scratch::new("mcp-serve-features-stdio");
    fill(&dir);
    let config = dir.write_config(&config_with(&llm, &dir.workspace(), &[]));
    let target = [
        "stdio",
        BIN,
        "--config",
        config.to_str().unwrap(),
        "mcp-server",
    ];
    let report = features("legacy", &target).await;
    assert_eq!(report["version"], "2025-11-25", "{report}");
    assert_features(&report, &dir.workspace());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_client_speaks_2026_07_28_to_our_http_server() {
    let llm = ScriptedLlm::start().await;
    let dir = Scratch::new("mcp-serve-features-http");
    fill(&dir);
    let config = dir.write_config(&config_with(&llm, &dir.workspace(), &[]));
    let port = free_port();
    let child = tokio::process::Command::new(BIN)
        .current_dir(dir.path())
        .env_remove("MANUS_API_TOKENS")
        .arg("--config")
        .arg(&config)
        .args(["mcp-server", "--transport", "http", "--bind"])
        .arg(format!("127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Killed (SIGKILL, by its PID) when dropped.
    let server = child;
    assert!(
        listening_soon(port).await,
        "mcp-server did not listen on {port}"
    );
    let url = format!("http://127.0.0.1:{port}/mcp");
    let report = features("2026-07-28", &["http", &url]).await;
    assert_eq!(
        report["version"],
        serde_json::json!(["2026-07-28"]),
        "{report}"
    );
    assert_features(&report, &dir.workspace());
    drop(server);
}

/// A client that cancels a running call (`notifications/cancelled`, spoken here as raw
/// JSON-RPC over stdio) stops what the tool was running: the background `sleep` a bash
/// call started is gone within seconds, no answer to the cancelled call is sent, and the
/// session's next call runs in a fresh worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_stops_what_the_tool_was_running() {
    /// A duration no other process on the machine sleeps for.
    const NAP: &str = "4321.0987";
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let llm = ScriptedLlm::start().await;
    let dir = Scratch::new("mcp-serve-cancel");
    // Longer than the test waits, so only the cancel can stop the call.
    let patient = [("tools.bash_timeout_secs", "600")];
    let config = dir.write_config(&config_with(&llm, &dir.workspace(), &patient));
    let mut server = tokio::process::Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .arg("mcp-server")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut to = server.stdin.take().unwrap();
    let mut from = BufReader::new(server.stdout.take().unwrap()).lines();
    let mut said = Vec::<Value>::new();
    let mut send = async |message: Value| {
        to.write_all(format!("{message}\n").as_bytes())
            .await
            .unwrap();
        to.flush().await.unwrap();
    };
    send(
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "cancel-test", "version": "1"}}}),
    )
    .await;
    let hello: Value = serde_json::from_str(&from.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(hello["id"], 1, "{hello}");
    send(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    let call = format!("sleep {NAP} & wait");
    send(
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "bash", "arguments": {"command": call}}}),
    )
    .await;
    // The sleep, found by its own duration on this host (the confined shell has a process
    // namespace of its own, so it cannot tell its host PID).
    let sleeper = || {
        let wanted = format!("sleep\0{NAP}\0");
        std::fs::read_dir("/proc").unwrap().flatten().find_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let zombie = stat.rsplit(')').next()?.trim_start().starts_with('Z');
            (cmdline == wanted.as_bytes() && !zombie).then_some(pid)
        })
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let pid = loop {
        if let Some(pid) = sleeper() {
            break pid;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "bash never started the sleep"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    send(
        serde_json::json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 2, "reason": "the test changed its mind"}}),
    )
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while sleeper().is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the sleep {pid} the cancelled call started still runs"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    send(
        serde_json::json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "bash", "arguments": {"command": "echo still-serving"}}}),
    )
    .await;
    let answer = loop {
        let line = tokio::time::timeout(Duration::from_secs(60), from.next_line())
            .await
            .expect("an answer to the next call")
            .unwrap()
            .expect("the server is still there");
        let message: Value = serde_json::from_str(&line).unwrap();
        if message["id"] == 3 {
            break message;
        }
        said.push(message);
    };
    assert!(
        answer["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("still-serving")),
        "{answer}"
    );
    assert!(said.iter().all(|m| m["id"] != 2), "{said:?}");
    server.kill().await.unwrap();
}
