//! The process cap that holds for root too. `RLIMIT_NPROC` is never applied to root (the
//! kernel exempts uid 0 however few capabilities it keeps), so where the runtime may make
//! cgroups of the `pids` controller (root on cgroup v1, or a v2 cgroup that delegates
//! `pids` to its children) each confined command runs in a cgroup of its own whose
//! `pids.max` is `[sandbox] pids_limit`, entered between fork and exec. Elsewhere the
//! rlimit alone holds, which it does for everyone but root.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Makes every cgroup's name distinct within this process.
static SEQ: AtomicU64 = AtomicU64::new(0);
/// The prefix of the cgroups this module makes (then `<runtime pid>-<seq>`).
const PREFIX: &str = "manus-confined-";

/// A confined command's own `pids` cgroup, removed when this is dropped.
pub(super) struct Cgroup {
    dir: PathBuf,
    /// Its `cgroup.procs`, open for writing, so that entering is one `write`.
    procs: OwnedFd,
}

impl Cgroup {
    /// A new cgroup allowing `max` processes, or `None` where none can be made here.
    pub(super) fn new(max: u64) -> io::Result<Option<Cgroup>> {
        let Some(parent) = parent() else {
            return Ok(None);
        };
        // A cgroup outlives a runtime that was SIGKILLed.
        super::sweep_dead(parent, PREFIX, |dir| std::fs::remove_dir(dir));
        let dir = parent.join(format!(
            "{PREFIX}{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&dir)?;
        let made = (|| {
            std::fs::write(dir.join("pids.max"), max.to_string())?;
            let procs = std::fs::OpenOptions::new()
                .write(true)
                .open(dir.join("cgroup.procs"))?;
            Ok(OwnedFd::from(procs))
        })();
        match made {
            Ok(procs) => Ok(Some(Cgroup { dir, procs })),
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                Err(e)
            }
        }
    }

    /// Move the calling process into the cgroup. Between fork and exec: one system call.
    pub(super) fn enter(&self) -> io::Result<()> {
        // SAFETY: a write of a static buffer to a descriptor this value owns.
        let written = unsafe { libc::write(self.procs.as_raw_fd(), b"0".as_ptr().cast(), 1) };
        if written != 1 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for Cgroup {
    /// The command's processes end with it (its namespace or group is killed first), but
    /// may not all be reaped yet: the folder is removed once they are, by a thread that
    /// tries for a while and then leaves it to the next sweep.
    fn drop(&mut self) {
        let dir = std::mem::take(&mut self.dir);
        if std::fs::remove_dir(&dir).is_ok() {
            return;
        }
        let _ = std::thread::Builder::new()
            .name("cgroup-remove".into())
            .spawn(move || {
                for _ in 0..100 {
                    std::thread::sleep(Duration::from_millis(20));
                    if std::fs::remove_dir(&dir).is_ok() {
                        return;
                    }
                }
            });
    }
}

/// Where this process may make `pids` cgroups, found once by trying.
fn parent() -> Option<&'static Path> {
    static FOUND: OnceLock<Option<PathBuf>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            let mine = std::fs::read_to_string("/proc/self/cgroup").ok()?;
            let dir = place(&mine, Path::new("/sys/fs/cgroup"))?;
            let probe = dir.join(format!("{PREFIX}{}-probe", std::process::id()));
            std::fs::create_dir(&probe).ok()?;
            let usable = probe.join("pids.max").exists();
            let _ = std::fs::remove_dir(&probe);
            usable.then_some(dir)
        })
        .as_deref()
}

/// Whether confined commands get a cgroup of their own here (`sandbox doctor`).
pub(super) fn available() -> bool {
    parent().is_some()
}

/// The folder of this process's own cgroup in the `pids` hierarchy, from
/// `/proc/self/cgroup`'s lines (`id:controllers:path`): the v1 hierarchy that lists
/// `pids`, else the v2 one when its cgroup hands `pids` down to its children.
fn place(lines: &str, root: &Path) -> Option<PathBuf> {
    let mut v2 = None;
    for line in lines.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let path = path.trim_start_matches('/');
        if controllers.split(',').any(|c| c == "pids") {
            return Some(root.join(controllers).join(path));
        }
        if controllers.is_empty() {
            v2 = Some(root.join(path));
        }
    }
    let v2 = v2?;
    let handed = std::fs::read_to_string(v2.join("cgroup.subtree_control")).ok()?;
    handed.split_whitespace().any(|c| c == "pids").then_some(v2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pids_hierarchy_is_found_in_either_cgroup_version() {
        let root = Path::new("/sys/fs/cgroup");
        let v1 = "9:name=systemd:/\n8:pids:/user.slice\n4:memory:/x\n0::/\n";
        assert_eq!(
            place(v1, root),
            Some(PathBuf::from("/sys/fs/cgroup/pids/user.slice"))
        );
        let joined = "5:cpu,pids:/a\n";
        assert_eq!(
            place(joined, root),
            Some(PathBuf::from("/sys/fs/cgroup/cpu,pids/a"))
        );
        // A v2 cgroup is used only when it hands `pids` down (there is no such file here).
        assert_eq!(place("0::/no/such/cgroup\n", root), None);
        assert_eq!(place("garbage\n", root), None);
    }
}
