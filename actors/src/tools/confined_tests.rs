//! `python_execute` and `bash` under `[sandbox] mode = "process"` (`crate::confine`), with
//! real files, sockets on 127.0.0.1 and processes: what they may do in the workspace, and
//! what they are refused outside it, each with the setting that allows it.

use std::io::{Read, Write};
use std::time::Duration;

use serde_json::json;

use super::tests::{TempDir, host_ctx};
use super::{Tool, ToolCtx, ToolSettings, bash::Bash, python::PythonExecute};
use crate::confine::{ConfineSettings, Host, Network, Support};

/// Whether this kernel can confine; a test that cannot run says so loudly.
fn can_confine(test: &str) -> bool {
    let here = Support::here();
    if !here.full() {
        eprintln!(
            "SKIPPED {test}: this kernel offers Landlock ABI {} (6 needed) and seccomp {}",
            here.landlock_abi, here.seccomp
        );
    }
    here.full()
}

fn settings(network: bool) -> ToolSettings {
    with_caps(if network { Network::On } else { Network::Off }, 256, 30)
}

/// Settings with `processes` and `cpu_time` seconds as the caps.
fn with_caps(network: Network, processes: u64, cpu_time: u64) -> ToolSettings {
    ToolSettings {
        python_timeout: Duration::from_secs(60),
        bash_timeout: Duration::from_secs(60),
        confine: Some(ConfineSettings {
            network,
            memory_limit: 256 << 20,
            processes,
            file_size: 4 << 20,
            open_files: 64,
            cpu_time,
        }),
        ..ToolSettings::default()
    }
}

/// The output of a call, whether it succeeded or not.
async fn said(tool: &mut dyn Tool, ctx: &ToolCtx, args: serde_json::Value) -> String {
    match tool.call(args, ctx).await {
        Ok(out) => out.text,
        Err(e) => e.0,
    }
}

async fn py(tool: &mut PythonExecute, ctx: &ToolCtx, code: &str) -> String {
    said(tool, ctx, json!({ "code": code })).await
}

async fn sh(tool: &mut Bash, ctx: &ToolCtx, command: &str) -> String {
    said(tool, ctx, json!({ "command": command })).await
}

const FS_NOTE: &str = "`[sandbox] mode = \"none\"`";
const NET_NOTE: &str = "`[sandbox] network = true`";

#[tokio::test]
async fn confined_code_writes_only_in_its_workspace() {
    if !can_confine("confined_code_writes_only_in_its_workspace") {
        return;
    }
    let (ws, outside) = (TempDir::new("confine-ws"), TempDir::new("confine-out"));
    let ctx = host_ctx(&ws.0);
    let mut python = PythonExecute::new(&settings(false));
    let done = py(
        &mut python,
        &ctx,
        "import json, csv, statistics, os, tempfile\n\
         open('data.json', 'w').write(json.dumps([1, 2, 3]))\n\
         with tempfile.NamedTemporaryFile('w', delete=False) as t: t.write('x')\n\
         print(statistics.mean(json.load(open('data.json'))), os.path.dirname(t.name) == os.environ['TMPDIR'])",
    )
    .await;
    assert!(done.contains("2 True"), "{done}");
    let outer = outside.0.display();
    let link = ws.0.join("out");
    std::os::unix::fs::symlink(&outside.0, &link).unwrap();
    let rel = format!("../{}", outside.0.file_name().unwrap().to_string_lossy());
    for target in [
        format!("{outer}/abs.txt"),
        format!("{rel}/dots.txt"),
        "out/link.txt".into(),
    ] {
        let said = py(
            &mut python,
            &ctx,
            &format!("open({target:?}, 'w').write('x')"),
        )
        .await;
        assert!(said.contains("PermissionError"), "{target}: {said}");
        assert!(said.contains(FS_NOTE), "{target}: {said}");
    }
    let mut bash = Bash::new(&settings(false));
    let said = sh(
        &mut bash,
        &ctx,
        &format!("echo hi > here.txt && cat here.txt && echo x > {outer}/sh.txt"),
    )
    .await;
    assert!(
        said.starts_with("hi\n") && said.contains("Permission denied"),
        "{said}"
    );
    assert!(said.contains(FS_NOTE), "{said}");
    // A hard link cannot carry an outside file into the workspace.
    std::fs::write(outside.0.join("target.txt"), "mine").unwrap();
    let said = sh(
        &mut bash,
        &ctx,
        &format!("ln {outer}/target.txt linked.txt"),
    )
    .await;
    assert!(said.contains("exit code"), "{said}");
    assert!(!ws.0.join("linked.txt").exists());
    let landed: Vec<_> = std::fs::read_dir(&outside.0)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(landed, ["target.txt"]);
    assert_eq!(
        std::fs::read_to_string(outside.0.join("target.txt")).unwrap(),
        "mine"
    );
}

#[tokio::test]
async fn confined_code_reads_no_secrets_of_the_runtime_or_its_user() {
    if !can_confine("confined_code_reads_no_secrets_of_the_runtime_or_its_user") {
        return;
    }
    let (ws, home) = (TempDir::new("confine-ws"), TempDir::new("confine-home"));
    std::fs::create_dir(home.0.join(".ssh")).unwrap();
    let key = home.0.join(".ssh/id_rsa");
    std::fs::write(&key, "FAKE PRIVATE KEY").unwrap();
    let ctx = host_ctx(&ws.0);
    let mut python = PythonExecute::new(&settings(false));
    let said = py(
        &mut python,
        &ctx,
        &format!("print(open({:?}).read())", key.display().to_string()),
    )
    .await;
    assert!(
        said.contains("PermissionError") && !said.contains("FAKE"),
        "{said}"
    );
    let pid = std::process::id();
    let said = py(
        &mut python,
        &ctx,
        &format!("print(open('/proc/{pid}/environ', 'rb').read())"),
    )
    .await;
    // Not even there to be refused, where there are private mounts.
    assert!(
        said.contains("PermissionError") || said.contains("FileNotFoundError"),
        "{said}"
    );
    assert!(!said.contains("PATH="), "{said}");
    // The runtime's variables are not handed on (cargo gives tests this one).
    assert!(std::env::var_os("CARGO_PKG_NAME").is_some());
    let said = py(&mut python, &ctx, "import os\nprint('CARGO_PKG_NAME' in os.environ, os.environ['HOME'] == os.environ['TMPDIR'])").await;
    assert!(said.contains("False True"), "{said}");
    let mut bash = Bash::new(&settings(false));
    let said = sh(&mut bash, &ctx, &format!("cat {}", key.display())).await;
    assert!(
        said.contains("Permission denied") && !said.contains("FAKE"),
        "{said}"
    );
    // No capabilities, not even for root; no mount, no namespaces.
    let said = sh(
        &mut bash,
        &ctx,
        "grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status",
    )
    .await;
    assert_eq!(said.matches("0000000000000000").count(), 3, "{said}");
    let said = py(
        &mut python,
        &ctx,
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n\
         print(libc.mount(b'none', b'.', b'tmpfs', 0, None), os.strerror(ctypes.get_errno()))\n\
         print(libc.unshare(0x20000), os.strerror(ctypes.get_errno()))",
    )
    .await;
    assert_eq!(
        said.matches("-1 Operation not permitted").count(),
        2,
        "{said}"
    );
}

#[tokio::test]
async fn confined_code_reaches_no_socket_unless_the_network_is_allowed() {
    if !can_confine("confined_code_reaches_no_socket_unless_the_network_is_allowed") {
        return;
    }
    let ws = TempDir::new("confine-ws");
    let ctx = host_ctx(&ws.0);
    let canary = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    canary.set_nonblocking(true).unwrap();
    let port = canary.local_addr().unwrap().port();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    let unix_path = ws.0.join("canary.sock");
    let unix = std::os::unix::net::UnixListener::bind(&unix_path).unwrap();
    unix.set_nonblocking(true).unwrap();
    let mut python = PythonExecute::new(&settings(false));
    let said = py(&mut python, &ctx, &format!("import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=5).sendall(b'leak')")).await;
    assert!(
        said.contains("Network is unreachable") && said.contains(NET_NOTE),
        "{said}"
    );
    let said = py(&mut python, &ctx, &format!("import socket\nsocket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'leak', ('127.0.0.1', {udp_port}))")).await;
    assert!(said.contains("Network is unreachable"), "{said}");
    let said = py(
        &mut python,
        &ctx,
        "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect('canary.sock')",
    )
    .await;
    assert!(said.contains("PermissionError"), "{said}");
    let said = py(
        &mut python,
        &ctx,
        "import socket\na, b = socket.socketpair()\na.send(b'x')\nprint(b.recv(1))",
    )
    .await;
    assert!(said.contains("b'x'"), "{said}");
    let mut bash = Bash::new(&settings(false));
    let said = sh(
        &mut bash,
        &ctx,
        &format!("echo leak > /dev/tcp/127.0.0.1/{port}"),
    )
    .await;
    assert!(
        said.contains("Network is unreachable") || said.contains("Permission denied"),
        "{said}"
    );
    assert!(canary.accept().is_err(), "the canary heard a connection");
    assert!(unix.accept().is_err(), "the unix canary heard a connection");
    assert!(
        udp.recv(&mut [0; 8]).is_err(),
        "the UDP canary heard a datagram"
    );
    // With the network allowed, the same code reaches the canary.
    let mut python = PythonExecute::new(&settings(true));
    let said = py(&mut python, &ctx, &format!("import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=5).sendall(b'hello')")).await;
    assert!(!said.contains("Error"), "{said}");
    canary.set_nonblocking(false).unwrap();
    let (mut conn, _) = canary.accept().unwrap();
    let mut heard = String::new();
    conn.read_to_string(&mut heard).unwrap();
    assert_eq!(heard, "hello");
    let _ = conn.write_all(b"");
}

#[tokio::test]
async fn confined_code_is_held_to_the_memory_limit() {
    if !can_confine("confined_code_is_held_to_the_memory_limit") {
        return;
    }
    let ws = TempDir::new("confine-ws");
    let ctx = host_ctx(&ws.0);
    let mut python = PythonExecute::new(&settings(false));
    let said = py(&mut python, &ctx, "x = bytearray(512 << 20)").await;
    assert!(said.contains("MemoryError"), "{said}");
    let said = py(&mut python, &ctx, "x = bytearray(16 << 20)\nprint(len(x))").await;
    assert!(said.contains("16777216"), "{said}");
}

/// The file-size and open-files caps hold: a file past 4 MiB cannot be written, the 65th
/// descriptor cannot be opened, and below both everything works.
#[tokio::test]
async fn confined_code_is_held_to_its_file_size_and_open_files() {
    if !can_confine("confined_code_is_held_to_its_file_size_and_open_files") {
        return;
    }
    let ws = TempDir::new("confine-ws");
    let ctx = host_ctx(&ws.0);
    let mut python = PythonExecute::new(&settings(false));
    let said = py(
        &mut python,
        &ctx,
        "open('big.bin', 'wb').write(b'x' * (8 << 20))",
    )
    .await;
    assert!(said.contains("File too large"), "{said}");
    let said = py(
        &mut python,
        &ctx,
        "print(open('ok.bin', 'wb').write(b'x' * (1 << 20)))",
    )
    .await;
    assert!(said.contains("1048576"), "{said}");
    let said = py(
        &mut python,
        &ctx,
        "kept = [open('ok.bin') for _ in range(100)]",
    )
    .await;
    assert!(said.contains("Too many open files"), "{said}");
    let said = py(
        &mut python,
        &ctx,
        "kept = [open('ok.bin') for _ in range(20)]\nprint(len(kept))",
    )
    .await;
    assert!(said.contains("20"), "{said}");
}

/// Other processes are not even seen: not the runtime (whose command line and environment
/// may hold keys), not another process of the same user with a secret in its arguments;
/// the code's own processes are, and `/proc/self` works.
#[tokio::test]
async fn confined_code_sees_no_other_process() {
    if !can_confine("confined_code_sees_no_other_process") {
        return;
    }
    if !Support::here().private_mounts {
        eprintln!("SKIPPED confined_code_sees_no_other_process: no private mounts here");
        return;
    }
    let ws = TempDir::new("confine-ws");
    let ctx = host_ctx(&ws.0);
    let mut other = std::process::Command::new("sh")
        .args(["-c", "sleep 60", "manus-secret-argument"])
        .spawn()
        .unwrap();
    let (me, them) = (std::process::id(), other.id());
    let mut python = PythonExecute::new(&settings(false));
    let said = py(
        &mut python,
        &ctx,
        &format!(
            "import os\n\
             pids = [p for p in os.listdir('/proc') if p.isdigit()]\n\
             lines = [open(f'/proc/{{p}}/cmdline', 'rb').read() for p in pids]\n\
             print('secret', any(b'manus-secret' in l for l in lines))\n\
             print('runtime', os.path.exists('/proc/{me}/cmdline'), os.path.exists('/proc/{them}'))\n\
             print('self', os.getpid() == int(os.readlink('/proc/self')), len(open('/proc/self/status').read()) > 0)\n\
             print('count', len(pids))"
        ),
    )
    .await;
    let _ = other.kill();
    let _ = other.wait();
    assert!(said.contains("secret False"), "{said}");
    assert!(said.contains("runtime False False"), "{said}");
    assert!(said.contains("self True True"), "{said}");
    // The interpreter alone (its shell, if any, and the namespace's init are not shown).
    let count: usize = said
        .lines()
        .find_map(|l| l.strip_prefix("count "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(usize::MAX);
    assert!(count <= 2, "{said}");
}

/// Python's multiprocessing works confined: its locks live in a private `/dev/shm`, where
/// nothing of the host's is seen.
#[tokio::test]
async fn confined_code_has_a_private_shared_memory() {
    if !can_confine("confined_code_has_a_private_shared_memory") {
        return;
    }
    if !Support::here().private_mounts {
        eprintln!("SKIPPED confined_code_has_a_private_shared_memory: no private mounts here");
        return;
    }
    let ws = TempDir::new("confine-ws");
    let ctx = host_ctx(&ws.0);
    let planted =
        std::path::Path::new("/dev/shm").join(format!("manus-test-{}", std::process::id()));
    std::fs::write(&planted, "host's").unwrap();
    let mut python = PythonExecute::new(&settings(false));
    let said = py(
        &mut python,
        &ctx,
        &format!(
            "import multiprocessing as mp, os\n\
             with mp.Pool(2) as pool: print('pool', pool.map(abs, [-1, -2, -3]))\n\
             lock = mp.Lock()\n\
             with lock: print('locked')\n\
             print('seen', os.path.exists({:?}))",
            planted.display().to_string()
        ),
    )
    .await;
    let _ = std::fs::remove_file(&planted);
    assert!(said.contains("pool [1, 2, 3]"), "{said}");
    assert!(said.contains("locked"), "{said}");
    assert!(said.contains("seen False"), "{said}");
}

/// A fork bomb meets the process cap, for root too (by a cgroup of its own where the
/// kernel's rlimit does not hold), and the runtime stays up.
#[tokio::test]
async fn confined_code_is_held_to_the_process_cap() {
    if !can_confine("confined_code_is_held_to_the_process_cap") {
        return;
    }
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 && !Support::here().pids_cgroup {
        eprintln!("SKIPPED confined_code_is_held_to_the_process_cap: root without a pids cgroup");
        return;
    }
    let ws = TempDir::new("confine-ws");
    let ctx = host_ctx(&ws.0);
    let mut python = PythonExecute::new(&with_caps(Network::Off, 16, 30));
    let said = py(
        &mut python,
        &ctx,
        "import os, time\n\
         made = 0\n\
         try:\n\
         \x20   for _ in range(200):\n\
         \x20       if os.fork() == 0:\n\
         \x20           time.sleep(30)\n\
         \x20           os._exit(0)\n\
         \x20       made += 1\n\
         except OSError as e:\n\
         \x20   print('refused', e)\n\
         print('made', made)",
    )
    .await;
    assert!(said.contains("refused"), "{said}");
    let made: usize = said
        .lines()
        .find_map(|l| l.strip_prefix("made "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(usize::MAX);
    assert!(made < 16, "{said}");
    // The call after it works: the cap is the code's, not the runtime's.
    let said = py(&mut python, &ctx, "print('still', 6 * 7)").await;
    assert!(said.contains("still 42"), "{said}");
}

/// ptrace is refused (so no process can be read or steered through it), with the note.
#[tokio::test]
async fn confined_code_cannot_ptrace() {
    if !can_confine("confined_code_cannot_ptrace") {
        return;
    }
    let ws = TempDir::new("confine-ws");
    let ctx = host_ctx(&ws.0);
    let mut python = PythonExecute::new(&settings(false));
    let said = py(
        &mut python,
        &ctx,
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n\
         print(libc.ptrace(16, os.getppid(), None, None), os.strerror(ctypes.get_errno()))\n\
         print(libc.ptrace(0, 0, None, None), os.strerror(ctypes.get_errno()))",
    )
    .await;
    assert_eq!(
        said.matches("-1 Operation not permitted").count(),
        2,
        "{said}"
    );
    assert!(said.contains(FS_NOTE), "{said}");
}

/// Code that spins meets its CPU-time cap and is stopped, with the setting named.
#[tokio::test]
async fn confined_code_is_held_to_its_cpu_time() {
    if !can_confine("confined_code_is_held_to_its_cpu_time") {
        return;
    }
    let ws = TempDir::new("confine-ws");
    let ctx = host_ctx(&ws.0);
    let mut bash = Bash::new(&with_caps(Network::Off, 256, 1));
    let said = sh(&mut bash, &ctx, "python3 -c 'while True: pass'; echo after").await;
    assert!(said.contains("cpu_time_limit_secs"), "{said}");
    assert!(said.contains("after"), "{said}");
}

/// A hard link in the workspace to a file outside it (made before the code runs, since
/// confined code cannot make one) stops the command before it starts, naming the file;
/// the outside file is untouched.
#[tokio::test]
async fn a_hard_link_to_an_outside_file_is_refused() {
    if !can_confine("a_hard_link_to_an_outside_file_is_refused") {
        return;
    }
    let (ws, outside) = (TempDir::new("confine-ws"), TempDir::new("confine-out"));
    let ctx = host_ctx(&ws.0);
    std::fs::write(outside.0.join("bashrc"), "mine").unwrap();
    std::fs::hard_link(outside.0.join("bashrc"), ws.0.join("rc")).unwrap();
    let mut python = PythonExecute::new(&settings(false));
    let said = py(&mut python, &ctx, "open('rc', 'w').write('changed')").await;
    assert!(said.contains("hard links to files outside"), "{said}");
    assert!(said.contains("rc` (2 links, 1 in the workspace)"), "{said}");
    assert_eq!(
        std::fs::read_to_string(outside.0.join("bashrc")).unwrap(),
        "mine"
    );
    // Links within the workspace are fine.
    std::fs::remove_file(ws.0.join("rc")).unwrap();
    std::fs::create_dir(ws.0.join("sub")).unwrap();
    std::fs::write(ws.0.join("a.txt"), "a").unwrap();
    std::fs::hard_link(ws.0.join("a.txt"), ws.0.join("sub/b.txt")).unwrap();
    let said = py(&mut python, &ctx, "print(open('sub/b.txt').read(), 'fine')").await;
    assert!(said.contains("a fine"), "{said}");
}

/// A server on 127.0.0.1 that answers each connection's first request with `body`, and
/// counts the connections it heard.
fn tiny_server(body: &'static str) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let heard = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = heard.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut conn = conn;
            let mut head = [0u8; 4096];
            let _ = conn.read(&mut head);
            let _ = write!(
                conn,
                "HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (port, heard)
}

/// With `network` a list of hosts, code reaches a listed one by HTTP (urllib through the
/// proxy, and a raw CONNECT tunnel), and nothing else: an unlisted host gets the proxy's
/// refusal with the note, a direct connection and a UDP datagram are refused, and the
/// unlisted server hears nothing.
#[tokio::test]
async fn confined_code_reaches_only_the_listed_hosts() {
    if !can_confine("confined_code_reaches_only_the_listed_hosts") {
        return;
    }
    let ws = TempDir::new("confine-ws");
    let ctx = host_ctx(&ws.0);
    let (allowed, _) = tiny_server("welcome");
    let (canary, heard) = tiny_server("leaked");
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    let hosts = vec![Host::parse(&format!("127.0.0.1:{allowed}")).unwrap()];
    let mut python = PythonExecute::new(&with_caps(Network::Only(hosts), 256, 30));
    let get = |port: u16| {
        format!(
            "import urllib.request\nprint(urllib.request.urlopen('http://127.0.0.1:{port}/', timeout=10).read())"
        )
    };
    let said = py(&mut python, &ctx, &get(allowed)).await;
    assert!(said.contains("b'welcome'"), "{said}");
    let said = py(
        &mut python,
        &ctx,
        &format!(
            "import os, socket, urllib.parse\n\
             proxy = urllib.parse.urlparse(os.environ['HTTPS_PROXY'])\n\
             s = socket.create_connection((proxy.hostname, proxy.port), timeout=10)\n\
             s.sendall(b'CONNECT 127.0.0.1:{allowed} HTTP/1.1\\r\\n\\r\\n')\n\
             print(s.recv(100).split(b'\\r\\n')[0])\n\
             s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n')\n\
             print(s.recv(100).endswith(b'welcome'))"
        ),
    )
    .await;
    assert!(
        said.contains("b'HTTP/1.1 200 Connection established'\nTrue"),
        "{said}"
    );
    let said = py(&mut python, &ctx, &get(canary)).await;
    assert!(
        said.contains("403") && said.contains("[sandbox] network"),
        "{said}"
    );
    assert!(said.contains("may reach only 127.0.0.1:"), "{said}");
    let said = py(
        &mut python,
        &ctx,
        &format!("import socket\nsocket.create_connection(('127.0.0.1', {canary}), timeout=5)"),
    )
    .await;
    assert!(said.contains("PermissionError"), "{said}");
    let said = py(&mut python, &ctx, &format!("import socket\nsocket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'leak', ('127.0.0.1', {udp_port}))")).await;
    assert!(said.contains("Network is unreachable"), "{said}");
    assert!(said.contains("may reach only"), "{said}");
    // TCP fast-open would send data with no `connect` for Landlock to see.
    let said = py(
        &mut python,
        &ctx,
        &format!(
            "import socket\n\
             s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)\n\
             try: s.setsockopt(socket.IPPROTO_TCP, 30, 1)\n\
             except OSError as e: print('connect option', e)\n\
             s.sendto(b'leak', socket.MSG_FASTOPEN, ('127.0.0.1', {canary}))"
        ),
    )
    .await;
    assert!(
        said.contains("connect option [Errno 1]") && said.contains("PermissionError"),
        "{said}"
    );
    assert_eq!(heard.load(std::sync::atomic::Ordering::SeqCst), 0);
    assert!(
        udp.recv(&mut [0; 8]).is_err(),
        "the UDP canary heard a datagram"
    );
}

/// With the network open, Landlock's scoping still holds: an abstract unix socket made
/// outside the code's domain cannot be reached, and a process outside it cannot be
/// signalled.
#[tokio::test]
async fn confined_code_reaches_no_abstract_socket_or_outside_process() {
    if !can_confine("confined_code_reaches_no_abstract_socket_or_outside_process") {
        return;
    }
    use std::os::linux::net::SocketAddrExt;
    let ws = TempDir::new("confine-ws");
    let ctx = host_ctx(&ws.0);
    let name = format!("manus-test-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let abstract_canary = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    abstract_canary.set_nonblocking(true).unwrap();
    let mut outside = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let mut python = PythonExecute::new(&settings(true));
    let said = py(
        &mut python,
        &ctx,
        &format!(
            "import os, socket\n\
             s = socket.socket(socket.AF_UNIX)\n\
             try: s.connect('\\0{name}')\n\
             except OSError as e: print('abstract', type(e).__name__)\n\
             try: os.kill({}, 9)\n\
             except OSError as e: print('signal', type(e).__name__)",
            outside.id()
        ),
    )
    .await;
    let alive = outside.try_wait().unwrap().is_none();
    let _ = outside.kill();
    let _ = outside.wait();
    assert!(said.contains("abstract PermissionError"), "{said}");
    // Refused by Landlock, or not even found from the code's own PID namespace.
    assert!(
        said.contains("signal PermissionError") || said.contains("signal ProcessLookupError"),
        "{said}"
    );
    assert!(alive, "the outside process was killed");
    assert!(
        abstract_canary.accept().is_err(),
        "the abstract socket heard a connection"
    );
}

/// A descriptor the runtime left open without close-on-exec (to a file the code may not
/// read) is closed before the code starts.
#[tokio::test]
async fn confined_code_inherits_no_descriptor_of_the_runtime() {
    if !can_confine("confined_code_inherits_no_descriptor_of_the_runtime") {
        return;
    }
    let (ws, outside) = (TempDir::new("confine-ws"), TempDir::new("confine-out"));
    let ctx = host_ctx(&ws.0);
    let secret = outside.0.join("secret.txt");
    std::fs::write(&secret, "FAKE TOKEN").unwrap();
    let path = std::ffi::CString::new(secret.display().to_string()).unwrap();
    // SAFETY: open returns a descriptor this test closes below.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY) };
    assert!(fd >= 0);
    let mut python = PythonExecute::new(&settings(false));
    let said = py(
        &mut python,
        &ctx,
        &format!(
            "import os\ntry: print(os.read({fd}, 100))\nexcept OSError as e: print('closed', e.errno)"
        ),
    )
    .await;
    // SAFETY: the descriptor opened above.
    unsafe { libc::close(fd) };
    assert!(
        said.contains("closed 9") && !said.contains("FAKE"),
        "{said}"
    );
}
