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
//! `read_workspace_file` is that rule for readers outside the engine (the service).

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use super::{ToolCtx, ToolError};
use crate::sandbox::SandboxHandle;

mod beneath;
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

/// The bytes of the regular file `rel` (relative) under the directory `workspace`, at most
/// `max_bytes` of them, opened by the file tools' own rule: name by name under the
/// workspace's handle, no symbolic link followed, no `..`, no special or hard-linked file.
/// For readers outside the engine (the service shows the agents' files). Blocking: call it
/// off the async threads.
pub fn read_workspace_file(
    workspace: &Path,
    rel: &Path,
    max_bytes: u64,
) -> Result<Vec<u8>, WorkspaceFileError> {
    let root = Root::open(workspace).map_err(WorkspaceFileError::Io)?;
    match root.find(rel)? {
        Found::Missing => return Err(WorkspaceFileError::Missing),
        Found::Dir => return Err(WorkspaceFileError::Folder),
        Found::File(size) if size > max_bytes => {
            return Err(WorkspaceFileError::TooLarge {
                size,
                max: max_bytes,
            });
        }
        // A link or a special file: the read says which, and refuses it.
        Found::File(_) | Found::Other => {}
    }
    // One byte past the limit tells a file that grew since it was looked at.
    let bytes = root.read_at_most(rel, max_bytes.saturating_add(1))?;
    match bytes.len() as u64 {
        size if size > max_bytes => Err(WorkspaceFileError::TooLarge {
            size,
            max: max_bytes,
        }),
        _ => Ok(bytes),
    }
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

    /// The target's bytes. Callers check `kind` first, so errors here are unexpected ones.
    pub(crate) async fn read(&self, target: &Target) -> Result<Vec<u8>, ToolError> {
        let read = match &self.ctx.sandbox {
            Some(sandbox) => {
                sandbox
                    .read(&self.ctx.flow_id, &target.path.to_string_lossy())
                    .await
            }
            None => {
                let rel = target.rel.clone();
                self.beneath(&target.root, move |r| r.read(&rel))
                    .await
                    .map_err(|e| e.to_string())
            }
        };
        read.map_err(|e| self.fail(format!("cannot read `{}`: {e}", target.shown)))
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
