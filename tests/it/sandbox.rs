//! The sandbox against a real Docker engine (scripts/test.sh starts one with its own data
//! root and socket and builds the test image): agent code, shell sessions and file tools work
//! in the flow's container and not on the host, confined to its workspace; memory, time, process and network limits hold and are reported to the
//! model; a container killed from outside is re-created; no container outlives the runtime.

use crate::support;

use std::process::Command;
use std::time::Duration;

use manus_rt::{Config, FlowHandle, FlowMode, FlowStatus, Runtime, SubmitOptions};
use serde_json::json;
use support::llm_server::{Gate, Reply, ScriptedLlm};
use support::scenario::{Scratch, config_with, done, last_tool_text, observation, start_single};

/// The engine and image scripts/test.sh prepared.
fn engine() -> (String, String) {
    let host = std::env::var("MANUS_TEST_DOCKER_HOST").expect(
        "MANUS_TEST_DOCKER_HOST is not set: run the suite with scripts/test.sh, which starts a Docker engine for it",
    );
    let image = std::env::var("MANUS_TEST_SANDBOX_IMAGE")
        .unwrap_or_else(|_| "manus-rt-sandbox:test-v2".into());
    (host, image)
}

fn docker(args: &[&str]) -> String {
    let (host, _) = engine();
    let out = Command::new("docker")
        .env("DOCKER_HOST", host)
        .args(args)
        .output()
        .expect("the docker client runs");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn sandbox_config(server: &ScriptedLlm, dir: &Scratch) -> Config {
    sandbox_config_with(server, dir, &[])
}

/// The sandbox config with `extra` overrides (`("sandbox.KEY", "TOML value")`).
fn sandbox_config_with(server: &ScriptedLlm, dir: &Scratch, extra: &[(&str, &str)]) -> Config {
    let (host, image) = engine();
    let host = format!("\"{host}\"");
    let image = format!("\"{image}\"");
    let text = config_with(
        server,
        &dir.workspace(),
        &[
            ("sandbox.use_sandbox", "true"),
            ("sandbox.docker_host", &host),
            ("sandbox.image", &image),
            ("sandbox.memory_limit", "\"96m\""),
            ("sandbox.pids_limit", "64"),
            ("tools.python_timeout_secs", "6"),
            ("agents.manus.max_steps", "12"),
            ("flow.max_step_retries", "0"),
        ]
        .into_iter()
        .chain(extra.iter().copied())
        .collect::<Vec<_>>(),
    );
    Config::from_text(&text, "sandbox-test", None).unwrap()
}

fn python(code: &str) -> Reply {
    Reply::tool("python_execute", json!({"code": code}))
}

/// A runtime with the sandbox on, running `task` with the primary agent alone.
async fn start(server: &ScriptedLlm, dir: &Scratch, task: &str) -> (Runtime, FlowHandle) {
    start_single(sandbox_config(server, dir), task).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_runs_in_the_container_not_on_the_host() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        python("import os\nopen('data.txt', 'w').write('1 2 3')\nprint(os.getcwd())"),
        python("print(sum(int(x) for x in open('/workspace/data.txt').read().split()))"),
        done("summed"),
    ]);
    let dir = Scratch::new("sandbox-basic");
    let (rt, flow) = start(&server, &dir, "sum some numbers").await;
    let id = flow.id.clone();
    let outcome = flow.outcome().await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    assert_eq!(observation(&server, 0), "/workspace");
    assert_eq!(observation(&server, 1), "6");
    assert!(
        !dir.workspace().join("data.txt").exists(),
        "the host workspace is untouched"
    );
    rt.shutdown().await;
    assert_eq!(
        docker(&[
            "ps",
            "-aq",
            "--filter",
            &format!("label=manus-rt.flow={id}")
        ]),
        "",
        "no container is left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_hold_and_are_reported() {
    let server = ScriptedLlm::start().await;
    let fork_bomb = "import os, time\npids = []\ntry:\n    for i in range(1000):\n        pid = os.fork()\n        \
                     if pid == 0:\n            time.sleep(30)\n            os._exit(0)\n        pids.append(pid)\n\
                     except OSError as e:\n    print('fork failed after', len(pids), type(e).__name__)\n\
                     for p in pids:\n    os.kill(p, 9)\n";
    server.push_all([
        python("b = bytearray(512 * 1024 * 1024)\nprint(len(b))"),
        python("print('still alive')"),
        python("while True:\n    pass"),
        python(fork_bomb),
        python("print(sorted(line.split(':')[0].strip() for line in open('/proc/net/dev').readlines()[2:]))"),
        done("limits checked"),
    ]);
    let dir = Scratch::new("sandbox-limits");
    let (rt, flow) = start(&server, &dir, "probe the limits").await;
    let outcome = flow.outcome().await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    let oom = observation(&server, 0);
    assert!(
        oom.starts_with("Error:") && oom.contains("killed") && oom.contains("memory"),
        "{oom}"
    );
    assert_eq!(
        observation(&server, 1),
        "still alive",
        "the container survives an OOM kill"
    );
    let looped = observation(&server, 2);
    assert!(
        looped.contains("ran past the 6 s limit and was interrupted"),
        "{looped}"
    );
    let forks = observation(&server, 3);
    assert!(
        forks.contains("fork failed after") && forks.contains("BlockingIOError"),
        "{forks}"
    );
    assert_eq!(
        observation(&server, 4),
        "['lo']",
        "no network interface but loopback"
    );
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_keeps_its_state_in_the_container() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        python("import os\nnumbers = list(range(5))\nos.getcwd()"),
        python("sum(numbers)"),
        python("import time\nnumbers.append(5)\ntime.sleep(60)"),
        python("sum(numbers)"),
        python("import os\nos._exit(3)"),
        python("print('numbers' in globals())"),
        done("counted"),
    ]);
    let dir = Scratch::new("sandbox-python-state");
    let (rt, flow) = start(&server, &dir, "count in the container").await;
    let outcome = flow.outcome().await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    assert_eq!(observation(&server, 0), "'/workspace'");
    assert_eq!(observation(&server, 1), "10");
    let interrupted = observation(&server, 2);
    assert!(
        interrupted.contains("ran past the 6 s limit and was interrupted (KeyboardInterrupt)"),
        "{interrupted}"
    );
    assert_eq!(
        observation(&server, 3),
        "15",
        "the interrupted cell's state stays"
    );
    let crashed = observation(&server, 4);
    assert!(
        crashed.contains("exited with status 3") && crashed.contains("a fresh interpreter"),
        "{crashed}"
    );
    assert_eq!(observation(&server, 5), "False");
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_killed_from_outside_is_recreated() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        python("open('marker', 'w').write('x')\nprint('first')"),
        // While the model "thinks" about this one, the test kills the container.
        python("print('after the kill')").delay(2500),
        python("import os\nprint('fresh', os.path.exists('marker'))"),
        done("survived"),
    ]);
    let dir = Scratch::new("sandbox-kill");
    let (rt, flow) = start(&server, &dir, "survive a kill").await;
    let id = flow.id.clone();
    let filter = format!("label=manus-rt.flow={id}");
    // Wait until the second model call is under way, then kill the container.
    tokio::time::timeout(Duration::from_secs(60), async {
        while server.requests().len() < 2 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the flow reached its second model call");
    let running = docker(&["ps", "-q", "--filter", &filter]);
    assert!(!running.is_empty(), "the flow's container runs");
    docker(&["kill", &running]);
    let outcome = flow.outcome().await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    let lost = observation(&server, 1);
    assert!(
        lost.starts_with("Error:") && lost.contains("fresh sandbox"),
        "{lost}"
    );
    assert_eq!(
        observation(&server, 2),
        "fresh False",
        "a new container, without the old one's files"
    );
    rt.shutdown().await;
    assert_eq!(
        docker(&["ps", "-aq", "--filter", &filter]),
        "",
        "no container is left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mounted_workspace_is_shared_with_the_host() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        python("open('from_container.txt', 'w').write('made inside')"),
        Reply::tool(
            "str_replace_editor",
            json!({"command": "view", "path": "from_container.txt"}),
        ),
        done("shared"),
    ]);
    let dir = Scratch::new("sandbox-mount");
    let (rt, flow) = start_single(
        sandbox_config_with(&server, &dir, &[("sandbox.mount_workspace", "true")]),
        "share a file",
    )
    .await;
    let outcome = flow.outcome().await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    assert_eq!(
        std::fs::read_to_string(dir.workspace().join("from_container.txt")).unwrap(),
        "made inside"
    );
    assert!(
        observation(&server, 1).contains("made inside"),
        "the editor sees what Python made"
    );
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_sandbox_is_removed_and_made_again_when_needed() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        python("print('one')"),
        // The model takes a while: long enough for the idle sweep to remove the container.
        python("print('two')").delay(3500),
        done("done"),
    ]);
    let dir = Scratch::new("sandbox-idle");
    let config = sandbox_config_with(&server, &dir, &[("sandbox.idle_timeout_secs", "1")]);
    let (rt, flow) = start_single(config, "idle a while").await;
    let filter = format!("label=manus-rt.flow={}", flow.id);
    tokio::time::timeout(Duration::from_secs(60), async {
        while server.requests().len() < 2 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the flow reached its second model call");
    let removed = tokio::time::timeout(Duration::from_secs(3), async {
        while !docker(&["ps", "-aq", "--filter", &filter]).is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(
        removed.is_ok(),
        "the idle container was removed while the model was thinking"
    );
    let outcome = flow.outcome().await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    // A new container served the next call, and the model is told its interpreter is new.
    let two = observation(&server, 1);
    assert!(
        two.starts_with("(The interpreter ended without a word")
            && two.ends_with("are gone.)\ntwo"),
        "{two}"
    );
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandboxes_beyond_max_sandboxes_are_refused_clearly() {
    let server = ScriptedLlm::start().await;
    // Flow A holds its sandbox while its model thinks (the delayed reply); flow B asks for
    // one meanwhile and is told why it gets none.
    server.push_all([
        python("print('a')"),
        done("a done").delay(8000),
        python("print('b')"),
        done("b done"),
    ]);
    let dir = Scratch::new("sandbox-max");
    let config = sandbox_config_with(&server, &dir, &[("sandbox.max_sandboxes", "1")]);
    let rt = Runtime::builder().config(config).start().await.unwrap();
    let single = SubmitOptions {
        mode: FlowMode::Single,
        ..Default::default()
    };
    let a = rt.submit("flow a", single.clone()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(60), async {
        while server.requests().len() < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("flow a ran its first call");
    let b = rt.submit("flow b", single).await.unwrap();
    let (a, b) = tokio::join!(a.outcome(), b.outcome());
    assert_eq!(a.status, FlowStatus::Completed, "{}", a.reason);
    assert_eq!(b.status, FlowStatus::Completed, "{}", b.reason);
    let refused = server
        .requests()
        .iter()
        .map(last_tool_text)
        .find(|t| t.contains("max_sandboxes"))
        .expect("flow b was told why it got no sandbox");
    assert!(refused.contains("all 1 sandboxes are in use"), "{refused}");
    rt.shutdown().await;
}

fn bash(command: &str) -> Reply {
    Reply::tool("bash", json!({ "command": command }))
}

fn edit(args: serde_json::Value) -> Reply {
    Reply::tool("str_replace_editor", args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_keeps_one_session_in_the_container() {
    let server = ScriptedLlm::start().await;
    // Lists the commands running in the container, one per line.
    let ps = "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done";
    server.push_all([
        bash("mkdir -p made/deeper && cd made/deeper && export KEPT=42 && echo in > here.txt"),
        bash("pwd; echo \"kept=$KEPT\"; cat here.txt"),
        bash("echo begun; sleep 97 | cat"),
        bash(&format!(
            "pwd; echo \"[$KEPT]\"; {ps} | grep -c '^sleep 97' || true"
        )),
        bash("export AGAIN=1; echo bye; exit 3"),
        bash("echo \"[$AGAIN]\"; ls /workspace/made/deeper"),
        done("the shell behaved"),
    ]);
    let dir = Scratch::new("sandbox-bash");
    let (rt, flow) = start_single(
        sandbox_config_with(&server, &dir, &[("tools.bash_timeout_secs", "2")]),
        "use the shell",
    )
    .await;
    let outcome = flow.outcome().await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    assert_eq!(observation(&server, 0), "(no output)");
    assert_eq!(
        observation(&server, 1),
        "/workspace/made/deeper\nkept=42\nin",
        "the directory and variables carry over between calls"
    );
    let cut = observation(&server, 2);
    assert!(
        cut.contains("timed out after 2 s") && cut.contains("begun"),
        "{cut}"
    );
    assert_eq!(
        observation(&server, 3),
        "/workspace\n[]\n0",
        "a fresh shell in the workspace, and the timed-out command was killed"
    );
    let ended = observation(&server, 4);
    assert!(
        ended.contains("bye") && ended.contains("exited with status 3"),
        "{ended}"
    );
    assert_eq!(observation(&server, 5), "[]\nhere.txt");
    assert!(
        !dir.workspace().join("made").exists(),
        "the host workspace is untouched"
    );
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_editor_works_on_container_files_and_stays_inside_the_workspace() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        edit(json!({"command": "create", "path": "notes/plan.txt", "file_text": "step one\nstep two\n"})),
        edit(json!({"command": "str_replace", "path": "/workspace/notes/plan.txt",
                    "old_str": "step two", "new_str": "step 2"})),
        python("print(open('/workspace/notes/plan.txt').read().strip())"),
        edit(json!({"command": "view", "path": "."})),
        edit(json!({"command": "view", "path": "../../etc/passwd"})),
        edit(json!({"command": "view", "path": "/etc/passwd"})),
        bash("ln -s /etc /workspace/etc_link && ls -d /workspace/etc_link/"),
        edit(json!({"command": "view", "path": "etc_link/passwd"})),
        edit(json!({"command": "create", "path": "notes/plan.txt", "file_text": "again"})),
        edit(json!({"command": "undo_edit", "path": "notes/plan.txt"})),
        edit(json!({"command": "view", "path": "notes/plan.txt"})),
        done("edited"),
    ]);
    let dir = Scratch::new("sandbox-editor");
    let (rt, flow) = start(&server, &dir, "edit files").await;
    let outcome = flow.outcome().await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    assert!(
        observation(&server, 0).contains("Created `notes/plan.txt` (2 lines)"),
        "{}",
        observation(&server, 0)
    );
    assert!(observation(&server, 1).contains("Replaced the text in `notes/plan.txt`"));
    assert_eq!(observation(&server, 2), "step one\nstep 2");
    let listing = observation(&server, 3);
    assert!(
        listing.contains("notes/\nnotes/plan.txt\n"),
        "the container's workspace is listed: {listing}"
    );
    for n in [4, 5, 7] {
        let refused = observation(&server, n);
        assert!(
            refused.contains("is outside the workspace `/workspace`")
                && refused.contains("/etc/passwd")
                && !refused.contains("root:x:0:0"),
            "request {n}: {refused}"
        );
    }
    assert!(observation(&server, 8).contains("already exists as a file"));
    assert!(observation(&server, 9).contains("Restored `notes/plan.txt`"));
    assert!(
        observation(&server, 10).contains("step two"),
        "{}",
        observation(&server, 10)
    );
    assert!(
        !dir.workspace().join("notes").exists(),
        "the host workspace is untouched"
    );
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn charts_and_reports_are_read_and_written_in_the_container() {
    let server = ScriptedLlm::start().await;
    server.push_all([
        python("open('sales.csv', 'w').write('month,sales\\n2024-01,10\\n2024-02,12\\n2024-03,9\\n')"),
        Reply::tool(
            "data_visualization",
            json!({"data_path": "sales.csv", "chart_type": "bar", "x": "month", "y": "sales",
                   "title": "Sales by month", "output_path": "charts/sales.png"}),
        ),
        Reply::tool(
            "data_report",
            json!({"title": "Sales", "output_path": "report/sales.html",
                   "sections": [{"heading": "Months", "markdown": "March was lowest.",
                                 "charts": ["charts/sales.png"]}]}),
        ),
        python(
            "import os\nprint(open('charts/sales.png', 'rb').read()[1:4].decode())\n\
             print(sorted(os.listdir('report')))\nprint('data:image/png;base64,' in open('report/sales.html').read())",
        ),
        done("charted"),
    ]);
    let dir = Scratch::new("sandbox-charts");
    let tools = "[\"python_execute\", \"data_visualization\", \"data_report\"]";
    let (rt, flow) = start_single(
        sandbox_config_with(&server, &dir, &[("agents.manus.tools", tools)]),
        "chart the sales",
    )
    .await;
    let outcome = flow.outcome().await;
    assert_eq!(outcome.status, FlowStatus::Completed, "{}", outcome.reason);
    let drawn = observation(&server, 1);
    assert!(
        drawn.contains("Wrote `charts/sales.png`") && drawn.contains("2024-03"),
        "{drawn}"
    );
    assert!(observation(&server, 2).contains("Wrote `report/sales.html`"));
    assert_eq!(
        observation(&server, 3),
        "PNG\n['sales.html', 'sales.md']\nTrue"
    );
    assert!(
        !dir.workspace().join("charts").exists() && !dir.workspace().join("report").exists(),
        "the host workspace is untouched"
    );
    rt.shutdown().await;
}

/// The second engine scripts/test.sh prepared (TLS certificates and the image in its data
/// root), started here over TCP on 127.0.0.1, stopped by its PID.
struct SecondEngine {
    child: std::process::Child,
    port: u16,
    root: std::path::PathBuf,
    run: std::path::PathBuf,
}

impl SecondEngine {
    fn start() -> SecondEngine {
        let root = std::path::PathBuf::from(std::env::var("MANUS_TEST_DOCKER2_ROOT").expect(
            "MANUS_TEST_DOCKER2_ROOT is not set: run the suite with scripts/test.sh, which prepares a second engine",
        ));
        let port = support::scenario::free_port();
        let run = std::env::temp_dir().join(format!("manus-rt-dockerd2-{}", std::process::id()));
        std::fs::create_dir_all(&run).unwrap();
        let certs = root.join("certs");
        let child = Command::new("dockerd")
            .arg("--data-root")
            .arg(root.join("data"))
            .arg("--exec-root")
            .arg(run.join("exec"))
            .arg("--pidfile")
            .arg(run.join("dockerd.pid"))
            .args(["-H", &format!("tcp://127.0.0.1:{port}"), "--tlsverify"])
            .arg("--tlscacert")
            .arg(certs.join("ca.pem"))
            .arg("--tlscert")
            .arg(certs.join("server.pem"))
            .arg("--tlskey")
            .arg(certs.join("server-key.pem"))
            .args([
                "--bridge=none",
                "--iptables=false",
                "--ip-forward=false",
                "--ip-masq=false",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(run.join("dockerd.log")).unwrap())
            .spawn()
            .expect("dockerd runs");
        let engine = SecondEngine {
            child,
            port,
            root,
            run,
        };
        for _ in 0..120 {
            if !engine
                .docker(&["version", "-f", "{{.Server.Version}}"])
                .is_empty()
            {
                return engine;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        panic!("the second engine did not come up");
    }

    fn url(&self) -> String {
        format!("tcp://127.0.0.1:{}", self.port)
    }

    /// The config's entry for this engine.
    fn host_toml(&self) -> String {
        let certs = self.root.join("certs");
        format!(
            "{{ url = \"{}\", ca = \"{}\", cert = \"{}\", key = \"{}\" }}",
            self.url(),
            certs.join("ca.pem").display(),
            certs.join("cert.pem").display(),
            certs.join("key.pem").display()
        )
    }

    fn docker(&self, args: &[&str]) -> String {
        let certs = self.root.join("certs");
        let out = Command::new("docker")
            .env_remove("DOCKER_HOST")
            .arg("--tlsverify")
            .arg("--tlscacert")
            .arg(certs.join("ca.pem"))
            .arg("--tlscert")
            .arg(certs.join("cert.pem"))
            .arg("--tlskey")
            .arg(certs.join("key.pem"))
            .args(["-H", &self.url()])
            .args(args)
            .output()
            .expect("the docker client runs");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Stop the engine (SIGTERM, as a host going down for maintenance would) and wait.
    fn stop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for SecondEngine {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            // Its flows' containers go with it.
            let left = self.docker(&["ps", "-aq", "--filter", "label=manus-rt.flow"]);
            for id in left.split_whitespace() {
                self.docker(&["rm", "-f", id]);
            }
            self.stop();
        }
        let _ = std::fs::remove_dir_all(&self.run);
    }
}

/// `[sandbox] hosts`: a local socket and an engine over TCP with TLS client certificates.
/// Two flows' containers go one to each (the fewest first); when the TCP engine stops, the
/// flow whose container was there is told it was lost and goes on in a new container on
/// the engine left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandboxes_spread_over_two_engines_and_survive_one_stopping() {
    let mut second = SecondEngine::start();
    let server = ScriptedLlm::start().await;
    // Each flow keeps its container until the test has looked where both are and stopped
    // an engine (however long the first container takes to start).
    let looked = Gate::new();
    for who in ["alpha", "beta"] {
        server.push_for(
            &format!("flow {who}"),
            [
                python(&format!("print('{who} here')")),
                python(&format!("print('{who} again')")).held_by(&looked),
                python(&format!("print('{who} once more')")),
                done(&format!("{who} done")),
            ],
        );
    }
    let (first, _) = engine();
    let hosts = format!("[\"{first}\", {}]", second.host_toml());
    let dir = Scratch::new("sandbox-two-engines");
    let config = sandbox_config_with(
        &server,
        &dir,
        &[
            ("sandbox.docker_host", ""),
            ("sandbox.hosts", &hosts),
            // A held answer is not a model that stopped answering.
            ("llm.timeout_secs", "120"),
        ],
    );
    let rt = Runtime::builder().config(config).start().await.unwrap();
    let single = |task: &'static str| {
        rt.submit(
            task,
            SubmitOptions {
                mode: FlowMode::Single,
                ..Default::default()
            },
        )
    };
    let alpha = single("flow alpha: compute").await.unwrap();
    let beta = single("flow beta: compute").await.unwrap();
    let ids = [alpha.id.clone(), beta.id.clone()];
    // Once both have run their first call, each has a container, one on each engine.
    let ran = |who: &str| {
        let text = format!("{who} here");
        server.tool_results().iter().any(|t| t.contains(&text))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !(ran("alpha") && ran("beta")) {
        assert!(
            std::time::Instant::now() < deadline,
            "the flows did not run their first calls"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Other tests use the first engine too: count this test's flows' containers.
    let mine = |engine: &dyn Fn(&[&str]) -> String| {
        ids.iter()
            .filter(|id| {
                let label = format!("label=manus-rt.flow={id}");
                !engine(&["ps", "-q", "--filter", &label]).is_empty()
            })
            .count()
    };
    assert_eq!(
        (mine(&docker), mine(&|a: &[&str]| second.docker(a))),
        (1, 1),
        "one container on each engine"
    );
    second.stop();
    looked.open();
    let (a, b) = tokio::join!(alpha.outcome(), beta.outcome());
    rt.shutdown().await;
    assert_eq!(
        (a.status, b.status),
        (FlowStatus::Completed, FlowStatus::Completed),
        "{} / {}",
        a.reason,
        b.reason
    );
    let results = server.tool_results();
    let lost: Vec<&String> = results
        .iter()
        .filter(|t| t.contains("the sandbox was lost"))
        .collect();
    assert!(
        !lost.is_empty() && lost.iter().all(|t| t.contains(&second.url())),
        "{results:#?}"
    );
    // The moved flow's next call ran, in a new container on the engine left.
    assert!(
        results.iter().any(|t| t.contains("once more")),
        "{results:#?}"
    );
    for id in &ids {
        let label = format!("label=manus-rt.flow={id}");
        assert_eq!(
            docker(&["ps", "-aq", "--filter", &label]),
            "",
            "no container outlives the runtime"
        );
    }
}
