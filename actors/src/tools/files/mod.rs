//! Where an agent's files live, and the one confinement rule for them. On the host they are
//! in the workspace directory; with `[sandbox] use_sandbox` they are in the flow's container,
//! under its work_dir, reached through the sandbox supervisor (archive endpoints for
//! contents, a short shell command for resolving and listing). The file tools (editor,
//! charts, report) use only this module, so they behave the same on both sides.
//!
//! The invariant: on the host, a path is checked and then used only through `beneath`,
//! which opens it name by name under the workspace's handle without following links, so
//! nothing a tool reads or writes can be outside the workspace, whatever changes between
//! the check and the use; named pipes, sockets, devices and hard-linked files are refused.
//! `open_workspace_file` is that rule for readers outside the engine (the service).
//!
//! Reading is bounded: a tool reads a whole file only up to `MAX_READ`, and a range of
//! lines (`lines`) is found by reading the file in pieces, so a file's size never becomes
//! the engine's memory.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use super::{ToolCtx, ToolError};
use crate::sandbox::SandboxHandle;

pub(crate) mod beneath;
#[cfg(test)]
mod tests;

use beneath::{Found, Mode, Refusal, Root};

/// Why `read_workspace_file` gave no bytes.
#[derive(Debug)]
pub enum WorkspaceFileError {
    /// Nothing by that name.
    Missing,
    /// A folder, not a file.
    Folder,
    /// Larger than the limit: its size when looked at (at least), and the limit.
    TooLarge { size: u64, max: u64 },
    /// The confinement rule refused it: why (a symbolic link on the way, `..`, an absolute
    /// path, a named pipe, socket or device, a hard-linked file).
    Refused(String),
    /// The workspace or the file could not be read.
    Io(std::io::Error),
}

impl std::fmt::Display for WorkspaceFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WorkspaceFileError::Missing => write!(f, "there is no such file in the workspace"),
            WorkspaceFileError::Folder => write!(f, "it is a folder; name a file in it"),
            WorkspaceFileError::TooLarge { size, max } => {
                write!(f, "it is {size} bytes, more than the {max} allowed")
            }
            WorkspaceFileError::Refused(why) => write!(f, "refused: {why}"),
            WorkspaceFileError::Io(e) => write!(f, "it cannot be read: {e}"),
        }
    }
}

impl std::error::Error for WorkspaceFileError {}

impl From<Refusal> for WorkspaceFileError {
    fn from(r: Refusal) -> Self {
        match r {
            // `..`, an absolute path or a NUL, as `beneath` refuses them.
            Refusal::Io(e) if e.kind() == std::io::ErrorKind::InvalidInput => {
                WorkspaceFileError::Refused(e.to_string())
            }
            // Gone since it was found, or a folder on the way is missing.
            Refusal::Io(e) if e.kind() == std::io::ErrorKind::NotFound => {
                WorkspaceFileError::Missing
            }
            Refusal::Io(e) => WorkspaceFileError::Io(e),
            refused => WorkspaceFileError::Refused(refused.to_string()),
        }
    }
}

/// The regular file `rel` (relative) under the directory `workspace`, open for reading,
/// and its size when opened (at most `max_bytes`), by the file tools' own rule: name by name
/// under the workspace's handle, no symbolic link followed, no `..`, no special or
/// hard-linked file. For readers outside the engine (the service streams the agents'
/// files): read no more than the size given, as the file may grow. Blocking: call it off the
/// async threads.
pub fn open_workspace_file(
    workspace: &Path,
    rel: &Path,
    max_bytes: u64,
) -> Result<(File, u64), WorkspaceFileError> {
    let root = Root::open(workspace).map_err(WorkspaceFileError::Io)?;
    match root.find(rel)? {
        Found::Missing => return Err(WorkspaceFileError::Missing),
        Found::Dir => return Err(WorkspaceFileError::Folder),
        // A link or a special file: the open says which, and refuses it.
        Found::File(_) | Found::Other => {}
    }
    let file = root.open_read(rel)?;
    // The size of what was opened, not of what was looked at.
    match file.metadata().map_err(WorkspaceFileError::Io)?.len() {
        size if size > max_bytes => Err(WorkspaceFileError::TooLarge {
            size,
            max: max_bytes,
        }),
        size => Ok((file, size)),
    }
}

/// The most bytes a tool reads of a file at once (to edit it, chart it, embed it or view
/// it whole); larger files are refused with what to do instead.
pub(crate) const MAX_READ: u64 = 20 * 1024 * 1024;

/// The most bytes of lines `lines` gathers for one range.
pub(crate) const MAX_LINES_BYTES: usize = 1024 * 1024;

/// Lines of a file found by reading it in pieces.
pub(crate) struct Lines {
    /// The lines asked for that the file has, without their line ends (`\n`, `\r\n`).
    pub(crate) lines: Vec<Vec<u8>>,
    /// How many lines the file has (a last line without `\n` counts).
    pub(crate) total: usize,
}

/// Lines `first..=last` (numbered from 1) of what `reader` gives, and how many lines it
/// has. Memory holds a piece of the input and the lines asked for; `None` when those pass
/// `MAX_LINES_BYTES`.
fn scan_lines(reader: impl Read, first: usize, last: usize) -> std::io::Result<Option<Lines>> {
    let mut reader = BufReader::with_capacity(64 * 1024, reader);
    let (mut lines, mut total, mut kept) = (Vec::new(), 0, 0);
    // The line being read (`open`), and its bytes when it is one asked for.
    let mut current: Option<Vec<u8>> = None;
    let mut open = false;
    loop {
        let piece = reader.fill_buf()?;
        if piece.is_empty() {
            break;
        }
        let (part, ends) = match piece.iter().position(|&b| b == b'\n') {
            Some(at) => (&piece[..at], true),
            None => (piece, false),
        };
        if !open {
            open = true;
            total += 1;
            current = (first..=last).contains(&total).then(Vec::new);
        }
        if let Some(line) = &mut current {
            kept += part.len();
            if kept > MAX_LINES_BYTES {
                return Ok(None);
            }
            line.extend_from_slice(part);
        }
        let used = part.len() + usize::from(ends);
        reader.consume(used);
        if ends {
            open = false;
            if let Some(mut line) = current.take() {
                if line.ends_with(b"\r") {
                    line.pop();
                }
                lines.push(line);
            }
        }
    }
    if let Some(line) = current {
        lines.push(line);
    }
    Ok(Some(Lines { lines, total }))
}

/// The media type of an image file by its (lower-case) extension; `None` for anything
/// that is not an image a page can show.
pub fn image_type(ext: &str) -> Option<&'static str> {
    Some(match ext {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "svg" => "image/svg+xml",
        _ => return None,
    })
}

/// What a resolved path names right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Missing,
    Dir,
    /// A file (or anything else that is not a directory) of this many bytes.
    File(u64),
}

/// A path that has been checked to lie inside the workspace.
pub(crate) struct Target {
    /// The resolved path (in the container, with the sandbox on), symbolic links followed
    /// as far as the path exists.
    pub(crate) path: PathBuf,
    /// How the path is named in messages: relative to the workspace.
    pub(crate) shown: String,
    pub(crate) kind: Kind,
    /// On the host: the workspace's resolved root and the path below it, by which the file
    /// is opened (name by name, links not followed).
    pub(crate) root: PathBuf,
    pub(crate) rel: PathBuf,
}

impl Target {
    /// Its size in bytes when it was resolved (0 if not a file).
    pub(crate) fn size(&self) -> u64 {
        match self.kind {
            Kind::File(size) => size,
            Kind::Dir | Kind::Missing => 0,
        }
    }
}

/// The file side of one tool call: which tool is asking (errors name it) and where.
pub(crate) struct Files<'a> {
    tool: &'a str,
    ctx: &'a ToolCtx,
}

/// Resolves a path inside the container and says what it is: the workspace root, the path,
/// then `dir`, `file SIZE` or `missing`. `realpath -m` follows links and `..` even where
/// the path does not exist yet.
const RESOLVE_SH: &str = r#"cd -- "$1" || exit 3
root=$(realpath -m -- "$1") && p=$(realpath -m -- "$2") || exit 3
printf '%s\n%s\n' "$root" "$p"
if [ -d "$p" ]; then echo dir; elif [ -e "$p" ]; then stat -c 'file %s' -- "$p"; else echo missing; fi"#;

/// Lists one directory level inside the container: type letter, space, name, NUL.
const LIST_SH: &str = r#"find "$1" -mindepth 1 -maxdepth 1 ! -name '.*' -printf '%y %f\0'"#;

impl<'a> Files<'a> {
    pub(crate) fn new(tool: &'a str, ctx: &'a ToolCtx) -> Self {
        Files { tool, ctx }
    }

    fn fail(&self, msg: impl std::fmt::Display) -> ToolError {
        ToolError::new(format!("{}: {msg}", self.tool))
    }

    /// Resolve `raw` (relative to the workspace, or absolute) and refuse it unless it is
    /// inside the workspace once `..` and symbolic links are followed.
    pub(crate) async fn resolve(&self, raw: &str) -> Result<Target, ToolError> {
        let raw = raw.trim();
        if raw.is_empty() {
            return Err(self.fail(
                "`path` is empty; give a path relative to the workspace, or absolute inside it",
            ));
        }
        let (root, path, kind, workspace) = match &self.ctx.sandbox {
            Some(sandbox) => {
                let (root, path, kind) = self.resolve_in(sandbox, raw).await?;
                (root, path, kind, sandbox.work_dir.clone())
            }
            None => {
                let (root, path) = self.resolve_on_host(raw).await?;
                let rel = path.strip_prefix(&root).unwrap_or(&path).to_path_buf();
                let found = self.beneath(&root, move |r| r.find(&rel)).await;
                let kind = match found {
                    Ok(Found::Dir) => Kind::Dir,
                    Ok(Found::File(size)) => Kind::File(size),
                    // Refused with the reason when used.
                    Ok(Found::Other) => Kind::File(0),
                    Ok(Found::Missing) | Err(_) => Kind::Missing,
                };
                (root, path, kind, self.ctx.workspace.display().to_string())
            }
        };
        let Ok(relative) = path.strip_prefix(&root) else {
            return Err(self.fail(format!(
                "`{raw}` is outside the workspace `{workspace}` (it resolves to `{}`). Only files \
                 inside the workspace can be used; give a path relative to it.",
                path.display()
            )));
        };
        let shown = match relative.to_string_lossy() {
            rel if rel.is_empty() => ".".to_string(),
            rel => rel.into_owned(),
        };
        let rel = relative.to_path_buf();
        Ok(Target {
            path,
            shown,
            kind,
            root,
            rel,
        })
    }

    /// Run `op` on the workspace's handle, off the async threads.
    async fn beneath<T: Send + 'static>(
        &self,
        root: &Path,
        op: impl FnOnce(&Root) -> Result<T, Refusal> + Send + 'static,
    ) -> Result<T, Refusal> {
        let root = root.to_path_buf();
        tokio::task::spawn_blocking(move || op(&Root::open(&root)?))
            .await
            .unwrap_or_else(|e| Err(Refusal::Io(std::io::Error::other(e))))
    }

    /// The other file with the same path as `target` but `extension`: checked like any path.
    pub(crate) async fn beside(
        &self,
        target: &Target,
        extension: &str,
    ) -> Result<Target, ToolError> {
        let shown = Path::new(&target.shown).with_extension(extension);
        self.resolve(&shown.to_string_lossy()).await
    }

    /// The workspace root and `raw` resolved by the host's file system.
    async fn resolve_on_host(&self, raw: &str) -> Result<(PathBuf, PathBuf), ToolError> {
        let workspace = &self.ctx.workspace;
        let root = tokio::fs::canonicalize(workspace).await.map_err(|e| {
            self.fail(format!(
                "the workspace `{}` cannot be opened: {e}",
                workspace.display()
            ))
        })?;
        let full = workspace.join(raw);
        // The deepest ancestor that exists is resolved by the file system; the rest does not
        // exist yet and is appended name by name.
        let mut existing = None;
        for ancestor in full.ancestors() {
            if let Ok(real) = tokio::fs::canonicalize(ancestor).await {
                existing = Some((ancestor, real));
                break;
            }
        }
        let Some((ancestor, mut path)) = existing else {
            return Err(self.fail(format!("`{raw}` cannot be resolved")));
        };
        for part in full
            .strip_prefix(ancestor)
            .unwrap_or(Path::new(""))
            .components()
        {
            match part {
                Component::Normal(name) => {
                    path.push(name);
                    // It exists, yet could not be resolved: a link to nowhere (or a loop).
                    if tokio::fs::symlink_metadata(&path).await.is_ok() {
                        return Err(self.fail(format!(
                            "`{raw}` goes through a symbolic link whose target is missing or \
                             loops; refusing to follow it"
                        )));
                    }
                }
                Component::ParentDir => {
                    return Err(self.fail(format!(
                        "`{raw}` uses `..` after a directory that does not exist ({})",
                        path.display()
                    )));
                }
                _ => {}
            }
        }
        Ok((root, path))
    }

    /// The workspace root, `raw` resolved, and its kind, from inside the container.
    async fn resolve_in(
        &self,
        sandbox: &SandboxHandle,
        raw: &str,
    ) -> Result<(PathBuf, PathBuf, Kind), ToolError> {
        let out = self
            .sh(sandbox, RESOLVE_SH, &[&sandbox.work_dir, raw])
            .await
            .map_err(|e| self.fail(format!("cannot resolve `{raw}` in the sandbox: {e}")))?;
        let mut lines = out.lines();
        let (Some(root), Some(path), Some(kind)) = (lines.next(), lines.next(), lines.next())
        else {
            return Err(self.fail(format!(
                "cannot resolve `{raw}` in the sandbox: unexpected answer {out:?}"
            )));
        };
        let kind = match kind.split_once(' ') {
            Some(("file", size)) => Kind::File(size.parse().unwrap_or(0)),
            _ if kind == "dir" => Kind::Dir,
            _ => Kind::Missing,
        };
        Ok((root.into(), path.into(), kind))
    }

    /// Run a `bash -c` script in the container with positional arguments; its stdout, or
    /// its stderr as the error.
    async fn sh(
        &self,
        sandbox: &SandboxHandle,
        script: &str,
        args: &[&str],
    ) -> Result<String, String> {
        let mut cmd = vec![
            "bash".to_string(),
            "-c".into(),
            script.into(),
            "manus".into(),
        ];
        cmd.extend(args.iter().map(|a| a.to_string()));
        let out = sandbox
            .exec(&self.ctx.flow_id, cmd, Duration::from_secs(30))
            .await?;
        if out.exit_code == Some(0) {
            Ok(out.stdout)
        } else {
            Err(match out.stderr.trim() {
                "" => format!("exit code {:?}", out.exit_code),
                err => err.to_string(),
            })
        }
    }

    /// The target's bytes, at most `MAX_READ` of them; a larger file is refused, the
    /// message ending with `instead` (what to do with it). Callers check `kind` first.
    pub(crate) async fn read(&self, target: &Target, instead: &str) -> Result<Vec<u8>, ToolError> {
        self.too_large(target, target.size(), instead)?;
        let read = match &self.ctx.sandbox {
            Some(sandbox) => {
                sandbox
                    .read(&self.ctx.flow_id, &target.path.to_string_lossy())
                    .await
            }
            None => {
                let rel = target.rel.clone();
                self.beneath(&target.root, move |r| {
                    let mut bytes = Vec::new();
                    // One byte past the limit tells a file that grew since it was looked at.
                    r.open_read(&rel)?
                        .take(MAX_READ + 1)
                        .read_to_end(&mut bytes)?;
                    Ok(bytes)
                })
                .await
                .map_err(|e| e.to_string())
            }
        };
        let bytes = read.map_err(|e| self.fail(format!("cannot read `{}`: {e}", target.shown)))?;
        self.too_large(target, bytes.len() as u64, instead)?;
        Ok(bytes)
    }

    /// Lines `first..=last` (from 1; `usize::MAX` for the end) of the target and how many
    /// it has. On the host the file is read in pieces, whatever its size; in the sandbox it
    /// is read whole, so up to `MAX_READ`. `instead` is for a file or range too large.
    pub(crate) async fn lines(
        &self,
        target: &Target,
        (first, last): (usize, usize),
        instead: &str,
    ) -> Result<Lines, ToolError> {
        let scanned = match &self.ctx.sandbox {
            Some(_) => {
                let bytes = self.read(target, instead).await?;
                scan_lines(&bytes[..], first, last).map_err(|e| e.to_string())
            }
            None => {
                let rel = target.rel.clone();
                self.beneath(&target.root, move |r| {
                    Ok(scan_lines(r.open_read(&rel)?, first, last)?)
                })
                .await
                .map_err(|e| e.to_string())
            }
        };
        match scanned {
            Ok(Some(lines)) => Ok(lines),
            Ok(None) => Err(self.fail(format!(
                "the lines asked for in `{}` hold more than {} MB; {instead}",
                target.shown,
                MAX_LINES_BYTES >> 20
            ))),
            Err(e) => Err(self.fail(format!("cannot read `{}`: {e}", target.shown))),
        }
    }

    fn too_large(&self, target: &Target, size: u64, instead: &str) -> Result<(), ToolError> {
        if size <= MAX_READ {
            return Ok(());
        }
        Err(self.fail(format!(
            "`{}` is {:.1} MB ({size} bytes), more than the {} MB this tool reads at once; \
             {instead}",
            target.shown,
            size as f64 / (1024.0 * 1024.0),
            MAX_READ >> 20
        )))
    }

    /// Create or replace the target's contents, making its folders first.
    pub(crate) async fn write(&self, target: &Target, bytes: &[u8]) -> Result<(), ToolError> {
        let written = match &self.ctx.sandbox {
            Some(sandbox) => {
                sandbox
                    .write(
                        &self.ctx.flow_id,
                        &target.path.to_string_lossy(),
                        bytes.to_vec(),
                    )
                    .await
            }
            None => {
                let (rel, bytes) = (target.rel.clone(), bytes.to_vec());
                self.beneath(&target.root, move |r| r.write(&rel, &bytes, Mode::Replace))
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string())
            }
        };
        written.map_err(|e| self.fail(format!("cannot write `{}`: {e}", target.shown)))
    }

    /// Write a new file; `Ok(false)` if something is already there (nothing is changed).
    pub(crate) async fn create(&self, target: &Target, bytes: &[u8]) -> Result<bool, ToolError> {
        if target.kind != Kind::Missing {
            return Ok(false);
        }
        if self.ctx.sandbox.is_some() {
            // The container's mailbox runs one operation at a time, so nothing slips in
            // between the check above and this write.
            return self.write(target, bytes).await.map(|_| true);
        }
        let (rel, bytes) = (target.rel.clone(), bytes.to_vec());
        self.beneath(&target.root, move |r| {
            r.write(&rel, &bytes, Mode::CreateNew)
        })
        .await
        .map_err(|e| self.fail(format!("cannot create `{}`: {e}", target.shown)))
    }

    /// Visible entries of the directory `target`, or of its sub-directory `sub` when not
    /// empty, sorted by name, each with whether it is a directory. Symbolic links are listed
    /// but not followed.
    pub(crate) async fn entries(
        &self,
        target: &Target,
        sub: &str,
    ) -> Result<Vec<(String, bool)>, ToolError> {
        let (dir, rel) = (target.path.join(sub), target.rel.join(sub));
        let shown = Path::new(&target.shown).join(sub);
        let shown = shown.display();
        let failed = |e: String| self.fail(format!("cannot list `{shown}`: {e}"));
        let mut found = Vec::new();
        match &self.ctx.sandbox {
            Some(sandbox) => {
                let out = self
                    .sh(sandbox, LIST_SH, &[&dir.to_string_lossy()])
                    .await
                    .map_err(failed)?;
                for entry in out.split('\0') {
                    if let Some((kind, name)) = entry.split_once(' ') {
                        found.push((name.to_string(), kind == "d"));
                    }
                }
            }
            None => {
                let listed = self.beneath(&target.root, move |r| r.list(&rel)).await;
                found = listed.map_err(|e| failed(e.to_string()))?;
                found.retain(|(name, _)| !name.starts_with('.'));
            }
        }
        found.sort();
        Ok(found)
    }
}
