//! The WebDriver side of the browser: a chromedriver this process launches (in its own
//! process group, so stopping it takes every browser it started along), and the session
//! capabilities that say which Chromium to start and how.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::BrowserSettings;
use crate::process::kill_group;

/// A chromedriver started by the browser supervisor.
pub struct Driver {
    child: tokio::process::Child,
    pub url: String,
}

impl Driver {
    /// Start `path` on a free loopback port and wait until it answers `/status`.
    pub async fn launch(path: &str) -> Result<Driver, String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port for chromedriver: {e}"))?
            .port();
        let child = tokio::process::Command::new(path)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot start chromedriver `{path}`: {e}; install it (Debian: apt-get install chromium-driver) \
                     or set [browser] chromedriver_path or webdriver_url"
                )
            })?;
        let mut driver = Driver {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let http = crate::tls::client();
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(20) {
            if let Ok(Some(status)) = driver.child.try_wait() {
                return Err(format!("chromedriver `{path}` exited at start ({status})"));
            }
            let ready = http
                .get(format!("{}/status", driver.url))
                .timeout(Duration::from_secs(2))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ready {
                tracing::info!(url = %driver.url, "chromedriver started");
                return Ok(driver);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        driver.stop();
        Err(format!(
            "chromedriver `{path}` did not answer on port {port} within 20 s"
        ))
    }

    /// Whether the process still runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Kill chromedriver and every browser it started.
    pub fn stop(&mut self) {
        if let Some(pid) = self.child.id() {
            kill_group(pid);
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The new-session capabilities: Chromium's binary, its arguments (headless, window size,
/// a fresh profile directory, the proxy, then the configured extras) and the page-load limit.
pub fn capabilities(
    settings: &BrowserSettings,
    profile_dir: &Path,
    proxy: Option<&str>,
) -> serde_json::Map<String, Value> {
    let (w, h) = settings.viewport;
    let mut args = vec![
        format!("--window-size={w},{h}"),
        format!("--user-data-dir={}", profile_dir.display()),
    ];
    if settings.headless {
        args.push("--headless=new".into());
    }
    if running_as_root() {
        // Chromium refuses to start as root with its sandbox on.
        args.push("--no-sandbox".into());
    }
    if let Some(server) = proxy {
        args.push(format!("--proxy-server={server}"));
    }
    args.extend(settings.extra_args.iter().cloned());
    let mut chrome = json!({ "args": args });
    if let Some(binary) = &settings.chromium_path {
        chrome["binary"] = json!(binary);
    }
    let caps = json!({
        "browserName": "chrome",
        "goog:chromeOptions": chrome,
        "pageLoadStrategy": "normal",
        "unhandledPromptBehavior": "accept",
        "timeouts": {
            "pageLoad": settings.page_load_timeout.as_millis() as u64,
            "script": 30_000,
            "implicit": 0,
        },
    });
    match caps {
        Value::Object(map) => map,
        _ => unreachable!("a JSON object literal"),
    }
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|ids| ids.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}
