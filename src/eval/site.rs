//! A case's web pages: its `site/` directory served read-only on a free 127.0.0.1 port for
//! the length of the run, and the Chromium argument that makes the host `site.test` resolve
//! there, so a task (and a recorded cassette) names the same address on every machine.
//! Written by hand (one GET route over one directory) rather than pulling in a static-file
//! crate: paths are taken only as plain names inside the directory.

use std::path::{Component, Path, PathBuf};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use tokio::task::JoinHandle;

/// The host a case's pages are served as.
pub const SITE_HOST: &str = "site.test";

pub struct Site {
    port: u16,
    task: JoinHandle<()>,
}

impl Site {
    pub async fn start(dir: PathBuf) -> Result<Site, String> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("cannot serve the case's site: {e}"))?;
        let port = listener
            .local_addr()
            .map_err(|e| format!("cannot serve the case's site: {e}"))?
            .port();
        let app = Router::new().fallback(page).with_state(dir);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Site { port, task })
    }

    /// Chromium's argument that sends `site.test` (port 80) to this server.
    pub fn chromium_arg(&self) -> String {
        format!(
            "--host-resolver-rules=MAP {SITE_HOST} 127.0.0.1:{}",
            self.port
        )
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn page(State(dir): State<PathBuf>, uri: Uri) -> Response {
    let wanted = uri.path().trim_start_matches('/');
    let wanted = if wanted.is_empty() || wanted.ends_with('/') {
        format!("{wanted}index.html")
    } else {
        wanted.to_string()
    };
    let relative = Path::new(&wanted);
    if !relative
        .components()
        .all(|c| matches!(c, Component::Normal(_)))
    {
        return StatusCode::NOT_FOUND.into_response();
    }
    let path = dir.join(relative);
    // Plain files only: a symbolic link is not followed out of the site.
    match std::fs::symlink_metadata(&path) {
        Ok(meta) if meta.is_file() => {}
        _ => return StatusCode::NOT_FOUND.into_response(),
    }
    match tokio::fs::read(&path).await {
        Ok(body) => ([(header::CONTENT_TYPE, content_type(&path))], body).into_response(),
        Err(_) => StatusCode::NOT_FOUND.into_response(),
    }
}

fn content_type(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()).unwrap_or("") {
        "html" | "htm" => "text/html; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "js" => "text/javascript; charset=utf-8",
        "json" => "application/json",
        "csv" => "text/csv; charset=utf-8",
        "png" => "image/png",
        "svg" => "image/svg+xml",
        "jpg" | "jpeg" => "image/jpeg",
        _ => "text/plain; charset=utf-8",
    }
}
