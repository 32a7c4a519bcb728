//! The sandbox-supervisor actor: the only owner of a Docker Engine API client. Agent code
//! and files (python_execute, bash, the editor and the data tools) live in one container per flow,
//! created on first use by a child `Container` actor, removed when the flow ends, when it
//! has idled past `idle_timeout`, and when the runtime shuts down. `max_sandboxes` bounds
//! how many exist at once.

mod container;
mod shell;
pub mod tar;

use std::time::{Duration, Instant};

use bollard::Docker;
use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};

use crate::children::FlowChildren;
use crate::protocol::{
    Attached, ContainerMsg, ExecOutput, SandboxMsg, SandboxOp, SandboxReply, ShellEnd,
};
use container::{Container, ContainerArgs};

/// `[sandbox]`, as data.
#[derive(Debug, Clone)]
pub struct SandboxSettings {
    /// The engines containers may go to (at least one): each flow's container goes to the
    /// answering one with the fewest of this runtime's containers.
    pub hosts: Vec<DockerHost>,
    pub image: String,
    /// The working directory inside the container; agents' files live here.
    pub work_dir: String,
    /// Bytes.
    pub memory_limit: i64,
    /// CPUs, e.g. 1.0.
    pub cpu_limit: f64,
    pub pids_limit: i64,
    pub network_enabled: bool,
    pub idle_timeout: Duration,
    pub max_sandboxes: usize,
    /// A host directory bound at `work_dir`, so the host sees what the agents make in the
    /// container; `None` keeps the host untouched.
    pub mount: Option<std::path::PathBuf>,
}

/// A Docker engine: a local socket, or TCP with TLS client certificates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerHost {
    /// `unix:///path/docker.sock` (Docker or Podman's compatible socket), or
    /// `tcp://host:port` with `tls`.
    pub url: String,
    pub tls: Option<TlsFiles>,
}

/// PEM files for an engine over TCP: the CA that signed its certificate, and this client's
/// certificate and key. Only their paths are ever logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub ca: std::path::PathBuf,
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
}

impl SandboxSettings {
    /// The engines, for messages.
    pub fn engines_text(&self) -> String {
        self.hosts
            .iter()
            .map(|h| h.url.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Connect to the first engine that answers and check it does; the error says what
    /// to start.
    pub async fn connect(&self) -> Result<Docker, String> {
        let mut why = vec![];
        for host in &self.hosts {
            match host.connect().await {
                Ok(d) => return Ok(d),
                Err(e) => why.push(e),
            }
        }
        Err(why.join("; "))
    }

    /// Whether the image is on the engine `docker`, with what to do if not.
    pub async fn check_image(&self, docker: &Docker) -> Result<(), String> {
        docker.inspect_image(&self.image).await.map(|_| ()).map_err(|_| {
            format!("the sandbox image `{}` is not on this engine; build it with deploy/sandbox/build.sh", self.image)
        })
    }
}

impl DockerHost {
    /// Connect to the engine and check it answers; the error says what to start.
    pub async fn connect(&self) -> Result<Docker, String> {
        let hint = format!(
            "no Docker engine answers at {} — start dockerd (or Podman's socket service) or set [sandbox] docker_host \
             (or hosts); [sandbox] use_sandbox = false runs code on the host instead",
            self.url
        );
        let docker = match &self.tls {
            Some(tls) => {
                let addr = self.url.replacen("tcp://", "https://", 1);
                Docker::connect_with_ssl(
                    &addr,
                    &tls.key,
                    &tls.cert,
                    &tls.ca,
                    120,
                    bollard::API_DEFAULT_VERSION,
                )
                .map_err(|e| format!("{hint} ({e})"))?
            }
            None => {
                let path = self.url.strip_prefix("unix://").unwrap_or(&self.url);
                Docker::connect_with_unix(path, 120, bollard::API_DEFAULT_VERSION)
                    .map_err(|e| format!("{hint} ({e})"))?
            }
        };
        docker.ping().await.map_err(|e| format!("{hint} ({e})"))?;
        Ok(docker)
    }
}

/// How tools reach the sandbox: a message to the supervisor per operation.
#[derive(Debug, Clone)]
pub struct SandboxHandle {
    pub supervisor: ActorRef<SandboxMsg>,
    pub work_dir: String,
    pub memory_limit: i64,
}

impl SandboxHandle {
    async fn run(
        &self,
        flow_id: &str,
        op: SandboxOp,
        limit: Duration,
    ) -> Result<SandboxReply, String> {
        let flow_id = flow_id.to_string();
        // Creating a container may take a while on a cold engine; the op has its own limit.
        let wait = limit.saturating_add(Duration::from_secs(120));
        let call = self
            .supervisor
            .call(
                |reply| SandboxMsg::Run {
                    flow_id,
                    op,
                    span: tracing::Span::current(),
                    reply,
                },
                Some(wait),
            )
            .await;
        crate::protocol::answered(call, "the sandbox", wait)
    }

    /// Run a program in the flow's container, cut at `timeout`.
    pub async fn exec(
        &self,
        flow_id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<ExecOutput, String> {
        match self
            .run(flow_id, SandboxOp::Exec { cmd, timeout }, timeout)
            .await?
        {
            SandboxReply::Exec(out) => Ok(out),
            other => Err(format!("the sandbox answered {other:?} to an exec")),
        }
    }

    /// A file's bytes; `path` is absolute inside the container.
    pub async fn read(&self, flow_id: &str, path: &str) -> Result<Vec<u8>, String> {
        match self
            .run(
                flow_id,
                SandboxOp::Read { path: path.into() },
                Duration::from_secs(60),
            )
            .await?
        {
            SandboxReply::Read(bytes) => Ok(bytes),
            other => Err(format!("the sandbox answered {other:?} to a read")),
        }
    }

    /// Create or replace a file; `path` is absolute inside the container.
    pub async fn write(&self, flow_id: &str, path: &str, bytes: Vec<u8>) -> Result<(), String> {
        match self
            .run(
                flow_id,
                SandboxOp::Write {
                    path: path.into(),
                    bytes,
                },
                Duration::from_secs(60),
            )
            .await?
        {
            SandboxReply::Written => Ok(()),
            other => Err(format!("the sandbox answered {other:?} to a write")),
        }
    }

    /// Run `command` in the agent's persistent shell in the flow's container: the output
    /// and how the command ended.
    pub async fn shell(
        &self,
        flow_id: &str,
        agent: &str,
        command: &str,
        timeout: Duration,
        restart: bool,
    ) -> Result<(String, ShellEnd), String> {
        let op = SandboxOp::Shell {
            session: agent.into(),
            command: command.into(),
            timeout,
            restart,
        };
        match self.run(flow_id, op, timeout).await? {
            SandboxReply::Shell { output, end } => Ok((output, end)),
            other => Err(format!("the sandbox answered {other:?} to a shell command")),
        }
    }

    /// Start `cmd` in the flow's container, attached to the caller, who owns it from then
    /// on: it ends when the caller drops its stdin, or with the container.
    pub async fn attach(&self, flow_id: &str, cmd: Vec<String>) -> Result<Attached, String> {
        let op = SandboxOp::Attach { cmd };
        match self.run(flow_id, op, Duration::from_secs(60)).await? {
            SandboxReply::Attached(attached) => Ok(attached),
            other => Err(format!("the sandbox answered {other:?} to an attach")),
        }
    }

    /// Mark the flow's container busy until the guard is dropped: the idle sweep leaves it
    /// alone meanwhile (a cell of a kept interpreter may run longer than `idle_timeout`).
    pub fn busy(&self, flow_id: &str) -> BusyGuard {
        let mark = |busy| SandboxMsg::Busy {
            flow_id: flow_id.into(),
            busy,
        };
        let _ = self.supervisor.send_message(mark(true));
        BusyGuard {
            supervisor: self.supervisor.clone(),
            done: Some(mark(false)),
        }
    }

    /// Send `signal` to the process group `group` in the flow's container.
    pub async fn signal_group(
        &self,
        flow_id: &str,
        group: u32,
        signal: &str,
    ) -> Result<(), String> {
        let out = self
            .exec(
                flow_id,
                signal_group_cmd(group, signal),
                Duration::from_secs(30),
            )
            .await?;
        match out.exit_code {
            Some(0) => Ok(()),
            _ => Err(format!("kill said: {}", out.stderr.trim())),
        }
    }

    /// The memory limit for messages, e.g. `64 MiB`.
    pub fn memory_limit_text(&self) -> String {
        format!("{} MiB", self.memory_limit / (1024 * 1024))
    }
}

/// The command that sends `signal` (`KILL`, `INT`) to process group `group` in a container:
/// bash's own `kill`, since a minimal image may have no `kill` program.
fn signal_group_cmd(group: u32, signal: &str) -> Vec<String> {
    let script = format!("kill -{signal} -- -\"$1\"");
    ["bash", "-c", &script, "kill", &group.to_string()]
        .map(String::from)
        .to_vec()
}

/// A container marked busy by `SandboxHandle::busy`, until this is dropped.
pub struct BusyGuard {
    supervisor: ActorRef<SandboxMsg>,
    done: Option<SandboxMsg>,
}

impl Drop for BusyGuard {
    fn drop(&mut self) {
        if let Some(done) = self.done.take() {
            let _ = self.supervisor.send_message(done);
        }
    }
}

/// One line of `manus-rt sandbox doctor`.
pub struct Check {
    pub ok: bool,
    pub what: String,
}

impl SandboxSettings {
    /// Check each engine, the image on it and a real container round trip, saying what to
    /// fix.
    pub async fn doctor(&self) -> Vec<Check> {
        let mut checks = vec![];
        for host in &self.hosts {
            let one = SandboxSettings {
                hosts: vec![host.clone()],
                ..self.clone()
            };
            checks.extend(one.doctor_one(host).await);
        }
        checks
    }

    async fn doctor_one(&self, host: &DockerHost) -> Vec<Check> {
        let mut checks = vec![];
        let docker = match host.connect().await {
            Ok(d) => d,
            Err(e) => return vec![Check { ok: false, what: e }],
        };
        let version = docker
            .version()
            .await
            .ok()
            .and_then(|v| v.version)
            .unwrap_or_else(|| "unknown".into());
        checks.push(Check {
            ok: true,
            what: format!("engine at {} answers (version {version})", host.url),
        });
        if let Err(e) = self.check_image(&docker).await {
            checks.push(Check { ok: false, what: e });
            return checks;
        }
        checks.push(Check {
            ok: true,
            what: format!("image {} is present", self.image),
        });
        let trial = async {
            let (sup, _) =
                Actor::spawn(None, SandboxSupervisor, (vec![Some(docker)], self.clone()))
                    .await
                    .map_err(|e| e.to_string())?;
            let handle = SandboxHandle {
                supervisor: sup.clone(),
                work_dir: self.work_dir.clone(),
                memory_limit: self.memory_limit,
            };
            let cmd = ["python3", "-c", "import sys; print(sys.version.split()[0])"]
                .map(String::from)
                .to_vec();
            let out = handle.exec("doctor", cmd, Duration::from_secs(60)).await;
            let _ = sup.stop_and_wait(None, Some(Duration::from_secs(30))).await;
            match out {
                Ok(o) if o.exit_code == Some(0) => Ok(o.stdout.trim().to_string()),
                Ok(o) => Err(format!(
                    "python3 in the image failed: {}{}",
                    o.stdout, o.stderr
                )),
                Err(e) => Err(e),
            }
        };
        match trial.await {
            Ok(v) => checks.push(Check {
                ok: true,
                what: format!(
                    "a container ran python {v} (memory {} MiB, {} CPU, pids {}, network {})",
                    self.memory_limit / (1 << 20),
                    self.cpu_limit,
                    self.pids_limit,
                    if self.network_enabled { "on" } else { "off" }
                ),
            }),
            Err(e) => checks.push(Check {
                ok: false,
                what: format!("a trial container failed: {e}"),
            }),
        }
        checks
    }
}

pub struct SandboxSupervisor;

pub struct SupervisorState {
    /// A client per engine of `settings.hosts`, `None` while it does not answer.
    engines: Vec<Option<Docker>>,
    settings: SandboxSettings,
    /// Each flow's container actor, with when the flow last used it and its engine.
    containers: FlowChildren<ContainerMsg, Placed>,
}

/// What the supervisor keeps beside a flow's container actor.
struct Placed {
    used: Instant,
    /// Pieces of work under way in programs attached to callers (`SandboxMsg::Busy`).
    busy: u32,
    /// Its index in `engines`.
    engine: usize,
}

/// How long an engine has to answer a ping before a flow's container there counts as lost.
const PING_WAIT: Duration = Duration::from_secs(3);

impl SupervisorState {
    /// Whether engine `i` answers (connecting to it again if it did not before).
    async fn answers(&mut self, i: usize) -> bool {
        if let Some(d) = &self.engines[i]
            && matches!(tokio::time::timeout(PING_WAIT, d.ping()).await, Ok(Ok(_)))
        {
            return true;
        }
        self.engines[i] =
            match tokio::time::timeout(PING_WAIT, self.settings.hosts[i].connect()).await {
                Ok(Ok(d)) => Some(d),
                _ => None,
            };
        self.engines[i].is_some()
    }

    /// The answering engine with the fewest containers, for a new one.
    async fn place(&mut self) -> Result<usize, String> {
        let load = |i: usize| {
            self.containers
                .iter()
                .filter(|(_, c)| c.data.engine == i)
                .count()
        };
        let mut order: Vec<usize> = (0..self.engines.len()).collect();
        order.sort_by_key(|&i| load(i));
        for i in order {
            if self.answers(i).await {
                return Ok(i);
            }
            tracing::warn!(
                "the Docker engine {} does not answer",
                self.settings.hosts[i].url
            );
        }
        Err(format!(
            "no Docker engine of the sandbox answers ({})",
            self.settings.engines_text()
        ))
    }
}

impl Actor for SandboxSupervisor {
    type Msg = SandboxMsg;
    type State = SupervisorState;
    /// A client per engine of the settings' hosts (`None`: not answering at start).
    type Arguments = (Vec<Option<Docker>>, SandboxSettings);

    async fn pre_start(
        &self,
        myself: ActorRef<SandboxMsg>,
        (engines, settings): (Vec<Option<Docker>>, SandboxSettings),
    ) -> Result<SupervisorState, ActorProcessingErr> {
        let every =
            (settings.idle_timeout / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
        myself.send_interval(every, || SandboxMsg::Sweep);
        Ok(SupervisorState {
            engines,
            settings,
            containers: FlowChildren::new("sandbox container actor"),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<SandboxMsg>,
        msg: SandboxMsg,
        st: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SandboxMsg::Run {
                flow_id,
                op,
                span,
                reply,
            } => {
                // With engines to move to, a flow whose engine stopped answering has lost
                // its container: say so, and the next call makes a new one on an engine
                // that answers. (With one engine nothing is asked here: a container that
                // died is made again, as ever.)
                if st.engines.len() > 1
                    && let Some(engine) = st.containers.get(&flow_id).map(|c| c.data.engine)
                    && !st.answers(engine).await
                {
                    let c = st.containers.remove(&flow_id).expect("just found");
                    c.actor.stop(Some("its engine stopped answering".into()));
                    let url = &st.settings.hosts[engine].url;
                    tracing::warn!(flow = %flow_id, "the sandbox's Docker engine {url} stopped answering; the flow's container is lost");
                    let _ = reply.send(Err(format!(
                        "the sandbox was lost: its Docker engine {url} stopped answering. The next call starts a new \
                         container on an engine that answers; the files and processes of the old one are gone, so make \
                         again what later steps need"
                    )));
                    return Ok(());
                }
                let full = st.containers.len() >= st.settings.max_sandboxes;
                let container = match st.containers.get_mut(&flow_id) {
                    Some(c) => {
                        c.data.used = Instant::now();
                        c.actor.clone()
                    }
                    None if full => {
                        let _ = reply.send(Err(format!(
                            "all {} sandboxes are in use by other flows ([sandbox] max_sandboxes); try again when one ends",
                            st.settings.max_sandboxes
                        )));
                        return Ok(());
                    }
                    None => {
                        let engine = match st.place().await {
                            Ok(e) => e,
                            Err(e) => {
                                let _ = reply.send(Err(e));
                                return Ok(());
                            }
                        };
                        let args = ContainerArgs {
                            docker: st.engines[engine]
                                .clone()
                                .expect("placed on an answering engine"),
                            settings: st.settings.clone(),
                            flow_id: flow_id.clone(),
                        };
                        let placed = || Placed {
                            used: Instant::now(),
                            busy: 0,
                            engine,
                        };
                        let cell = myself.get_cell();
                        let started = st.containers.start(&flow_id, Container, args, cell, placed);
                        match started.await {
                            Ok(c) => c,
                            Err(e) => {
                                let _ =
                                    reply.send(Err(format!("the sandbox could not start: {e}")));
                                return Ok(());
                            }
                        }
                    }
                };
                if let Err(e) = container.send_message(ContainerMsg::Run { op, span, reply }) {
                    tracing::warn!(flow = %flow_id, "the sandbox container actor is gone: {e}");
                    st.containers.remove(&flow_id);
                }
            }
            SandboxMsg::Release { flow_id } => {
                if let Some(c) = st.containers.remove(&flow_id) {
                    let _ = c
                        .actor
                        .stop_and_wait(Some("flow ended".into()), Some(Duration::from_secs(30)))
                        .await;
                }
            }
            SandboxMsg::Busy { flow_id, busy } => {
                if let Some(c) = st.containers.get_mut(&flow_id) {
                    c.data.used = Instant::now();
                    c.data.busy = match busy {
                        true => c.data.busy + 1,
                        false => c.data.busy.saturating_sub(1),
                    };
                }
            }
            SandboxMsg::Sweep => {
                let idle: Vec<String> = st
                    .containers
                    .iter()
                    .filter(|(_, c)| {
                        c.data.busy == 0 && c.data.used.elapsed() >= st.settings.idle_timeout
                    })
                    .map(|(f, _)| f.clone())
                    .collect();
                for flow_id in idle {
                    if let Some(c) = st.containers.remove(&flow_id) {
                        tracing::info!(flow = %flow_id, "removing an idle sandbox");
                        let _ = c
                            .actor
                            .stop_and_wait(Some("idle".into()), Some(Duration::from_secs(30)))
                            .await;
                    }
                }
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<SandboxMsg>,
        st: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        // No container outlives the runtime.
        st.containers.stop_all(Duration::from_secs(30)).await;
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<SandboxMsg>,
        evt: SupervisionEvent,
        st: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        // A container actor that stopped (its container died) leaves the table; the next
        // request for its flow makes a new one.
        st.containers.forget(&evt);
        Ok(())
    }
}
