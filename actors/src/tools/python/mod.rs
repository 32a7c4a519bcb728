//! The `python_execute` tool. By default each agent keeps one interpreter for its flow
//! (`session.rs`): variables, imports and loaded data stay between calls, and a last bare
//! expression shows its value, as in a REPL. With `[tools] python_session = "call"` every
//! call runs in a fresh interpreter instead. Either way the code runs in the workspace (or
//! the flow's container) and is stopped at its time limit.

pub mod code;
pub(crate) mod session;

use std::process::Stdio;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use tokio::process::Command;

use super::{Builtin, Tool, ToolCtx, ToolError, ToolFuture, ToolOutput, ToolSettings, args};
use crate::confine::{self, ConfineSettings};
use crate::llm::ToolSpec;
use crate::process::Capture;
use crate::sandbox::SandboxHandle;
use session::{CellEnd, CellRun, Interpreter, MAX_STDERR, MAX_STDOUT, pump};

const NAME: &str = "python_execute";

/// A run is stopped after `[tools] python_timeout`; a kept interpreter may take a little
/// longer to start, or to stop when interrupted.
pub const TOOL: Builtin =
    Builtin::new(NAME, |s| Box::new(PythonExecute::new(s))).with_deadline(|s| {
        Some(
            s.python_timeout
                .saturating_add(session::START_LIMIT)
                .saturating_add(session::GRACE),
        )
    });

/// `[tools] python_session`: how long one interpreter lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PythonSession {
    /// One interpreter per agent for the whole flow: state carries over between calls.
    #[default]
    Flow,
    /// A fresh interpreter for every call.
    Call,
}

/// A call's arguments.
#[derive(Deserialize, JsonSchema)]
struct Args {
    /// The Python code to run, for example "import math\nprint(math.pi)".
    code: String,
}

/// Runs Python code with the configured interpreter.
pub struct PythonExecute {
    python: String,
    timeout: Duration,
    session: PythonSession,
    confine: Option<ConfineSettings>,
    /// The agent's interpreter, in `Flow` sessions on the host, once started.
    kept: Option<Interpreter>,
}

impl PythonExecute {
    /// Uses the interpreter, time limit and session from `settings`.
    pub fn new(settings: &ToolSettings) -> Self {
        PythonExecute {
            python: settings.python.clone(),
            timeout: settings.python_timeout,
            session: settings.python_session,
            confine: settings.confine.clone(),
            kept: None,
        }
    }

    async fn run(&mut self, args: Value, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let Args { code } = args::parse(NAME, &args)?;
        let code = code.as_str();
        if code.trim().is_empty() {
            return Err(ToolError::new(
                "python_execute: `code` is empty; send the Python source to run.",
            ));
        }
        let result = match (self.session, &ctx.sandbox) {
            (PythonSession::Flow, _) => self.run_kept(ctx, code).await,
            (PythonSession::Call, Some(sandbox)) => self.run_in_sandbox(sandbox, ctx, code).await,
            (PythonSession::Call, None) => self.run_fresh(ctx, code).await,
        };
        match (&self.confine, &ctx.sandbox) {
            (Some(confine), None) => explained(result, confine),
            _ => result,
        }
    }

    /// Run `code` as the next cell of the agent's interpreter, starting one if needed.
    async fn run_kept(&mut self, ctx: &ToolCtx, code: &str) -> Result<ToolOutput, ToolError> {
        // A call abandoned mid-cell (its step was cancelled) leaves the cell's end unread.
        let mut note = String::new();
        if let Some(mut old) = self.kept.take() {
            if old.busy {
                old.kill().await;
                note = "(The previous cell was stopped before it ended, so this ran in a fresh \
                        interpreter: variables, imports and data from earlier calls are gone.)\n"
                    .into();
            } else if let Some(how) = old.ended_between_cells().await {
                note = format!(
                    "(The interpreter {how} after the previous call, so this ran in a fresh one: \
                     variables, imports and data from earlier calls are gone.)\n"
                );
            } else {
                self.kept = Some(old);
            }
        }
        let interpreter = match &mut self.kept {
            Some(interpreter) => interpreter,
            empty => {
                let started = match &ctx.sandbox {
                    Some(sandbox) => Interpreter::start_in_container(sandbox, &ctx.flow_id).await,
                    None => {
                        let confine = self.confine.as_ref();
                        Interpreter::start_on_host(&self.python, &ctx.workspace, confine).await
                    }
                };
                empty.insert(started.map_err(|e| ToolError::new(format!("python_execute: {e}")))?)
            }
        };
        let run = interpreter.run(code, self.timeout).await;
        if !run.interpreter_lives() {
            self.kept = None;
        }
        cell_report(run, self.timeout, &note)
            .map(ToolOutput::text)
            .map_err(ToolError)
    }

    /// Run `code` in a new interpreter of its own, ended with the call.
    async fn run_fresh(&mut self, ctx: &ToolCtx, code: &str) -> Result<ToolOutput, ToolError> {
        let mut cmd = Command::new(&self.python);
        cmd.arg("-c")
            .arg(code)
            .current_dir(&ctx.workspace)
            // Unbuffered, so output printed before a timeout is not lost with the process.
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let confine = self.confine.as_ref();
        let python = confine::spawn(&mut cmd, confine, &ctx.workspace, &self.python);
        let mut python = python.map_err(|e| {
            ToolError::new(format!(
                "python_execute: could not start the interpreter `{}`: {e}",
                self.python
            ))
        })?;
        let child = python.child();
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return Err(ToolError::new(
                "python_execute: the interpreter started without its pipes",
            ));
        };

        let mut out = Capture::new(MAX_STDOUT);
        let mut err = Capture::new(MAX_STDERR);
        // The call ends when the interpreter does: `wait` then ends whatever it left running,
        // which also closes the pipes such processes held.
        let finished = tokio::time::timeout(self.timeout, async {
            let (_, _, status) = tokio::join!(
                pump(stdout, &mut out),
                pump(stderr, &mut err),
                python.wait()
            );
            status
        })
        .await;

        match finished {
            Ok(Ok(status)) if status.success() => Ok(ToolOutput::text(report(&out, &err))),
            Ok(Ok(status)) => {
                let how = match status.code() {
                    Some(code) => format!("exit code {code}"),
                    None => status.to_string(),
                };
                Err(ToolError::new(format!(
                    "{}\n[python failed: {how}]",
                    report(&out, &err)
                )))
            }
            Ok(Err(e)) => Err(ToolError::new(format!(
                "python_execute: lost track of the interpreter: {e}"
            ))),
            Err(_) => {
                // The script, or processes it started, ran too long: end them all.
                python.kill();
                Err(ToolError::new(format!(
                    "python_execute: timed out after {} s and was killed. Make the code faster, \
                     or do less per call.\nOutput before the timeout:\n{}",
                    self.timeout.as_secs_f64(),
                    report(&out, &err)
                )))
            }
        }
    }
}

/// A confined call's result with the sandbox's note added where its output shows a refusal.
pub(crate) fn explained(
    result: Result<ToolOutput, ToolError>,
    confine: &ConfineSettings,
) -> Result<ToolOutput, ToolError> {
    let add = |text: &mut String| {
        if let Some(note) = confine::refusal_note(text, confine) {
            text.push('\n');
            text.push_str(&note);
        }
    };
    match result {
        Ok(mut out) => {
            add(&mut out.text);
            Ok(out)
        }
        Err(mut e) => {
            add(&mut e.0);
            Err(e)
        }
    }
}

impl PythonExecute {
    /// The same contract, with the code running in the flow's container.
    async fn run_in_sandbox(
        &mut self,
        sandbox: &SandboxHandle,
        ctx: &ToolCtx,
        code: &str,
    ) -> Result<ToolOutput, ToolError> {
        let cmd = vec![
            "env".into(),
            "PYTHONUNBUFFERED=1".into(),
            "python3".into(),
            "-c".into(),
            code.into(),
        ];
        let out = sandbox
            .exec(&ctx.flow_id, cmd, self.timeout)
            .await
            .map_err(|e| {
                ToolError::new(format!(
                    "python_execute: the sandbox could not run the code: {e}"
                ))
            })?;
        let text = report_text(&out.stdout, &out.stderr);
        match out.exit_code {
            _ if out.timed_out => Err(ToolError::new(format!(
                "python_execute: timed out after {} s and was killed. Make the code faster, or do less per \
                 call.\nOutput before the timeout:\n{text}",
                self.timeout.as_secs_f64()
            ))),
            Some(0) => Ok(ToolOutput::text(text)),
            Some(137) => Err(ToolError::new(format!(
                "{text}\n[python was killed (signal 9): most likely it ran out of memory — the sandbox allows {}]",
                sandbox.memory_limit_text()
            ))),
            Some(code) => Err(ToolError::new(format!(
                "{text}\n[python failed: exit code {code}]"
            ))),
            None => Err(ToolError::new(format!(
                "{text}\n[python ended without an exit code]"
            ))),
        }
    }
}

impl Tool for PythonExecute {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: NAME.into(),
            description: match self.session {
                PythonSession::Flow => format!(
                    "Run Python code in a `{}` interpreter that stays alive between your calls, \
                     as a notebook does: variables, functions, imports and loaded data defined in \
                     one call are still there in the next, so load a file once and work on it \
                     over several calls. The working directory is the workspace. You see what the \
                     code prints (stdout, and stderr under its own label) and, as in a REPL, the \
                     value of a last line that is a bare expression. The code gets no stdin. An \
                     exception is reported as a failure with its traceback; what the code defined \
                     before it is kept. A call that runs longer than {} s is interrupted with \
                     KeyboardInterrupt; if the interpreter crashes or cannot be interrupted, a \
                     fresh one starts and you are told that earlier state is gone.",
                    self.python,
                    self.timeout.as_secs_f64()
                ),
                PythonSession::Call => format!(
                    "Run Python source code in a new `{}` process whose working directory is the \
                     workspace. Only what the code prints is returned (stdout, and stderr under its \
                     own label), so use print() for any value you want to see; nothing is kept \
                     between calls. The code gets no stdin. An exception or non-zero exit is \
                     reported as a failure with its traceback. Processes the code starts end when \
                     it exits. Runs longer than {} s are killed.",
                    self.python,
                    self.timeout.as_secs_f64()
                ),
            },
            parameters: args::schema::<Args>(),
            variants: None,
        }
    }

    fn call<'a>(&'a mut self, args: Value, ctx: &'a ToolCtx) -> ToolFuture<'a> {
        Box::pin(self.run(args, ctx))
    }
}

/// What the model is told about a cell of a kept interpreter whose limit is `limit`: the
/// text, as a success or a failure. `note` goes first.
pub(crate) fn cell_report(run: CellRun, limit: Duration, note: &str) -> Result<String, String> {
    let CellRun { out, err, end } = run;
    let mut shown_out = out.text();
    let mut shown_err = err.text();
    let lost = "a fresh interpreter starts with the next call, and every variable, import \
                and loaded data from earlier calls is gone";
    let (done, ending) = match end {
        CellEnd::Finished(done) => (done, None),
        CellEnd::Interrupted(done) => {
            let why = format!(
                "[the cell ran past the {} s limit and was interrupted (KeyboardInterrupt); \
                 the interpreter keeps what was defined before that. Make the code faster, or \
                 do less per call]",
                limit.as_secs_f64()
            );
            (done, Some(why))
        }
        CellEnd::Killed => {
            let why = format!(
                "[the cell ran past the {} s limit and did not stop when interrupted, so the \
                 interpreter was killed: {lost}]",
                limit.as_secs_f64()
            );
            return Err(format!(
                "{note}{}\n{why}",
                report_text(&shown_out, &shown_err)
            ));
        }
        CellEnd::Crashed(how) => {
            let why = format!("[the Python interpreter {how} while running this cell: {lost}]");
            return Err(format!(
                "{note}{}\n{why}",
                report_text(&shown_out, &shown_err)
            ));
        }
    };
    if let Some(value) = &done.value {
        if !shown_out.is_empty() && !shown_out.ends_with('\n') {
            shown_out.push('\n');
        }
        shown_out.push_str(value);
    }
    if let Some(traceback) = &done.error
        && ending.is_none()
    {
        shown_err.push_str(traceback);
    }
    let text = report_text(&shown_out, &shown_err);
    match (ending, &done.error) {
        (Some(why), _) => Err(format!("{note}{text}\n{why}")),
        (None, Some(_)) => Err(format!(
            "{note}{text}\n[the cell raised an exception; what it defined before that is kept]"
        )),
        (None, None) => Ok(format!("{note}{text}")),
    }
}

/// Stdout, then stderr under a label if there was any.
fn report(out: &Capture, err: &Capture) -> String {
    report_text(&out.text(), &err.text())
}

fn report_text(out: &str, err: &str) -> String {
    let (out, err) = (out.trim_end_matches('\n'), err.trim_end_matches('\n'));
    match (out.is_empty(), err.is_empty()) {
        (true, true) => "(no output)".into(),
        (_, true) => out.into(),
        (true, false) => format!("[stderr]\n{err}"),
        (false, false) => format!("{out}\n[stderr]\n{err}"),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use serde_json::json;

    use super::*;
    use crate::tools::tests::{TempDir, assert_ended, host_ctx as ctx, unique_sleep};

    /// The tool keeping one interpreter, as by default.
    fn tool(timeout_secs: u64) -> PythonExecute {
        tool_in(PythonSession::Flow, timeout_secs)
    }

    fn tool_in(session: PythonSession, timeout_secs: u64) -> PythonExecute {
        PythonExecute::new(&ToolSettings {
            python_timeout: Duration::from_secs(timeout_secs),
            python_session: session,
            ..ToolSettings::default()
        })
    }

    async fn run(tool: &mut PythonExecute, ctx: &ToolCtx, code: &str) -> Result<String, String> {
        tool.call(json!({ "code": code }), ctx)
            .await
            .map(|o| o.text)
            .map_err(|e| e.0)
    }

    #[tokio::test]
    async fn prints_and_runs_in_the_workspace() {
        let ws = TempDir::new("basic");
        let ctx = ctx(&ws.0);
        let mut py = tool(30);
        assert_eq!(run(&mut py, &ctx, "print(6 * 7)").await.unwrap(), "42");
        // Under our own ids, also inside a user namespace.
        // SAFETY: getuid and getgid cannot fail.
        let ids = unsafe { format!("{} {}", libc::getuid(), libc::getgid()) };
        let seen = run(&mut py, &ctx, "import os\nprint(os.getuid(), os.getgid())").await;
        assert_eq!(seen.unwrap(), ids);
        assert_eq!(run(&mut py, &ctx, "x = 1").await.unwrap(), "(no output)");
        run(&mut py, &ctx, "open('made.txt', 'w').write('hi')")
            .await
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(ws.0.join("made.txt")).unwrap(),
            "hi"
        );
        let out = run(
            &mut py,
            &ctx,
            "import sys\nprint('to out')\nprint('to err', file=sys.stderr)",
        )
        .await
        .unwrap();
        assert_eq!(out, "to out\n[stderr]\nto err");
        // Code that reads stdin sees end of input.
        let out = run(&mut py, &ctx, "import sys\nprint(repr(sys.stdin.read()))")
            .await
            .unwrap();
        assert_eq!(out, "''");
    }

    #[tokio::test]
    async fn errors_show_the_traceback_and_keep_the_state() {
        let ws = TempDir::new("error");
        let ctx = ctx(&ws.0);
        let mut py = tool(30);
        let err = run(&mut py, &ctx, "kept = 'still here'\nprint('before')\n1 / 0")
            .await
            .unwrap_err();
        assert!(
            err.starts_with(
                "before\n[stderr]\nTraceback (most recent call last):\n  File \"<cell 1>\", line 3"
            ),
            "{err}"
        );
        assert!(err.contains("ZeroDivisionError"), "{err}");
        assert!(
            err.ends_with("[the cell raised an exception; what it defined before that is kept]"),
            "{err}"
        );
        // The runner's own frames stay out of the traceback.
        assert!(
            !err.contains("driver") && !err.contains("<string>"),
            "{err}"
        );
        let err = run(&mut py, &ctx, "import sys; sys.exit(4)")
            .await
            .unwrap_err();
        assert!(err.contains("SystemExit: 4"), "{err}");
        let err = run(&mut py, &ctx, "def broken(:").await.unwrap_err();
        assert!(
            err.contains("SyntaxError") && err.contains("<cell 3>"),
            "{err}"
        );
        assert!(!err.contains("ast.py"), "{err}");
        assert_eq!(run(&mut py, &ctx, "kept").await.unwrap(), "'still here'");
        let err = py.call(json!({ "code": 5 }), &ctx).await.unwrap_err().0;
        assert!(err.contains("`code` must be a string"), "{err}");
        let err = py.call(json!({}), &ctx).await.unwrap_err().0;
        assert!(err.contains("missing required argument `code`"), "{err}");
    }

    #[tokio::test]
    async fn a_fresh_interpreter_per_call_reports_its_exit() {
        let ws = TempDir::new("exit");
        let ctx = ctx(&ws.0);
        let mut py = tool_in(PythonSession::Call, 30);
        let err = run(&mut py, &ctx, "print('before')\n1 / 0")
            .await
            .unwrap_err();
        assert!(
            err.contains("before") && err.contains("ZeroDivisionError"),
            "{err}"
        );
        assert!(err.contains("[python failed: exit code 1]"), "{err}");
        let err = run(&mut py, &ctx, "import sys; sys.exit(4)")
            .await
            .unwrap_err();
        assert!(err.contains("exit code 4"), "{err}");
        // Killed by a signal, reported as such (through the namespace's init, where there is one).
        let err = run(&mut py, &ctx, "import os\nos.kill(os.getpid(), 9)")
            .await
            .unwrap_err();
        assert!(err.contains("[python failed: signal: 9"), "{err}");
        run(&mut py, &ctx, "x = 1").await.unwrap();
        let err = run(&mut py, &ctx, "print(x)").await.unwrap_err();
        assert!(err.contains("NameError"), "{err}");
    }

    #[tokio::test]
    async fn state_carries_over_between_calls() {
        let ws = TempDir::new("state");
        std::fs::write(ws.0.join("data.csv"), "a,b\n1,2\n3,4\n").unwrap();
        let ctx = ctx(&ws.0);
        let mut py = tool(30);
        let load = "import csv\nrows = list(csv.DictReader(open('data.csv')))\n\
                    def total(col): return sum(int(r[col]) for r in rows)\nlen(rows)";
        assert_eq!(run(&mut py, &ctx, load).await.unwrap(), "2");
        assert_eq!(
            run(&mut py, &ctx, "print('sum', total('b'))\ntotal('a') * 10")
                .await
                .unwrap(),
            "sum 6\n40"
        );
        // `_` holds the last value, as in a REPL; `None` shows nothing.
        assert_eq!(run(&mut py, &ctx, "_ + 2").await.unwrap(), "42");
        assert_eq!(run(&mut py, &ctx, "None").await.unwrap(), "(no output)");
        // Output of processes the cell starts is captured too, in order.
        let out = run(
            &mut py,
            &ctx,
            "import os\nprint('a', flush=True)\nos.system('echo b; echo c >&2')\nprint('d')",
        )
        .await
        .unwrap();
        assert_eq!(out, "a\nb\nd\n[stderr]\nc");
        // Text that looks like the protocol is only text.
        let out = run(&mut py, &ctx, "print('{\"done\": {\"id\": 99}}')")
            .await
            .unwrap();
        assert_eq!(out, "{\"done\": {\"id\": 99}}");
        let big = run(&mut py, &ctx, "'x' * 100000").await.unwrap();
        assert!(
            big.ends_with("characters cut]") && big.len() < 9000,
            "{}",
            big.len()
        );
    }

    #[tokio::test]
    async fn a_cell_past_its_limit_is_interrupted_and_the_state_stays() {
        let ws = TempDir::new("interrupt");
        let ctx = ctx(&ws.0);
        let mut py = tool(1);
        run(&mut py, &ctx, "x = 5").await.unwrap();
        let started = Instant::now();
        let err = run(
            &mut py,
            &ctx,
            "import time\nprint('working')\nx += 1\ntime.sleep(30)",
        )
        .await
        .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(
            err.contains("working") && err.contains("interrupted (KeyboardInterrupt)"),
            "{err}"
        );
        assert_eq!(run(&mut py, &ctx, "x").await.unwrap(), "6");
    }

    #[tokio::test]
    async fn an_interpreter_that_cannot_be_interrupted_is_replaced() {
        let ws = TempDir::new("stubborn");
        let ctx = ctx(&ws.0);
        let mut py = tool(1);
        run(&mut py, &ctx, "x = 5").await.unwrap();
        let code = "import time\nwhile True:\n    try:\n        time.sleep(10)\n    except KeyboardInterrupt:\n        print('ignored')";
        let err = run(&mut py, &ctx, code).await.unwrap_err();
        assert!(
            err.contains("ignored") && err.contains("did not stop when interrupted"),
            "{err}"
        );
        assert!(
            err.contains("every variable, import and loaded data from earlier calls is gone"),
            "{err}"
        );
        let err = run(&mut py, &ctx, "x").await.unwrap_err();
        assert!(err.contains("NameError"), "{err}");
    }

    #[tokio::test]
    async fn what_a_background_process_prints_between_calls_comes_with_the_next() {
        let ws = TempDir::new("background");
        let ctx = ctx(&ws.0);
        let mut py = tool(30);
        let code = "import subprocess\nkept = 7\n\
                    subprocess.Popen(['sh', '-c', 'sleep 0.3; echo from the background'])\n\
                    print('started')";
        assert_eq!(run(&mut py, &ctx, code).await.unwrap(), "started");
        tokio::time::sleep(Duration::from_millis(1200)).await;
        // The interpreter was not taken for broken: its state is there.
        assert_eq!(
            run(&mut py, &ctx, "kept").await.unwrap(),
            "from the background\n7"
        );
        assert_eq!(run(&mut py, &ctx, "kept + 1").await.unwrap(), "8");
    }

    #[tokio::test]
    async fn a_crashed_interpreter_is_replaced_and_the_model_told() {
        let ws = TempDir::new("crash");
        let ctx = ctx(&ws.0);
        let mut py = tool(30);
        let crashes = [
            ("import os\nos._exit(3)", "exited with status 3"),
            ("import os\nos.kill(os.getpid(), 9)", "was killed (signal 9"),
            (
                "import ctypes\nctypes.string_at(0)",
                "was killed by signal 11",
            ),
        ];
        for (code, how) in crashes {
            run(&mut py, &ctx, "x = 5\nprint('set')").await.unwrap();
            let err = run(&mut py, &ctx, code).await.unwrap_err();
            assert!(err.contains(how), "{code}: {err}");
            assert!(
                err.contains("a fresh interpreter starts with the next call"),
                "{err}"
            );
            let err = run(&mut py, &ctx, "x").await.unwrap_err();
            assert!(err.contains("NameError"), "{code}: {err}");
        }
        // Killed between calls: the next call runs in a fresh interpreter, and says so.
        let code =
            "import os, threading\nx = 5\nthreading.Timer(0.2, os.kill, (os.getpid(), 9)).start()";
        run(&mut py, &ctx, code).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let out = run(&mut py, &ctx, "print('x' in globals())").await.unwrap();
        assert!(
            out.starts_with("(The interpreter was killed (signal 9")
                && out.ends_with("earlier calls are gone.)\nFalse"),
            "{out}"
        );
    }

    #[tokio::test]
    async fn processes_a_kept_interpreter_started_end_with_it() {
        let ws = TempDir::new("kept-leaves");
        let ctx = ctx(&ws.0);
        let (in_group, in_session) = (unique_sleep(5), unique_sleep(6));
        let mut py = tool(30);
        let code = format!(
            "import subprocess\n\
             subprocess.Popen(['sleep', '{in_group}'], stdout=subprocess.DEVNULL)\n\
             subprocess.Popen(['sleep', '{in_session}'], start_new_session=True)\n\
             print('started')"
        );
        assert_eq!(run(&mut py, &ctx, &code).await.unwrap(), "started");
        // They live with the interpreter, between calls ...
        assert_eq!(run(&mut py, &ctx, "1 + 1").await.unwrap(), "2");
        // ... and end with it, when the agent's tools go.
        drop(py);
        assert_ended(&in_group, false);
        assert_ended(&in_session, true);
    }

    #[tokio::test]
    async fn missing_interpreter_is_reported() {
        let ws = TempDir::new("nopy");
        let ctx = ctx(&ws.0);
        let settings = ToolSettings {
            python: "no-such-python-here".into(),
            ..ToolSettings::default()
        };
        let err = PythonExecute::new(&settings)
            .call(json!({ "code": "print(1)" }), &ctx)
            .await
            .unwrap_err()
            .0;
        assert!(
            err.contains("could not start the interpreter `no-such-python-here`"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_python_without_json_is_named_clearly() {
        use std::os::unix::fs::PermissionsExt;
        let ws = TempDir::new("nojson");
        // A Python whose `json` cannot be imported, as in Debian's python3-minimal.
        let lib = ws.0.join("lib");
        std::fs::create_dir(&lib).unwrap();
        std::fs::write(lib.join("json.py"), "raise ImportError('no json here')\n").unwrap();
        let python = ws.0.join("python-without-json");
        let script = format!(
            "#!/bin/sh\nPYTHONPATH='{}' exec python3 \"$@\"\n",
            lib.display()
        );
        std::fs::write(&python, script).unwrap();
        std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
        let settings = ToolSettings {
            python: python.display().to_string(),
            ..ToolSettings::default()
        };
        let err = PythonExecute::new(&settings)
            .call(json!({ "code": "print(1)" }), &ctx(&ws.0))
            .await
            .unwrap_err()
            .0;
        assert!(
            err.contains("could not start: this Python has no `json` module")
                && err.contains("python_session = \"call\""),
            "{err}"
        );
    }

    #[tokio::test]
    async fn long_output_is_shortened() {
        let ws = TempDir::new("long");
        let ctx = ctx(&ws.0);
        let out = run(&mut tool(30), &ctx, "for i in range(100000): print(i)")
            .await
            .unwrap();
        assert!(out.starts_with("0\n1\n") && out.ends_with("99999"), "{out}");
        assert!(out.contains("bytes of output cut") && out.len() < MAX_STDOUT + 100);
    }

    #[tokio::test]
    async fn processes_the_script_leaves_end_with_it() {
        let ws = TempDir::new("leaves");
        let ctx = ctx(&ws.0);
        let (in_group, in_session) = (unique_sleep(1), unique_sleep(2));
        // One child stays in python's group with no pipes; one leaves the group in a
        // session of its own and keeps python's stdout open.
        let code = format!(
            "import subprocess\n\
             subprocess.Popen(['sleep', '{in_group}'], stdout=subprocess.DEVNULL)\n\
             subprocess.Popen(['sleep', '{in_session}'], start_new_session=True)\n\
             print('started')"
        );
        let out = run(&mut tool_in(PythonSession::Call, 60), &ctx, &code).await;
        assert_ended(&in_group, false);
        assert_ended(&in_session, true);
        // The call ended with python, not at its time limit.
        assert_eq!(out.unwrap(), "started");
    }

    #[tokio::test]
    async fn timeout_kills_the_script_and_its_children() {
        let ws = TempDir::new("timeout");
        let ctx = ctx(&ws.0);
        let (in_group, in_session) = (unique_sleep(3), unique_sleep(4));
        let started = Instant::now();
        let code = format!(
            "import subprocess, time\n\
             subprocess.Popen(['sleep', '{in_group}'])\n\
             subprocess.Popen(['setsid', 'sleep', '{in_session}'], stdout=subprocess.DEVNULL)\n\
             print('waiting')\n\
             time.sleep(30)"
        );
        let err = run(&mut tool_in(PythonSession::Call, 1), &ctx, &code)
            .await
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(
            err.contains("timed out after 1 s") && err.contains("waiting"),
            "{err}"
        );
        assert_ended(&in_group, false);
        assert_ended(&in_session, true);
    }
}
