//! The web console's server side. Its page, style and scripts are compiled into the binary
//! (`ASSETS`: nothing is read from disk at run time, nothing comes from a CDN): `GET /` is
//! the page, `GET /console/{name}` each file. They hold no data (the page asks for the API
//! token and sends it as `Authorization: Bearer` on its /v1 calls), so they need no token,
//! but they pass the `Host` check like every route, and the page's Content-Security-Policy
//! lets only these files run in it.
//!
//! Also here, behind the token: `GET /v1/flows/{id}/files/{*path}`, a file of the workspace
//! this node's flows work in (a fork's own, for a fork), opened by the file tools' own confinement rule
//! (`manus_actors::tools::open_workspace_file`) and typed so that nothing in it runs with
//! the console's origin: images and text inline, everything else as a download, and all of
//! it under a policy that sandboxes it when opened by itself. The file is streamed from
//! the descriptor that rule opened, at most `MAX_DOWNLOADS` at a time.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use manus_actors::tools::{WorkspaceFileError, image_type, open_workspace_file};
use tokio::io::AsyncReadExt;
use tokio::sync::Semaphore;
use tokio_util::io::ReaderStream;

use super::{ApiError, App};

const HTML: &str = "text/html; charset=utf-8";

/// The console's files: name, Content-Type, contents. A new script is one line here.
const ASSETS: &[(&str, &str, &str)] = &[
    ("index.html", HTML, include_str!("console/index.html")),
    ("style.css", "text/css", include_str!("console/style.css")),
    ("app.js", "text/javascript", include_str!("console/app.js")),
    ("api.js", "text/javascript", include_str!("console/api.js")),
    ("dom.js", "text/javascript", include_str!("console/dom.js")),
    (
        "graph.js",
        "text/javascript",
        include_str!("console/graph.js"),
    ),
    ("run.js", "text/javascript", include_str!("console/run.js")),
];

/// The page's policy: only the console's own scripts, styles and calls, no inline script
/// (so text a flow shows can never run as one); images also from the blobs the page makes
/// of workspace files it fetched with the token.
const PAGE_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                           img-src 'self' blob: data:; connect-src 'self'; base-uri 'none'; \
                           form-action 'self'; frame-ancestors 'none'";

/// The policy on every workspace file: opened by itself it is a sandboxed document (no
/// scripts, a unique origin, no requests), so an SVG or page an agent wrote runs nothing
/// with the console's origin; inline styles keep an SVG drawn right.
const FILE_POLICY: &str = "sandbox; default-src 'none'; style-src 'unsafe-inline'";

/// The largest workspace file served: the console shows charts, reports and notes, not
/// data sets.
const MAX_FILE_BYTES: u64 = 20 * 1024 * 1024;

/// Workspace files sent at once. Each holds an open file and a 64 KiB buffer until its
/// client has read it all, however slowly; a request past the bound waits up to
/// `DOWNLOAD_WAIT` for one to finish, then gets a 503 with `Retry-After`.
const MAX_DOWNLOADS: usize = 16;
const DOWNLOAD_WAIT: Duration = Duration::from_secs(5);
static DOWNLOADS: Semaphore = Semaphore::const_new(MAX_DOWNLOADS);

/// `GET /`: the console's page.
pub(super) async fn page() -> Result<Response, ApiError> {
    console_file("index.html")
}

/// `GET /console/{name}`: one of the console's files.
pub(super) async fn asset(Path(name): Path<String>) -> Result<Response, ApiError> {
    console_file(&name)
}

fn console_file(name: &str) -> Result<Response, ApiError> {
    let Some(&(_, kind, body)) = ASSETS.iter().find(|(n, _, _)| *n == name) else {
        let names: Vec<&str> = ASSETS.iter().map(|(n, _, _)| *n).collect();
        return Err(ApiError(
            StatusCode::NOT_FOUND,
            format!(
                "the console has no file `{name}` (it has {}); GET / opens the console",
                names.join(", ")
            ),
        ));
    };
    let policy = match kind {
        HTML => vec![(header::CONTENT_SECURITY_POLICY, PAGE_POLICY)],
        _ => vec![],
    };
    Ok(typed(kind, &policy, body))
}

/// `body` as `content_type`, with `extra` headers and those every file served here carries:
/// the type is the one given (never sniffed), no Referer leaves the page, and each load
/// asks whether the file changed (the console after an upgrade, a file an agent rewrote).
fn typed(
    content_type: &'static str,
    extra: &[(HeaderName, &'static str)],
    body: impl IntoResponse,
) -> Response {
    let mut response = body.into_response();
    let always = [
        (header::CONTENT_TYPE, content_type),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-cache"),
    ];
    let headers = response.headers_mut();
    for (name, value) in always.iter().chain(extra) {
        headers.insert(name.clone(), HeaderValue::from_static(value));
    }
    response
}

/// `GET /v1/flows/{id}/files/{*path}`: a file of the workspace flow `id` works in. The
/// workspace is the node's, shared by its flows; the id says which node's.
pub(super) async fn file(
    State(app): State<Arc<App>>,
    Path((id, path)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let workspace = workspace_of(&app, &id).await?;
    let Ok(Ok(permit)) = tokio::time::timeout(DOWNLOAD_WAIT, DOWNLOADS.acquire()).await else {
        let mut busy = ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "{MAX_DOWNLOADS} workspace files are being sent already (the most at once) and \
                 none finished within {} s; ask again after Retry-After seconds",
                DOWNLOAD_WAIT.as_secs()
            ),
        )
        .into_response();
        let retry = HeaderValue::from(DOWNLOAD_WAIT.as_secs());
        busy.headers_mut().insert(header::RETRY_AFTER, retry);
        return Ok(busy);
    };
    let rel = PathBuf::from(&path);
    // Opening name by name is blocking.
    let opened =
        tokio::task::spawn_blocking(move || open_workspace_file(&workspace, &rel, MAX_FILE_BYTES))
            .await
            .map_err(|e| {
                ApiError(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("opening `{path}` failed: {e}"),
                )
            })?;
    let (file, size) = opened.map_err(|e| not_served(&path, e))?;
    // At most the size it had when opened is sent, so a file that grows meanwhile cannot
    // pass the limit (one that shrinks ends the body short of its Content-Length, which the
    // client sees). The permit goes with the stream: it is held until the body is sent or
    // the client leaves.
    let stream = ReaderStream::with_capacity(tokio::fs::File::from_std(file).take(size), 64 << 10)
        .map(move |piece| {
            let _sending = &permit;
            piece
        });
    let mut extra = vec![(header::CONTENT_SECURITY_POLICY, FILE_POLICY)];
    let (kind, inline) = file_type(&path);
    if !inline {
        extra.push((header::CONTENT_DISPOSITION, "attachment"));
    }
    let mut response = typed(kind, &extra, Body::from_stream(stream));
    response
        .headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    Ok(response)
}

/// The host directory holding flow `id`'s files, or the 404 that says why not: the flow
/// is not one this service holds, or (on a cluster) it runs on another node, or the agents
/// work in a sandbox that does not mount the workspace. A fork's is its own workspace.
async fn workspace_of(app: &App, id: &str) -> Result<PathBuf, ApiError> {
    let flow = app.flow(id).await?;
    flow.files_here(app.settings.keep_finished)?;
    // A fork works in a workspace of its own.
    if let Some(fork) = flow.view().await?.0.fork {
        return Ok(PathBuf::from(fork.workspace));
    }
    app.workspace.clone().ok_or_else(|| {
        ApiError(
            StatusCode::NOT_FOUND,
            "the agents here work in a sandbox that does not mount the workspace: their files \
             are in each flow's container, not on this host. Set [sandbox] mount_workspace = \
             true to read them here"
                .into(),
        )
    })
}

/// The answer for a workspace file that is not served.
fn not_served(path: &str, e: WorkspaceFileError) -> ApiError {
    let (status, what_to_do) = match &e {
        WorkspaceFileError::Missing => (StatusCode::NOT_FOUND, ""),
        WorkspaceFileError::Folder => (StatusCode::BAD_REQUEST, ""),
        WorkspaceFileError::TooLarge { .. } => {
            (StatusCode::PAYLOAD_TOO_LARGE, "; read it on the host")
        }
        WorkspaceFileError::Refused(_) => (
            StatusCode::FORBIDDEN,
            ". Only regular files inside the workspace, named by a relative path without \
             links or `..`, are served",
        ),
        // A name the file system cannot take (too long, say) is the request's fault.
        WorkspaceFileError::Io(io) if io.kind() == std::io::ErrorKind::InvalidFilename => (
            StatusCode::BAD_REQUEST,
            "; the name is too long or cannot name a file",
        ),
        WorkspaceFileError::Io(_) => (StatusCode::INTERNAL_SERVER_ERROR, ""),
    };
    let path: String = match path.char_indices().nth(200) {
        Some((cut, _)) => format!("{}…", &path[..cut]),
        None => path.to_string(),
    };
    ApiError(status, format!("`{path}`: {e}{what_to_do}"))
}

/// A workspace file's Content-Type by its extension, and whether it is shown inline:
/// images and plain text are; anything else (HTML, scripts, archives) is a download, so
/// it never opens as a page of the console's origin.
fn file_type(path: &str) -> (&'static str, bool) {
    let extension = std::path::Path::new(path)
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    if let Some(image) = image_type(&extension) {
        return (image, true);
    }
    match extension.as_str() {
        "txt" | "md" | "csv" | "json" | "log" | "py" | "sh" => ("text/plain; charset=utf-8", true),
        _ => ("application/octet-stream", false),
    }
}
