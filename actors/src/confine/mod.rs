//! `[sandbox] mode = "process"`: what the code tools' host processes (the Python
//! interpreter, the shell, and all they start) may touch, enforced by the kernel in the
//! command between fork and exec (`process::LastStep`, run after `Contained` has made its
//! group and namespace):
//!
//! - the filesystem by Landlock: read and execute in the toolchain (`/usr`, `/lib*`, `/bin`,
//!   `/sbin`, `/opt`, `/etc` but its secrets, `/sys`, the configured Python's own prefix and
//!   `sys.path`), read-write only in the workspace and a private temporary folder (`TMPDIR`
//!   and `HOME`, removed with the process); links and renames that would carry a file into
//!   more rights are refused (`Refer`); a hard link already in the workspace to a file
//!   outside it stops the command before it starts (`links`);
//! - other processes unseen: a private `/proc` and `/dev/shm` (`mounts`), and Landlock's
//!   scoping (no ptrace, signals or abstract sockets outside the code's own domain);
//! - with `network = false`, no sockets (seccomp refuses `socket()` of every family, so TCP,
//!   UDP, fast-open, unix sockets by path and abstract ones alike; `socketpair` stays) and
//!   Landlock's TCP bind/connect rules as a second layer; with a list of hosts, TCP to the
//!   runtime's proxy alone (`proxy`);
//! - a seccomp filter refusing what code never needs (ptrace, mount, namespaces, bpf,
//!   keyrings, kernel modules, reboot, io_uring, …); no capabilities (bounding, ambient,
//!   effective, permitted, inheritable all cleared) and `no_new_privs`;
//! - caps from `[sandbox]`: file size (`RLIMIT_FSIZE`), open files (`RLIMIT_NOFILE`),
//!   memory (`RLIMIT_DATA`), CPU time (`RLIMIT_CPU`), processes (`RLIMIT_NPROC`, and a
//!   `pids` cgroup of the command's own where one can be made, since the kernel does not
//!   apply the rlimit to root: `cgroup`), no core files;
//! - a minimal environment: the runtime's variables (API keys among them) are not passed on;
//! - every inherited descriptor but stdio closed at exec.
//!
//! Knows nothing of tools: they name the workspace and the Python; it hands back a
//! `Contained`.

use std::collections::HashMap;
use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use landlock::{
    ABI, Access, AccessFs, AccessNet, NetPort, Ruleset, RulesetAttr, RulesetCreatedAttr, Scope,
    path_beneath_rules,
};
use seccompiler::{BpfProgram, TargetArch};
use tokio::process::Command;

use crate::process::{Contained, LastStep};

mod cgroup;
mod links;
mod mounts;
mod proxy;
mod seccomp;

pub use proxy::{Host, Network};

/// What confined processes may do, from `[sandbox]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfineSettings {
    /// Where they may connect (`[sandbox] network`).
    pub network: Network,
    /// Bytes of data each process may map (`[sandbox] memory_limit`, as `RLIMIT_DATA`).
    pub memory_limit: u64,
    /// Processes the user may have (`[sandbox] pids_limit`, as `RLIMIT_NPROC`).
    pub processes: u64,
    /// The largest file a process may write (`[sandbox] file_size_limit`, `RLIMIT_FSIZE`).
    pub file_size: u64,
    /// Descriptors a process may hold open (`[sandbox] open_files`, `RLIMIT_NOFILE`).
    pub open_files: u64,
    /// Seconds of CPU each process may use (`[sandbox] cpu_time_limit_secs`,
    /// `RLIMIT_CPU`): SIGXCPU then, SIGKILL a few seconds later.
    pub cpu_time: u64,
}

/// What the kernel here offers for confinement (`sandbox doctor`).
#[derive(Debug, Clone, Copy)]
pub struct Support {
    /// Landlock's ABI version, 0 when there is none.
    pub landlock_abi: i64,
    /// Whether seccomp filters can be installed.
    pub seccomp: bool,
    /// Whether commands get a private `/proc` and `/dev/shm` (`mounts`).
    pub private_mounts: bool,
    /// Whether commands get a `pids` cgroup of their own, the process cap that holds for
    /// root too (`cgroup`).
    pub pids_cgroup: bool,
}

impl Support {
    /// Found once by asking the kernel.
    pub fn here() -> Support {
        static FOUND: OnceLock<Support> = OnceLock::new();
        *FOUND.get_or_init(|| {
            // SAFETY: with a null attribute and the version flag the call only answers.
            let abi = unsafe {
                libc::syscall(
                    libc::SYS_landlock_create_ruleset,
                    std::ptr::null::<u8>(),
                    0usize,
                    1u32, // LANDLOCK_CREATE_RULESET_VERSION
                )
            };
            // SAFETY: PR_GET_SECCOMP only answers.
            let seccomp = unsafe { libc::prctl(libc::PR_GET_SECCOMP) } >= 0
                && TargetArch::try_from(std::env::consts::ARCH).is_ok();
            Support {
                landlock_abi: abi.max(0) as i64,
                seccomp,
                private_mounts: mounts::available(),
                pids_cgroup: cgroup::available(),
            }
        })
    }

    /// What process mode can do here, in a line.
    pub fn describe(&self) -> String {
        format!(
            "Landlock ABI {}{}, seccomp {}: {}",
            self.landlock_abi,
            if self.landlock_abi == 0 {
                " (none)"
            } else {
                ""
            },
            if self.seccomp {
                "available"
            } else {
                "unavailable"
            },
            if self.full() {
                "fully confining"
            } else {
                "NOT fully confining (Landlock ABI 6 and seccomp are needed)"
            }
        )
    }

    /// What of process mode is weaker here than it can be, a line each (`sandbox doctor`).
    pub fn gaps(&self) -> Vec<&'static str> {
        let mut gaps = vec![];
        if !self.private_mounts {
            gaps.push(
                "no private mount namespace: confined code gets no /proc and no /dev/shm \
                 (tools that read /proc, and Python's multiprocessing locks, fail)",
            );
        }
        // SAFETY: geteuid cannot fail.
        if !self.pids_cgroup && unsafe { libc::geteuid() } == 0 {
            gaps.push(
                "no pids cgroup can be made, and the kernel does not apply RLIMIT_NPROC to \
                 root: running as root, confined code's process count is not capped",
            );
        }
        gaps
    }

    /// Whether process mode confines fully here: files, TCP and abstract sockets by
    /// Landlock (ABI 6 or later) and the rest by seccomp.
    pub fn full(&self) -> bool {
        self.landlock_abi >= 6 && self.seccomp
    }
}

/// Start `cmd` contained, and confined by `confine` when it is given, with `workspace` the
/// only place it may write and `python` (resolved through `PATH`) the Python it may run.
pub(crate) fn spawn(
    cmd: &mut Command,
    confine: Option<&ConfineSettings>,
    workspace: &Path,
    python: &str,
) -> io::Result<Contained> {
    let Some(settings) = confine else {
        return Contained::spawn(cmd);
    };
    let support = Support::here();
    if support.landlock_abi < 1 || !support.seccomp {
        return Err(io::Error::other(
            "[sandbox] mode = \"process\" needs Landlock and seccomp, which this kernel does not \
             offer (see `manus-rt sandbox doctor`)",
        ));
    }
    links::check(workspace)?;
    let toolchain = toolchain(python);
    let proxy = match &settings.network {
        Network::Only(hosts) => Some(proxy::port_for(hosts)?),
        Network::Off | Network::On => None,
    };
    let prepared = Prepared::new(settings, workspace, &toolchain, proxy)?;
    prepared.environment(cmd, &toolchain, proxy);
    Contained::spawn_then(cmd, Arc::new(prepared))
}

/// The line added to a tool's output that shows a refusal the sandbox likely caused, or
/// `None` when the output shows none.
pub(crate) fn refusal_note(output: &str, settings: &ConfineSettings) -> Option<String> {
    if output.contains("CPU time limit exceeded") || output.contains("signal 24") {
        return Some(format!(
            "[sandbox: the process used up its {} s of CPU time and was stopped; \
             `[sandbox] cpu_time_limit_secs` in the runtime's config sets it]",
            settings.cpu_time
        ));
    }
    let unreachable = output.contains("Network is unreachable") || output.contains("[Errno 101]");
    match &settings.network {
        Network::Off if unreachable => {
            return Some(
                "[sandbox: code here may not use the network; `[sandbox] network = true` in \
                 the runtime's config allows it]"
                    .into(),
            );
        }
        Network::Only(_) if unreachable || output.contains(proxy::REFUSED) => {
            return Some(format!(
                "[sandbox: code here may reach {}, by HTTP(S) through the proxy in \
                 $HTTPS_PROXY, and use no other sockets; a host added to `[sandbox] network` in \
                 the runtime's config is allowed]",
                settings.network
            ));
        }
        _ => {}
    }
    let refused = [
        "Permission denied",
        "PermissionError",
        "Operation not permitted",
    ];
    refused.iter().any(|r| output.contains(r)).then(|| {
        "[sandbox: code here may write only in the workspace and $TMPDIR, read only those and \
         the system's and Python's files, and may not open sockets or use privileged system \
         calls; `[sandbox] mode = \"none\"` in the runtime's config lifts this]"
            .into()
    })
}

/// Where the configured Python lives, found once per name by asking it.
#[derive(Clone, Default)]
struct Toolchain {
    /// Its real executable, when it answered.
    executable: Option<PathBuf>,
    /// Its prefixes and `sys.path`.
    reads: Vec<PathBuf>,
}

fn toolchain(python: &str) -> Toolchain {
    static FOUND: OnceLock<Mutex<HashMap<String, Toolchain>>> = OnceLock::new();
    let found = FOUND.get_or_init(Default::default);
    if let Some(known) = found.lock().unwrap_or_else(|e| e.into_inner()).get(python) {
        return known.clone();
    }
    let script = "import sys, json; print(json.dumps([sys.executable, sys.prefix, \
                  sys.base_prefix, sys.exec_prefix, *sys.path]))";
    let answer = std::process::Command::new(python)
        .args(["-I", "-c", script])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .and_then(|out| serde_json::from_slice::<Vec<String>>(&out.stdout).ok())
        .unwrap_or_default();
    let executable = answer
        .first()
        .filter(|e| !e.is_empty())
        .and_then(|e| std::fs::canonicalize(e).ok());
    let mut reads: Vec<PathBuf> = answer
        .iter()
        .skip(1)
        .filter(|p| p.starts_with('/'))
        .map(PathBuf::from)
        .collect();
    reads.extend(
        executable
            .iter()
            .filter_map(|e| e.parent()?.parent().map(Path::to_path_buf)),
    );
    let chain = Toolchain { executable, reads };
    found
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(python.to_string(), chain.clone());
    chain
}

/// Read and execute, everywhere a toolchain lives (`/etc` is added entry by entry).
const TOOLCHAIN: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/opt",
    "/sys",
    "/dev/zero",
    "/dev/random",
    "/dev/urandom",
];
/// Read and write, though outside the workspace.
const DEVICES: &[&str] = &["/dev/null", "/dev/full", "/dev/tty"];
/// What of `/etc` stays unreadable: passwords, keys, credentials.
const ETC_SECRETS: &[&str] = &[
    "shadow",
    "shadow-",
    "gshadow",
    "gshadow-",
    "sudoers",
    "sudoers.d",
    "ssh",
    "ssl/private",
    "security/opasswd",
    "credstore",
    "credstore.encrypted",
    "wireguard",
    "NetworkManager/system-connections",
    "docker",
    "containers/auth.json",
    "machine-id",
];
/// The variables passed on from the runtime's environment (and every `LC_*`).
const KEPT_ENV: &[&str] = &["PATH", "LANG", "LANGUAGE", "TERM", "TZ", "USER", "LOGNAME"];

/// The Landlock ABI whose rights are asked for (older kernels get what they offer).
const LANDLOCK_ABI: ABI = ABI::V6;
/// Seconds between SIGXCPU at the CPU-time limit and SIGKILL.
const CPU_GRACE_SECS: u64 = 5;
/// The prefix of private temporary folders' names (then `<runtime pid>-<seq>`).
const TMP_PREFIX: &str = "manus-confined-";
/// Makes every private temporary folder's name distinct.
static TMP_SEQ: AtomicU64 = AtomicU64::new(0);

/// All a confined command needs, made before the fork so that the step before exec only
/// makes system calls (it must not allocate or lock).
struct Prepared {
    /// The Landlock ruleset, to be enforced on the command.
    ruleset: OwnedFd,
    /// Seccomp programs, each with its own errno.
    filters: Vec<BpfProgram>,
    limits: Vec<(libc::__rlimit_resource_t, libc::rlimit)>,
    /// The command's own `pids` cgroup, where one can be made.
    cgroup: Option<cgroup::Cgroup>,
    /// The options of its private `/dev/shm`, when it gets private mounts.
    private_mounts: Option<CString>,
    /// Landlock's read rights and all its rights, for the private mounts' rules.
    rights: (u64, u64),
    /// The command's private temporary folder, removed with this.
    tmp: PathBuf,
}

impl Prepared {
    fn new(
        settings: &ConfineSettings,
        workspace: &Path,
        toolchain: &Toolchain,
        proxy: Option<u16>,
    ) -> io::Result<Prepared> {
        sweep_dead(&std::env::temp_dir(), TMP_PREFIX, |dir| {
            std::fs::remove_dir_all(dir)
        });
        let tmp = std::env::temp_dir().join(format!(
            "{TMP_PREFIX}{}-{}",
            std::process::id(),
            TMP_SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        // Seccomp first: it needs no folder, so a failure leaves nothing behind.
        let filters = seccomp::filters(settings)?;
        let cgroup = cgroup::Cgroup::new(settings.processes)?;
        let private = Support::here().private_mounts;
        std::fs::create_dir(&tmp)?;
        let ruleset = (|| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o700))?;
            Option::<OwnedFd>::from(landlock(settings, workspace, &tmp, toolchain, proxy)?)
                .ok_or_else(|| io::Error::other("Landlock made no ruleset here"))
        })();
        let ruleset = ruleset.inspect_err(|_| {
            let _ = std::fs::remove_dir_all(&tmp);
        })?;
        Ok(Prepared {
            ruleset,
            filters,
            limits: vec![
                (libc::RLIMIT_DATA, limit(settings.memory_limit)),
                (libc::RLIMIT_NPROC, limit(settings.processes)),
                (libc::RLIMIT_FSIZE, limit(settings.file_size)),
                (libc::RLIMIT_NOFILE, limit(settings.open_files)),
                (libc::RLIMIT_CORE, limit(0)),
                (
                    libc::RLIMIT_CPU,
                    libc::rlimit {
                        rlim_cur: settings.cpu_time,
                        rlim_max: settings.cpu_time.saturating_add(CPU_GRACE_SECS),
                    },
                ),
            ],
            cgroup,
            private_mounts: private.then(|| mounts::shm_options(settings.memory_limit)),
            rights: (
                AccessFs::from_read(LANDLOCK_ABI).bits(),
                AccessFs::from_all(LANDLOCK_ABI).bits(),
            ),
            tmp,
        })
    }

    /// A minimal environment: the runtime's own variables stay behind.
    fn environment(&self, cmd: &mut Command, toolchain: &Toolchain, proxy: Option<u16>) {
        let set: Vec<(OsString, Option<OsString>)> = cmd
            .as_std()
            .get_envs()
            .map(|(k, v)| (k.to_owned(), v.map(|v| v.to_owned())))
            .collect();
        cmd.env_clear();
        for (key, value) in std::env::vars_os() {
            let name = key.to_string_lossy();
            if KEPT_ENV.contains(&name.as_ref()) || name.starts_with("LC_") {
                cmd.env(&key, value);
            }
        }
        // The Python the config names comes first, as itself (not a shim that needs more).
        if let Some(bin) = toolchain.executable.as_deref().and_then(Path::parent) {
            let path = std::env::var_os("PATH").unwrap_or_default();
            let dirs = std::iter::once(bin.to_path_buf()).chain(std::env::split_paths(&path));
            if let Ok(joined) = std::env::join_paths(dirs) {
                cmd.env("PATH", joined);
            }
        }
        cmd.env("HOME", &self.tmp).env("TMPDIR", &self.tmp);
        if let Some(port) = proxy {
            let url = format!("http://127.0.0.1:{port}");
            for key in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
                cmd.env(key, &url).env(key.to_ascii_lowercase(), &url);
            }
        }
        for (key, value) in set {
            match value {
                Some(value) => cmd.env(key, value),
                None => cmd.env_remove(key),
            };
        }
    }
}

impl LastStep for Prepared {
    fn before_exec(&self) -> io::Result<()> {
        // SAFETY: between fork and exec in the command: system calls only, on memory made
        // before the fork; nothing allocates or locks.
        unsafe {
            if let Some(cgroup) = &self.cgroup {
                cgroup.enter()?;
            }
            if let Some(shm) = &self.private_mounts {
                mounts::enter(shm)?;
                mounts::grant(self.ruleset.as_raw_fd(), self.rights.0, self.rights.1)?;
            }
            for (resource, value) in &self.limits {
                // Never raise a limit the runtime already has lower.
                let mut now = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                libc::getrlimit(*resource, &mut now);
                let lower = libc::rlimit {
                    rlim_cur: value.rlim_cur.min(now.rlim_cur),
                    rlim_max: value.rlim_max.min(now.rlim_max),
                };
                if libc::setrlimit(*resource, &lower) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            drop_capabilities()?;
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::syscall(
                libc::SYS_landlock_restrict_self,
                self.ruleset.as_raw_fd(),
                0u32,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            for filter in &self.filters {
                seccompiler::apply_filter(filter).map_err(|_| io::Error::last_os_error())?;
            }
            // Whatever the runtime left open without close-on-exec ends at exec.
            libc::syscall(
                libc::SYS_close_range,
                3u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            );
        }
        Ok(())
    }
}

impl Drop for Prepared {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.tmp);
    }
}

fn limit(value: u64) -> libc::rlimit {
    libc::rlimit {
        rlim_cur: value,
        rlim_max: value,
    }
}

/// Clear every capability set, the bounding and ambient ones included, so that not even
/// root's exec gets any back.
unsafe fn drop_capabilities() -> io::Result<()> {
    // SAFETY: prctl and capset on this process only.
    unsafe {
        let mut cap = 0;
        // PR_CAPBSET_DROP needs CAP_SETPCAP; without it there is nothing to drop.
        while libc::prctl(libc::PR_CAPBSET_READ, cap, 0, 0, 0) >= 0 {
            libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
            cap += 1;
        }
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
        #[repr(C)]
        struct Header {
            version: u32,
            pid: libc::c_int,
        }
        let header = Header {
            version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
            pid: 0,
        };
        let none = [0u32; 6];
        if libc::syscall(libc::SYS_capset, &header, none.as_ptr()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The Landlock ruleset: what may be read, written and reached.
fn landlock(
    settings: &ConfineSettings,
    workspace: &Path,
    tmp: &Path,
    toolchain: &Toolchain,
    proxy: Option<u16>,
) -> io::Result<landlock::RulesetCreated> {
    if !workspace.is_dir() {
        return Err(io::Error::other(format!(
            "the workspace `{}` is not a folder",
            workspace.display()
        )));
    }
    let abi = LANDLOCK_ABI;
    let bad = |e: landlock::RulesetError| io::Error::other(format!("Landlock: {e}"));
    let mut ruleset = Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .map_err(bad)?
        .scope(Scope::from_all(abi))
        .map_err(bad)?;
    if settings.network != Network::On {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(abi))
            .map_err(bad)?;
    }
    let mut reads: Vec<PathBuf> = TOOLCHAIN.iter().map(PathBuf::from).collect();
    reads.extend(etc_without_secrets(Path::new("/etc"), ""));
    reads.extend(toolchain.reads.iter().cloned());
    let writes = [workspace, tmp]
        .into_iter()
        .map(Path::to_path_buf)
        .chain(DEVICES.iter().map(PathBuf::from));
    // The host's own `/proc` and `/dev/shm` show and share too much: there are no rules for
    // them here; the private ones get theirs in the command (`mounts::grant`).
    let created = ruleset
        .create()
        .map_err(bad)?
        .add_rules(path_beneath_rules(reads, AccessFs::from_read(abi)))
        .map_err(bad)?
        .add_rules(path_beneath_rules(writes, AccessFs::from_all(abi)))
        .map_err(bad)?
        .add_rules(proxy.map(|port| Ok(NetPort::new(port, AccessNet::ConnectTcp))))
        .map_err(bad)?;
    Ok(created)
}

/// The entries of `dir` (`/etc`, or one of its folders, `rel` below it) but the secrets,
/// descending only into folders that hold one.
fn etc_without_secrets(dir: &Path, rel: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return vec![];
    };
    let mut kept = vec![];
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = format!("{rel}{}", name.to_string_lossy());
        if ETC_SECRETS.contains(&name.as_str()) {
            continue;
        }
        let inside = format!("{name}/");
        if ETC_SECRETS.iter().any(|s| s.starts_with(&inside)) {
            kept.extend(etc_without_secrets(&entry.path(), &inside));
        } else {
            kept.push(entry.path());
        }
    }
    kept
}

/// Remove what runtimes that are gone (SIGKILLed, so nothing of theirs was dropped) left in
/// `parent`: the entries named `<prefix><pid>-…` whose process no longer exists.
fn sweep_dead(parent: &Path, prefix: &str, remove: impl Fn(&Path) -> io::Result<()>) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(owner) = name
            .to_str()
            .and_then(|n| n.strip_prefix(prefix))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: signal 0 only asks whether the process exists.
        let gone = unsafe { libc::kill(owner, 0) } != 0
            && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            let _ = remove(&entry.path());
        }
    }
}
