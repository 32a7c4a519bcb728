//! The workspace's files as MCP resources, for `mcp-server`. Listing walks the workspace
//! name by name under its handle (`tools::files::beneath`), so links, special files and
//! anything beyond them are left out, as the file tools would refuse them; reading goes
//! through `open_workspace_file`, the file tools' own confinement rule, and refuses files
//! above `MAX_READ_BYTES`. A resource's URI is the `file://` URL of its path on the host.
//! Knows nothing of MCP sessions or tools.

use std::collections::VecDeque;
use std::io::Read;
use std::path::{Path, PathBuf};

use base64::Engine;
use rmcp::model::{Resource, ResourceContents};

use crate::tools::files::beneath::{Found, Root};
use crate::tools::files::{WorkspaceFileError, image_type, open_workspace_file};

/// The largest file a client may read as a resource.
pub const MAX_READ_BYTES: u64 = 4 * 1024 * 1024;
/// The most files listed; a workspace with more lists the first ones found, nearest first.
pub const MAX_LISTED: usize = 10_000;
/// Resources in one page of `resources/list`.
const PAGE: usize = 500;

/// One page of the workspace's files from `cursor` (an offset this module wrote), and the
/// cursor of the next page. Blocking: call it off the async threads.
pub fn list(
    workspace: &Path,
    cursor: Option<&str>,
) -> Result<(Vec<Resource>, Option<String>), String> {
    let from = match cursor {
        None => 0,
        Some(c) => c
            .parse::<usize>()
            .map_err(|_| format!("the cursor `{c}` is not one this server gave"))?,
    };
    let files = walk(workspace).map_err(|e| format!("the workspace could not be listed: {e}"))?;
    let page: Vec<Resource> = files
        .iter()
        .skip(from)
        .take(PAGE)
        .filter_map(|(rel, size)| {
            let url = reqwest::Url::from_file_path(workspace.join(rel)).ok()?;
            let name = rel.to_string_lossy().into_owned();
            let resource = Resource::new(url.to_string(), name).with_size(*size);
            Some(match known_type(rel) {
                Some(mime) => resource.with_mime_type(mime),
                None => resource,
            })
        })
        .collect();
    let next = (from + PAGE < files.len()).then(|| (from + PAGE).to_string());
    Ok((page, next))
}

/// The regular files under `workspace` (relative paths, with sizes), breadth first and
/// sorted within each folder, at most `MAX_LISTED`.
fn walk(workspace: &Path) -> std::io::Result<Vec<(PathBuf, u64)>> {
    let root = Root::open(workspace)?;
    let mut files = Vec::new();
    let mut folders = VecDeque::from([PathBuf::new()]);
    while let Some(folder) = folders.pop_front() {
        // A folder that went away or turned into a link meanwhile is skipped.
        let Ok(mut names) = root.list(&folder) else {
            continue;
        };
        names.sort();
        for (name, _) in names {
            let rel = folder.join(name);
            match root.find(&rel) {
                Ok(Found::Dir) => folders.push_back(rel),
                Ok(Found::File(size)) => {
                    files.push((rel, size));
                    if files.len() == MAX_LISTED {
                        return Ok(files);
                    }
                }
                _ => {}
            }
        }
    }
    Ok(files)
}

/// The contents of the resource `uri`: text when the file is UTF-8, else base64. Blocking.
pub fn read(workspace: &Path, uri: &str) -> Result<ResourceContents, String> {
    let url = reqwest::Url::parse(uri).map_err(|e| format!("`{uri}` is not a URI ({e})"))?;
    let path = url
        .to_file_path()
        .map_err(|_| format!("`{uri}` is not a file:// URI of this server's workspace"))?;
    let rel = path.strip_prefix(workspace).map_err(|_| {
        format!(
            "`{uri}` is outside the workspace {}; only its files are resources",
            workspace.display()
        )
    })?;
    let (file, size) =
        open_workspace_file(workspace, rel, MAX_READ_BYTES).map_err(|e| match e {
            WorkspaceFileError::TooLarge { size, max } => {
                format!("`{uri}` is {size} bytes; resources are read up to {max} bytes")
            }
            e => format!("`{uri}` cannot be read: {e}"),
        })?;
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(size)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("`{uri}` could not be read: {e}"))?;
    let known = known_type(rel);
    Ok(match String::from_utf8(bytes) {
        Ok(text) => ResourceContents::text(text, uri).with_mime_type(known.unwrap_or("text/plain")),
        Err(e) => {
            let blob = base64::engine::general_purpose::STANDARD.encode(e.as_bytes());
            ResourceContents::blob(blob, uri)
                .with_mime_type(known.unwrap_or("application/octet-stream"))
        }
    })
}

/// The media type of a file by its extension, for the kinds a client may show as they are.
fn known_type(rel: &Path) -> Option<&'static str> {
    let ext = rel.extension()?.to_string_lossy().to_ascii_lowercase();
    image_type(&ext).or(match ext.as_str() {
        "json" => Some("application/json"),
        "md" => Some("text/markdown"),
        "html" | "htm" => Some("text/html"),
        "csv" => Some("text/csv"),
        "pdf" => Some("application/pdf"),
        _ => None,
    })
}
