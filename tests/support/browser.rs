//! Real Chromium for the browser tests: a chromedriver each test starts on a free loopback
//! port in its own process group (stopped by PID, with every browser it launched), the
//! config that points a runtime at it, and a site of test pages served from 127.0.0.1 that
//! records which paths were asked for.

use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::response::Html;
use axum::routing::get;
use tokio::task::JoinHandle;

/// The Chromium arguments the tests run with (the runtime adds `--headless=new`, the window
/// size and a fresh `--user-data-dir`).
pub const CHROMIUM_ARGS: &[&str] = &[
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
];

/// A chromedriver on 127.0.0.1, killed with its browsers when dropped.
pub struct Chromedriver {
    child: Child,
    pub port: u16,
}

impl Chromedriver {
    pub fn start() -> Chromedriver {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        Chromedriver::start_on(port)
    }

    /// Start on `port` and wait until it accepts connections.
    pub fn start_on(port: u16) -> Chromedriver {
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("chromedriver runs (scripts/test.sh installs Debian's chromium-driver)");
        let driver = Chromedriver { child, port };
        for _ in 0..400 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return driver;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        drop(driver);
        panic!("chromedriver did not listen on port {port}");
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The process group's members whose command line contains `needle`.
    pub fn group_members(&self, needle: &str) -> Vec<u32> {
        let out = Command::new("pgrep")
            .args(["-g", &self.child.id().to_string(), "-f", "--", needle])
            .output()
            .expect("pgrep runs");
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }

    /// Kill chromedriver and every browser it started, and reap it.
    pub fn kill(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for Chromedriver {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Config overrides that point the runtime's browser at `driver`.
pub fn browser_overrides(driver: &Chromedriver) -> Vec<(&'static str, String)> {
    let args = CHROMIUM_ARGS
        .iter()
        .map(|a| format!("\"{a}\""))
        .collect::<Vec<_>>()
        .join(", ");
    vec![
        ("browser.webdriver_url", format!("\"{}\"", driver.url())),
        ("browser.chromium_path", "\"/usr/bin/chromium\"".into()),
        ("browser.extra_args", format!("[{args}]")),
        ("browser.viewport", "{ width = 1024, height = 700 }".into()),
        ("browser.page_load_timeout_secs", "20".into()),
    ]
}

/// The test pages, served from 127.0.0.1.
pub struct TestSite {
    addr: SocketAddr,
    hits: Arc<Mutex<Vec<String>>>,
    task: JoinHandle<()>,
}

fn page(title: &str, body: &str) -> Html<String> {
    Html(format!(
        "<!doctype html><html><head><meta charset=utf-8><title>{title}</title></head><body>{body}</body></html>"
    ))
}

impl TestSite {
    pub async fn start() -> TestSite {
        let hits: Arc<Mutex<Vec<String>>> = Arc::default();
        let app = Router::new()
            .route("/form", get(|| async {
                page("Order form", "<h1>Order a kite</h1>\
                    <form action=\"/order\" method=\"get\">\
                    <p><label>Name <input type=\"text\" name=\"name\" placeholder=\"Your name\"></label></p>\
                    <p><label>Colour <select name=\"colour\"><option value=\"\">Pick one</option>\
                    <option value=\"red\">Red</option><option value=\"green\">Green</option><option value=\"blue\">Blue</option>\
                    </select></label></p>\
                    <button type=\"submit\">Place order</button></form>")
            }))
            .route("/order", get(|Query(q): Query<std::collections::HashMap<String, String>>| async move {
                let name = q.get("name").cloned().unwrap_or_default();
                let colour = q.get("colour").cloned().unwrap_or_default().to_uppercase();
                page("Order placed", &format!(
                    "<h1>Thank you, {name}!</h1><p>Your kite is on its way.</p>\
                     <p>Your order number is <b>KITE-{colour}-{}</b>.</p>", name.len()))
            }))
            .route("/links", get(|| async {
                page("Links", "<p><a href=\"/form\" target=\"_blank\">Open the form in a new tab</a></p>\
                    <p><a href=\"/long\">A long page</a></p>")
            }))
            .route("/long", get(|| async {
                let filler: String = (1..=150).map(|i| format!("<p>Filler paragraph {i}.</p>")).collect();
                page("Long page", &format!("<h1>Top</h1>{filler}<p id=\"end\">The secret word is marigold.</p>\
                    <button>Bottom button</button>"))
            }))
            .route("/whoami/{name}", get(|Path(name): Path<String>| async move {
                page(&format!("Page of {name}"), &format!("<h1>This page belongs to {name}</h1><a href=\"/form\">form</a>"))
            }))
            // Never finishes loading: its image never arrives.
            .route("/slow", get(|| async { page("Slow page", "<p>Loading forever</p><img src=\"/hang\">") }))
            .route("/hang", get(std::future::pending::<Html<String>>))
            .layer(axum::middleware::from_fn_with_state(hits.clone(), record))
            .with_state(());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        TestSite { addr, hits, task }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Wait (bounded) until `path` has been requested.
    pub async fn wait_for_hit(&self, path: &str) {
        for _ in 0..1200 {
            if self.hits.lock().unwrap().iter().any(|h| h == path) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{path} was never requested");
    }
}

async fn record(
    State(hits): State<Arc<Mutex<Vec<String>>>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    hits.lock().unwrap().push(req.uri().path().to_string());
    next.run(req).await
}

impl Drop for TestSite {
    fn drop(&mut self) {
        self.task.abort();
    }
}
