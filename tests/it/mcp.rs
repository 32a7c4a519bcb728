//! MCP both ways, against the official peers scripts/test.sh installs into target/test-peers:
//! the reference server `@modelcontextprotocol/server-everything` (npm) over stdio, streamable
//! HTTP and legacy SSE; a server written with the official Python SDK (tests/peers) that
//! changes its tool list mid-session and dies on request; and the Python SDK's client
//! talking to `manus-rt mcp-server` over stdio and HTTP.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use manus_rt::{Config, FlowStatus};
use serde_json::{Value, json};
use support::llm_server::{Reply, ScriptedLlm};
use support::scenario::{
    Scratch, config_with, done, free_port, listening_soon, observation, start_single,
};

const BIN: &str = env!("CARGO_BIN_EXE_manus-rt");

/// The reference server's entry point and the Python with the SDK, as scripts/test.sh set them.
pub(crate) fn peers() -> (PathBuf, PathBuf) {
    let get = |key: &str| {
        PathBuf::from(std::env::var(key).unwrap_or_else(|_| {
            panic!(
                "{key} is not set: run the suite with scripts/test.sh, which installs the MCP peers"
            )
        }))
    };
    (
        get("MANUS_TEST_MCP_EVERYTHING"),
        get("MANUS_TEST_MCP_PYTHON"),
    )
}

pub(crate) fn peer_server_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/mcp_peer_server.py")
}

/// A config whose agents get the servers of `servers` (an `mcpServers` object).
pub(crate) fn mcp_config(server: &ScriptedLlm, dir: &Scratch, servers: Value) -> Config {
    Config::from_text(
        &mcp_config_text(server, dir, servers, &[]),
        "mcp-test",
        None,
    )
    .unwrap()
}

/// `mcp_config`'s text, with `extra` settings.
pub(crate) fn mcp_config_text(
    server: &ScriptedLlm,
    dir: &Scratch,
    servers: Value,
    extra: &[(&str, &str)],
) -> String {
    let file = dir.path().join("mcp.json");
    std::fs::write(&file, json!({ "mcpServers": servers }).to_string()).unwrap();
    let named = format!("{:?}", file.display().to_string());
    let mut settings = vec![
        ("mcp.servers_file", named.as_str()),
        ("mcp.call_timeout_secs", "20"),
    ];
    settings.extend_from_slice(extra);
    config_with(server, &dir.workspace(), &settings)
}

async fn run_single(config: Config, task: &str) -> manus_rt::FlowOutcome {
    let (rt, flow) = start_single(config, task).await;
    let outcome = flow.outcome().await;
    rt.shutdown().await;
    outcome
}

/// A peer process, killed by its PID when dropped.
pub(crate) struct Peer(pub(crate) tokio::process::Child);

impl Drop for Peer {
    fn drop(&mut self) {
        // SIGKILL, to its PID.
        let _ = self.0.start_kill();
    }
}

/// Start the reference server in `mode` (streamableHttp or sse) and wait for its port.
async fn everything_over_http(mode: &str) -> (Peer, u16) {
    let (everything, _) = peers();
    let port = free_port();
    let child = tokio::process::Command::new("node")
        .arg(&everything)
        .arg(mode)
        .env("PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs the reference server");
    assert!(
        listening_soon(port).await,
        "the reference server did not listen on {port} in {mode} mode"
    );
    (Peer(child), port)
}

/// Echo and add through the reference server; check what the model saw and got.
async fn echo_and_sum(servers: Value, name: &str) {
    let server = ScriptedLlm::start().await;
    server.push_all([
        Reply::tool(
            "mcp_everything_echo",
            json!({"message": "hello from manus-rt"}),
        ),
        Reply::tool("mcp_everything_get-sum", json!({"a": 2, "b": 40})),
        Reply::tool("mcp_everything_get-sum", json!({"a": "two"})),
        done("echoed and added"),
    ]);
    let dir = Scratch::new(name);
    let outcome = run_single(mcp_config(&server, &dir, servers), "use the MCP tools").await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    let first = &server.requests()[0];
    let tools = first.tool_names();
    assert!(
        tools.contains(&"mcp_everything_echo".to_string())
            && tools.contains(&"mcp_everything_get-sum".to_string())
            && tools.contains(&"python_execute".to_string()),
        "{tools:?}"
    );
    // The server's schema reaches the model unchanged.
    let echo = first.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "mcp_everything_echo")
        .unwrap();
    assert_eq!(
        echo["function"]["parameters"]["properties"]["message"]["type"], "string",
        "{echo}"
    );
    assert_eq!(observation(&server, 0), "Echo: hello from manus-rt");
    assert_eq!(observation(&server, 1), "The sum of 2 and 40 is 42.");
    let bad = observation(&server, 2);
    assert!(bad.starts_with("Error:") && bad.contains('a'), "{bad}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_uses_the_reference_server_over_stdio() {
    let (everything, _) = peers();
    echo_and_sum(
        json!({"everything": {"command": "node", "args": [everything, "stdio"]}}),
        "mcp-stdio",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_uses_the_reference_server_over_streamable_http() {
    let (_peer, port) = everything_over_http("streamableHttp").await;
    echo_and_sum(
        json!({"everything": {"type": "streamable-http", "url": format!("http://127.0.0.1:{port}/mcp")}}),
        "mcp-http",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_uses_the_reference_server_over_legacy_sse() {
    let (_peer, port) = everything_over_http("sse").await;
    echo_and_sum(
        json!({"everything": {"type": "sse", "url": format!("http://127.0.0.1:{port}/sse")}}),
        "mcp-sse",
    )
    .await;
}

fn python_peer() -> Value {
    let (_, python) = peers();
    json!({"peer": {"command": python, "args": [peer_server_script()]}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_list_change_announced_by_the_server_reaches_the_model() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        Reply::tool("mcp_peer_unlock_later", json!({})),
        // Meanwhile the server adds the tool and says so, unasked.
        Reply::tool("python_execute", json!({"code": "print('waiting')"})).delay(1500),
        Reply::tool("mcp_peer_secret", json!({})),
        done("found the secret"),
    ]);
    let dir = Scratch::new("mcp-list-changed");
    let outcome = run_single(mcp_config(&server, &dir, python_peer()), "find the secret").await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    let requests = server.requests();
    let has_secret = |n: usize| {
        requests[n]
            .tool_names()
            .contains(&"mcp_peer_secret".to_string())
    };
    assert!(!has_secret(0));
    assert!(has_secret(2), "{:?}", requests[2].tool_names());
    assert!(observation(&server, 2).contains("swordfish"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_dies_mid_call_is_reported_and_reconnected() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        Reply::tool("mcp_peer_crash", json!({})),
        // Something else meanwhile; the next round starts past the first backoff (0.5 s).
        Reply::tool("python_execute", json!({"code": "print('still working')"})).delay(1500),
        Reply::tool("mcp_peer_trace", json!({})),
        done("survived"),
    ]);
    let dir = Scratch::new("mcp-crash");
    let outcome = run_single(mcp_config(&server, &dir, python_peer()), "crash the server").await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    let crashed = observation(&server, 0);
    assert!(
        crashed.starts_with("Error:") && crashed.contains("MCP server `peer`"),
        "{crashed}"
    );
    assert_eq!(observation(&server, 1), "still working");
    assert!(
        server.requests()[2]
            .tool_names()
            .contains(&"mcp_peer_trace".to_string())
    );
    assert_eq!(
        observation(&server, 2),
        "none",
        "a fresh session answers the next call"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_leaves_the_other_tools_working() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        Reply::tool("python_execute", json!({"code": "print(6 * 7)"})),
        done("computed without the server"),
    ]);
    let dir = Scratch::new("mcp-unreachable");
    let servers = json!({"gone": {"type": "streamable-http", "url": format!("http://127.0.0.1:{}/mcp", free_port())}});
    let outcome = run_single(mcp_config(&server, &dir, servers), "compute").await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    assert_eq!(observation(&server, 0), "42");
    assert!(
        server.requests()[0]
            .tool_names()
            .iter()
            .all(|t| !t.starts_with("mcp_")),
        "{:?}",
        server.requests()[0].tool_names()
    );
}

/// Run the Python SDK client check against a manus-rt MCP server; its JSON report.
async fn python_client(target: &[&str], workspace: &Path) -> Value {
    let (_, python) = peers();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/mcp_client_check.py");
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(python)
            .arg(script)
            .args(target)
            .env("MANUS_WORKSPACE", workspace)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the client check finished")
    .unwrap();
    assert!(
        out.status.success(),
        "client check failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn assert_client_report(report: &Value, workspace: &Path) {
    let tools: Vec<&str> = report["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(
        tools,
        ["bash", "python_execute", "str_replace_editor", "terminate"],
        "{report}"
    );
    assert_eq!(report["bash"], "hello from bash", "{report}");
    assert!(
        report["created"]
            .as_str()
            .unwrap()
            .contains("Created `notes.txt`"),
        "{report}"
    );
    assert!(report["viewed"].as_str().unwrap().contains("kept by MCP"));
    assert_eq!(report["escape_is_error"], true, "{report}");
    assert!(
        report["escape"]
            .as_str()
            .unwrap()
            .contains("outside the workspace"),
        "{report}"
    );
    assert_eq!(
        std::fs::read_to_string(workspace.join("notes.txt")).unwrap(),
        "kept by MCP\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_client_uses_our_tools_over_stdio() {
    let server = ScriptedLlm::start().await;
    let dir = Scratch::new("mcp-serve-stdio");
    let config = dir.write_config(&config_with(&server, &dir.workspace(), &[]));
    let report = python_client(
        &[
            "stdio",
            BIN,
            "--config",
            config.to_str().unwrap(),
            "mcp-server",
        ],
        &dir.workspace(),
    )
    .await;
    assert_client_report(&report, &dir.workspace());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_client_uses_our_tools_over_http() {
    let server = ScriptedLlm::start().await;
    let dir = Scratch::new("mcp-serve-http");
    let config = dir.write_config(&config_with(&server, &dir.workspace(), &[]));
    let port = free_port();
    let child = tokio::process::Command::new(BIN)
        .current_dir(dir.path())
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
    let peer = Peer(child);
    assert!(
        listening_soon(port).await,
        "manus-rt mcp-server did not listen on {port}"
    );
    let url = format!("http://127.0.0.1:{port}/mcp");
    let report = python_client(&["http", &url], &dir.workspace()).await;
    assert_client_report(&report, &dir.workspace());
    drop(peer);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_mcp_drives_one_agent_with_one_servers_tools() {
    let (everything, _) = peers();
    let server = ScriptedLlm::start().await;
    server.push_all([
        Reply::tool("mcp_server_echo", json!({"message": "ping"})),
        done("The server echoed ping."),
    ]);
    let dir = Scratch::new("mcp-run-mcp");
    let config = dir.write_config(&config_with(&server, &dir.workspace(), &[]));
    let stdio = format!("node {} stdio", everything.display());
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(BIN)
            .current_dir(dir.path())
            .arg("--config")
            .arg(&config)
            .args(["run-mcp", "--stdio", &stdio, "-p", "echo ping"])
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("The server echoed ping."), "{stdout}");
    let first = &server.requests()[0];
    assert_eq!(first.tool_names()[0], "terminate");
    assert!(first.tool_names().contains(&"mcp_server_echo".to_string()));
    assert_eq!(observation(&server, 0), "Echo: ping");
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_call_carries_the_trace_context_to_the_server() {
    let server = ScriptedLlm::start().await;
    server.push_all([Reply::tool("mcp_peer_trace", json!({})), done("traced")]);
    let otlp = support::otlp::OtlpReceiver::start().await;
    let dir = Scratch::new("mcp-trace");
    let file = dir.path().join("mcp.json");
    std::fs::write(&file, json!({ "mcpServers": python_peer() }).to_string()).unwrap();
    let config = dir.write_config(&config_with(
        &server,
        &dir.workspace(),
        &[
            (
                "mcp.servers_file",
                &format!("{:?}", file.display().to_string()),
            ),
            ("telemetry.otlp_endpoint", &format!("{:?}", otlp.endpoint())),
        ],
    ));
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(BIN)
            .current_dir(dir.path())
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .arg("--config")
            .arg(&config)
            .args(["run", "report the trace context"])
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen = observation(&server, 0);
    let parts: Vec<&str> = seen.split('-').collect();
    assert!(
        parts.len() == 4 && parts[0] == "00" && parts[1].len() == 32 && parts[2].len() == 16,
        "the server got no traceparent: {seen}"
    );
    let spans = otlp.spans();
    let tool = spans
        .iter()
        .find(|s| s.name == "execute_tool mcp_peer_trace")
        .expect("the MCP call's tool span was exported");
    assert_eq!(parts[1], hex(&tool.trace_id), "the flow's trace");
    assert_eq!(parts[2], hex(&tool.span_id), "the tool call's span");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_from_a_tool_reaches_a_model_that_sees_images() {
    let (everything, _) = peers();
    let server = ScriptedLlm::start().await;
    server.push_all([
        Reply::tool("mcp_everything_get-tiny-image", json!({})),
        done("saw the image"),
    ]);
    let dir = Scratch::new("mcp-image");
    let file = dir.path().join("mcp.json");
    let servers = json!({"everything": {"command": "node", "args": [everything, "stdio"]}});
    std::fs::write(&file, json!({ "mcpServers": servers }).to_string()).unwrap();
    let text = config_with(
        &server,
        &dir.workspace(),
        &[
            (
                "mcp.servers_file",
                &format!("{:?}", file.display().to_string()),
            ),
            ("llm.vision", "true"),
        ],
    );
    let config = Config::from_text(&text, "mcp-image", None).unwrap();
    let outcome = run_single(config, "look at the image").await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    assert!(observation(&server, 0).contains("[image image/png"));
    let second = &server.requests()[1];
    let parts: Vec<&Value> = second
        .messages()
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|p| p["type"] == "image_url")
        .collect();
    assert_eq!(parts.len(), 1, "{:?}", second.messages());
    assert!(
        parts[0]["image_url"]["url"]
            .as_str()
            .unwrap()
            .starts_with("data:image/png;base64,iVBOR")
    );
}
