//! One agent's long-lived Python interpreter: the cell runner (`driver.py`) started on the
//! host or in the flow's container, and the JSON-lines protocol spoken with it. This module
//! knows how a cell ends (finished, interrupted, killed, crashed); what the model is told
//! about each is the tool's business (`mod.rs`).

use std::pin::Pin;
use std::process::Stdio;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use serde::Deserialize;
use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt,
};
use tokio::process::Command;

use super::code::CellFunction;
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
    Call(CellCall),
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
pub(crate) struct Done {
    id: u64,
    /// The repr of the cell's last bare expression, when it had one that was not `None`.
    pub(super) value: Option<String>,
    /// The traceback of the exception that ended the cell.
    pub(super) error: Option<String>,
    /// The exception was the interruption the runtime sent.
    pub(super) interrupted: bool,
}

/// A tool call a cell makes: the runner waits for its answer.
#[derive(Debug, Deserialize)]
pub(crate) struct CellCall {
    pub(crate) id: u64,
    /// The tool's name.
    pub(crate) name: String,
    /// Its arguments, as the cell gave them.
    pub(crate) args: serde_json::Map<String, serde_json::Value>,
}

/// What a cell did next.
enum Collected {
    Call(CellCall),
    Done(Done),
}

/// A cell under way (`Interpreter::begin`).
pub(crate) struct Cell {
    id: u64,
    run: CellRun,
    /// What is left of its limit (or, once interrupted, of the grace).
    left: Duration,
    interrupted: bool,
    /// In a container, it is busy while this lives.
    _in_use: Option<crate::sandbox::BusyGuard>,
}

impl Cell {
    /// Its output and how it ended, once `next` said it ended.
    pub(crate) fn into_run(self) -> CellRun {
        self.run
    }
}

/// How a cell ended, as far as the runtime knows.
pub(crate) enum CellEnd {
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
pub(crate) struct CellRun {
    pub(super) out: Capture,
    pub(super) err: Capture,
    pub(super) end: CellEnd,
}

impl CellRun {
    /// Whether the interpreter lives on after this cell.
    pub(crate) fn interpreter_lives(&self) -> bool {
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
    pub(crate) async fn kill(&self) {
        match self {
            Place::Host(process) => process.kill(),
            Place::Container { .. } => self.signal(libc::SIGKILL, "KILL").await,
        }
    }
}

/// A running cell runner and the pipes to it.
pub(crate) struct Interpreter {
    place: Place,
    /// Its pipes, only ever used through `get_mut`: the mutexes make the interpreter `Sync`,
    /// as an actor's state must be, without any locking.
    input: Mutex<Pin<Box<dyn AsyncWrite + Send>>>,
    output: Mutex<Pin<Box<dyn AsyncBufRead + Send>>>,
    /// A partly read frame, kept when reading is cut short by a limit.
    line: Vec<u8>,
    /// What processes a cell left running printed since that cell ended: it goes with the
    /// next cell's output.
    since: (Capture, Capture),
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
    pub(crate) async fn start_on_host(
        python: &str,
        workspace: &std::path::Path,
        confine: Option<&crate::confine::ConfineSettings>,
    ) -> Result<Interpreter, String> {
        let mut cmd = Command::new(python);
        cmd.args(["-u", "-c", DRIVER])
            .current_dir(workspace)
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut process = crate::confine::spawn(&mut cmd, confine, workspace, python)
            .map_err(|e| format!("could not start the interpreter `{python}`: {e}"))?;
        let child = process.child();
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err("the interpreter started without its pipes".into());
        };
        let interpreter = Interpreter {
            place: Place::Host(process),
            input: Mutex::new(Box::pin(stdin)),
            output: Mutex::new(Box::pin(tokio::io::BufReader::new(stdout))),
            line: Vec::new(),
            since: (Capture::new(MAX_STDOUT), Capture::new(MAX_STDERR)),
            cells: 0,
            busy: false,
        };
        interpreter.ready(python, Some(stderr)).await
    }

    /// Start the interpreter in the flow's container and wait until it is ready.
    pub(crate) async fn start_in_container(
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
            input: Mutex::new(input),
            output: Mutex::new(output),
            line: Vec::new(),
            since: (Capture::new(MAX_STDOUT), Capture::new(MAX_STDERR)),
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

    /// Run one cell that calls no tools: interrupted when it runs past `limit`, and the
    /// interpreter killed if it then does not stop within `GRACE`.
    pub(crate) async fn run(&mut self, code: &str, limit: Duration) -> CellRun {
        let mut cell = match self.begin(code, limit).await {
            Ok(cell) => cell,
            Err(run) => return run,
        };
        while let Some(call) = self.next(&mut cell).await {
            let refused = format!("`{}` cannot be called from here", call.name);
            self.answer(call.id, false, &refused).await;
        }
        cell.into_run()
    }

    /// Send a cell; its limit counts only while it runs, not while its tool calls do.
    pub(crate) async fn begin(&mut self, code: &str, limit: Duration) -> Result<Cell, CellRun> {
        self.cells += 1;
        let fresh = (Capture::new(MAX_STDOUT), Capture::new(MAX_STDERR));
        let (out, err) = std::mem::replace(&mut self.since, fresh);
        let mut cell = Cell {
            id: self.cells,
            run: CellRun {
                out,
                err,
                end: CellEnd::Killed,
            },
            left: limit,
            interrupted: false,
            _in_use: match &self.place {
                Place::Container {
                    sandbox, flow_id, ..
                } => Some(sandbox.busy(flow_id)),
                Place::Host(_) => None,
            },
        };
        let frame = serde_json::json!({ "cell": { "id": cell.id, "code": code } });
        self.busy = true;
        if self.send(&frame).await.is_err() {
            let how = self.ended(Lost::Closed).await;
            cell.run.end = CellEnd::Crashed(format!("{how} before the cell was sent"));
            return Err(cell.run);
        }
        Ok(cell)
    }

    /// The cell's next tool call, or `None` once it has ended (`Cell::into_run`). A cell
    /// past its limit is interrupted; one that then calls a tool is refused.
    pub(crate) async fn next(&mut self, cell: &mut Cell) -> Option<CellCall> {
        loop {
            let started = tokio::time::Instant::now();
            let heard = tokio::time::timeout(cell.left, self.collect(cell.id, &mut cell.run)).await;
            cell.left = cell.left.saturating_sub(started.elapsed());
            let end = match heard {
                Ok(Ok(Collected::Call(call))) if cell.interrupted => {
                    self.answer(call.id, false, "the cell is past its time limit")
                        .await;
                    continue;
                }
                Ok(Ok(Collected::Call(call))) => return Some(call),
                // A cell that caught the interrupt, or ended just then, simply finished.
                Ok(Ok(Collected::Done(done))) if cell.interrupted && done.interrupted => {
                    CellEnd::Interrupted(done)
                }
                Ok(Ok(Collected::Done(done))) => CellEnd::Finished(done),
                Ok(Err(Lost::Garbled(what))) => {
                    self.kill().await;
                    CellEnd::Crashed(format!(
                        "broke its protocol (it sent {what:?}) and was killed"
                    ))
                }
                Ok(Err(lost)) => CellEnd::Crashed(self.ended(lost).await),
                Err(_) if !cell.interrupted => {
                    self.signal(libc::SIGINT, "INT").await;
                    cell.interrupted = true;
                    cell.left = GRACE;
                    continue;
                }
                Err(_) => {
                    self.kill().await;
                    CellEnd::Killed
                }
            };
            self.busy = matches!(end, CellEnd::Killed | CellEnd::Crashed(_));
            cell.run.end = end;
            return None;
        }
    }

    /// Answer tool call `id` of the running cell: its result, or (`ok` false) the error
    /// the cell sees raised. A runner that is gone is noticed by `next`.
    pub(crate) async fn answer(&mut self, id: u64, ok: bool, text: &str) {
        let frame = serde_json::json!({ "answer": { "id": id, "ok": ok, "text": text } });
        let _ = self.send(&frame).await;
    }

    /// Make each of `functions` callable from the cells.
    pub(crate) async fn define(&mut self, functions: &[CellFunction]) -> Result<(), String> {
        let frame = serde_json::json!({ "tools": functions });
        match self.send(&frame).await {
            Ok(()) => Ok(()),
            Err(_) => Err(self.ended(Lost::Closed).await),
        }
    }

    /// Whether the interpreter ended since its last cell (killed from outside, or its
    /// container removed while idle). Between cells it sends only its end, or what processes
    /// a cell left running print, which is kept for the next cell's output.
    pub(crate) async fn ended_between_cells(&mut self) -> Option<String> {
        // Read what is there, without a timer (a zero timeout would wait for the timer's
        // next tick, up to a millisecond a call); a partly read frame stays in `self.line`.
        loop {
            return match futures_util::FutureExt::now_or_never(self.frame()) {
                None => None,
                // Printed by processes a cell left running: for the next cell's output.
                Some(Ok(Frame::Out(text))) => {
                    self.since.0.push(text.as_bytes());
                    continue;
                }
                Some(Ok(Frame::Err(text))) => {
                    self.since.1.push(text.as_bytes());
                    continue;
                }
                Some(Ok(Frame::Exit(status))) => Some(self.ended(Lost::Exited(status)).await),
                Some(Ok(_)) => {
                    self.kill().await;
                    Some("spoke out of turn and was stopped".into())
                }
                Some(Err(lost)) => Some(self.ended(lost).await),
            };
        }
    }

    /// Read frames into `run` until cell `id` is done or calls a tool.
    async fn collect(&mut self, id: u64, run: &mut CellRun) -> Result<Collected, Lost> {
        loop {
            match self.frame().await? {
                Frame::Out(text) => run.out.push(text.as_bytes()),
                Frame::Err(text) => run.err.push(text.as_bytes()),
                Frame::Call(call) => return Ok(Collected::Call(call)),
                Frame::Done(done) if done.id == id => return Ok(Collected::Done(done)),
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
        let output = self
            .output
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        let read = output
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
        let input = self.input.get_mut().unwrap_or_else(PoisonError::into_inner);
        input.write_all(line.as_bytes()).await?;
        input.flush().await
    }

    async fn signal(&mut self, signal: libc::c_int, name: &str) {
        self.place.signal(signal, name).await
    }

    /// End the runner and everything it started, now.
    pub(crate) async fn kill(&mut self) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ToolSpec;
    use crate::tools::tests::TempDir;

    fn echo_tool() -> ToolSpec {
        ToolSpec {
            name: "echo_tool".into(),
            description: "Say the words back.".into(),
            parameters: serde_json::json!({
                "type": "object",
                "properties": {
                    "words": {"type": "string", "description": "What to say."},
                    "times": {"type": "integer", "description": "How often."}
                },
                "required": ["words"]
            }),
            variants: None,
        }
    }

    #[tokio::test]
    async fn a_cell_calls_tools_as_functions_and_their_time_is_not_its_own() {
        let ws = TempDir::new("cell-calls");
        let mut py = Interpreter::start_on_host("python3", &ws.0, None)
            .await
            .unwrap();
        py.define(&[CellFunction::of(&echo_tool())]).await.unwrap();
        let code = "import inspect\n\
                    print(inspect.signature(echo_tool))\n\
                    heard = [echo_tool(w, times=2) for w in ['a', 'b']]\n\
                    try:\n    echo_tool('bad')\nexcept ToolError as e:\n    print('caught:', e)\n\
                    heard";
        // A limit shorter than the time the calls take: only the cell's own time counts.
        let mut cell = py
            .begin(code, Duration::from_millis(1500))
            .await
            .ok()
            .unwrap();
        let mut seen = vec![];
        while let Some(call) = py.next(&mut cell).await {
            tokio::time::sleep(Duration::from_millis(600)).await;
            let words = call.args["words"].as_str().unwrap().to_string();
            seen.push((
                call.name.clone(),
                serde_json::Value::Object(call.args.clone()),
            ));
            match words.as_str() {
                "bad" => py.answer(call.id, false, "no such words").await,
                w => py.answer(call.id, true, &w.repeat(2)).await,
            }
        }
        let run = cell.into_run();
        let CellEnd::Finished(done) = run.end else {
            panic!("the cell did not finish: {}", run.err.text());
        };
        assert_eq!(done.value.as_deref(), Some("['aa', 'bb']"));
        assert_eq!(
            run.out.text(),
            "(words: str, times: int = None) -> str\ncaught: no such words\n"
        );
        assert_eq!(seen.len(), 3);
        assert_eq!(seen[0].0, "echo_tool");
        assert_eq!(seen[0].1, serde_json::json!({"words": "a", "times": 2}));
        assert_eq!(seen[2].1, serde_json::json!({"words": "bad"}));
        // Wrong arguments fail in the cell, naming the signature; nothing is called.
        let run = py
            .run("echo_tool(colour='red')", Duration::from_secs(5))
            .await;
        let CellEnd::Finished(done) = run.end else {
            panic!("the cell did not finish");
        };
        let error = done.error.unwrap();
        assert!(error.contains("TypeError: echo_tool(words: str"), "{error}");
        assert!(!error.contains("inspect.py"), "{error}");
    }

    #[tokio::test]
    async fn a_cell_waiting_on_a_call_is_interrupted_by_its_own_limit_only() {
        let ws = TempDir::new("cell-call-limit");
        let mut py = Interpreter::start_on_host("python3", &ws.0, None)
            .await
            .unwrap();
        py.define(&[CellFunction::of(&echo_tool())]).await.unwrap();
        let mut cell = py
            .begin(
                "import time\nx = echo_tool('a')\ntime.sleep(30)",
                Duration::from_secs(1),
            )
            .await
            .ok()
            .unwrap();
        let call = py.next(&mut cell).await.unwrap();
        py.answer(call.id, true, "fine").await;
        assert!(py.next(&mut cell).await.is_none());
        let run = cell.into_run();
        assert!(
            matches!(run.end, CellEnd::Interrupted(_)),
            "{}",
            run.err.text()
        );
        // The answer arrived before the interruption, and stays.
        let run = py.run("x", Duration::from_secs(5)).await;
        let CellEnd::Finished(done) = run.end else {
            panic!("the cell did not finish");
        };
        assert_eq!(done.value.as_deref(), Some("'fine'"));
    }
}
