//! OAuth 2.1 for remote MCP servers: our client against a resource server written with the
//! official Python SDK's auth support (tests/peers/mcp_oauth_server.py) and the minimal
//! authorization server of the test support, both on 127.0.0.1: discovery from the 401,
//! the client-credentials grant, the PKCE sign-in of `manus-rt mcp-login`, stored tokens
//! refreshed when expired, and a wrong secret's error.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

use crate::mcp::{Peer, mcp_config_text, peers};
use crate::support::llm_server::{Reply, ScriptedLlm};
use crate::support::oauth_server::{AuthServer, CLIENT_ID, CLIENT_SECRET};
use crate::support::scenario::{Scratch, done, free_port, listening_soon, observation};

const BIN: &str = env!("CARGO_BIN_EXE_manus-rt");

/// An authorization server whose access tokens live `ttl`, and the protected Python server
/// trusting it, with its URL.
async fn protected(ttl: Duration) -> (AuthServer, Peer, String) {
    let auth = AuthServer::start(ttl).await;
    let (_, python) = peers();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/mcp_oauth_server.py");
    let port = free_port();
    let child = tokio::process::Command::new(python)
        .arg(script)
        .arg(port.to_string())
        .arg(&auth.issuer)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the Python SDK runs the protected server");
    let peer = Peer(child);
    assert!(
        listening_soon(port).await,
        "the protected server did not listen"
    );
    (auth, peer, format!("http://127.0.0.1:{port}/mcp"))
}

/// A config file in `dir` whose servers file has `secure` at `url` with `oauth`.
fn config(llm: &ScriptedLlm, dir: &Scratch, url: &str, oauth: Value) -> PathBuf {
    let servers = json!({"secure": {"url": url, "oauth": oauth}});
    dir.write_config(&mcp_config_text(llm, dir, servers, &[]))
}

/// `manus-rt run-mcp` on the `secure` server with `prompt`, in `dir`, the client secret
/// `secret` in `SECURE_SECRET`; its output.
async fn ask(dir: &Scratch, config: &Path, secret: &str, prompt: &str) -> (bool, String) {
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(BIN)
            .current_dir(dir.path())
            .env("SECURE_SECRET", secret)
            .arg("--config")
            .arg(config)
            .args(["run-mcp", "--server", "secure", "-p", prompt])
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("manus-rt finished within 120s")
    .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The model calls `whoami` on the secure server, then ends.
fn whoami_script(llm: &ScriptedLlm) {
    llm.push_all([
        Reply::tool("mcp_secure_whoami", json!({})),
        done("asked who I am"),
    ]);
}

/// A PKCE sign-in (`mcp-login`) as the known client.
fn sign_in() -> Value {
    json!({"grant": "authorization_code", "client_id": CLIENT_ID, "scopes": ["mcp"]})
}

fn client_credentials() -> Value {
    json!({"grant": "client_credentials", "client_id": CLIENT_ID,
           "client_secret_env": "SECURE_SECRET", "scopes": ["mcp"]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_credentials_get_a_token_the_client_uses() {
    let (auth, _peer, url) = protected(Duration::from_secs(3600)).await;
    let llm = ScriptedLlm::start().await;
    whoami_script(&llm);
    let dir = Scratch::new("mcp-oauth-cc");
    let config = config(&llm, &dir, &url, client_credentials());
    let (ok, out) = ask(&dir, &config, CLIENT_SECRET, "who am I").await;
    assert!(ok, "{out}");
    assert!(
        llm.requests()[0]
            .tool_names()
            .contains(&"mcp_secure_whoami".to_string())
    );
    assert_eq!(observation(&llm, 0), format!("signed in as {CLIENT_ID}"));
    assert_eq!(auth.grants("client_credentials"), 1);
    let tokens = dir.path().join("mcp-tokens/secure.json");
    assert_eq!(mode(&tokens), 0o600);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_credentials_token_is_renewed_before_it_expires() {
    // Tokens live 34 s, so the session is opened again (with a new token) 2 s after the
    // first; the second call comes 6 s later, when the first token would count as expired.
    let (auth, _peer, url) = protected(Duration::from_secs(34)).await;
    let llm = ScriptedLlm::start().await;
    llm.push_all([
        Reply::tool("mcp_secure_whoami", json!({})),
        Reply::tool("mcp_secure_whoami", json!({})).delay(6000),
        done("asked twice"),
    ]);
    let dir = Scratch::new("mcp-oauth-renew");
    let config = config(&llm, &dir, &url, client_credentials());
    let (ok, out) = ask(&dir, &config, CLIENT_SECRET, "who am I, twice").await;
    assert!(ok, "{out}");
    assert_eq!(observation(&llm, 0), format!("signed in as {CLIENT_ID}"));
    assert_eq!(observation(&llm, 1), format!("signed in as {CLIENT_ID}"));
    assert_eq!(auth.grants("client_credentials"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_client_secret_says_which_server_and_step() {
    let (auth, _peer, url) = protected(Duration::from_secs(3600)).await;
    let llm = ScriptedLlm::start().await;
    whoami_script(&llm);
    let dir = Scratch::new("mcp-oauth-wrong");
    let config = config(&llm, &dir, &url, client_credentials());
    let (_, out) = ask(&dir, &config, "not-the-secret", "who am I").await;
    // The server's tools are missing and the model is told why.
    let first = &llm.requests()[0];
    assert!(
        !first
            .tool_names()
            .contains(&"mcp_secure_whoami".to_string()),
        "{out}"
    );
    let said = format!("{}\n{out}", serde_json::to_string(&first.body).unwrap());
    assert!(
        said.contains("`secure`")
            && said.contains("client-credentials grant failed")
            && said.contains("client secret"),
        "{said}"
    );
    assert_eq!(auth.grants("client_credentials"), 0);
}

/// Run `mcp-login secure`, open the printed address as a browser would (following the
/// redirect to the loopback listener), and wait for it to finish.
async fn login(dir: &Scratch, config: &Path) -> String {
    let mut child = tokio::process::Command::new(BIN)
        .current_dir(dir.path())
        .arg("--config")
        .arg(config)
        .args(["mcp-login", "secure", "--wait-secs", "60"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut said = String::new();
    let address = loop {
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("mcp-login printed an address within 60s")
            .unwrap()
            .unwrap_or_else(|| panic!("mcp-login ended without an address: {said}"));
        said.push_str(&line);
        said.push('\n');
        if line.starts_with("http://") {
            break line;
        }
    };
    let page = reqwest::get(&address).await.unwrap();
    assert!(page.status().is_success(), "{:?}", page.status());
    let page = page.text().await.unwrap();
    assert!(page.contains("Signed in"), "{page}");
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .unwrap()
        .unwrap();
    while let Ok(Some(line)) = lines.next_line().await {
        said.push_str(&line);
        said.push('\n');
    }
    assert!(status.success(), "{said}");
    said
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pkce_sign_in_gets_a_token_the_client_uses() {
    let (auth, _peer, url) = protected(Duration::from_secs(3600)).await;
    let llm = ScriptedLlm::start().await;
    whoami_script(&llm);
    let dir = Scratch::new("mcp-oauth-pkce");
    let oauth = sign_in();
    let config = config(&llm, &dir, &url, oauth);
    // Before anyone signs in, the server's tools are missing with a note saying what to do.
    let said = login(&dir, &config).await;
    assert!(said.contains("Signed in to `secure`"), "{said}");
    assert_eq!(auth.grants("authorization_code"), 1);
    assert_eq!(mode(&dir.path().join("mcp-tokens/secure.json")), 0o600);
    let (ok, out) = ask(&dir, &config, "", "who am I").await;
    assert!(ok, "{out}");
    assert_eq!(observation(&llm, 0), format!("signed in as {CLIENT_ID}"));
    assert_eq!(auth.grants("refresh_token"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_client_id_the_sign_in_registers_the_client() {
    let (_auth, _peer, url) = protected(Duration::from_secs(3600)).await;
    let llm = ScriptedLlm::start().await;
    whoami_script(&llm);
    let dir = Scratch::new("mcp-oauth-dcr");
    let oauth = json!({"grant": "authorization_code", "scopes": ["mcp"]});
    let config = config(&llm, &dir, &url, oauth);
    login(&dir, &config).await;
    let (ok, out) = ask(&dir, &config, "", "who am I").await;
    assert!(ok, "{out}");
    // The registered client's id, kept with the tokens, is the one the server sees.
    assert!(
        observation(&llm, 0).starts_with("signed in as registered-"),
        "{}",
        observation(&llm, 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_token_is_refreshed() {
    // Tokens live 2 seconds: the stored one has expired by the time the run uses it.
    let (auth, _peer, url) = protected(Duration::from_secs(2)).await;
    let llm = ScriptedLlm::start().await;
    whoami_script(&llm);
    let dir = Scratch::new("mcp-oauth-refresh");
    let oauth = sign_in();
    let config = config(&llm, &dir, &url, oauth);
    login(&dir, &config).await;
    let before = std::fs::read_to_string(dir.path().join("mcp-tokens/secure.json")).unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (ok, out) = ask(&dir, &config, "", "who am I").await;
    assert!(ok, "{out}");
    assert_eq!(observation(&llm, 0), format!("signed in as {CLIENT_ID}"));
    assert!(auth.grants("refresh_token") >= 1);
    let after = std::fs::read_to_string(dir.path().join("mcp-tokens/secure.json")).unwrap();
    assert_ne!(before, after, "the refreshed tokens were stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_refresh_the_same_tokens_one_after_the_other() {
    // Each refresh token is good once, and each refresh is held 2 s, so two runs that
    // refreshed at once would spend the same refresh token and one would be refused.
    let (auth, _peer, url) = protected(Duration::from_secs(2)).await;
    let dir = Scratch::new("mcp-oauth-two");
    let oauth = sign_in();
    let (first, second) = (ScriptedLlm::start().await, ScriptedLlm::start().await);
    whoami_script(&first);
    whoami_script(&second);
    let one = config(&first, &dir, &url, oauth.clone());
    login(&dir, &one).await;
    let two = dir.path().join("second.toml");
    std::fs::write(
        &two,
        mcp_config_text(
            &second,
            &dir,
            json!({"secure": {"url": url, "oauth": oauth}}),
            &[],
        ),
    )
    .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    auth.slow_refresh(Duration::from_secs(2));
    let ((ok1, out1), (ok2, out2)) = tokio::join!(
        ask(&dir, &one, "", "who am I"),
        ask(&dir, &two, "", "who am I")
    );
    assert!(ok1 && ok2, "{out1}\n---\n{out2}");
    assert_eq!(observation(&first, 0), format!("signed in as {CLIENT_ID}"));
    assert_eq!(observation(&second, 0), format!("signed in as {CLIENT_ID}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_sign_in_the_error_says_to_run_mcp_login() {
    let (_auth, _peer, url) = protected(Duration::from_secs(3600)).await;
    let llm = ScriptedLlm::start().await;
    llm.push_all([done("nothing to do")]);
    let dir = Scratch::new("mcp-oauth-none");
    let oauth = json!({"grant": "authorization_code", "client_id": CLIENT_ID});
    let config = config(&llm, &dir, &url, oauth);
    let (_, out) = ask(&dir, &config, "", "who am I").await;
    let said = format!(
        "{}\n{out}",
        serde_json::to_string(&llm.requests()[0].body).unwrap()
    );
    assert!(said.contains("manus-rt mcp-login secure"), "{said}");
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}
