//! `manus-rt mcp-server --transport http` as a stranger meets it, over real HTTP on
//! 127.0.0.1 (no MCP peers needed): bearer tokens, the `Origin` check, the answer to a body
//! that is not JSON-RPC, the session cap, idle sessions closed with their shells, and OAuth
//! access tokens of an issuer run here (support/issuer.rs) checked as a resource server.

use crate::support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::issuer::Issuer;
use support::llm_server::ScriptedLlm;
use support::scenario::{Scratch, config_with, free_port, listening_soon};

const BIN: &str = env!("CARGO_BIN_EXE_manus-rt");
const TOKEN: &str = "mcp-test-token";
const VERSION: &str = "2025-06-18";

/// A running `mcp-server --transport http`, killed when dropped.
struct McpServer {
    child: tokio::process::Child,
    url: String,
    http: reqwest::Client,
    _dir: Scratch,
}

impl Drop for McpServer {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// Start the server with the test config plus `overrides` and wait until it listens.
async fn start(name: &str, overrides: &[(&str, &str)]) -> McpServer {
    let llm = ScriptedLlm::start().await;
    let dir = Scratch::new(name);
    let config = dir.write_config(&config_with(&llm, &dir.workspace(), overrides));
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
    assert!(
        listening_soon(port).await,
        "manus-rt mcp-server did not listen on {port}"
    );
    McpServer {
        child,
        url: format!("http://127.0.0.1:{port}/mcp"),
        http: reqwest::Client::new(),
        _dir: dir,
    }
}

fn with_tokens() -> (&'static str, String) {
    ("server.api_tokens", format!("[\"{TOKEN}\"]"))
}

fn initialize(id: u64) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": VERSION, "capabilities": {},
        "clientInfo": {"name": "mcp-http-test", "version": "1"}}})
    .to_string()
}

impl McpServer {
    /// A POST to /mcp with `body`, the token `token` (if any), `Origin` (if any) and the
    /// session id (if any).
    async fn post(
        &self,
        body: String,
        token: Option<&str>,
        origin: Option<&str>,
        session: Option<&str>,
    ) -> reqwest::Response {
        let mut req = self
            .http
            .post(&self.url)
            .header("Accept", "application/json, text/event-stream")
            .header("Content-Type", "application/json")
            .timeout(Duration::from_secs(60))
            .body(body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(o) = origin {
            req = req.header("Origin", o);
        }
        if let Some(s) = session {
            req = req
                .header("Mcp-Session-Id", s)
                .header("MCP-Protocol-Version", VERSION);
        }
        req.send().await.unwrap()
    }

    /// Open a session (initialize, then the initialized notification); its id.
    async fn open_session(&self) -> String {
        let resp = self.post(initialize(1), Some(TOKEN), None, None).await;
        assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
        let id = resp.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_string();
        let reply = rpc_reply(resp).await;
        assert!(reply["result"]["serverInfo"].is_object(), "{reply}");
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
        let resp = self.post(note, Some(TOKEN), None, Some(&id)).await;
        assert_eq!(resp.status(), 202);
        id
    }

    /// Call `bash` with `command` in session `id`; the tool's text.
    async fn bash(&self, id: &str, command: &str) -> String {
        let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "bash", "arguments": {"command": command}}});
        let resp = self
            .post(call.to_string(), Some(TOKEN), None, Some(id))
            .await;
        assert_eq!(resp.status(), 200);
        let reply = rpc_reply(resp).await;
        reply["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("no tool text in {reply}"))
            .to_string()
    }

    fn pid(&self) -> u32 {
        self.child.id().expect("the server is running")
    }
}

/// The JSON-RPC answer in a response, whether sent as JSON or as server-sent events.
async fn rpc_reply(resp: reqwest::Response) -> Value {
    let sse = resp
        .headers()
        .get("content-type")
        .is_some_and(|c| c.to_str().unwrap().starts_with("text/event-stream"));
    let text = resp.text().await.unwrap();
    if !sse {
        return serde_json::from_str(&text).unwrap();
    }
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|v| v.get("result").is_some() || v.get("error").is_some())
        .unwrap_or_else(|| panic!("no JSON-RPC answer in the stream:\n{text}"))
}

/// The `bash` processes whose parent is `pid`.
/// The processes under `pid` (its children, theirs, …), by PID with their command lines:
/// a command may run under a small init of its own PID namespace, not as a direct child.
fn descendants(pid: u32) -> Vec<(u32, String)> {
    let mut parents = std::collections::HashMap::<u32, Vec<u32>>::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok());
        if let Some(ppid) = ppid {
            parents.entry(ppid).or_default().push(p);
        }
    }
    let (mut found, mut todo) = (vec![], vec![pid]);
    while let Some(p) = todo.pop() {
        for &child in parents.get(&p).into_iter().flatten() {
            let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            found.push((child, cmdline.trim().to_string()));
            todo.push(child);
        }
    }
    found
}

/// How many `bash` processes run under `pid`.
fn bash_children(pid: u32) -> usize {
    descendants(pid)
        .iter()
        .filter(|(p, _)| {
            std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "bash")
        })
        .count()
}

/// Whether process `pid` has ended (gone, or a zombie waiting for its reaper).
fn ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_origins_and_bodies_are_checked() {
    let (key, tokens) = with_tokens();
    let server = start("mcp-http-guard", &[(key, &tokens)]).await;

    // No token, or a wrong one: 401, and nothing runs.
    let resp = server.post(initialize(1), None, None, None).await;
    assert_eq!(resp.status(), 401);
    assert_eq!(resp.headers()["www-authenticate"], "Bearer");
    assert!(resp.text().await.unwrap().contains("api_tokens"));
    let resp = server.post(initialize(1), Some("guess"), None, None).await;
    assert_eq!(resp.status(), 401);

    // A browser page from elsewhere: 403; one served from loopback passes.
    for evil in [
        "https://evil.example",
        "http://127.0.0.1.evil.example:80",
        "null",
    ] {
        let resp = server
            .post(initialize(1), Some(TOKEN), Some(evil), None)
            .await;
        assert_eq!(resp.status(), 403, "Origin {evil}");
    }
    let resp = server
        .post(
            initialize(2),
            Some(TOKEN),
            Some("http://localhost:5173"),
            None,
        )
        .await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());

    // Malformed JSON, and JSON that is not a JSON-RPC message: 400 with a JSON-RPC error.
    for (body, code) in [
        ("{\"jsonrpc\": \"2.0\", ", -32700),
        ("{\"hello\": 1}", -32600),
    ] {
        let resp = server.post(body.into(), Some(TOKEN), None, None).await;
        assert_eq!(resp.status(), 400, "{body}");
        let answer: Value = resp.json().await.unwrap();
        assert_eq!(answer["error"]["code"], code, "{answer}");
    }

    // The right token: a session opens and a tool runs.
    let id = server.open_session().await;
    assert!(server.bash(&id, "echo guarded").await.contains("guarded"));
}

/// Seconds since the epoch, `ahead` from now (negative for the past).
fn at(ahead: i64) -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    now + ahead
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauth_access_tokens_are_checked_against_the_issuers_keys() {
    const AUDIENCE: &str = "https://tools.example/mcp";
    let issuer = Issuer::start().await;
    let (key, tokens) = with_tokens();
    let server = start(
        "mcp-http-oauth",
        &[
            ("mcp.oauth_issuer", &format!("\"{}\"", issuer.url)),
            ("mcp.oauth_audience", &format!("\"{AUDIENCE}\"")),
            ("mcp.oauth_scopes", "[\"mcp:tools\"]"),
            (key, &tokens),
        ],
    )
    .await;
    let base = server.url.trim_end_matches("/mcp").to_string();
    // Served here (at both RFC 9728 paths, so a proxy may forward the public one), and
    // named in challenges at the resource's public address.
    let metadata_url = format!("{base}/.well-known/oauth-protected-resource/mcp");
    let public_metadata = "https://tools.example/.well-known/oauth-protected-resource/mcp";
    let good = json!({"iss": issuer.url, "aud": AUDIENCE, "exp": at(600), "iat": at(0),
        "scope": "openid mcp:tools", "sub": "someone"});

    // The metadata answers without a token and names the issuer.
    let meta: Value = server
        .http
        .get(&metadata_url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(meta["resource"], AUDIENCE, "{meta}");
    assert_eq!(meta["authorization_servers"], json!([issuer.url]), "{meta}");
    assert_eq!(meta["scopes_supported"], json!(["mcp:tools"]), "{meta}");

    // No token: 401 naming the metadata.
    let resp = server.post(initialize(1), None, None, None).await;
    assert_eq!(resp.status(), 401);
    let challenge = resp.headers()["www-authenticate"].to_str().unwrap();
    assert!(
        challenge.contains(&format!("resource_metadata=\"{public_metadata}\"")),
        "{challenge}"
    );

    // Expired, for another audience, from another issuer, signed by a stranger: 401.
    let mut bad = vec![];
    let mut expired = good.clone();
    expired["exp"] = json!(at(-3600));
    bad.push((issuer.sign(&expired), "expired"));
    let mut elsewhere = good.clone();
    elsewhere["aud"] = json!(["https://other.example/mcp"]);
    bad.push((issuer.sign(&elsewhere), "not for https://tools.example/mcp"));
    let mut foreign = good.clone();
    foreign["iss"] = json!("https://issuer.example");
    bad.push((issuer.sign(&foreign), "was issued by"));
    bad.push((issuer.sign_as_stranger(&good), "does not verify"));
    bad.push(("not-a-jwt".to_string(), "is not a JWT"));
    for (token, why) in &bad {
        let resp = server.post(initialize(1), Some(token), None, None).await;
        assert_eq!(resp.status(), 401, "{why}");
        let challenge = resp.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .to_string();
        assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");
        let text = resp.text().await.unwrap();
        assert!(text.contains(why), "{why}: {text}");
    }

    // Without the scope: 403 insufficient_scope.
    let mut narrow = good.clone();
    narrow["scope"] = json!("openid");
    let resp = server
        .post(initialize(1), Some(&issuer.sign(&narrow)), None, None)
        .await;
    assert_eq!(resp.status(), 403);
    let challenge = resp.headers()["www-authenticate"].to_str().unwrap();
    assert!(
        challenge.contains("error=\"insufficient_scope\"") && challenge.contains("mcp:tools"),
        "{challenge}"
    );

    // A good token opens a session and runs a tool; the static token still works too.
    let token = issuer.sign(&good);
    let resp = server.post(initialize(1), Some(&token), None, None).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
    let id = resp.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    let resp = server.post(note, Some(&token), None, Some(&id)).await;
    assert_eq!(resp.status(), 202);
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "bash", "arguments": {"command": "echo with oauth"}}});
    let resp = server
        .post(call.to_string(), Some(&token), None, Some(&id))
        .await;
    assert_eq!(resp.status(), 200);
    let reply = rpc_reply(resp).await;
    assert_eq!(
        reply["result"]["content"][0]["text"], "with oauth",
        "{reply}"
    );
    let static_id = server.open_session().await;
    assert!(!static_id.is_empty());
}

#[tokio::test]
async fn without_tokens_it_refuses_to_listen_beyond_loopback() {
    let llm = ScriptedLlm::start().await;
    let dir = Scratch::new("mcp-http-open");
    let config = dir.write_config(&config_with(&llm, &dir.workspace(), &[]));
    let out = tokio::process::Command::new(BIN)
        .current_dir(dir.path())
        .env_remove("MANUS_API_TOKENS")
        .arg("--config")
        .arg(&config)
        .args(["mcp-server", "--transport", "http", "--bind", "0.0.0.0:0"])
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("without bearer tokens"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_cap_refuses_the_next_with_a_clear_error() {
    let (key, tokens) = with_tokens();
    let server = start("mcp-http-cap", &[(key, &tokens), ("mcp.max_sessions", "2")]).await;
    let first = server.open_session().await;
    let _second = server.open_session().await;

    let resp = server.post(initialize(3), Some(TOKEN), None, None).await;
    assert_eq!(resp.status(), 503);
    let answer: Value = resp.json().await.unwrap();
    assert_eq!(answer["id"], 3, "{answer}");
    let why = answer["error"]["message"].as_str().unwrap();
    assert!(
        why.contains("maximum of 2 MCP sessions") && why.contains("max_sessions"),
        "{why}"
    );

    // Ending a session makes room.
    let resp = server
        .http
        .delete(&server.url)
        .bearer_auth(TOKEN)
        .header("Mcp-Session-Id", &first)
        .header("MCP-Protocol-Version", VERSION)
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());
    server.open_session().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_is_closed_with_its_shell() {
    let (key, tokens) = with_tokens();
    let server = start(
        "mcp-http-idle",
        &[(key, &tokens), ("mcp.session_idle_secs", "2")],
    )
    .await;
    let id = server.open_session().await;
    // A call longer than the idle time is not cut: only a session with nothing running
    // is idle.
    let slow = server.bash(&id, "sleep 3; echo still-here").await;
    assert!(slow.contains("still-here"), "{slow}");
    // The shell leaves a command running in the background.
    // Found by its command line: `$!` may be a PID of the shell's own namespace. The shell
    // answers once it forked the job, which may exec `sleep` a moment later (under load).
    server.bash(&id, "sleep 299.5 & echo started").await;
    let find = || {
        descendants(server.pid())
            .into_iter()
            .find(|(_, cmd)| cmd == "sleep 299.5")
            .map(|(p, _)| p)
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut sleeper = find();
    while sleeper.is_none() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        sleeper = find();
    }
    let sleeper = sleeper.expect("the background command runs under the server");
    assert_eq!(bash_children(server.pid()), 1, "the session's shell runs");
    assert!(!ended(sleeper));

    // Left alone, the session is closed, and its shell and what the shell started end.
    let deadline = Instant::now() + Duration::from_secs(30);
    while (bash_children(server.pid()) > 0 || !ended(sleeper)) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(bash_children(server.pid()), 0, "the shell is gone");
    assert!(ended(sleeper), "the shell's background command is gone");
    let call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}).to_string();
    let resp = server.post(call, Some(TOKEN), None, Some(&id)).await;
    assert_eq!(resp.status(), 404, "the session is gone");
}
