//! Host-side file operations that cannot leave a directory: every path is opened one name
//! at a time relative to the handle of the directory before it, never following a symbolic
//! link (`O_NOFOLLOW`, `O_DIRECTORY`) and never going up (`..` is refused). So the check
//! and the operation are one: a directory or file swapped for a link while a tool works
//! makes the open fail instead of reaching outside. Only regular files with one link are
//! read or written: a named pipe, socket or device (opened non-blocking, so a pipe never
//! holds the call) and a hard link to a file elsewhere are refused.
//!
//! One `openat` per name works on every Linux kernel and also serves creating the folders
//! on the way (`mkdirat` on the same handles); `openat2`'s `RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS` would give the same guarantee in one call for opening only.
//! Knows nothing of tools, the sandbox or how paths are shown.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

/// Why an operation was refused, beyond what `io::Error` says.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// A name on the way is a symbolic link (perhaps put there while the tool worked).
    Link,
    /// Not a regular file: what it is.
    Special(&'static str),
    /// A regular file with this many hard links: another name, maybe outside, shares it.
    HardLinked(u64),
    Io(io::Error),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Link => write!(
                f,
                "a part of the path is a symbolic link (or became one while in use); links are \
                 not followed"
            ),
            Refusal::Special(what) => write!(f, "it is a {what}, not a regular file"),
            Refusal::HardLinked(n) => write!(
                f,
                "it has {n} hard links: another name (possibly outside the workspace) shares \
                 this file, so it is not touched"
            ),
            Refusal::Io(e) => e.fmt(f),
        }
    }
}

impl From<io::Error> for Refusal {
    fn from(e: io::Error) -> Refusal {
        // ELOOP: O_NOFOLLOW met a link; ENOTDIR with O_DIRECTORY|O_NOFOLLOW: a link (or a
        // file) where a folder should be.
        match e.raw_os_error() {
            Some(libc::ELOOP) => Refusal::Link,
            _ => Refusal::Io(e),
        }
    }
}

/// What a name is, as found without following it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    Missing,
    Dir,
    File(u64),
    /// A link or a special file: refused when used.
    Other,
}

/// How a write treats a file that is already there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Replace,
    /// Leave it alone and say so (`Ok(false)`).
    CreateNew,
}

/// An open directory that operations stay beneath.
pub(crate) struct Root(OwnedFd);

impl Root {
    pub(crate) fn open(dir: &Path) -> io::Result<Root> {
        open_at(libc::AT_FDCWD, &c_path(dir.as_os_str().as_bytes())?, DIR, 0).map(Root)
    }

    /// The folder holding `rel`'s last name, and that name; folders on the way are made
    /// when `make` is set.
    fn parent_of(&self, rel: &Path, make: bool) -> Result<(OwnedFd, CString), Refusal> {
        let mut names = Vec::new();
        for part in rel.components() {
            match part {
                Component::Normal(n) => names.push(n.as_bytes()),
                Component::CurDir => {}
                _ => {
                    return Err(Refusal::Io(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "the path must be relative and free of `..`",
                    )));
                }
            }
        }
        let Some((last, folders)) = names.split_last() else {
            return Err(Refusal::Io(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the workspace itself is not a file",
            )));
        };
        let mut dir = self.0.try_clone()?;
        for name in folders {
            let name = c_path(name)?;
            if make {
                // SAFETY: a valid directory descriptor and a NUL-terminated name.
                let made = unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o755) };
                if made != 0 {
                    let e = io::Error::last_os_error();
                    if e.raw_os_error() != Some(libc::EEXIST) {
                        return Err(e.into());
                    }
                }
            }
            dir = open_at(dir.as_raw_fd(), &name, DIR, 0).map_err(not_a_folder)?;
        }
        Ok((dir, c_path(last)?))
    }

    /// What `rel` names now, links not followed.
    pub(crate) fn find(&self, rel: &Path) -> Result<Found, Refusal> {
        if rel.components().all(|c| c == Component::CurDir) {
            return Ok(Found::Dir);
        }
        let (dir, name) = match self.parent_of(rel, false) {
            Ok(found) => found,
            Err(Refusal::Io(e)) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(Found::Missing);
            }
            Err(e) => return Err(e),
        };
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: valid descriptor, NUL-terminated name, `st` large enough for a stat.
        let r = unsafe {
            libc::fstatat(
                dir.as_raw_fd(),
                name.as_ptr(),
                st.as_mut_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if r != 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::NotFound => Ok(Found::Missing),
                _ => Err(e.into()),
            };
        }
        // SAFETY: fstatat succeeded, so it filled `st`.
        let st = unsafe { st.assume_init() };
        Ok(match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => Found::Dir,
            libc::S_IFREG => Found::File(st.st_size as u64),
            _ => Found::Other,
        })
    }

    /// The regular file `rel`, open for reading (in pieces: callers bound what they read).
    pub(crate) fn open_read(&self, rel: &Path) -> Result<File, Refusal> {
        let (dir, name) = self.parent_of(rel, false)?;
        open_file(&dir, &name, libc::O_RDONLY)
    }

    /// Write `bytes` as the regular file `rel`, making its folders; `Ok(false)` when
    /// `how` is `CreateNew` and something is there already (nothing is changed).
    pub(crate) fn write(&self, rel: &Path, bytes: &[u8], how: Mode) -> Result<bool, Refusal> {
        let (dir, name) = self.parent_of(rel, true)?;
        let flags = match how {
            Mode::Replace => libc::O_WRONLY | libc::O_CREAT,
            Mode::CreateNew => libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
        };
        let mut file = match open_file(&dir, &name, flags) {
            Err(Refusal::Io(e))
                if how == Mode::CreateNew && e.raw_os_error() == Some(libc::EEXIST) =>
            {
                return Ok(false);
            }
            other => other?,
        };
        // Emptied only now that it is known to be a regular file of its own.
        file.set_len(0)?;
        file.write_all(bytes)?;
        file.flush()?;
        Ok(true)
    }

    /// The names in the folder `rel` (the root for an empty path), each with whether it is
    /// a folder (links are listed, not followed).
    pub(crate) fn list(&self, rel: &Path) -> Result<Vec<(String, bool)>, Refusal> {
        let dir = if rel.components().all(|c| c == Component::CurDir) {
            self.0.try_clone()?
        } else {
            let (parent, name) = self.parent_of(rel, false)?;
            open_at(parent.as_raw_fd(), &name, DIR, 0).map_err(not_a_folder)?
        };
        // The open folder, by its descriptor: the name under /proc is the handle itself.
        let mut found = Vec::new();
        for entry in std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))? {
            let entry = entry?;
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            found.push((entry.file_name().to_string_lossy().into_owned(), is_dir));
        }
        Ok(found)
    }
}

/// Opening a folder: never through a link.
const DIR: libc::c_int = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;

fn c_path(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in the path"))
}

fn open_at(
    dir: libc::c_int,
    name: &CString,
    flags: libc::c_int,
    mode: libc::c_uint,
) -> io::Result<OwnedFd> {
    // SAFETY: `name` is NUL-terminated; a returned descriptor is owned by nobody else.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), flags, mode) };
    if fd < 0 {
        Err(io::Error::last_os_error())
    } else {
        // SAFETY: `fd` was just opened and is not shared.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

/// A folder name that is a link or a file gives ENOTDIR under O_DIRECTORY|O_NOFOLLOW: a
/// link there is refused as one.
fn not_a_folder(e: io::Error) -> Refusal {
    match e.raw_os_error() {
        Some(libc::ENOTDIR) => Refusal::Link,
        _ => e.into(),
    }
}

/// Open `name` in `dir` as a regular file with one link, never following a link and never
/// waiting on a pipe.
fn open_file(dir: &OwnedFd, name: &CString, flags: libc::c_int) -> Result<File, Refusal> {
    let flags = flags | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
    let fd = open_at(dir.as_raw_fd(), name, flags, 0o644).map_err(|e| match e.raw_os_error() {
        // A pipe with no reader, opened for writing without waiting.
        Some(libc::ENXIO) => Refusal::Special("named pipe or socket"),
        _ => Refusal::from(e),
    })?;
    let file = File::from(fd);
    let meta = file.metadata()?;
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let t = meta.file_type();
    if !t.is_file() {
        return Err(Refusal::Special(if t.is_fifo() {
            "named pipe"
        } else if t.is_socket() {
            "socket"
        } else if t.is_dir() {
            "folder"
        } else {
            "device or other special file"
        }));
    }
    if meta.nlink() > 1 {
        return Err(Refusal::HardLinked(meta.nlink()));
    }
    Ok(file)
}
