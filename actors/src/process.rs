//! Running processes with bounded memory and a bounded life: the end-of-command marker
//! protocol a persistent bash speaks wherever it runs (`ShellIo`), output capture that keeps
//! both ends (`Capture`), killing a process group, and starting a host process so that
//! everything it starts ends with it (`Contained`). The bash tool, `python_execute`, the
//! sandbox's shells and the chromedriver launcher share these.

use std::io;
use std::pin::Pin;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::process::{Child, Command};

/// Most bytes of command output kept for the model.
pub(crate) const MAX_OUTPUT: usize = 16_000;
/// Longest piece of one output line read at a time, so a huge line never sits in memory.
const LINE_PIECE: u64 = 8 * 1024;

/// Makes every end-of-command marker distinct, across shells and calls.
static MARKER_SEQ: AtomicU64 = AtomicU64::new(0);

/// Why a command's end was not read.
pub(crate) enum ShellIoError {
    /// The shell's output ended (it exited or was killed).
    Closed,
    /// The marker line carried something that is not a status.
    Garbled(String),
}

/// The end-of-command marker protocol over a bash's stdin and merged stdout, wherever that
/// bash runs.
pub(crate) struct ShellIo {
    input: Pin<Box<dyn AsyncWrite + Send>>,
    output: Pin<Box<dyn AsyncBufRead + Send>>,
    /// A command was sent and its end marker not yet read.
    pub(crate) busy: bool,
}

impl ShellIo {
    pub(crate) fn new(
        input: Pin<Box<dyn AsyncWrite + Send>>,
        output: Pin<Box<dyn AsyncBufRead + Send>>,
    ) -> Self {
        ShellIo {
            input,
            output,
            busy: false,
        }
    }

    /// Run one command, adding its output to `output`, and return its exit status.
    pub(crate) async fn exec(
        &mut self,
        command: &str,
        output: &mut Capture,
    ) -> Result<i32, ShellIoError> {
        let token = format!(
            "__MANUS_{}_{}__",
            std::process::id(),
            MARKER_SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let marker = format!("{token}DONE:");
        // The command travels as a quoted here-document and runs through `eval`, so even a
        // syntax error cannot swallow the marker line. Its stdin is /dev/null so it cannot
        // read the script that follows it.
        let script = format!(
            "exec 2>&1\nIFS= read -r -d '' __manus_cmd <<'{token}'\n{command}\n{token}\n\
             eval \"$__manus_cmd\" < /dev/null\nprintf '\\n%s%d\\n' '{marker}' \"$?\"\n"
        );
        self.busy = true;
        if self.input.write_all(script.as_bytes()).await.is_err()
            || self.input.flush().await.is_err()
        {
            return Err(ShellIoError::Closed);
        }
        let mut piece = Vec::new();
        let mut at_line_start = true;
        loop {
            piece.clear();
            let read = self
                .output
                .as_mut()
                .take(LINE_PIECE)
                .read_until(b'\n', &mut piece)
                .await;
            if matches!(read, Ok(0) | Err(_)) {
                return Err(ShellIoError::Closed);
            }
            if at_line_start && let Some(status) = piece.strip_prefix(marker.as_bytes()) {
                self.busy = false;
                let status = String::from_utf8_lossy(status);
                return status
                    .trim()
                    .parse()
                    .map_err(|_| ShellIoError::Garbled(status.into_owned()));
            }
            at_line_start = piece.ends_with(b"\n");
            output.push(&piece);
        }
    }
}

/// Send SIGKILL to the process group led by `pid` (the child was spawned with
/// `process_group(0)`). Best effort: a group that is already gone is fine.
/// One system call, so it never blocks and is safe from async code and `Drop`.
pub(crate) fn kill_group(pid: u32) {
    signal_group(pid, libc::SIGKILL);
}

/// Send `signal` to the process group led by `pid`, as `kill_group` does.
fn signal_group(pid: u32, signal: libc::c_int) {
    // Group 0 would be our own.
    let Ok(group @ 1..) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: killpg takes two integers and touches no memory of ours.
    let _ = unsafe { libc::killpg(group, signal) };
}

/// A host process started for a tool call, and everything it starts in turn: when it ends
/// (or this is dropped, or `kill` is called) whatever it left running is ended too.
///
/// It always runs in its own process group, recorded at spawn (`Child::id` is gone once the
/// child is reaped, while what it left may still run). Where the host allows a PID
/// namespace (see `pid_namespaces`), the command also runs in one of its own under a small
/// init: when the command exits, or the init is killed, the kernel kills every process in
/// the namespace, including those that left the group with `setsid` or a double fork.
pub(crate) struct Contained {
    child: Child,
    group: u32,
}

impl Contained {
    /// Start `cmd` contained (this sets its process group and `kill_on_drop`).
    pub(crate) fn spawn(cmd: &mut Command) -> io::Result<Contained> {
        cmd.process_group(0).kill_on_drop(true);
        #[cfg(target_os = "linux")]
        if let Some(mode) = pidns::mode() {
            // SAFETY: the hook runs between fork and exec and makes only async-signal-safe
            // system calls; it allocates nothing and takes no lock.
            unsafe { cmd.pre_exec(move || pidns::enter(mode)) };
        }
        let child = cmd.spawn()?;
        let group = child
            .id()
            .ok_or_else(|| io::Error::other("the process ended before it was seen"))?;
        Ok(Contained { child, group })
    }

    /// The process itself (for its pipes).
    pub(crate) fn child(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Wait for the process to end, then end everything it left running.
    pub(crate) async fn wait(&mut self) -> io::Result<ExitStatus> {
        let status = self.child.wait().await;
        self.kill();
        status
    }

    /// End the process and everything it started, now. Never blocks.
    pub(crate) fn kill(&self) {
        kill_group(self.group);
    }

    /// Send `signal` to the command and everything it started that stayed in its group, as
    /// a terminal sends Ctrl-C to its foreground job. The namespace's init and the process
    /// tokio waits for ignore SIGINT, so an interrupt reaches only the command.
    pub(crate) fn signal(&self, signal: libc::c_int) {
        signal_group(self.group, signal);
    }
}

impl Drop for Contained {
    fn drop(&mut self) {
        // `kill_on_drop` ends the process itself (and so its namespace); this ends the rest
        // of its group where there is no namespace.
        self.kill();
    }
}

/// Whether `Contained` processes run in a PID namespace of their own here, so that even
/// processes that leave their group end with them (tests check those only then).
#[cfg(test)]
pub(crate) fn pid_namespaces() -> bool {
    #[cfg(target_os = "linux")]
    return pidns::mode().is_some();
    #[cfg(not(target_os = "linux"))]
    false
}

/// A PID namespace per contained command, set up between fork and exec:
///
/// ```text
/// tool's child (outer namespace; what tokio waits for)      -- waits, then exits as the command did
/// └── init (PID 1 of the new namespace; dies with its parent) -- reaps; exits when the command does
///     └── the command (PID 2), and all it starts
/// ```
///
/// When init exits or is killed, the kernel kills every process left in the namespace.
/// Without privileges this needs a user namespace too, which maps only our own uid and gid
/// onto themselves, so files and permissions look the same inside.
#[cfg(target_os = "linux")]
mod pidns {
    use std::io;
    use std::sync::OnceLock;

    use libc::{c_int, c_void, pid_t};

    /// How a namespace is made on this host, found once by trying.
    #[derive(Clone, Copy)]
    pub(super) struct Mode {
        flags: c_int,
        ids: Option<&'static IdMaps>,
    }

    /// The lines written to map our uid and gid onto themselves in a new user namespace.
    pub(super) struct IdMaps {
        uid: String,
        gid: String,
    }

    /// The namespace mode, or `None` where this host allows none (logged once).
    pub(super) fn mode() -> Option<Mode> {
        static MODE: OnceLock<Option<Mode>> = OnceLock::new();
        *MODE.get_or_init(|| {
            // With CAP_SYS_ADMIN a PID namespace alone keeps the process's identity and
            // capabilities exactly; without it, a user namespace makes one possible.
            // SAFETY: getuid and getgid cannot fail.
            let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
            let ids: &'static IdMaps = Box::leak(Box::new(IdMaps {
                uid: format!("{uid} {uid} 1\n"),
                gid: format!("{gid} {gid} 1\n"),
            }));
            let tries = [
                Mode {
                    flags: libc::CLONE_NEWPID,
                    ids: None,
                },
                Mode {
                    flags: libc::CLONE_NEWPID | libc::CLONE_NEWUSER,
                    ids: Some(ids),
                },
            ];
            let found = tries.into_iter().find(|&mode| probe(mode));
            if found.is_none() {
                tracing::warn!(
                    "this host allows no PID namespace (user namespaces are off, or a seccomp \
                     filter forbids unshare): tool processes are ended by process group only, \
                     so one that calls setsid or double-forks can outlive its call"
                );
            }
            found
        })
    }

    /// Whether a child can make a namespace this way and start a process in it.
    fn probe(mode: Mode) -> bool {
        // SAFETY: the child makes only async-signal-safe system calls, then `_exit`s.
        unsafe {
            match libc::fork() {
                -1 => false,
                0 => {
                    let ok = unshare(mode).is_ok()
                        && match libc::fork() {
                            0 => libc::_exit(0),
                            -1 => false,
                            pid => exited_zero(pid),
                        };
                    libc::_exit(if ok { 0 } else { 1 })
                }
                pid => exited_zero(pid),
            }
        }
    }

    fn exited_zero(pid: pid_t) -> bool {
        let mut status = 0;
        // SAFETY: waitpid writes only to `status`.
        while unsafe { libc::waitpid(pid, &mut status, 0) } == -1 {
            if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                return false;
            }
        }
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
    }

    /// Unshare the namespaces; with a user namespace, map our ids onto themselves.
    unsafe fn unshare(mode: Mode) -> io::Result<()> {
        // SAFETY: plain system calls on our own process.
        unsafe {
            if libc::unshare(mode.flags) != 0 {
                return Err(io::Error::last_os_error());
            }
            if let Some(ids) = mode.ids {
                // setgroups must be denied before an unprivileged process may map its gid.
                write_file(c"/proc/self/setgroups", b"deny")?;
                write_file(c"/proc/self/uid_map", ids.uid.as_bytes())?;
                write_file(c"/proc/self/gid_map", ids.gid.as_bytes())?;
            }
        }
        Ok(())
    }

    unsafe fn write_file(path: &std::ffi::CStr, bytes: &[u8]) -> io::Result<()> {
        // SAFETY: open, write and close on a descriptor we own.
        unsafe {
            let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            let written = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
            let err = io::Error::last_os_error();
            libc::close(fd);
            if written != bytes.len() as isize {
                return Err(err);
            }
        }
        Ok(())
    }

    /// The `pre_exec` hook, in the tool's child after fork: make the namespace, fork its
    /// init, which forks the command (the only one to return, and so to exec), and stay
    /// behind to wait for the init and exit as the command did.
    pub(super) fn enter(mode: Mode) -> io::Result<()> {
        // SAFETY: between fork and exec; only async-signal-safe system calls below.
        unsafe {
            unshare(mode)?;
            let mut status_pipe = [0; 2];
            if libc::pipe2(status_pipe.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
                return Err(io::Error::last_os_error());
            }
            let [status_r, status_w] = status_pipe;
            match libc::fork() {
                -1 => Err(io::Error::last_os_error()),
                0 => {
                    // The init: killed with the process tokio waits for.
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    match libc::fork() {
                        0 => Ok(()),
                        command => init(command, status_w),
                    }
                }
                init => watch(init, status_r),
            }
        }
    }

    /// The namespace's init: reap whatever ends, and when the command ends, pass its raw
    /// status on and exit, which ends everything else in the namespace.
    unsafe fn init(command: pid_t, status_w: c_int) -> ! {
        // SAFETY: descriptors and system calls of this process alone.
        unsafe {
            close_all_but(status_w);
            if command == -1 {
                libc::_exit(127);
            }
            loop {
                let mut status = 0;
                let pid = libc::waitpid(-1, &mut status, 0);
                if pid == command {
                    libc::write(status_w, (&raw const status).cast::<c_void>(), 4);
                    libc::_exit(0);
                }
                if pid == -1 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                    libc::_exit(127);
                }
            }
        }
    }

    /// The process tokio waits for: wait for the init, then end as the command ended (or as
    /// the init did, if it was killed first).
    unsafe fn watch(init: pid_t, status_r: c_int) -> ! {
        // SAFETY: descriptors and system calls of this process alone.
        unsafe {
            close_all_but(status_r);
            // An interrupt sent to the group is for the command (`Contained::signal`).
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            let mut status = 0;
            while libc::waitpid(init, &mut status, 0) == -1 {
                if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                    libc::_exit(127);
                }
            }
            let mut command = 0;
            if libc::read(status_r, (&raw mut command).cast::<c_void>(), 4) == 4 {
                status = command;
            }
            if libc::WIFSIGNALED(status) {
                let signal = libc::WTERMSIG(status);
                // Die of the same signal, without a second core dump.
                let no_core = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                libc::setrlimit(libc::RLIMIT_CORE, &no_core);
                libc::signal(signal, libc::SIG_DFL);
                libc::kill(libc::getpid(), signal);
                libc::_exit(128 + signal);
            }
            libc::_exit(libc::WEXITSTATUS(status))
        }
    }

    /// Close every descriptor but `keep`: the pipes of the command and the one the spawner
    /// reads to learn that exec happened must be held by the command alone.
    unsafe fn close_all_but(keep: c_int) {
        let keep = keep as libc::c_uint;
        // SAFETY: closing descriptors of this process, which uses none of them.
        unsafe {
            if keep > 0 {
                close_range(0, keep - 1);
            }
            close_range(keep + 1, libc::c_uint::MAX);
        }
    }

    unsafe fn close_range(first: libc::c_uint, last: libc::c_uint) {
        // SAFETY: as above.
        unsafe {
            if libc::syscall(libc::SYS_close_range, first, last, 0) == 0 {
                return;
            }
            // Kernels before 5.9: close one by one up to the descriptor limit.
            let mut limit = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            let top = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
                limit.rlim_cur.min(1 << 20) as libc::c_uint
            } else {
                1024
            };
            for fd in first..=last.min(top) {
                libc::close(fd as c_int);
            }
        }
    }
}

/// Process output with bounded memory: the start and the end are kept, the middle is only
/// counted, and the text says how much was left out.
pub(crate) struct Capture {
    head: Vec<u8>,
    tail: Vec<u8>,
    head_max: usize,
    tail_max: usize,
    cut: usize,
}

impl Capture {
    /// Keep at most `limit` bytes: two thirds from the start, one third from the end.
    pub(crate) fn new(limit: usize) -> Self {
        let head_max = limit * 2 / 3;
        Capture {
            head: Vec::new(),
            tail: Vec::new(),
            head_max,
            tail_max: limit - head_max,
            cut: 0,
        }
    }

    pub(crate) fn push(&mut self, mut bytes: &[u8]) {
        let room = self.head_max - self.head.len();
        if room > 0 {
            let take = room.min(bytes.len());
            self.head.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
        }
        self.tail.extend_from_slice(bytes);
        if self.tail.len() > 2 * self.tail_max {
            let excess = self.tail.len() - self.tail_max;
            self.tail.drain(..excess);
            self.cut += excess;
        }
    }

    /// The kept output as text (invalid UTF-8 replaced), with a note where bytes were cut.
    pub(crate) fn text(&self) -> String {
        let start = self.tail.len().saturating_sub(self.tail_max);
        let head = String::from_utf8_lossy(&self.head);
        let tail = String::from_utf8_lossy(&self.tail[start..]);
        match self.cut + start {
            0 => format!("{head}{tail}"),
            cut => format!("{head}\n[... {cut} bytes of output cut ...]\n{tail}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_keeps_both_ends() {
        let mut cap = Capture::new(30);
        cap.push(b"0123456789");
        assert_eq!(cap.text(), "0123456789");
        for _ in 0..100 {
            cap.push(b"..........");
        }
        cap.push(b"abcdefghij");
        assert_eq!(
            cap.text(),
            "0123456789..........\n[... 990 bytes of output cut ...]\nabcdefghij"
        );
    }
}
