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
/// (or this is dropped, or `kill` is called, or this whole process dies, SIGKILL included)
/// whatever it left running is ended too.
///
/// It always runs in its own process group, recorded at spawn (`Child::id` is gone once the
/// child is reaped, while what it left may still run). On Linux the process spawned is a
/// small watcher (see `contain`) that ends the command's whole tree when our process dies,
/// and, where the host allows a PID namespace (see `pid_namespaces`), the command also runs
/// in one of its own under a small init: when the command exits, or the init is killed, the
/// kernel kills every process in the namespace, including those that left the group with
/// `setsid` or a double fork.
pub(crate) struct Contained {
    child: Child,
    group: u32,
    /// The command's last step before exec, kept for as long as the process lives.
    _last: Option<std::sync::Arc<dyn LastStep>>,
}

/// What the command alone (not its watcher or init) does last before exec, such as
/// confining itself. It runs between fork and exec: system calls only, no allocation, no
/// lock.
pub(crate) trait LastStep: Send + Sync + 'static {
    fn before_exec(&self) -> io::Result<()>;
}

impl Contained {
    /// Start `cmd` contained (this sets its process group and `kill_on_drop`).
    pub(crate) fn spawn(cmd: &mut Command) -> io::Result<Contained> {
        #[cfg(target_os = "linux")]
        return Contained::spawn_tied(cmd, contain::lifeline()?, contain::mode());
        #[cfg(not(target_os = "linux"))]
        Contained::start(cmd)
    }

    /// Start `cmd` contained, and have the command take `last` as its last step before exec
    /// (after its group and namespace are made, so they are not confined by it).
    pub(crate) fn spawn_then(
        cmd: &mut Command,
        last: std::sync::Arc<dyn LastStep>,
    ) -> io::Result<Contained> {
        #[cfg(target_os = "linux")]
        {
            let (lifeline, mode) = (contain::lifeline()?, contain::mode());
            // SAFETY: as in `spawn_tied`; only the command returns from its hook, so only the
            // command runs `before_exec`, whose contract is the same.
            unsafe {
                cmd.pre_exec(move || contain::enter(mode, lifeline));
            }
            let step = last.clone();
            // SAFETY: `LastStep::before_exec` promises the same as the hook above.
            unsafe { cmd.pre_exec(move || step.before_exec()) };
        }
        let mut contained = Contained::start(cmd)?;
        contained._last = Some(last);
        Ok(contained)
    }

    /// Start `cmd` under a watcher that ends its tree once every write end of the pipe whose
    /// read end is `lifeline` is closed, in a PID namespace of its own if `mode` says so.
    #[cfg(target_os = "linux")]
    fn spawn_tied(
        cmd: &mut Command,
        lifeline: libc::c_int,
        mode: Option<contain::Mode>,
    ) -> io::Result<Contained> {
        // SAFETY: the hook runs between fork and exec and makes only async-signal-safe
        // system calls; it allocates nothing and takes no lock.
        unsafe { cmd.pre_exec(move || contain::enter(mode, lifeline)) };
        Contained::start(cmd)
    }

    fn start(cmd: &mut Command) -> io::Result<Contained> {
        cmd.process_group(0).kill_on_drop(true);
        let child = cmd.spawn()?;
        let group = child
            .id()
            .ok_or_else(|| io::Error::other("the process ended before it was seen"))?;
        Ok(Contained {
            child,
            group,
            _last: None,
        })
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

/// Whether `step`, a command's last step before exec (system calls only), succeeds here;
/// tried once in a throwaway process placed as a contained command is.
#[cfg(target_os = "linux")]
pub(crate) fn try_as_command(step: fn() -> bool) -> bool {
    contain::try_as_command(step)
}

/// Whether `Contained` processes run in a PID namespace of their own here, so that even
/// processes that leave their group end with them (tests check those only then).
#[cfg(test)]
pub(crate) fn pid_namespaces() -> bool {
    #[cfg(target_os = "linux")]
    return contain::mode().is_some();
    #[cfg(not(target_os = "linux"))]
    false
}

/// What a contained command runs under, set up between fork and exec:
///
/// ```text
/// tool's child: the watcher (outer namespace; what tokio waits for)
/// │      waits for its child, then exits as the command did; when our process dies, kills
/// │      its child and its whole process group
/// └── init (PID 1 of a new namespace, where the host allows one; dies with the watcher)
///     │  reaps; exits when the command does, and the kernel then kills the namespace
///     └── the command (PID 2), and all it starts
/// ```
///
/// Without a namespace the command is the watcher's child itself.
///
/// **Why a lifeline pipe, and not `PR_SET_PDEATHSIG`, tells the watcher that our process
/// died.** The parent-death signal fires when the *thread* that forked exits, not the
/// process. Tools spawn from tokio's threads, and its blocking-pool threads exit after idling
/// for a while, which would kill a healthy shell; a thread kept for spawning alone would need
/// every spawn sent to it. Instead our process makes one pipe (`lifeline`) at its first
/// contained spawn and keeps the write end open, never writing to it, for as long as it
/// lives. Both ends are close-on-exec, and every process forked from ours without exec
/// (watchers, inits) closes every descriptor it does not use, so no other process holds the
/// write end for longer than a fork takes. When our process ends, however it ends (SIGKILL
/// included: the kernel closes its descriptors), the pipe's read end reports a hang-up to
/// every watcher at once, which kills its child (and so the namespace) and its process group.
/// A pipe closed before a watcher first looks reports the same, so there is no race with a
/// death during the spawn. The init is a child of the watcher, a process with one thread, so
/// `PR_SET_PDEATHSIG` is exact there.
///
/// A PID namespace needs, without privileges, a user namespace too, which maps only our own
/// uid and gid onto themselves, so files and permissions look the same inside.
#[cfg(target_os = "linux")]
mod contain {
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

    /// The read end of this process's lifeline: a pipe whose write end this process alone
    /// holds until it ends (see the module's comment). Made once; the write end is never
    /// closed.
    pub(super) fn lifeline() -> io::Result<c_int> {
        static READ: OnceLock<c_int> = OnceLock::new();
        if let Some(&read) = READ.get() {
            return Ok(read);
        }
        let mut ends = [0; 2];
        // SAFETY: pipe2 writes two descriptors into `ends`.
        if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let [read, write] = ends;
        if READ.set(read).is_err() {
            // Another thread made it first: this pair is not needed.
            // SAFETY: both descriptors are ours and used nowhere else.
            unsafe {
                libc::close(read);
                libc::close(write);
            }
        }
        Ok(*READ.get().expect("set above"))
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

    /// Whether `step` succeeds in a throwaway process placed where a contained command
    /// runs here (in the namespaces `mode` makes, as their second process), so that what
    /// a command would do before exec can be tried once, harmlessly.
    pub(super) fn try_as_command(step: fn() -> bool) -> bool {
        let mode = mode();
        // SAFETY: the children make only system calls (and `step`, whose caller promises
        // the same), then `_exit`.
        unsafe {
            match libc::fork() {
                -1 => false,
                0 => {
                    let placed = mode.is_none_or(|mode| unshare(mode).is_ok());
                    let ok = placed
                        && match libc::fork() {
                            0 => libc::_exit(if step() { 0 } else { 1 }),
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

    /// The `pre_exec` hook, in the tool's child after fork: with a namespace, make it and
    /// fork its init, which forks the command; without, fork the command. The command is the
    /// only one to return, and so to exec; this process stays behind as the watcher.
    pub(super) fn enter(mode: Option<Mode>, lifeline: c_int) -> io::Result<()> {
        // SAFETY: between fork and exec; only async-signal-safe system calls below.
        unsafe {
            let Some(mode) = mode else {
                return match libc::fork() {
                    -1 => Err(io::Error::last_os_error()),
                    0 => Ok(()),
                    command => watch(command, None, lifeline),
                };
            };
            unshare(mode)?;
            let mut status_pipe = [0; 2];
            if libc::pipe2(status_pipe.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
                return Err(io::Error::last_os_error());
            }
            let [status_r, status_w] = status_pipe;
            match libc::fork() {
                -1 => Err(io::Error::last_os_error()),
                0 => {
                    // The init: killed with the watcher, a process of one thread.
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    match libc::fork() {
                        0 => Ok(()),
                        command => init(command, status_w),
                    }
                }
                init => watch(init, Some(status_r), lifeline),
            }
        }
    }

    /// The namespace's init: reap whatever ends, and when the command ends, pass its raw
    /// status on and exit, which ends everything else in the namespace.
    unsafe fn init(command: pid_t, status_w: c_int) -> ! {
        // SAFETY: descriptors and system calls of this process alone.
        unsafe {
            close_all_but([status_w, status_w]);
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

    /// Does nothing: its one use is to interrupt `ppoll` when a child ends.
    extern "C" fn on_child(_: c_int) {}

    /// The watcher, the process tokio waits for: wait for `child` (the init, or the command
    /// itself) while watching the lifeline, then end as the command ended (or as the init
    /// did, if it was killed first). When the lifeline hangs up, our process is gone: kill
    /// the child and the whole process group, this process included.
    unsafe fn watch(child: pid_t, status_r: Option<c_int>, lifeline: c_int) -> ! {
        // SAFETY: descriptors, signals and system calls of this process alone.
        unsafe {
            close_all_but([status_r.unwrap_or(lifeline), lifeline]);
            // An interrupt sent to the group is for the command (`Contained::signal`).
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            // SIGCHLD stays blocked but inside `ppoll`, which unblocks it atomically, with a
            // handler that does nothing, so a child's end between `waitpid` and `ppoll` is
            // never missed: it interrupts the `ppoll`.
            let mut blocked: libc::sigset_t = std::mem::zeroed();
            let mut waiting: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut blocked);
            libc::sigaddset(&mut blocked, libc::SIGCHLD);
            libc::sigprocmask(libc::SIG_BLOCK, &blocked, &mut waiting);
            libc::sigdelset(&mut waiting, libc::SIGCHLD);
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_child as extern "C" fn(c_int) as usize;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(libc::SIGCHLD, &action, std::ptr::null_mut());
            let mut status = 0;
            loop {
                match libc::waitpid(child, &mut status, libc::WNOHANG) {
                    0 => {}
                    -1 if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
                    -1 => libc::_exit(127),
                    _ => break,
                }
                let mut watched = libc::pollfd {
                    fd: lifeline,
                    events: libc::POLLIN,
                    revents: 0,
                };
                if libc::ppoll(&mut watched, 1, std::ptr::null(), &waiting) > 0 {
                    // A hang-up (nothing is ever written): our process is gone.
                    libc::kill(child, libc::SIGKILL);
                    libc::kill(0, libc::SIGKILL);
                    libc::_exit(128 + libc::SIGKILL);
                }
            }
            let mut command = 0;
            if let Some(status_r) = status_r
                && libc::read(status_r, (&raw mut command).cast::<c_void>(), 4) == 4
            {
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
                let mut only: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut only);
                libc::sigaddset(&mut only, signal);
                libc::sigprocmask(libc::SIG_UNBLOCK, &only, std::ptr::null_mut());
                libc::kill(libc::getpid(), signal);
                libc::_exit(128 + signal);
            }
            libc::_exit(libc::WEXITSTATUS(status))
        }
    }

    /// Close every descriptor but the two in `keep` (which may be the same): the pipes of
    /// the command, the one the spawner reads to learn that exec happened, and the lifeline's
    /// write end must be held by the command alone (and the last not even by it).
    unsafe fn close_all_but(keep: [c_int; 2]) {
        let low = keep[0].min(keep[1]) as libc::c_uint;
        let high = keep[0].max(keep[1]) as libc::c_uint;
        let mut first = 0;
        // SAFETY: closing descriptors of this process, which uses none of them.
        unsafe {
            for kept in [low, high] {
                if kept > first {
                    close_range(first, kept - 1);
                }
                first = first.max(kept + 1);
            }
            close_range(first, libc::c_uint::MAX);
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

/// The processes running `sleep <seconds>` (tests start such sleeps to see what ends).
#[cfg(test)]
pub(crate) fn sleeping(seconds: &str) -> Vec<i32> {
    let wanted = format!("sleep\0{seconds}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|line| line == wanted.as_bytes())
        })
        .collect()
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

    /// Wait up to 5 s for `done`.
    #[cfg(target_os = "linux")]
    async fn soon(done: impl Fn() -> bool) -> bool {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        while !done() {
            if tokio::time::Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        true
    }

    /// Our process's death, played by a lifeline of the test's own whose write end it
    /// closes: the command and the job it left in the background end at once, with and
    /// without a PID namespace; while the write end is open they run on.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_contained_tree_ends_when_the_lifeline_hangs_up() {
        let mut modes = vec![None];
        modes.extend(contain::mode().map(Some));
        for (n, mode) in modes.into_iter().enumerate() {
            let mut ends = [0; 2];
            // SAFETY: pipe2 writes two descriptors into `ends`.
            assert_eq!(
                unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) },
                0
            );
            let [read, write] = ends;
            let id = std::process::id();
            let (job, command) = (
                format!("{}.{id}", 400 + 2 * n),
                format!("{}.{id}", 401 + 2 * n),
            );
            let mut cmd = Command::new("sh");
            cmd.arg("-c")
                .arg(format!("sleep {job} & exec sleep {command}"))
                .stdin(std::process::Stdio::null());
            let mut contained = Contained::spawn_tied(&mut cmd, read, mode).unwrap();
            let both = || sleeping(&job).len() == 1 && sleeping(&command).len() == 1;
            assert!(soon(both).await, "mode {n}: the command never started");
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            assert!(both(), "mode {n}: the tree ended with its lifeline held");
            assert!(contained.child().try_wait().unwrap().is_none());
            // SAFETY: the descriptor is the test's own.
            unsafe { libc::close(write) };
            let status = tokio::time::timeout(std::time::Duration::from_secs(5), contained.wait())
                .await
                .expect("the watcher ended at the hang-up")
                .unwrap();
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(status.signal(), Some(libc::SIGKILL), "mode {n}: {status:?}");
            let none = || sleeping(&job).is_empty() && sleeping(&command).is_empty();
            let gone = soon(none).await;
            for pid in sleeping(&job).into_iter().chain(sleeping(&command)) {
                // SAFETY: kill takes two integers.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            // SAFETY: the descriptor is the test's own.
            unsafe { libc::close(read) };
            assert!(gone, "mode {n}: the tree outlived its lifeline");
        }
    }

    /// Under the watcher, with or without a namespace, the command's exit code and the
    /// signal that killed it come through as they were.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_watched_command_ends_as_it_ended() {
        use std::os::unix::process::ExitStatusExt;
        let mut modes = vec![None];
        modes.extend(contain::mode().map(Some));
        for mode in modes {
            for (script, code, signal) in [
                ("exit 3", Some(3), None),
                ("kill -TERM $$", None, Some(libc::SIGTERM)),
            ] {
                let mut cmd = Command::new("sh");
                cmd.arg("-c").arg(script);
                let mut contained =
                    Contained::spawn_tied(&mut cmd, contain::lifeline().unwrap(), mode).unwrap();
                let status = contained.wait().await.unwrap();
                assert_eq!((status.code(), status.signal()), (code, signal), "{script}");
            }
        }
    }
}
