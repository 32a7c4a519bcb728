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

/// The runner's source, run with `python -u -c`.
const DRIVER: &str = include_str!("driver.py");
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
    Ready(serde::de::IgnoredAny),
    Out(String),
    Err(String),
    Done(Done),
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

/// A running cell runner and the pipes to it.
pub(super) struct Interpreter {
    process: Contained,
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
        let mut interpreter = Interpreter {
            process,
            input: Box::pin(stdin),
            output: Box::pin(tokio::io::BufReader::new(stdout)),
            line: Vec::new(),
            cells: 0,
            busy: false,
        };
        match tokio::time::timeout(START_LIMIT, interpreter.frame()).await {
            Ok(Ok(Frame::Ready(_))) => Ok(interpreter),
            Ok(Ok(_)) => Err("the interpreter spoke before it was ready".into()),
            Ok(Err(_)) => {
                // Before the runner takes over its stderr, Python reports there why it failed.
                let mut said = Capture::new(2000);
                let _ = tokio::time::timeout(Duration::from_secs(2), pump(stderr, &mut said)).await;
                let how = interpreter.ended().await;
                Err(format!(
                    "the interpreter `{python}` {how} before it was ready: {}",
                    said.text().trim()
                ))
            }
            Err(_) => Err(format!(
                "the interpreter `{python}` was not ready within {} s",
                START_LIMIT.as_secs()
            )),
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
        if let Err(how) = self.send(&frame).await {
            run.end = CellEnd::Crashed(format!("{how} before the cell was sent"));
            return run;
        }
        let ended = match tokio::time::timeout(limit, self.collect(id, &mut run)).await {
            Ok(ended) => ended.map(CellEnd::Finished),
            Err(_) => {
                self.process.signal(libc::SIGINT);
                match tokio::time::timeout(GRACE, self.collect(id, &mut run)).await {
                    // A cell that caught the interrupt, or ended just then, simply finished.
                    Ok(ended) => ended.map(|done| match done.interrupted {
                        true => CellEnd::Interrupted(done),
                        false => CellEnd::Finished(done),
                    }),
                    Err(_) => {
                        self.process.kill();
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
            Err(Lost::Closed) => CellEnd::Crashed(self.ended().await),
            Err(Lost::Garbled(what)) => {
                self.process.kill();
                CellEnd::Crashed(format!(
                    "broke its protocol (it sent {what:?}) and was killed"
                ))
            }
        };
        run
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

    async fn send(&mut self, frame: &serde_json::Value) -> Result<(), String> {
        let mut line = frame.to_string();
        line.push('\n');
        let sent = async {
            self.input.write_all(line.as_bytes()).await?;
            self.input.flush().await
        };
        match sent.await {
            Ok(()) => Ok(()),
            Err(_) => Err(self.ended().await),
        }
    }

    /// How the interpreter ended, once its output has closed.
    async fn ended(&mut self) -> String {
        match tokio::time::timeout(Duration::from_secs(5), self.process.wait()).await {
            Ok(Ok(status)) => match (
                status.code(),
                std::os::unix::process::ExitStatusExt::signal(&status),
            ) {
                (Some(code), _) => format!("exited with status {code}"),
                (None, Some(9)) => {
                    "was killed (signal 9; most often the system ran out of memory)".into()
                }
                (None, Some(signal)) => format!("was killed by signal {signal}"),
                (None, None) => "ended".into(),
            },
            Ok(Err(e)) => format!("was lost ({e})"),
            Err(_) => {
                self.process.kill();
                "stopped answering and was killed".into()
            }
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
