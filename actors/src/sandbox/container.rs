//! The container actor: owns one flow's Docker container and does its work one operation at
//! a time (its mailbox is the lock). It creates and starts the container in `pre_start`,
//! removes it in `post_stop`, and re-creates it on the next operation when it has died.
//! It also keeps each agent's persistent shell in the container (`shell.rs`), and starts
//! programs attached to a caller who owns them from then on (a kept Python interpreter).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, DownloadFromContainerOptionsBuilder,
    RemoveContainerOptionsBuilder, UploadToContainerOptionsBuilder,
};
use futures_util::StreamExt;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tracing::Instrument;

use super::shell::SandboxShell;
use super::{SandboxSettings, tar};
use crate::process::Capture;
use crate::protocol::{Attached, ContainerMsg, ExecOutput, SandboxOp, SandboxReply, ShellEnd};

/// Output kept per stream; beyond it the middle is cut and the cut is said.
const OUTPUT_LIMIT: usize = 64 * 1024;

pub struct Container;

pub struct ContainerArgs {
    pub docker: Docker,
    pub settings: SandboxSettings,
    pub flow_id: String,
}

pub struct ContainerState {
    docker: Docker,
    settings: SandboxSettings,
    flow_id: String,
    /// How many containers this flow has had; names them apart.
    generation: u64,
    /// The live container; `None` after it died, until the next operation makes a new one.
    id: Option<String>,
    /// Each agent's bash session in the live container.
    shells: HashMap<String, SandboxShell>,
}

impl Actor for Container {
    type Msg = ContainerMsg;
    type State = ContainerState;
    type Arguments = ContainerArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<ContainerMsg>,
        args: ContainerArgs,
    ) -> Result<ContainerState, ActorProcessingErr> {
        let mut state = ContainerState {
            docker: args.docker,
            settings: args.settings,
            flow_id: args.flow_id,
            generation: 0,
            id: None,
            shells: HashMap::new(),
        };
        // Fail here, so the first request learns at once why there is no sandbox.
        state.ensure().await?;
        Ok(state)
    }

    async fn handle(
        &self,
        _myself: ActorRef<ContainerMsg>,
        msg: ContainerMsg,
        state: &mut ContainerState,
    ) -> Result<(), ActorProcessingErr> {
        let ContainerMsg::Run {
            op,
            span: parent,
            reply,
        } = msg;
        if let Err(e) = state.ensure().await {
            let _ = reply.send(Err(e));
            return Ok(());
        }
        let span = tracing::info_span!(
            parent: &parent,
            "sandbox",
            otel.name = format!("sandbox {}", op_name(&op)),
            manus.sandbox.container = %state.id()
        );
        let result = async {
            match op {
                SandboxOp::Exec { cmd, timeout } => {
                    state.exec(cmd, timeout).await.map(SandboxReply::Exec)
                }
                SandboxOp::Read { path } => state.read(&path).await.map(SandboxReply::Read),
                SandboxOp::Write { path, bytes } => state
                    .write(&path, &bytes)
                    .await
                    .map(|_| SandboxReply::Written),
                SandboxOp::Shell {
                    session,
                    command,
                    timeout,
                    restart,
                } => state.shell(session, &command, timeout, restart).await,
                SandboxOp::Attach { cmd } => state.attach(cmd).await.map(SandboxReply::Attached),
            }
        }
        .instrument(span)
        .await;
        let result = match result {
            Err(e) => match state.death().await {
                // The container is gone: say why; the next operation starts a new one.
                Some(death) => {
                    state.remove().await;
                    state.id = None;
                    state.shells.clear();
                    Err(format!(
                        "{death}; a fresh sandbox will be created on the next call"
                    ))
                }
                None => Err(e),
            },
            ok => ok,
        };
        let _ = reply.send(result);
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<ContainerMsg>,
        state: &mut ContainerState,
    ) -> Result<(), ActorProcessingErr> {
        state.remove().await;
        Ok(())
    }
}

fn op_name(op: &SandboxOp) -> &'static str {
    match op {
        SandboxOp::Exec { .. } => "exec",
        SandboxOp::Read { .. } => "read",
        SandboxOp::Write { .. } => "write",
        SandboxOp::Shell { .. } => "shell",
        SandboxOp::Attach { .. } => "attach",
    }
}

/// An exec's output stream, as the engine sends it.
pub(super) type ExecStream = std::pin::Pin<
    Box<
        dyn futures_util::Stream<
                Item = Result<bollard::container::LogOutput, bollard::errors::Error>,
            > + Send,
    >,
>;

/// Create and start an exec attached to our end: its id, its output and its stdin.
pub(super) async fn start_attached(
    docker: &Docker,
    container: &str,
    options: CreateExecOptions<String>,
) -> Result<
    (
        String,
        ExecStream,
        std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
    ),
    String,
> {
    let created = docker
        .create_exec(container, options)
        .await
        .map_err(|e| e.to_string())?;
    let started = docker
        .start_exec(
            &created.id,
            Some(StartExecOptions {
                detach: false,
                tty: false,
                output_capacity: None,
            }),
        )
        .await
        .map_err(|e| e.to_string())?;
    match started {
        StartExecResults::Attached { output, input } => Ok((created.id, output, input)),
        StartExecResults::Detached => Err("the engine started it detached".into()),
    }
}

/// Container names allow `[a-zA-Z0-9_.-]`.
fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

impl ContainerState {
    /// Make sure a container runs for the flow, creating one if there is none.
    async fn ensure(&mut self) -> Result<(), String> {
        if self.id.is_some() {
            return Ok(());
        }
        let s = &self.settings;
        self.generation += 1;
        let name = format!(
            "manus-rt-{}-{}-{}",
            std::process::id(),
            sanitize(&self.flow_id),
            self.generation
        );
        let host_config = HostConfig {
            memory: Some(s.memory_limit),
            memory_swap: Some(s.memory_limit),
            nano_cpus: Some((s.cpu_limit * 1e9) as i64),
            pids_limit: Some(s.pids_limit),
            network_mode: Some(if s.network_enabled {
                "bridge".into()
            } else {
                "none".into()
            }),
            cap_drop: Some(vec!["ALL".into()]),
            security_opt: Some(vec!["no-new-privileges".into()]),
            // A reaping init as PID 1 (docker-init / catatonit), so killed processes do not
            // linger as zombies that count against `pids_limit`.
            init: Some(true),
            binds: s
                .mount
                .as_ref()
                .map(|host| vec![format!("{}:{}:rw", host.display(), s.work_dir)]),
            ..Default::default()
        };
        let labels = HashMap::from([
            ("manus-rt.flow".to_string(), self.flow_id.clone()),
            ("manus-rt.pid".to_string(), std::process::id().to_string()),
        ]);
        let body = ContainerCreateBody {
            image: Some(s.image.clone()),
            // Something that waits forever and dies on the first signal.
            cmd: Some(vec!["sleep".into(), "2147483647".into()]),
            working_dir: Some(s.work_dir.clone()),
            labels: Some(labels),
            host_config: Some(host_config),
            network_disabled: Some(!s.network_enabled),
            ..Default::default()
        };
        let options = CreateContainerOptionsBuilder::default().name(&name).build();
        let created = self
            .docker
            .create_container(Some(options), body)
            .await
            .map_err(|e| {
                format!(
                    "cannot create a sandbox container from image `{}`: {e}",
                    s.image
                )
            })?;
        self.id = Some(created.id.clone());
        if let Err(e) = self.docker.start_container(&created.id, None).await {
            self.remove().await;
            self.id = None;
            return Err(format!("cannot start the sandbox container: {e}"));
        }
        // The working directory must exist before the first exec or upload uses it.
        let work_dir = self.settings.work_dir.clone();
        if let Err(e) = self
            .exec(
                vec!["mkdir".into(), "-p".into(), work_dir],
                Duration::from_secs(30),
            )
            .await
        {
            self.remove().await;
            self.id = None;
            return Err(e);
        }
        tracing::info!(container = %created.id, flow = %self.flow_id, "sandbox container started");
        Ok(())
    }

    fn id(&self) -> &str {
        self.id.as_deref().unwrap_or_default()
    }

    /// Run a program under `timeout -s KILL`, so a runaway is killed inside the container
    /// and the container stays usable; the output so far comes back either way. When the
    /// runtime could not even start the process (the process table still full after a fork
    /// bomb, say), it is tried again a few times before that is reported.
    async fn exec(&self, cmd: Vec<String>, limit: Duration) -> Result<ExecOutput, String> {
        let mut tries = 0;
        loop {
            let out = self.exec_once(cmd.clone(), limit).await?;
            let unstarted = out.exit_code == Some(126)
                && (out.stdout.contains("OCI runtime exec failed")
                    || out.stderr.contains("OCI runtime exec failed"));
            tries += 1;
            if !unstarted || tries == 4 {
                return Ok(out);
            }
            tracing::debug!(container = %self.id(), "the sandbox could not start a process; trying again");
            tokio::time::sleep(Duration::from_millis(250 * tries)).await;
        }
    }

    async fn exec_once(&self, cmd: Vec<String>, limit: Duration) -> Result<ExecOutput, String> {
        let started_at = Instant::now();
        let secs = limit.as_secs().max(1);
        let mut full = vec![
            "timeout".to_string(),
            "-s".into(),
            "KILL".into(),
            secs.to_string(),
        ];
        full.extend(cmd);
        let options = CreateExecOptions::<String> {
            cmd: Some(full),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            working_dir: Some(self.settings.work_dir.clone()),
            ..Default::default()
        };
        let (exec_id, mut output, _) = start_attached(&self.docker, self.id(), options)
            .await
            .map_err(|e| format!("cannot run a command in the sandbox: {e}"))?;
        let (mut stdout, mut stderr) = (Capture::new(OUTPUT_LIMIT), Capture::new(OUTPUT_LIMIT));
        // `timeout` inside kills the command; this outer bound only guards a stuck engine.
        let collect = async {
            while let Some(item) = output.next().await {
                match item {
                    Ok(bollard::container::LogOutput::StdOut { message }) => stdout.push(&message),
                    Ok(bollard::container::LogOutput::StdErr { message }) => stderr.push(&message),
                    Ok(_) => {}
                    Err(e) => return Err(format!("lost the command's output: {e}")),
                }
            }
            Ok(())
        };
        let outside = limit.saturating_add(Duration::from_secs(10));
        let timed_out_outside = tokio::time::timeout(outside, collect).await.is_err();
        let code = self
            .docker
            .inspect_exec(&exec_id)
            .await
            .ok()
            .and_then(|i| i.exit_code);
        // `timeout -s KILL` makes the command end with 137 when it was cut.
        let timed_out = timed_out_outside || (code == Some(137) && started_at.elapsed() >= limit);
        Ok(ExecOutput {
            stdout: stdout.text(),
            stderr: stderr.text(),
            exit_code: if timed_out { None } else { code },
            timed_out,
        })
    }

    /// Run `command` in the agent's shell, starting one if it has none. A shell whose
    /// command timed out is killed with its whole process group; one that ended is dropped.
    async fn shell(
        &mut self,
        session: String,
        command: &str,
        limit: Duration,
        restart: bool,
    ) -> Result<SandboxReply, String> {
        if restart && let Some(old) = self.shells.remove(&session) {
            self.kill_group(old.pid).await;
        }
        let shell = match self.shells.entry(session) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(
                SandboxShell::start(
                    &self.docker,
                    self.id.as_deref().unwrap_or_default(),
                    &self.settings.work_dir,
                )
                .await?,
            ),
        };
        if command.trim().is_empty() {
            return Ok(SandboxReply::Shell {
                output: String::new(),
                end: ShellEnd::Status(0),
            });
        }
        let (output, end) = shell.run(&self.docker, command, limit).await;
        let pid = shell.pid;
        match end {
            ShellEnd::Status(_) => {}
            _ => {
                if end == ShellEnd::TimedOut {
                    self.kill_group(pid).await;
                }
                self.shells.retain(|_, s| s.pid != pid);
            }
        }
        Ok(SandboxReply::Shell { output, end })
    }

    /// Start `cmd` attached to the caller, who reads its stdout (its stderr is dropped).
    async fn attach(&self, cmd: Vec<String>) -> Result<Attached, String> {
        let options = CreateExecOptions::<String> {
            cmd: Some(cmd),
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(false),
            working_dir: Some(self.settings.work_dir.clone()),
            ..Default::default()
        };
        let (_, output, input) = start_attached(&self.docker, self.id(), options).await?;
        let stdout = output.filter_map(|item| async move {
            match item {
                Ok(bollard::container::LogOutput::StdOut { message }) => Some(Ok(message)),
                Ok(_) => None,
                Err(e) => Some(Err(std::io::Error::other(e))),
            }
        });
        Ok(Attached {
            input,
            output: Box::pin(tokio_util::io::StreamReader::new(Box::pin(stdout))),
        })
    }

    /// Kill a shell and everything it started (its process group) inside the container.
    async fn kill_group(&self, pid: u32) {
        let cmd = super::signal_group_cmd(pid, "KILL");
        if let Err(e) = self.exec(cmd, Duration::from_secs(30)).await {
            tracing::warn!(container = %self.id(), "could not kill a sandbox shell: {e}");
        }
    }

    async fn read(&self, path: &str) -> Result<Vec<u8>, String> {
        let options = DownloadFromContainerOptionsBuilder::default()
            .path(path)
            .build();
        let mut stream = self
            .docker
            .download_from_container(self.id(), Some(options));
        let mut archive = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| match e {
                bollard::errors::Error::DockerResponseServerError {
                    status_code: 404, ..
                } => {
                    format!("no such file in the sandbox: {path}")
                }
                other => format!("cannot read {path} from the sandbox: {other}"),
            })?;
            archive.extend_from_slice(&chunk);
        }
        tar::first_file(&archive).map_err(|e| format!("cannot read {path}: {e}"))
    }

    async fn write(&self, path: &str, bytes: &[u8]) -> Result<(), String> {
        let (dir, name) = path
            .rsplit_once('/')
            .ok_or_else(|| format!("not an absolute path: {path}"))?;
        let dir = if dir.is_empty() { "/" } else { dir };
        let made = self
            .exec(
                vec!["mkdir".into(), "-p".into(), dir.into()],
                Duration::from_secs(30),
            )
            .await?;
        if made.exit_code != Some(0) {
            return Err(format!(
                "cannot create {dir} in the sandbox: {}",
                made.stderr.trim()
            ));
        }
        let archive = tar::single_file(name, bytes, 0o644)?;
        let options = UploadToContainerOptionsBuilder::default().path(dir).build();
        self.docker
            .upload_to_container(
                self.id(),
                Some(options),
                bollard::body_full(bytes::Bytes::from(archive)),
            )
            .await
            .map_err(|e| format!("cannot write {path} in the sandbox: {e}"))
    }

    /// If the container is no longer running, why.
    async fn death(&self) -> Option<String> {
        let inspected = match self.docker.inspect_container(self.id(), None).await {
            Ok(i) => i,
            Err(_) => return Some("the sandbox container is gone (removed from outside)".into()),
        };
        let state = inspected.state?;
        if state.running == Some(true) {
            return None;
        }
        Some(if state.oom_killed == Some(true) {
            format!(
                "the sandbox container was killed for using more than its memory limit ({} bytes)",
                self.settings.memory_limit
            )
        } else {
            format!(
                "the sandbox container stopped (exit code {})",
                state.exit_code.unwrap_or(-1)
            )
        })
    }

    async fn remove(&self) {
        let Some(id) = &self.id else { return };
        let options = RemoveContainerOptionsBuilder::default()
            .force(true)
            .v(true)
            .build();
        if let Err(e) = self.docker.remove_container(id, Some(options)).await {
            tracing::debug!(container = %id, "removing the sandbox container: {e}");
        }
    }
}
