//! A cluster of `manus-rt serve` processes on 127.0.0.1 sharing one PostgreSQL store and
//! one scripted model, for the cluster tests and bench; and a PostgreSQL server of their
//! own when none is given.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::llm_server::{Reply, Request, Responder, ScriptedLlm};
use super::scenario::{Scratch, free_port};

const BIN: &str = env!("CARGO_BIN_EXE_manus-rt");

/// A model for any number of flows: a two-step plan, each step one `bash` call (which
/// sleeps `secs`) and then `terminate`, and a summary.
pub fn any_flow(secs: f64) -> Responder {
    logged_flow(secs, None)
}

/// As `any_flow`, each `bash` call then adding a line to `log`: when it ended (ms since
/// the epoch) and where it ran (the node's workspace is in the path).
pub fn logged_flow(secs: f64, log: Option<PathBuf>) -> Responder {
    let done = match log {
        Some(log) => format!("echo \"$(date +%s%3N) $PWD\" >> {}", log.display()),
        None => "echo ok".into(),
    };
    Arc::new(move |r: &Request| {
        let body = r.json();
        let tools = r.tool_names();
        if tools.contains(&"planning") {
            return Some(Reply::tool(
                "planning",
                json!({"command": "create", "plan_id": "p", "title": "Two parts",
                       "steps": ["[MANUS] do the first part", "[MANUS] do the second part"]}),
            ));
        }
        if tools.is_empty() {
            return Some(Reply::text("Both parts are done."));
        }
        let ran = body["messages"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
        Some(if ran {
            Reply::tool("terminate", json!({"status": "success"})).with_text("part done")
        } else {
            Reply::tool("bash", json!({"command": format!("sleep {secs}; {done}")}))
        })
    })
}

pub struct Node {
    pub name: String,
    pub child: Child,
    pub url: String,
    pub log: PathBuf,
}

impl Node {
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `n` serve processes on one store, each with its own workspace.
pub async fn cluster(
    dir: &Scratch,
    server: &ScriptedLlm,
    store: &str,
    n: usize,
    lease: u64,
) -> Vec<Node> {
    let mut nodes = vec![];
    for i in 1..=n {
        let name = format!("node-{i}");
        let config = format!(
            "[llm]\napi_type = \"openai\"\nbase_url = \"{}\"\nmodel = \"scripted\"\napi_key = \"k\"\nmax_retries = 2\n\n\
             [runtime]\nworkspace = \"{}\"\n\n[agents.manus]\nprofile = \"manus\"\nreplicas = 8\nmax_steps = 4\n\n\
             [flow]\nflow_timeout_secs = 600\n\n[store]\nurl = \"{store}\"\n\n\
             [cluster]\nenabled = true\nlease_secs = {lease}\nmax_flows = 6\ndrain_secs = 2\n\n\
             [sandbox]\nmode = \"none\"   # `logged_flow`'s commands log to a file beside the nodes' workspaces\n",
            server.base_url(),
            dir.path().join(&name).display()
        );
        let path = dir.path().join(format!("{name}.toml"));
        std::fs::write(&path, config).unwrap();
        let port = free_port();
        let log = dir.path().join(format!("{name}.log"));
        let child = Command::new(BIN)
            .arg("--config")
            .arg(&path)
            .args(["serve", "--bind", &format!("127.0.0.1:{port}")])
            .env("MANUS_NODE_ID", &name)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        nodes.push(Node {
            name,
            child,
            url: format!("http://127.0.0.1:{port}"),
            log,
        });
    }
    let http = reqwest::Client::new();
    for node in &nodes {
        let deadline = Instant::now() + Duration::from_secs(30);
        while http
            .get(format!("{}/healthz", node.url))
            .send()
            .await
            .is_err()
        {
            assert!(
                Instant::now() < deadline,
                "{} did not start:\n{}",
                node.name,
                node.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    nodes
}

/// Queue `task` on `node`: the run's id (the node answered 201, queued).
pub async fn submit(http: &reqwest::Client, node: &Node, task: &str) -> String {
    let r = http
        .post(format!("{}/v1/flows", node.url))
        .json(&json!({"task": task}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["status"], "queued");
    body["id"].as_str().unwrap().to_string()
}

/// Run `id` as `node` shows it (`GET /v1/flows/{id}`).
pub async fn flow(http: &reqwest::Client, node: &Node, id: &str) -> Value {
    http.get(format!("{}/v1/flows/{id}", node.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The node (by index) whose name the run's owner starts with.
pub fn owner_of(nodes: &[Node], run: &Value) -> Option<usize> {
    let owner = run["node"].as_str()?;
    nodes
        .iter()
        .position(|n| owner.starts_with(&format!("{}:", n.name)))
}

/// A PostgreSQL server of its own (initdb in a temporary directory, 127.0.0.1 on a free
/// port, trusting the role `manus`), for a bench run without `MANUS_TEST_POSTGRES_URL`;
/// stopped by its PID, its directory removed, on drop.
pub struct PrivatePostgres {
    pub url: String,
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    /// The postmaster's own PID (as root, `runuser` stands between it and `runner`).
    pid: Option<i32>,
    runner: Child,
}

/// A PostgreSQL program, run as `postgres` when we are root (it refuses to run as root).
fn as_pg(program: PathBuf) -> Command {
    let mut c = if nix_is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    };
    c.stdout(Stdio::null()).stderr(Stdio::null());
    c
}

impl PrivatePostgres {
    pub fn start() -> PrivatePostgres {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL's programs under /usr/lib/postgresql (Debian's postgresql package)")
            .flatten()
            .map(|e| e.path().join("bin"))
            .max()
            .expect("a PostgreSQL version");
        let dir =
            std::env::temp_dir().join(format!("manus-pg-{}-{}", std::process::id(), free_port()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        if nix_is_root() {
            Command::new("chown")
                .arg("postgres")
                .arg(&dir)
                .status()
                .unwrap();
        }
        let ok = as_pg(bin.join("initdb"))
            .arg("-D")
            .arg(dir.join("data"))
            .args(["-U", "manus", "--auth=trust", "-E", "UTF8"])
            .status()
            .unwrap();
        assert!(ok.success(), "initdb failed");
        let port = free_port();
        let (runner, pid) = PrivatePostgres::launch(&bin, &dir, port);
        PrivatePostgres {
            url: format!("postgres://manus@127.0.0.1:{port}/postgres"),
            dir,
            bin,
            port,
            pid,
            runner,
        }
    }

    /// Start the server on `dir`'s data and `port`; once it takes connections, its runner
    /// and the postmaster's PID.
    fn launch(bin: &std::path::Path, dir: &std::path::Path, port: u16) -> (Child, Option<i32>) {
        let data = dir.join("data");
        let runner = as_pg(bin.join("postgres"))
            .arg("-D")
            .arg(&data)
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-k", ""])
            .spawn()
            .unwrap();
        let url = format!("postgres://manus@127.0.0.1:{port}/postgres");
        let deadline = Instant::now() + Duration::from_secs(30);
        while postgres::Client::connect(&url, postgres::NoTls).is_err() {
            assert!(Instant::now() < deadline, "PostgreSQL did not come up");
            std::thread::sleep(Duration::from_millis(200));
        }
        let pid = std::fs::read_to_string(data.join("postmaster.pid"))
            .ok()
            .and_then(|t| t.lines().next()?.trim().parse().ok());
        (runner, pid)
    }

    /// Send `sig` to the postmaster and every server process under it (SIGSTOP freezes
    /// the whole server, connections included).
    pub fn signal_all(&self, sig: &str) {
        let Some(pid) = self.pid else { return };
        let _ = Command::new("pkill")
            .args([sig, "-P", &pid.to_string()])
            .status();
        let _ = Command::new("kill").args([sig, &pid.to_string()]).status();
    }

    /// Stop the server (fast shutdown) and wait until it is gone.
    pub fn stop(&mut self) {
        if let Some(pid) = self.pid.take() {
            // SIGINT: PostgreSQL's fast shutdown.
            let _ = Command::new("kill")
                .args(["-INT", &pid.to_string()])
                .status();
            for _ in 0..100 {
                if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        let _ = self.runner.kill();
        let _ = self.runner.wait();
    }

    /// Start the stopped server again, on the same data and port.
    pub fn restart(&mut self) {
        let (runner, pid) = PrivatePostgres::launch(&self.bin, &self.dir, self.port);
        self.runner = runner;
        self.pid = pid;
    }
}

fn nix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        self.signal_all("-CONT");
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
