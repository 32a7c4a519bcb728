//! `[sandbox] mode = "process"` through the real runtime: an agent's Python and shell work
//! in the workspace, and what they try outside it (a write, a planted key, a connection to
//! a canary on 127.0.0.1) is refused with the program's own error and the setting that
//! allows it; nothing lands outside and the canary hears nothing.

use crate::support;

use std::time::Duration;

use manus_rt::engine::confine::Support;
use manus_rt::{Config, FlowStatus};
use serde_json::json;
use support::llm_server::{Reply, ScriptedLlm};
use support::scenario::{Scratch, config_with, done, observation, start_single};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_mode_keeps_agent_code_in_its_workspace() {
    if !Support::here().full() {
        eprintln!(
            "SKIPPED process_mode_keeps_agent_code_in_its_workspace: {}",
            Support::here().describe()
        );
        return;
    }
    let dir = Scratch::new("confine-flow");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(outside.join(".ssh")).unwrap();
    let key = outside.join(".ssh/id_rsa");
    std::fs::write(&key, "FAKE PRIVATE KEY").unwrap();
    let canary = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    canary.set_nonblocking(true).unwrap();
    let port = canary.local_addr().unwrap().port();
    let server = ScriptedLlm::start().await;
    let python = |code: String| Reply::tool("python_execute", json!({ "code": code }));
    server.push_all([
        python("open('kept.txt', 'w').write('ok')\nprint(open('kept.txt').read())".into()),
        python(format!(
            "open({:?}, 'w').write('x')",
            outside.join("escaped.txt")
        )),
        Reply::tool(
            "bash",
            json!({ "command": format!("cat {}", key.display()) }),
        ),
        python(format!(
            "import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=5)"
        )),
        done("tried"),
    ]);
    let text = config_with(
        &server,
        &dir.workspace(),
        &[("sandbox.mode", "\"process\"")],
    );
    let config = Config::from_text(&text, "confine-test", None).unwrap();
    let (_rt, flow) = start_single(config, "try the walls").await;
    let outcome = tokio::time::timeout(Duration::from_secs(120), flow.outcome())
        .await
        .expect("the flow ended");
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    assert_eq!(observation(&server, 0), "ok");
    let write = observation(&server, 1);
    assert!(write.contains("PermissionError"), "{write}");
    assert!(write.contains("[sandbox] mode = \"none\""), "{write}");
    let read = observation(&server, 2);
    assert!(
        read.contains("Permission denied") && !read.contains("FAKE"),
        "{read}"
    );
    let connect = observation(&server, 3);
    assert!(
        connect.contains("Network is unreachable") && connect.contains("[sandbox] network = true"),
        "{connect}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.workspace().join("kept.txt")).unwrap(),
        "ok"
    );
    assert!(!outside.join("escaped.txt").exists());
    assert!(canary.accept().is_err(), "the canary heard a connection");
}

/// Code mode on a confined host: a cell's refused write comes back as Python's own error
/// and the line that names the setting, as python_execute's results do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_mode_cell_says_which_setting_allows_what_was_refused() {
    if !Support::here().full() {
        eprintln!(
            "SKIPPED a_code_mode_cell_says…: {}",
            Support::here().describe()
        );
        return;
    }
    let dir = Scratch::new("confine-cell");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let server = ScriptedLlm::start().await;
    server.push_all([
        Reply::tool(
            "python",
            json!({ "code": format!("open({:?}, 'w').write('x')", outside.join("escaped.txt")) }),
        ),
        done("tried"),
    ]);
    let text = config_with(
        &server,
        &dir.workspace(),
        &[
            ("sandbox.mode", "\"process\""),
            ("agents.manus.action", "\"code\""),
        ],
    );
    let config = Config::from_text(&text, "confine-cell", None).unwrap();
    let (_rt, flow) = start_single(config, "try the wall from a cell").await;
    let outcome = tokio::time::timeout(Duration::from_secs(120), flow.outcome())
        .await
        .expect("the flow ended");
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    let said = observation(&server, 0);
    assert!(
        said.contains("PermissionError") && said.contains("[sandbox] mode = \"none\""),
        "{said}"
    );
    assert!(!outside.join("escaped.txt").exists());
}
