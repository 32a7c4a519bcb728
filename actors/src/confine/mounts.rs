//! What a confined command sees of other processes and shared memory: a mount namespace of
//! its own, made between fork and exec, where
//!
//! - `/proc` is a fresh procfs with `hidepid=invisible`: a process is listed only to those
//!   that may ptrace it, and Landlock lets a confined process ptrace only those of its own
//!   domain, so the runtime, the namespace's init and every other process of the user (the
//!   command lines, environments and memory in which keys live) are not even seen;
//! - `/dev/shm` is a private tmpfs of at most `[sandbox] memory_limit`, so Python's
//!   `multiprocessing` locks and shared memory work without touching anyone else's.
//!
//! Landlock does not look through mounts: a rule made before the fork on the host's `/proc`
//! would not reach the private one mounted over it, so the rules for the private ones are
//! added in the command itself, once they are mounted (`grant`).
//!
//! Where the kernel refuses a mount namespace (no user namespaces without privilege, or a
//! container whose `/proc` is partly masked), `Private::here` says so and the caller leaves
//! `/proc` and `/dev/shm` out of the Landlock rules instead: less works, nothing leaks.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::RawFd;
use std::sync::OnceLock;

/// The options of the private `/proc`.
const PROC_OPTIONS: &CStr = c"hidepid=invisible";

/// Whether commands get private mounts here, found once by trying in a throwaway process.
pub(super) fn available() -> bool {
    static FOUND: OnceLock<bool> = OnceLock::new();
    *FOUND.get_or_init(|| {
        crate::process::try_as_command(|| {
            // SAFETY: the throwaway process's own namespace; system calls only.
            unsafe { enter(c"size=1m,mode=1777") }.is_ok()
        })
    })
}

/// The `/dev/shm` options for a command allowed `memory` bytes.
pub(super) fn shm_options(memory: u64) -> CString {
    CString::new(format!("size={memory},mode=1777")).expect("no NUL in numbers")
}

/// Make the calling process's mount namespace and its private `/proc` and `/dev/shm`.
/// Between fork and exec: system calls only.
///
/// # Safety
/// Changes this process's mounts; call it only in a command about to exec.
pub(super) unsafe fn enter(shm: &CStr) -> io::Result<()> {
    let fail = || Err(io::Error::last_os_error());
    // SAFETY: namespace and mount calls on this process alone, with static or prepared
    // strings.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            return fail();
        }
        // Nothing done here may reach the host's mounts.
        if libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            return fail();
        }
        if libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            PROC_OPTIONS.as_ptr().cast(),
        ) != 0
        {
            return fail();
        }
        let mut shm_dir: libc::stat = std::mem::zeroed();
        if libc::stat(c"/dev/shm".as_ptr(), &mut shm_dir) == 0
            && libc::mount(
                c"tmpfs".as_ptr(),
                c"/dev/shm".as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                shm.as_ptr().cast(),
            ) != 0
        {
            return fail();
        }
    }
    Ok(())
}

/// Landlock's `struct landlock_path_beneath_attr`, written out here because the rule must
/// be added between fork and exec, with one system call and no allocation, which the
/// `landlock` crate's API (paths it opens itself, collections) does not offer.
#[repr(C, packed)]
struct PathBeneath {
    allowed_access: u64,
    parent_fd: i32,
}

/// Add to `ruleset` (before it is enforced) the private `/proc`, readable with `read`
/// rights, and `/dev/shm`, usable with `write` rights. Between fork and exec, after
/// `enter`: system calls only.
///
/// # Safety
/// `ruleset` must be a Landlock ruleset descriptor.
pub(super) unsafe fn grant(ruleset: RawFd, read: u64, write: u64) -> io::Result<()> {
    for (path, access) in [(c"/proc", read), (c"/dev/shm", write)] {
        // SAFETY: open, landlock_add_rule and close on descriptors of this process, with an
        // attribute on the stack.
        unsafe {
            let fd = libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
            if fd < 0 {
                // No `/dev/shm` on this host: nothing was mounted there either.
                continue;
            }
            let rule = PathBeneath {
                allowed_access: access,
                parent_fd: fd,
            };
            let added = libc::syscall(
                libc::SYS_landlock_add_rule,
                ruleset,
                1u32, // LANDLOCK_RULE_PATH_BENEATH
                &raw const rule,
                0u32,
            );
            let err = io::Error::last_os_error();
            libc::close(fd);
            if added != 0 {
                return Err(err);
            }
        }
    }
    Ok(())
}
