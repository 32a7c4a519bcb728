//! Code as the action (`[agents.NAME] action = "code"`), through the real runtime: one cell
//! calls the editor, bash and an MCP server's tool (the reference server over stdio) in a
//! loop, one of its calls waits for approval and goes on once approved, and the files it
//! leaves are those the same work leaves done one JSON call at a time.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use manus_actors::protocol::Decision;
use manus_rt::{Config, FlowEvent, FlowHandle, FlowStatus, Runtime, SubmitOptions};
use serde_json::json;
use support::llm_server::{Reply, ScriptedLlm};
use support::scenario::{Scratch, config_with, manus_cli, observation};

fn python(code: &str) -> Reply {
    Reply::tool("python", json!({ "code": code }))
}

/// Appending to a file with bash waits for a person.
const RULE: (&str, &str) = (
    "approvals.tools.bash",
    r#"{ matches = ">>", argument = "command" }"#,
);

/// A config with the reference MCP server over stdio and the approval rule; `extra` on top.
fn config(server: &ScriptedLlm, dir: &Scratch, extra: &[(&str, &str)]) -> Config {
    let everything = std::env::var("MANUS_TEST_MCP_EVERYTHING").expect(
        "MANUS_TEST_MCP_EVERYTHING is not set: run the suite with scripts/test.sh, which installs the MCP peers",
    );
    let file = dir.path().join("mcp.json");
    let servers =
        json!({ "mcpServers": { "everything": { "command": "node", "args": [everything] } } });
    std::fs::write(&file, servers.to_string()).unwrap();
    let servers_file = format!("{:?}", file.display().to_string());
    let mut overrides = vec![
        ("mcp.servers_file", servers_file.as_str()),
        ("mcp.call_timeout_secs", "20"),
        RULE,
    ];
    overrides.extend_from_slice(extra);
    let text = config_with(server, &dir.workspace(), &overrides);
    Config::from_text(&text, "code-mode-test", None).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

async fn single(config: Config, task: &str) -> (Runtime, FlowHandle) {
    let rt = Runtime::builder().config(config).start().await.unwrap();
    let options = SubmitOptions {
        mode: manus_rt::FlowMode::Single,
        ..Default::default()
    };
    let flow = rt.submit(task, options).await.unwrap();
    (rt, flow)
}

/// Approve the flow's first approval request, checking it is for `command` in bash.
async fn approve_bash(flow: &mut FlowHandle, command: &str) {
    let id = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            match flow.next_event().await {
                Some(FlowEvent::ApprovalRequested {
                    id,
                    tool,
                    arguments,
                    ..
                }) => {
                    assert_eq!(tool, "bash");
                    assert!(arguments.contains(command), "{arguments}");
                    return id;
                }
                Some(_) => {}
                None => panic!("the flow ended without asking for approval"),
            }
        }
    })
    .await
    .expect("an approval request within a minute");
    assert!(!flow.id.is_empty());
    let decision = Decision {
        approve: true,
        arguments: None,
        reason: None,
        by: "tester".into(),
        at_ms: 0,
    };
    assert!(
        flow.decide(id, decision).await.unwrap(),
        "the decision is taken"
    );
}

/// Every file of `dir`, by name, with its text.
fn files(dir: &Path) -> BTreeMap<String, String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.path().is_file())
        .map(|e| {
            let text = std::fs::read_to_string(e.path()).unwrap();
            (e.file_name().to_string_lossy().into_owned(), text)
        })
        .collect()
}

const CELL: &str = "\
for i in range(3):
    str_replace_editor(command='create', path=f'note{i}.txt', file_text=f'note {i}\\n')
    print(bash(f'cat note{i}.txt').strip(), '/', mcp_everything_echo(message=f'note {i} made'))
try:
    bash('false')
except ToolError as e:
    print('bash failed:', str(e).splitlines()[-1])
bash('echo appended >> log.txt')
print(open('log.txt').read().strip())
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_calls_tools_in_a_loop_waits_for_approval_and_leaves_the_same_files() {
    // Code mode: the whole job in one cell, then `terminate` from a second.
    let server = ScriptedLlm::start().await;
    server.push_all([python(CELL), python("terminate(status='success')")]);
    let dir = Scratch::new("code-mode");
    let code = config(&server, &dir, &[("agents.manus.action", "\"code\"")]);
    let (rt, mut flow) = single(code, "write three notes and a log").await;
    approve_bash(&mut flow, "echo appended >> log.txt").await;
    let outcome = flow.outcome().await;
    rt.shutdown().await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);

    // The model saw one tool, `python`, listing the agent's tools and the server's as functions.
    let first = &server.requests()[0];
    assert_eq!(first.tool_names(), ["python"]);
    let listed = first.body["tools"][0]["function"]["description"]
        .as_str()
        .unwrap()
        .to_string();
    for function in [
        "bash(command: str",
        "str_replace_editor(command: str",
        "mcp_everything_echo(message: str",
        "terminate(status: str",
    ] {
        assert!(
            listed.contains(function),
            "{function} is not listed:\n{listed}"
        );
    }
    assert!(!listed.contains("python_execute("), "{listed}");
    // Two model calls in all: the cell's calls went round no model.
    assert_eq!(server.requests().len(), 2);
    let cell = observation(&server, 0);
    assert_eq!(
        cell,
        "note 0 / Echo: note 0 made\nnote 1 / Echo: note 1 made\nnote 2 / Echo: note 2 made\n\
         bash failed: [exit code 1]\nappended\n\
         [tool calls made by this cell: str_replace_editor, bash, mcp_everything_echo, \
         str_replace_editor, bash, mcp_everything_echo, str_replace_editor, bash, \
         mcp_everything_echo, bash, bash]"
    );

    // The same work one JSON call at a time leaves the same files.
    let tools = ScriptedLlm::start().await;
    let mut replies = vec![];
    for i in 0..3 {
        replies.push(Reply::tool(
            "str_replace_editor",
            json!({"command": "create", "path": format!("note{i}.txt"), "file_text": format!("note {i}\n")}),
        ));
        replies.push(Reply::tool(
            "bash",
            json!({"command": format!("cat note{i}.txt")}),
        ));
        replies.push(Reply::tool(
            "mcp_everything_echo",
            json!({"message": format!("note {i} made")}),
        ));
    }
    replies.push(Reply::tool(
        "bash",
        json!({"command": "echo appended >> log.txt"}),
    ));
    replies.push(Reply::tool("terminate", json!({"status": "success"})));
    tools.push_all(replies);
    let tool_dir = Scratch::new("tool-mode");
    let (rt, mut flow) = single(
        config(&tools, &tool_dir, &[]),
        "write three notes and a log",
    )
    .await;
    approve_bash(&mut flow, "echo appended >> log.txt").await;
    let outcome = flow.outcome().await;
    rt.shutdown().await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    assert_eq!(tools.requests().len(), 11, "one model call per tool call");
    let made = files(&dir.workspace());
    assert_eq!(made.len(), 4, "{made:?}");
    assert_eq!(made, files(&tool_dir.workspace()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_without_tool_calls_writes_its_cell_as_a_fenced_block() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        Reply::text("I will count the files.\n```python\ncount = len(bash('ls').split())\nprint('files:', count)\n```"),
        Reply::text("```python\nterminate(status='success')\n```"),
    ]);
    let dir = Scratch::new("code-fenced");
    std::fs::create_dir_all(dir.workspace()).unwrap();
    std::fs::write(dir.workspace().join("a.txt"), "a").unwrap();
    let text = config_with(
        &server,
        &dir.workspace(),
        &[("agents.manus.action", "\"code\"")],
    );
    let config = Config::from_text(&text, "code-fenced", None).unwrap();
    let (rt, flow) = single(config, "count the files").await;
    let outcome = flow.outcome().await;
    rt.shutdown().await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    assert_eq!(
        observation(&server, 0),
        "files: 1\n[tool calls made by this cell: bash]"
    );
}

/// The lines of the side-effect log the cells' bash calls append to.
fn effects(dir: &Scratch) -> Vec<String> {
    std::fs::read_to_string(dir.workspace().join("effects.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// A code-mode step killed (SIGKILL) between two cells, and again while a cell's call waits
/// for approval: each `resume` makes the interpreter again from the recorded cells, their
/// tool calls answered from the record, so the variables are back, no tool call runs twice
/// (the log of side effects says so) and the model is not asked again for what it answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_code_step_goes_on_with_its_variables_and_no_call_repeated() {
    let server = ScriptedLlm::start().await;
    let dir = Scratch::new("code-kill");
    let db = dir.path().join("runs.db");
    let config = dir.write_config(&config_with(
        &server,
        &dir.workspace(),
        &[
            ("store.url", &format!("\"sqlite://{}\"", db.display())),
            ("agents.manus.action", "\"code\""),
            (
                "approvals.tools.bash",
                r#"{ matches = "needs-approval", argument = "command" }"#,
            ),
        ],
    ));
    server.push_all([
        support::scenario::plan_reply(&["[MANUS] Count and log"]),
        python(
            "import time\ncount = 0\nfor i in range(3):\n    bash(f'echo cell1-{i} >> effects.log')\n    count += 1\n\
             started = time.time()\nprint('counted', count)",
        ),
        // The model is slow to write the next cell: the process is killed meanwhile.
        python("print('never run')").delay(600_000),
    ]);
    let mut child = manus_cli(&dir, &config, &["run-flow", "Count and log"])
        .spawn()
        .unwrap();
    let asked = tokio::time::timeout(Duration::from_secs(60), async {
        while server.request_count() < 3 {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    if asked.is_err() || server.request_count() < 3 {
        let _ = child.start_kill();
        let out = child.wait_with_output().await.unwrap();
        panic!(
            "the second cell was never asked for ({} requests):\n{}",
            server.request_count(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    assert_eq!(effects(&dir), ["cell1-0", "cell1-1", "cell1-2"]);
    let before = server.request_count();
    let store = manus_rt::store::RunStore::open(&manus_rt::store::StoreUrl::Sqlite(db.clone()))
        .await
        .unwrap();
    let id = store.list(1).await.unwrap()[0].id.clone();

    // Resumed: the second cell uses the first's variables, then a call waits for approval.
    server.push_all([
        python(
            "print('count is', count)\nbash('echo cell2 > effects2.log')\n\
             bash('echo needs-approval >> effects.log')\nprint('after approval', count)",
        ),
        // Killed again while that call waits: this answer is never asked for before.
        python("terminate(status='success')"),
        Reply::text("Counted and logged."),
    ]);
    let mut child = manus_cli(&dir, &config, &["resume", &id, "--json"])
        .spawn()
        .unwrap();
    let paused = async {
        loop {
            let run = store.get(&id).await.unwrap().unwrap();
            let waits = run.plan.as_ref().is_some_and(|p| {
                p.steps[0].status == manus_rt::engine::plan::StepStatus::AwaitingApproval
            });
            if waits && !store.memories(&id).await.unwrap().is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), paused)
        .await
        .expect("the step paused for approval");
    // Killed while the call waits (if it has not stopped by itself yet: no one can answer).
    let _ = child.start_kill();
    child.wait().await.unwrap();
    assert!(dir.workspace().join("effects2.log").exists());
    assert_eq!(
        server.request_count(),
        before + 1,
        "one new model call: the second cell"
    );

    // Approved, and resumed again: the cell goes on from the call that waited.
    let approve = manus_cli(&dir, &config, &["approvals", "approve", &id, "1"])
        .output()
        .await
        .unwrap();
    assert!(
        approve.status.success(),
        "{}",
        String::from_utf8_lossy(&approve.stderr)
    );
    std::fs::remove_file(dir.workspace().join("effects2.log")).unwrap();
    let out = manus_cli(&dir, &config, &["resume", &id, "--json"])
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "resume failed:\n{stderr}");
    assert!(
        !dir.workspace().join("effects2.log").exists(),
        "the call before the one that waited did not run again"
    );
    assert_eq!(
        effects(&dir),
        ["cell1-0", "cell1-1", "cell1-2", "needs-approval"],
        "every tool call ran once"
    );
    // The model saw the first cell's variable in the second, and the cell went on.
    let requests = server.requests();
    let second = support::scenario::last_tool_text(&requests[requests.len() - 2]);
    assert!(
        second.contains("count is 3") && second.contains("after approval 3"),
        "{second}"
    );
    assert!(second.contains("interrupted and resumed"), "{second}");
    assert_eq!(requests.len(), before + 3, "no model call was asked twice");
    store.close().await;
}
