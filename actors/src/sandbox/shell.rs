//! One agent's persistent bash inside a flow's container: an exec attached by stdin and
//! output, speaking the end-of-command marker protocol (`process::ShellIo`).
//! The bash leads its own process group, so a command cut at its time limit is killed
//! together with everything it started. The Container actor keeps one per agent.

use std::time::Duration;

use bollard::Docker;
use bollard::exec::CreateExecOptions;
use futures_util::StreamExt;
use tokio_util::io::StreamReader;

use super::container::start_attached;
use crate::process::{Capture, MAX_OUTPUT, ShellIo, ShellIoError};
use crate::protocol::ShellEnd;

pub(super) struct SandboxShell {
    /// Only ever used through `get_mut`; the mutex makes the session `Sync`, as actor state
    /// must be, without any locking.
    io: tokio::sync::Mutex<ShellIo>,
    exec_id: String,
    /// The bash's pid inside the container, which is also its process group.
    pub(super) pid: u32,
}

impl SandboxShell {
    /// Start a bash in `work_dir` of the container and learn its pid.
    pub(super) async fn start(
        docker: &Docker,
        container: &str,
        work_dir: &str,
    ) -> Result<SandboxShell, String> {
        // `setsid -w` makes bash the leader of a new session and process group.
        let cmd = ["setsid", "-w", "bash", "--noprofile", "--norc"].map(String::from);
        let options = CreateExecOptions::<String> {
            cmd: Some(cmd.to_vec()),
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            working_dir: Some(work_dir.into()),
            ..Default::default()
        };
        let (exec_id, output, input) = start_attached(docker, container, options)
            .await
            .map_err(|e| format!("cannot start a shell in the sandbox: {e}"))?;
        let bytes = output.map(|item| item.map(|o| o.into_bytes()).map_err(std::io::Error::other));
        let mut shell = SandboxShell {
            io: tokio::sync::Mutex::new(ShellIo::new(input, Box::pin(StreamReader::new(bytes)))),
            exec_id,
            pid: 0,
        };
        let mut said = Capture::new(64);
        let asked = tokio::time::timeout(
            Duration::from_secs(30),
            shell.io.get_mut().exec("echo $$", &mut said),
        );
        let pid = match asked.await {
            Ok(Ok(0)) => said.text().trim().parse().ok(),
            _ => None,
        };
        shell.pid = pid.ok_or_else(|| {
            format!(
                "the shell in the sandbox did not start properly (said {:?})",
                said.text()
            )
        })?;
        Ok(shell)
    }

    /// Run one command: its output and how it ended. After anything but `Status`, the
    /// caller drops this shell (and kills its group, if it timed out).
    pub(super) async fn run(
        &mut self,
        docker: &Docker,
        command: &str,
        limit: Duration,
    ) -> (String, ShellEnd) {
        let mut output = Capture::new(MAX_OUTPUT);
        let end =
            match tokio::time::timeout(limit, self.io.get_mut().exec(command, &mut output)).await {
                Ok(Ok(status)) => ShellEnd::Status(status),
                Ok(Err(ShellIoError::Garbled(status))) => {
                    ShellEnd::ShellEnded(format!("sent a garbled status `{status}`"))
                }
                Ok(Err(ShellIoError::Closed)) => ShellEnd::ShellEnded(self.ended(docker).await),
                Err(_) => ShellEnd::TimedOut,
            };
        (output.text(), end)
    }

    /// How the shell ended, from the engine's record of its exec.
    async fn ended(&self, docker: &Docker) -> String {
        for _ in 0..10 {
            match docker.inspect_exec(&self.exec_id).await {
                Ok(i) if i.running == Some(true) => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                Ok(i) => {
                    return match i.exit_code {
                        Some(code) if code > 128 => format!("was killed (signal {})", code - 128),
                        Some(code) => format!("exited with status {code}"),
                        None => "ended".into(),
                    };
                }
                Err(_) => break,
            }
        }
        "stopped responding".into()
    }
}
