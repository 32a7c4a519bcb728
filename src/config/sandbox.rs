//! `[sandbox]`: where code the model wrote runs (`mode`: confined on the host, in a
//! container per flow, or on the host with the user's rights), and the limits, network and
//! container settings, checked. Unless the file names the Docker engine, `resolve` takes
//! `DOCKER_HOST` from the environment (a `unix://` one).

use std::path::Path;
use std::time::Duration;

use toml::Spanned;

use manus_actors::confine::{ConfineSettings, Host, Network};
use manus_actors::sandbox::{DockerHost, SandboxSettings, TlsFiles};

use super::error::{Lines, Problem};
use super::file::{FallbackToml, HostToml, NetworkToml, SandboxModeToml, SandboxToml};
use super::values::{Bounds, Table};

/// The engine's socket when neither the file nor `DOCKER_HOST` names one.
pub(super) const DEFAULT_DOCKER_HOST: &str = "unix:///var/run/docker.sock";

/// The default `idle_timeout_secs`.
const IDLE: Duration = Duration::from_secs(600);
/// The least memory Docker gives a container, in bytes.
const MIN_MEMORY: i64 = 6 << 20;
/// CPUs a container may use.
const CPUS: Bounds<f64> = Bounds::new(0.01, 1024.0, " CPUs");
/// Processes a container may hold (Linux's own limit is 2^22).
const PIDS: Bounds<i64> = Bounds::new(1, 4_194_304, " processes");
/// Seconds of CPU a confined process may use (a week at most).
const CPU_TIME: Bounds<i64> = Bounds::new(1, 604_800, " seconds");
/// The default `cpu_time_limit_secs`: an hour of CPU per process, far more than a call
/// needs, so that only code spinning in the background meets it.
const CPU_TIME_DEFAULT: u64 = 3600;
/// Descriptors a confined process may hold open.
const OPEN_FILES: Bounds<i64> = Bounds::new(16, 1_048_576, " descriptors");
/// Containers at once.
const SANDBOXES: Bounds<i64> = Bounds::new(1, 10_000, " containers");

/// `[sandbox] mode`, as the config check shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxMode {
    /// Code runs on the host with the user's rights.
    None,
    /// Code runs on the host, confined to its workspace (`manus_actors::confine`); the
    /// default where the kernel can confine.
    Process,
    /// Code runs in a container per flow.
    Container,
}

/// What `[sandbox]` sets up.
pub(super) struct Built {
    pub(super) mode: SandboxMode,
    /// The file said `use_sandbox = true`, the older spelling of `mode = "container"`.
    pub(super) old_spelling: bool,
    /// The container's settings in container mode, and whether the file named the engine.
    pub(super) container: Option<(SandboxSettings, bool)>,
    /// The confinement in process mode.
    pub(super) confine: Option<ConfineSettings>,
    /// Where the kernel cannot confine: run unconfined (saying so) rather than refuse.
    pub(super) fallback_to_none: bool,
}

/// The sandbox's settings for its mode. Every key is checked whatever the mode.
pub(super) fn build(sb: &SandboxToml, workspace: &Path, lines: Lines) -> Result<Built, Problem> {
    let use_sandbox = sb.use_sandbox.as_ref().map(|u| *u.get_ref());
    let mode = match (&sb.mode, &sb.use_sandbox) {
        (Some(_), Some(u)) => {
            return Err(Problem::at(
                lines.of(u),
                "[sandbox] use_sandbox",
                "[sandbox] use_sandbox is the older spelling of mode = \"container\": leave it \
                 out, mode says it all"
                    .to_string(),
            ));
        }
        (Some(m), None) => match m.get_ref() {
            SandboxModeToml::Process => SandboxMode::Process,
            SandboxModeToml::Container => SandboxMode::Container,
            SandboxModeToml::None => SandboxMode::None,
        },
        (None, _) if use_sandbox == Some(true) => SandboxMode::Container,
        // Safe by default: code is confined unless the file says otherwise.
        (None, _) => SandboxMode::Process,
    };
    let network = match (&sb.network, sb.network_enabled) {
        (Some(n), Some(_)) => {
            return Err(Problem::at(
                lines.of(n),
                "[sandbox] network",
                "[sandbox] network and network_enabled (its older spelling) are both set: keep \
                 network only"
                    .to_string(),
            ));
        }
        (Some(n), None) => network(n, mode, lines)?,
        (None, Some(true)) => Network::On,
        (None, _) => Network::Off,
    };
    let table = Table::new("[sandbox]", lines);
    let memory_limit = match &sb.memory_limit {
        Some(m) => parse_bytes(m.get_ref())
            .filter(|b| *b >= MIN_MEMORY)
            .ok_or_else(|| {
                Problem::at(
                    lines.of(m),
                    "[sandbox] memory_limit",
                    format!(
                        "[sandbox] memory_limit = \"{}\": use a size such as \"512m\" or \"2g\", \
                         at least \"6m\"",
                        m.get_ref()
                    ),
                )
            })?,
        None => 512 * 1024 * 1024,
    };
    let docker_host = table.text(&sb.docker_host, "docker_host", "the engine's socket")?;
    if let (Some(url), Some(v)) = (&docker_host, &sb.docker_host)
        && !unix_socket(url)
    {
        return Err(Problem::at(
            lines.of(v),
            "[sandbox] docker_host",
            format!(
                "[sandbox] docker_host = \"{url}\" is not a socket: use unix:///path/docker.sock \
                 (an engine over TCP goes in hosts, with its TLS files)"
            ),
        ));
    }
    let work_dir = table
        .text(&sb.work_dir, "work_dir", "an absolute path")?
        .unwrap_or_else(|| "/workspace".into());
    if !work_dir.starts_with('/') {
        return Err(Problem::at(
            sb.work_dir.as_ref().and_then(|w| lines.of(w)),
            "[sandbox] work_dir",
            format!("[sandbox] work_dir = \"{work_dir}\" must be an absolute path"),
        ));
    }
    let hosts = hosts(sb, docker_host.as_deref(), lines)?;
    let named = docker_host.is_some() || sb.hosts.is_some();
    let settings = SandboxSettings {
        hosts,
        image: table
            .text(&sb.image, "image", "an image's name")?
            .unwrap_or_else(|| "manus-rt-sandbox:latest".into()),
        work_dir,
        memory_limit,
        cpu_limit: table
            .number(&sb.cpu_limit, "cpu_limit", CPUS)?
            .unwrap_or(1.0),
        pids_limit: table
            .number(&sb.pids_limit, "pids_limit", PIDS)?
            .unwrap_or(256),
        network_enabled: network != Network::Off,
        idle_timeout: table.seconds(&sb.idle_timeout_secs, "idle_timeout_secs", IDLE)?,
        max_sandboxes: table
            .number(&sb.max_sandboxes, "max_sandboxes", SANDBOXES)?
            .map_or(8, |n| n as usize),
        mount: sb
            .mount_workspace
            .unwrap_or(false)
            .then(|| workspace.to_path_buf()),
    };
    let file_size = match &sb.file_size_limit {
        Some(f) => parse_bytes(f.get_ref())
            .filter(|b| *b >= 1 << 20)
            .ok_or_else(|| {
                Problem::at(
                    lines.of(f),
                    "[sandbox] file_size_limit",
                    format!(
                        "[sandbox] file_size_limit = \"{}\": use a size such as \"1g\" or \"500m\", \
                         at least \"1m\"",
                        f.get_ref()
                    ),
                )
            })?,
        None => 4 << 30,
    };
    let confine = ConfineSettings {
        network,
        memory_limit: settings.memory_limit as u64,
        processes: settings.pids_limit as u64,
        file_size: file_size as u64,
        open_files: table
            .number(&sb.open_files, "open_files", OPEN_FILES)?
            .map_or(1024, |n| n as u64),
        cpu_time: table
            .number(&sb.cpu_time_limit_secs, "cpu_time_limit_secs", CPU_TIME)?
            .map_or(CPU_TIME_DEFAULT, |n| n as u64),
    };
    Ok(Built {
        mode,
        old_spelling: sb.mode.is_none() && use_sandbox == Some(true),
        container: (mode == SandboxMode::Container).then_some((settings, named)),
        confine: (mode == SandboxMode::Process).then_some(confine),
        fallback_to_none: sb
            .fallback
            .as_ref()
            .is_none_or(|f| *f.get_ref() == FallbackToml::None),
    })
}

/// `[sandbox] network`: a switch, or (in process mode) the hosts code may reach.
fn network(n: &Spanned<NetworkToml>, mode: SandboxMode, lines: Lines) -> Result<Network, Problem> {
    let problem = |why: String| Problem::at(lines.of(n), "[sandbox] network", why);
    match n.get_ref() {
        NetworkToml::Switch(true) => Ok(Network::On),
        NetworkToml::Switch(false) => Ok(Network::Off),
        NetworkToml::Hosts(_) if mode == SandboxMode::Container => Err(problem(
            "[sandbox] network: a list of hosts is kept to in process mode only; in container \
             mode use true or false"
                .into(),
        )),
        NetworkToml::Hosts(hosts) if hosts.is_empty() => Err(problem(
            "[sandbox] network = []: name at least one host, or use false for none".into(),
        )),
        NetworkToml::Hosts(hosts) => hosts
            .iter()
            .map(|h| Host::parse(h).map_err(|e| problem(format!("[sandbox] network: {e}"))))
            .collect::<Result<_, _>>()
            .map(Network::Only),
    }
}

/// Process mode on a kernel with `support`: confined (`Ok(None)`), or where the kernel
/// cannot confine, unconfined with the warning to give (`Ok(Some)`, when `fallback_to_none`)
/// or refused (`Err`, saying why and what to change).
pub(super) fn fall_back(
    support: &manus_actors::confine::Support,
    fallback_to_none: bool,
) -> Result<Option<String>, String> {
    if support.full() {
        return Ok(None);
    }
    let why = format!("this kernel cannot confine code ({})", support.describe());
    if fallback_to_none {
        Ok(Some(format!(
            "{why}: code the model writes runs UNCONFINED, with your user's rights. \
             [sandbox] mode = \"container\" isolates it in Docker; fallback = \"refuse\" stops instead"
        )))
    } else {
        Err(format!(
            "[sandbox] fallback = \"refuse\": {why}. Use mode = \"container\", or \
             fallback = \"none\" to run unconfined"
        ))
    }
}

/// The engines: `hosts`, else `docker_host`, else the default socket (which `resolve`
/// replaces with `DOCKER_HOST`'s when the file names none).
fn hosts(
    sb: &SandboxToml,
    docker_host: Option<&str>,
    lines: Lines,
) -> Result<Vec<DockerHost>, Problem> {
    let Some(list) = &sb.hosts else {
        return Ok(vec![DockerHost {
            url: docker_host.unwrap_or(DEFAULT_DOCKER_HOST).to_string(),
            tls: None,
        }]);
    };
    let problem = |why: String| {
        Problem::at(
            lines.of(list),
            "[sandbox] hosts",
            format!("[sandbox] hosts: {why}"),
        )
    };
    if docker_host.is_some() {
        return Err(problem(
            "leave out docker_host with hosts (hosts lists every engine)".into(),
        ));
    }
    if list.get_ref().is_empty() {
        return Err(problem("is empty: name at least one engine".into()));
    }
    list.get_ref()
        .iter()
        .map(|h| match h {
            HostToml::Socket(url) if unix_socket(url) => Ok(DockerHost {
                url: url.clone(),
                tls: None,
            }),
            HostToml::Socket(url) => Err(problem(format!(
                "\"{url}\": a socket is unix:///path/docker.sock; an engine over TCP is \
                 {{ url = \"tcp://host:2376\", ca = \"ca.pem\", cert = \"cert.pem\", key = \"key.pem\" }}"
            ))),
            HostToml::Tls(t) if !tcp_engine(&t.url) => Err(problem(format!(
                "\"{}\": an engine with TLS files is reached over tcp://host:port",
                t.url
            ))),
            HostToml::Tls(t) => {
                let files = [("ca", &t.ca), ("cert", &t.cert), ("key", &t.key)];
                if let Some((name, _)) = files.iter().find(|(_, f)| f.trim().is_empty()) {
                    return Err(problem(format!(
                        "\"{}\": {name} is blank: give the path of its PEM file",
                        t.url
                    )));
                }
                Ok(DockerHost {
                    url: t.url.clone(),
                    tls: Some(TlsFiles {
                        ca: t.ca.clone().into(),
                        cert: t.cert.clone().into(),
                        key: t.key.clone().into(),
                    }),
                })
            }
        })
        .collect()
}

/// `unix:///absolute/path`.
fn unix_socket(url: &str) -> bool {
    url.strip_prefix("unix://")
        .is_some_and(|path| path.len() > 1 && path.starts_with('/'))
}

/// `tcp://host:port` (or `https://`), with a host.
fn tcp_engine(url: &str) -> bool {
    let Some(rest) = url
        .strip_prefix("tcp://")
        .or_else(|| url.strip_prefix("https://"))
    else {
        return false;
    };
    rest.trim_end_matches('/')
        .parse::<axum::http::uri::Authority>()
        .is_ok_and(|a| !a.host().is_empty() && !rest.contains('@'))
}

/// `512m`, `2g`, `1048576` → bytes.
pub(super) fn parse_bytes(s: &str) -> Option<i64> {
    let s = s.trim().to_ascii_lowercase();
    let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: i64 = digits.parse().ok()?;
    let mult = match unit.trim_end_matches('b') {
        "" => 1,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult).filter(|b| *b > 0)
}
