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
use support::scenario::{Scratch, config_with, observation};

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
    print(bash(f'cat note{i}.txt').strip())
print(mcp_everything_echo(message='from a cell'))
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
        "note 0\nnote 1\nnote 2\nEcho: from a cell\nbash failed: [exit code 1]\nappended\n\
         [tool calls made by this cell: str_replace_editor, bash, str_replace_editor, bash, \
         str_replace_editor, bash, mcp_everything_echo, bash, bash]"
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
    }
    replies.push(Reply::tool(
        "mcp_everything_echo",
        json!({"message": "from a cell"}),
    ));
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
    assert_eq!(tools.requests().len(), 9, "one model call per tool call");
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
