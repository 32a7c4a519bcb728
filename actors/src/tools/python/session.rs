//! One agent's long-lived Python interpreter: the cell runner (`driver.py`) started on the
//! host or in the flow's container, and the JSON-lines protocol spoken with it. This module
//! knows how a cell ends (finished, interrupted, killed, crashed); what the model is told
//! about each is the tool's business (`mod.rs`).

use std::pin::Pin;
use std::process::Stdio;
use std::time::Duration;

use serde::Deserialize;
use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt,
};
use tokio::process::Command;

use crate::process::{Capture, Contained};
use crate::protocol::Attached;
use crate::sandbox::SandboxHandle;

/// The runner's source, run with `python -u -c`.
const DRIVER: &str = include_str!("driver.py");
/// How the runner starts in a container: leading a process group of its own (which the
/// interrupt is sent to), under a shell that ignores the interrupt and reports the runner's
/// exit as a last frame.
const IN_CONTAINER: &str = "trap '' INT; python3 -u -c \"$1\"; echo \"{\\\"exit\\\": $?}\"";
/// How long the interpreter may take to start and say it is ready.
pub(super) const START_LIMIT: Duration = Duration::from_secs(20);
/// How long an interrupted cell may take to stop before the interpreter is killed.
pub(super) const GRACE: Duration = Duration::from_secs(3);
/// The longest frame the runner sends: its output comes in 64 KiB pieces, escaped.
const MAX_FRAME: u64 = 4 * 1024 * 1024;

/// Most bytes of stdout shown to the model.
pub(super) const MAX_STDOUT: usize = 12_000;
/// Most bytes of stderr shown to the model; tracebacks are short, and their end matters.
pub(super) const MAX_STDERR: usize = 6_000;

/// A frame from the runner.
#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum Frame {
    Ready(Ready),
    Out(String),
    Err(String),
    Done(Done),
    /// The runner's exit status, from the shell that starts it in a container.
    Exit(i32),
}

#[derive(Deserialize)]
struct Ready {
    /// The runner's process group, where it runs.
    pgid: u32,
}

/// How the runner says a cell ended.
#[derive(Deserialize)]
pub(super) struct Done {
    id: u64,
    /// The repr of the cell's last bare expression, when it had one that was not `None`.
    pub(super) value: Option<String>,
    /// The traceback of the exception that ended the cell.
    pub(super) error: Option<String>,
    /// The exception was the interruption the runtime sent.
    pub(super) interrupted: bool,
}

/// How a cell ended, as far as the runtime knows.
pub(super) enum CellEnd {
    /// The runner answered: the cell ran to its end or raised.
    Finished(Done),
    /// The cell ran past its limit and stopped when interrupted; the interpreter lives on.
    Interrupted(Done),
    /// The cell ran past its limit and did not stop when interrupted: the interpreter was
    /// killed.
    Killed,
    /// The interpreter died during the cell; the text says how.
    Crashed(String),
}

/// A cell's output and end.
pub(super) struct CellRun {
    pub(super) out: Capture,
    pub(super) err: Capture,
    pub(super) end: CellEnd,
}

impl CellRun {
    /// Whether the interpreter lives on after this cell.
    pub(super) fn interpreter_lives(&self) -> bool {
        matches!(self.end, CellEnd::Finished(_) | CellEnd::Interrupted(_))
    }
}

/// Where a runner runs, and so how it is signalled and how its end is learnt.
enum Place {
    /// Contained on the host: signals go to its group; its status comes from `wait`.
    Host(Contained),
    /// In the flow's container: signals go to its group there; its status is its last frame.
    Container {
        sandbox: SandboxHandle,
        flow_id: String,
        group: u32,
    },
}

impl Place {
    /// Send `signal` (`name` as `kill` writes it) to the runner and what it started.
    async fn signal(&self, signal: libc::c_int, name: &str) {
        match self {
            Place::Host(process) => process.signal(signal),
            Place::Container {
                sandbox,
                flow_id,
                group,
            } => {
                if let Err(e) = sandbox.signal_group(flow_id, *group, name).await {
                    tracing::warn!("could not signal the sandbox's interpreter: {e}");
                }
            }
        }
    }

    /// End the runner and everything it started, now.
    pub(super) async fn kill(&self) {
        match self {
            Place::Host(process) => process.kill(),
            Place::Container { .. } => self.signal(libc::SIGKILL, "KILL").await,
        }
    }
}

/// A running cell runner and the pipes to it.
pub(super) struct Interpreter {
    place: Place,
    input: Pin<Box<dyn AsyncWrite + Send>>,
    output: Pin<Box<dyn AsyncBufRead + Send>>,
    /// A partly read frame, kept when reading is cut short by a limit.
    line: Vec<u8>,
    cells: u64,
    /// A cell was sent and its end not yet read.
    pub(super) busy: bool,
}

/// The runner stopped speaking the protocol.
enum Lost {
    /// Its output ended.
    Closed,
    /// It exited with this status (a shell's: 128 + N for signal N).
    Exited(i32),
    /// It sent something that is not a frame.
    Garbled(String),
}

impl Interpreter {
    /// Start `python` in `workspace` on the host, contained, and wait until it is ready.
    pub(super) async fn start_on_host(
        python: &str,
        workspace: &std::path::Path,
    ) -> Result<Interpreter, String> {
        let mut cmd = Command::new(python);
        cmd.args(["-u", "-c", DRIVER])
            .current_dir(workspace)
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut process = Contained::spawn(&mut cmd)
            .map_err(|e| format!("could not start the interpreter `{python}`: {e}"))?;
        let child = process.child();
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err("the interpreter started without its pipes".into());
        };
        let interpreter = Interpreter {
            place: Place::Host(process),
            input: Box::pin(stdin),
            output: Box::pin(tokio::io::BufReader::new(stdout)),
            line: Vec::new(),
            cells: 0,
            busy: false,
        };
        interpreter.ready(python, Some(stderr)).await
    }

    /// Start the interpreter in the flow's container and wait until it is ready.
    pub(super) async fn start_in_container(
        sandbox: &SandboxHandle,
        flow_id: &str,
    ) -> Result<Interpreter, String> {
        let cmd = ["setsid", "-w", "sh", "-c", IN_CONTAINER, "sh", DRIVER]
            .map(String::from)
            .to_vec();
        let Attached { input, output } = sandbox
            .attach(flow_id, cmd)
            .await
            .map_err(|e| format!("the sandbox could not start the interpreter: {e}"))?;
        let interpreter = Interpreter {
            place: Place::Container {
                sandbox: sandbox.clone(),
                flow_id: flow_id.into(),
                group: 0,
            },
            input,
            output,
            line: Vec::new(),
            cells: 0,
            busy: false,
        };
        interpreter.ready("python3", None).await
    }

    /// Wait for the runner's first frame. `stderr` is where Python says why it could not
    /// start, before the runner takes it over.
    async fn ready(
        mut self,
        python: &str,
        stderr: Option<tokio::process::ChildStderr>,
    ) -> Result<Interpreter, String> {
        match tokio::time::timeout(START_LIMIT, self.frame()).await {
            Ok(Ok(Frame::Ready(Ready { pgid }))) => {
                if let Place::Container { group, .. } = &mut self.place {
                    *group = pgid;
                }
                Ok(self)
            }
            Ok(Ok(Frame::Exit(status))) => {
                let how = self.ended(Lost::Exited(status)).await;
                Err(format!(
                    "the interpreter `{python}` {how} before it was ready"
                ))
            }
            Ok(Ok(_)) => Err("the interpreter spoke before it was ready".into()),
            Ok(Err(Lost::Garbled(said))) => {
                self.kill().await;
                Err(format!(
                    "the interpreter `{python}` could not start: {}",
                    said.trim()
                ))
            }
            Ok(Err(lost)) => {
                let mut said = Capture::new(2000);
                if let Some(stderr) = stderr {
                    let _ =
                        tokio::time::timeout(Duration::from_secs(2), pump(stderr, &mut said)).await;
                }
                let how = self.ended(lost).await;
                Err(format!(
                    "the interpreter `{python}` {how} before it was ready{}",
                    match said.text().trim() {
                        "" => String::new(),
                        said => format!(": {said}"),
                    }
                ))
            }
            Err(_) => {
                self.kill().await;
                Err(format!(
                    "the interpreter `{python}` was not ready within {} s",
                    START_LIMIT.as_secs()
                ))
            }
        }
    }

    /// Run one cell: interrupted when it runs past `limit`, and the interpreter killed if it
    /// then does not stop within `GRACE`.
    pub(super) async fn run(&mut self, code: &str, limit: Duration) -> CellRun {
        self.cells += 1;
        let id = self.cells;
        let mut run = CellRun {
            out: Capture::new(MAX_STDOUT),
            err: Capture::new(MAX_STDERR),
            end: CellEnd::Killed,
        };
        let frame = serde_json::json!({ "cell": { "id": id, "code": code } });
        self.busy = true;
        let _in_use = match &self.place {
            Place::Container {
                sandbox, flow_id, ..
            } => Some(sandbox.busy(flow_id)),
            Place::Host(_) => None,
        };
        if self.send(&frame).await.is_err() {
            let how = self.ended(Lost::Closed).await;
            run.end = CellEnd::Crashed(format!("{how} before the cell was sent"));
            return run;
        }
        let ended = match tokio::time::timeout(limit, self.collect(id, &mut run)).await {
            Ok(ended) => ended.map(CellEnd::Finished),
            Err(_) => {
                self.signal(libc::SIGINT, "INT").await;
                match tokio::time::timeout(GRACE, self.collect(id, &mut run)).await {
                    // A cell that caught the interrupt, or ended just then, simply finished.
                    Ok(ended) => ended.map(|done| match done.interrupted {
                        true => CellEnd::Interrupted(done),
                        false => CellEnd::Finished(done),
                    }),
                    Err(_) => {
                        self.kill().await;
                        Ok(CellEnd::Killed)
                    }
                }
            }
        };
        run.end = match ended {
            Ok(end) => {
                self.busy = false;
                end
            }
            Err(Lost::Garbled(what)) => {
                self.kill().await;
                CellEnd::Crashed(format!(
                    "broke its protocol (it sent {what:?}) and was killed"
                ))
            }
            Err(lost) => CellEnd::Crashed(self.ended(lost).await),
        };
        run
    }

    /// Whether the interpreter ended since its last cell (killed from outside, or its
    /// container removed while idle): what it sends between cells can only be its end.
    pub(super) async fn ended_between_cells(&mut self) -> Option<String> {
        match tokio::time::timeout(Duration::ZERO, self.frame()).await {
            Err(_) => None,
            Ok(Ok(Frame::Exit(status))) => Some(self.ended(Lost::Exited(status)).await),
            Ok(Ok(_)) => {
                self.kill().await;
                Some("spoke out of turn and was stopped".into())
            }
            Ok(Err(lost)) => Some(self.ended(lost).await),
        }
    }

    /// Read frames into `run` until cell `id` is done.
    async fn collect(&mut self, id: u64, run: &mut CellRun) -> Result<Done, Lost> {
        loop {
            match self.frame().await? {
                Frame::Out(text) => run.out.push(text.as_bytes()),
                Frame::Err(text) => run.err.push(text.as_bytes()),
                Frame::Done(done) if done.id == id => return Ok(done),
                Frame::Done(done) => {
                    return Err(Lost::Garbled(format!("the end of cell {}", done.id)));
                }
                Frame::Ready(_) => return Err(Lost::Garbled("a second ready".into())),
                Frame::Exit(status) => return Err(Lost::Exited(status)),
            }
        }
    }

    /// The next frame. Cancel-safe: a partly read line stays in `self.line`.
    async fn frame(&mut self) -> Result<Frame, Lost> {
        let read = (&mut self.output)
            .take(MAX_FRAME)
            .read_until(b'\n', &mut self.line)
            .await;
        match read {
            Ok(0) | Err(_) => return Err(Lost::Closed),
            Ok(_) if !self.line.ends_with(b"\n") => {
                let what = String::from_utf8_lossy(&self.line[..self.line.len().min(200)]);
                return Err(Lost::Garbled(what.into_owned()));
            }
            Ok(_) => {}
        }
        let line = std::mem::take(&mut self.line);
        serde_json::from_slice(&line).map_err(|_| {
            Lost::Garbled(String::from_utf8_lossy(&line[..line.len().min(200)]).into_owned())
        })
    }

    async fn send(&mut self, frame: &serde_json::Value) -> std::io::Result<()> {
        let mut line = frame.to_string();
        line.push('\n');
        self.input.write_all(line.as_bytes()).await?;
        self.input.flush().await
    }

    async fn signal(&mut self, signal: libc::c_int, name: &str) {
        self.place.signal(signal, name).await
    }

    /// End the runner and everything it started, now.
    pub(super) async fn kill(&mut self) {
        self.place.kill().await
    }

    /// How the runner ended, once it stopped speaking.
    async fn ended(&mut self, lost: Lost) -> String {
        let status = match (&mut self.place, lost) {
            (_, Lost::Exited(status)) => status,
            (Place::Host(process), _) => {
                match tokio::time::timeout(Duration::from_secs(5), process.wait()).await {
                    Ok(Ok(status)) => {
                        use std::os::unix::process::ExitStatusExt;
                        match (status.code(), status.signal()) {
                            (Some(code), _) => code,
                            (None, Some(signal)) => 128 + signal,
                            (None, None) => return "ended".into(),
                        }
                    }
                    Ok(Err(e)) => return format!("was lost ({e})"),
                    Err(_) => {
                        process.kill();
                        return "stopped answering and was killed".into();
                    }
                }
            }
            (Place::Container { .. }, _) => {
                return "ended without a word: most likely its container stopped, and then a \
                        fresh sandbox is made on the next call, without the old one's files"
                    .into();
            }
        };
        let memory = match &self.place {
            Place::Host(_) => "most often the system ran out of memory".to_string(),
            Place::Container { sandbox, .. } => format!(
                "most often it ran out of memory: the sandbox allows {}",
                sandbox.memory_limit_text()
            ),
        };
        match status {
            137 => format!("was killed (signal 9; {memory})"),
            129.. => format!("was killed by signal {}", status - 128),
            code => format!("exited with status {code}"),
        }
    }
}

/// Copy a pipe into a capture until it closes (or breaks).
pub(super) async fn pump(mut pipe: impl AsyncRead + Unpin, into: &mut Capture) {
    let mut chunk = [0u8; 8192];
    while let Ok(n @ 1..) = pipe.read(&mut chunk).await {
        into.push(&chunk[..n]);
    }
}
