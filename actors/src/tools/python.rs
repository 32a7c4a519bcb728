//! The `python_execute` tool: runs a snippet of Python in a fresh interpreter inside the
//! workspace and shows what it printed, with a time limit.

use std::process::Stdio;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;

use super::{Builtin, Tool, ToolCtx, ToolError, ToolFuture, ToolOutput, ToolSettings, args};
use crate::llm::ToolSpec;
use crate::process::{Capture, Contained};
use crate::sandbox::SandboxHandle;

const NAME: &str = "python_execute";

/// A run is killed after `[tools] python_timeout`.
pub const TOOL: Builtin = Builtin::new(NAME, |s| Box::new(PythonExecute::new(s)))
    .with_deadline(|s| Some(s.python_timeout));

/// A call's arguments.
#[derive(Deserialize, JsonSchema)]
struct Args {
    /// The complete Python program to run, for example "import math\nprint(math.pi)".
    code: String,
}

/// Most bytes of stdout shown to the model.
const MAX_STDOUT: usize = 12_000;
/// Most bytes of stderr shown to the model; tracebacks are short, and their end matters.
const MAX_STDERR: usize = 6_000;

/// Runs Python code with the configured interpreter.
pub struct PythonExecute {
    python: String,
    timeout: Duration,
}

impl PythonExecute {
    /// Uses the interpreter and time limit from `settings`.
    pub fn new(settings: &ToolSettings) -> Self {
        PythonExecute {
            python: settings.python.clone(),
            timeout: settings.python_timeout,
        }
    }

    async fn run(&self, args: Value, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let Args { code } = args::parse(NAME, &args)?;
        let code = code.as_str();
        if code.trim().is_empty() {
            return Err(ToolError::new(
                "python_execute: `code` is empty; send the Python source to run.",
            ));
        }
        if let Some(sandbox) = &ctx.sandbox {
            return self.run_in_sandbox(sandbox, ctx, code).await;
        }
        let mut cmd = Command::new(&self.python);
        cmd.arg("-c")
            .arg(code)
            .current_dir(&ctx.workspace)
            // Unbuffered, so output printed before a timeout is not lost with the process.
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut python = Contained::spawn(&mut cmd).map_err(|e| {
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

impl PythonExecute {
    /// The same contract, with the code running in the flow's container.
    async fn run_in_sandbox(
        &self,
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
            description: format!(
                "Run Python source code in a new `{}` process whose working directory is the \
                 workspace. Only what the code prints is returned (stdout, and stderr under its \
                 own label), so use print() for any value you want to see; nothing is kept between \
                 calls. The code gets no stdin. An exception or non-zero exit is reported as a \
                 failure with its traceback. Processes the code starts end when it exits. Runs \
                 longer than {} s are killed.",
                self.python,
                self.timeout.as_secs_f64()
            ),
            parameters: args::schema::<Args>(),
        }
    }

    fn call<'a>(&'a mut self, args: Value, ctx: &'a ToolCtx) -> ToolFuture<'a> {
        Box::pin(self.run(args, ctx))
    }
}

/// Copy a pipe into a capture until it closes (or breaks).
async fn pump(mut pipe: impl AsyncRead + Unpin, into: &mut Capture) {
    let mut chunk = [0u8; 8192];
    while let Ok(n @ 1..) = pipe.read(&mut chunk).await {
        into.push(&chunk[..n]);
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

    fn tool(timeout_secs: u64) -> PythonExecute {
        PythonExecute::new(&ToolSettings {
            python_timeout: Duration::from_secs(timeout_secs),
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
    async fn errors_show_the_traceback() {
        let ws = TempDir::new("error");
        let ctx = ctx(&ws.0);
        let mut py = tool(30);
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
        let err = run(&mut py, &ctx, "def broken(:").await.unwrap_err();
        assert!(err.contains("SyntaxError"), "{err}");
        let err = py.call(json!({ "code": 5 }), &ctx).await.unwrap_err().0;
        assert!(err.contains("`code` must be a string"), "{err}");
        let err = py.call(json!({}), &ctx).await.unwrap_err().0;
        assert!(err.contains("missing required argument `code`"), "{err}");
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
        let out = run(&mut tool(60), &ctx, &code).await;
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
        let err = run(&mut tool(1), &ctx, &code).await.unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(
            err.contains("timed out after 1 s") && err.contains("waiting"),
            "{err}"
        );
        assert_ended(&in_group, false);
        assert_ended(&in_session, true);
    }
}
