//! A `manus-rt serve` process for the tests that talk to the service over HTTP (serve,
//! console): started on a free loopback port with a config written to its scratch folder,
//! killed by its PID when dropped; plain requests and an SSE reader on top.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::scenario::Scratch;

const BIN: &str = env!("CARGO_BIN_EXE_manus-rt");

/// A running `manus-rt serve`, killed by its PID when dropped.
pub struct Service {
    child: tokio::process::Child,
    pub base: String,
    pub http: reqwest::Client,
}

impl Drop for Service {
    fn drop(&mut self) {
        // SIGKILL, to its PID.
        let _ = self.child.start_kill();
    }
}

impl Service {
    pub async fn start(dir: &Scratch, config: &str) -> Service {
        Service::launch(Service::command(dir, config, "127.0.0.1:0", None)).await
    }

    /// `manus-rt serve --bind bind` in `dir` on `config`; with `nofile`, under that
    /// descriptor limit (set by the shell that execs it).
    pub fn command(
        dir: &Scratch,
        config: &str,
        bind: &str,
        nofile: Option<u32>,
    ) -> tokio::process::Command {
        let path = dir.write_config(config);
        let mut cmd = match nofile {
            Some(n) => {
                let mut sh = tokio::process::Command::new("sh");
                sh.arg("-c")
                    .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                    .arg(BIN);
                sh
            }
            None => tokio::process::Command::new(BIN),
        };
        cmd.current_dir(dir.path())
            .env_remove("MANUS_API_TOKENS")
            .arg("--config")
            .arg(&path)
            .args(["serve", "--bind", bind])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    pub async fn launch(mut cmd: tokio::process::Command) -> Service {
        let mut child = cmd.spawn().unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let base = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if let Some(rest) = line.split("serving on ").nth(1) {
                    return rest.split_whitespace().next().unwrap().to_string();
                }
            }
            panic!("manus-rt serve exited before listening");
        })
        .await
        .expect("manus-rt serve listened");
        // Keep draining stderr so the service never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Service {
            child,
            base,
            http: reqwest::Client::new(),
        }
    }

    /// SIGKILL the service and wait until it is gone.
    pub async fn kill(&mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }

    /// The service's process id (for reading its /proc entries).
    pub fn pid(&self) -> u32 {
        self.child.id().expect("the service is running")
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Submit `task` as a plan (the default mode); its id, once the answer is checked.
    pub async fn submit(&self, task: &str) -> String {
        self.submit_body(json!({"task": task})).await
    }

    /// Submit `task` to the primary agent alone (no plan); its id.
    pub async fn submit_single(&self, task: &str) -> String {
        self.submit_body(json!({"task": task, "mode": "single"}))
            .await
    }

    async fn submit_body(&self, body: Value) -> String {
        let r = self
            .http
            .post(self.url("/v1/flows"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        let location = r.headers()["location"].to_str().unwrap().to_string();
        let body: Value = r.json().await.unwrap();
        assert_eq!(
            location,
            format!("/v1/flows/{}", body["id"].as_str().unwrap())
        );
        body["id"].as_str().unwrap().to_string()
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let r = self.http.get(self.url(path)).send().await.unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    /// Decide approval `approval` of flow `flow` with `decision` (`{"approve": true}`); the
    /// HTTP status.
    pub async fn decide(&self, flow: &str, approval: u64, decision: Value) -> u16 {
        let path = format!("/v1/flows/{flow}/approvals/{approval}");
        let r = self.http.post(self.url(&path)).json(&decision).send().await;
        r.unwrap().status().as_u16()
    }

    /// `get` with `Authorization: Bearer token`.
    pub async fn get_with(&self, path: &str, token: &str) -> (u16, Value) {
        let r = self
            .http
            .get(self.url(path))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    /// Read the SSE stream (after `last_id`, if given) until `until` returns true for an
    /// event, or the stream ends; the (id, kind, data) triples read.
    pub async fn events(
        &self,
        id: &str,
        last_id: Option<u64>,
        mut until: impl FnMut(&str, &Value) -> bool,
    ) -> Vec<(u64, String, Value)> {
        let mut req = self.http.get(self.url(&format!("/v1/flows/{id}/events")));
        if let Some(n) = last_id {
            req = req.header("Last-Event-ID", n.to_string());
        }
        let mut r = req.send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert!(
            r.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/event-stream")
        );
        let mut got = vec![];
        let mut buf = String::new();
        let (mut eid, mut kind, mut data) = (0u64, String::new(), String::new());
        let read = async {
            while let Some(chunk) = r.chunk().await.unwrap() {
                buf.push_str(&String::from_utf8_lossy(&chunk));
                while let Some(end) = buf.find('\n') {
                    let line: String = buf.drain(..=end).collect();
                    let line = line.trim_end();
                    if line.is_empty() {
                        if !data.is_empty() {
                            let value: Value = serde_json::from_str(&data).unwrap();
                            let stop = until(&kind, &value);
                            got.push((eid, std::mem::take(&mut kind), value));
                            data.clear();
                            if stop {
                                return;
                            }
                        }
                    } else if let Some(v) = line.strip_prefix("id:") {
                        eid = v.trim().parse().unwrap();
                    } else if let Some(v) = line.strip_prefix("event:") {
                        kind = v.trim().to_string();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(120), read)
            .await
            .expect("the event stream ended or matched in time");
        got
    }
}
