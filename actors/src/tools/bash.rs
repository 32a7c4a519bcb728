//! The `bash` tool: one long-lived shell per agent, so the working directory, variables
//! and functions set by one command are still there for the next. On the host the shell is
//! a child process; with the sandbox on it lives in the flow's container. Both speak the
//! same end-of-command marker protocol (`process::ShellIo`).

use std::process::Stdio;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use tokio::io::BufReader;
use tokio::process::Command;

use super::{Builtin, Tool, ToolCtx, ToolError, ToolFuture, ToolOutput, ToolSettings, args};
use crate::confine::{self, ConfineSettings};
use crate::llm::ToolSpec;
use crate::process::{Capture, Contained, MAX_OUTPUT, ShellIo, ShellIoError};
use crate::protocol::ShellEnd;

const NAME: &str = "bash";

/// A command is killed after `[tools] bash_timeout`.
pub const TOOL: Builtin =
    Builtin::new(NAME, |s| Box::new(Bash::new(s))).with_deadline(|s| Some(s.bash_timeout));

/// A call's arguments.
#[derive(Deserialize, JsonSchema)]
struct Args {
    /// The shell command(s) to run. Several lines are fine; they run as one script.
    #[schemars(required)]
    command: Option<String>,
    /// Set to true to kill the current shell and start a fresh one in the workspace (before
    /// `command`, if one is given).
    restart: Option<bool>,
}

/// Runs shell commands in a persistent `bash` session.
pub struct Bash {
    timeout: Duration,
    shell: Option<Shell>,
    /// How the host shell is confined, and the Python it may run.
    confine: Option<ConfineSettings>,
    python: String,
}

impl Bash {
    /// A tool with no shell yet; the first call starts one in the workspace.
    pub fn new(settings: &ToolSettings) -> Self {
        Bash {
            timeout: settings.bash_timeout,
            shell: None,
            confine: settings.confine.clone(),
            python: settings.python.clone(),
        }
    }

    async fn run(&mut self, args: Value, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let result = self.run_command(args, ctx).await;
        match (&self.confine, &ctx.sandbox) {
            (Some(confine), None) => super::python::explained(result, confine),
            _ => result,
        }
    }

    async fn run_command(&mut self, args: Value, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let Args { command, restart } = args::parse(NAME, &args)?;
        let restart = restart.unwrap_or(false);
        let command = match command {
            Some(command) => command,
            None if restart => String::new(),
            None => return Err(ToolError::new("bash: missing required argument `command`")),
        };
        let command = command.as_str();
        if command.trim().is_empty() && !restart {
            return Err(ToolError::new(
                "bash: `command` is empty. Send the shell command to run (for example `ls -la`), \
                 or `restart: true` to start a fresh shell.",
            ));
        }
        let (note, text, end) = match &ctx.sandbox {
            Some(sandbox) => {
                let (text, end) = sandbox
                    .shell(&ctx.flow_id, &ctx.agent, command, self.timeout, restart)
                    .await
                    .map_err(|e| ToolError::new(format!("bash: the sandbox failed: {e}")))?;
                (String::new(), text, end)
            }
            None => self.run_on_host(command, restart, ctx).await?,
        };
        if restart && command.trim().is_empty() {
            return Ok(ToolOutput::text(
                "Started a fresh shell in the workspace; earlier working directory and variables \
                 are gone.",
            ));
        }
        let note = if restart {
            "(The shell was restarted before this command.)\n"
        } else {
            note.as_str()
        };
        let shown = match text.trim_end_matches('\n') {
            "" => "(no output)",
            trimmed => trimmed,
        };
        match end {
            ShellEnd::Status(0) => Ok(ToolOutput::text(format!("{note}{shown}"))),
            ShellEnd::Status(code) => {
                Err(ToolError::new(format!("{note}{shown}\n[exit code {code}]")))
            }
            ShellEnd::ShellEnded(how) => Err(ToolError::new(format!(
                "{note}{shown}\n[the shell {how} while running the command; a fresh shell will \
                 start on the next call, in the workspace, without earlier variables]"
            ))),
            ShellEnd::TimedOut => Err(ToolError::new(format!(
                "{note}bash: the command timed out after {} s, so the shell was killed. A fresh \
                 shell starts on the next call: the working directory is back to the workspace \
                 and variables are gone. Run long jobs in the background (`cmd > log 2>&1 &`) \
                 and check on them later.\nOutput so far:\n{shown}",
                self.timeout.as_secs_f64()
            ))),
        }
    }

    /// Run the command in this tool's host shell: a note for the model, the output, and how
    /// it ended.
    async fn run_on_host(
        &mut self,
        command: &str,
        restart: bool,
        ctx: &ToolCtx,
    ) -> Result<(String, String, ShellEnd), ToolError> {
        // A call that was abandoned mid-command leaves the shell busy with unread output.
        let interrupted = self.shell.as_ref().is_some_and(|shell| shell.io.busy);
        if restart || interrupted {
            self.shell = None;
        }
        let shell = match &mut self.shell {
            Some(shell) => shell,
            empty => empty.insert(Shell::start(ctx, self.confine.as_ref(), &self.python)?),
        };
        let mut output = Capture::new(MAX_OUTPUT);
        if command.trim().is_empty() {
            return Ok((String::new(), String::new(), ShellEnd::Status(0)));
        }
        let end = match tokio::time::timeout(self.timeout, shell.exec(command, &mut output)).await {
            Ok(Ok(code)) => ShellEnd::Status(code),
            Ok(Err(how)) => ShellEnd::ShellEnded(how),
            Err(_) => ShellEnd::TimedOut,
        };
        if !matches!(end, ShellEnd::Status(_)) {
            self.shell = None;
        }
        let note = if interrupted {
            "(The previous command was interrupted, so this ran in a fresh shell.)\n"
        } else {
            ""
        };
        Ok((note.to_string(), output.text(), end))
    }
}

impl Tool for Bash {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: NAME.into(),
            description: format!(
                "Run a command in a bash shell that stays open between calls, so `cd`, exported \
                 variables and shell functions carry over. It starts in the workspace directory. \
                 stderr is merged into stdout, and commands get no stdin (interactive programs see \
                 end of input). A non-zero exit status is reported as a failure. A command that \
                 runs longer than {} s is killed together with the shell, and a fresh shell is \
                 started. Background jobs keep running between calls and end with the shell. \
                 Long output is shortened in the middle; redirect it to a file and \
                 inspect parts of it instead.",
                self.timeout.as_secs_f64()
            ),
            parameters: args::schema::<Args>(),
            variants: None,
        }
    }

    fn call<'a>(&'a mut self, args: Value, ctx: &'a ToolCtx) -> ToolFuture<'a> {
        Box::pin(self.run(args, ctx))
    }
}

/// One running `bash` on the host, contained (`process::Contained`): what it starts, even in
/// the background, lives as long as the shell and ends with it (on a timeout, a restart,
/// `exit`, or when the tool is dropped with its worker).
struct Shell {
    bash: Contained,
    io: ShellIo,
}

impl Shell {
    fn start(
        ctx: &ToolCtx,
        confine: Option<&ConfineSettings>,
        python: &str,
    ) -> Result<Shell, ToolError> {
        let mut cmd = Command::new("bash");
        cmd.args(["--noprofile", "--norc"])
            .current_dir(&ctx.workspace)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let bash = confine::spawn(&mut cmd, confine, &ctx.workspace, python);
        let mut bash = bash.map_err(|e| {
            ToolError::new(format!(
                "bash: could not start a shell in `{}`: {e}",
                ctx.workspace.display()
            ))
        })?;
        let child = bash.child();
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(ToolError::new("bash: the shell started without its pipes"));
        };
        Ok(Shell {
            bash,
            io: ShellIo::new(Box::pin(stdin), Box::pin(BufReader::new(stdout))),
        })
    }

    /// Run one command; the error says how the shell ended, if it did.
    async fn exec(&mut self, command: &str, output: &mut Capture) -> Result<i32, String> {
        match self.io.exec(command, output).await {
            Ok(status) => Ok(status),
            Err(ShellIoError::Closed) => Err(self.ended().await),
            Err(ShellIoError::Garbled(status)) => Err(format!("sent a garbled status `{status}`")),
        }
    }

    /// Describe how the shell ended, after its output stopped.
    async fn ended(&mut self) -> String {
        match tokio::time::timeout(Duration::from_secs(1), self.bash.wait()).await {
            Ok(Ok(status)) => match status.code() {
                Some(code) => format!("exited with status {code}"),
                None => format!("was killed ({status})"),
            },
            _ => "stopped responding".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::tools::tests::{TempDir, assert_ended, host_ctx as ctx, unique_sleep};

    fn bash(timeout_secs: u64) -> Bash {
        Bash::new(&ToolSettings {
            bash_timeout: Duration::from_secs(timeout_secs),
            ..ToolSettings::default()
        })
    }

    async fn ok(tool: &mut Bash, ctx: &ToolCtx, command: &str) -> String {
        match tool.call(json!({ "command": command }), ctx).await {
            Ok(out) => out.text,
            Err(e) => panic!("`{command}` failed: {e}"),
        }
    }

    async fn fail(tool: &mut Bash, ctx: &ToolCtx, command: &str) -> String {
        match tool.call(json!({ "command": command }), ctx).await {
            Ok(out) => panic!("`{command}` should fail, got: {}", out.text),
            Err(e) => e.0,
        }
    }

    #[tokio::test]
    async fn starts_in_workspace_and_keeps_state() {
        let ws = TempDir::new("state");
        let ctx = ctx(&ws.0);
        let mut tool = bash(30);
        let canon = ws.0.canonicalize().unwrap();
        assert_eq!(
            ok(&mut tool, &ctx, "pwd -P").await,
            canon.display().to_string()
        );
        ok(&mut tool, &ctx, "mkdir sub && cd sub").await;
        ok(
            &mut tool,
            &ctx,
            "export GREETING=hello; f() { echo \"fn $1\"; }",
        )
        .await;
        assert_eq!(
            ok(&mut tool, &ctx, "pwd -P").await,
            canon.join("sub").display().to_string()
        );
        assert_eq!(
            ok(&mut tool, &ctx, "echo $GREETING; f x").await,
            "hello\nfn x"
        );
    }

    #[tokio::test]
    async fn output_shapes() {
        let ws = TempDir::new("shapes");
        let ctx = ctx(&ws.0);
        let mut tool = bash(30);
        assert_eq!(ok(&mut tool, &ctx, "true").await, "(no output)");
        assert_eq!(ok(&mut tool, &ctx, "printf abc").await, "abc");
        assert_eq!(
            ok(&mut tool, &ctx, "echo out; echo err >&2").await,
            "out\nerr"
        );
        assert_eq!(
            ok(&mut tool, &ctx, "cat <<EOF\nline one\n  two\nEOF").await,
            "line one\n  two"
        );
        // A command that reads stdin gets end of input instead of hanging.
        assert_eq!(ok(&mut tool, &ctx, "cat; echo after").await, "after");
        let long = ok(&mut tool, &ctx, "seq 1 200000").await;
        assert!(
            long.starts_with("1\n2\n") && long.ends_with("199999\n200000"),
            "{long}"
        );
        assert!(long.contains("bytes of output cut") && long.len() < MAX_OUTPUT + 100);
    }

    #[tokio::test]
    async fn failures_report_status_and_output() {
        let ws = TempDir::new("fail");
        let ctx = ctx(&ws.0);
        let mut tool = bash(30);
        let err = fail(&mut tool, &ctx, "echo partial; ls /no/such/dir").await;
        assert!(
            err.contains("partial")
                && err.contains("No such file")
                && err.contains("[exit code 2]"),
            "{err}"
        );
        let err = fail(&mut tool, &ctx, "if then fi").await;
        assert!(
            err.contains("syntax error") && err.contains("[exit code 2]"),
            "{err}"
        );
        // The shell is still usable after both.
        assert_eq!(ok(&mut tool, &ctx, "echo fine").await, "fine");
    }

    #[tokio::test]
    async fn empty_and_bad_arguments() {
        let ws = TempDir::new("args");
        let ctx = ctx(&ws.0);
        let mut tool = bash(30);
        assert!(
            fail(&mut tool, &ctx, "  ")
                .await
                .contains("`command` is empty")
        );
        let err = tool.call(json!({}), &ctx).await.unwrap_err().0;
        assert!(err.contains("missing required argument `command`"), "{err}");
        let err = tool
            .call(json!({"command": "ls", "restart": "yes"}), &ctx)
            .await
            .unwrap_err()
            .0;
        assert!(err.contains("`restart` must be a boolean"), "{err}");
    }

    #[tokio::test]
    async fn exit_ends_the_shell_and_the_next_call_starts_fresh() {
        let ws = TempDir::new("exit");
        let ctx = ctx(&ws.0);
        let mut tool = bash(30);
        ok(&mut tool, &ctx, "export KEEP=1; echo bye").await;
        let err = fail(&mut tool, &ctx, "echo leaving; exit 3").await;
        assert!(
            err.contains("leaving") && err.contains("exited with status 3"),
            "{err}"
        );
        assert_eq!(ok(&mut tool, &ctx, "echo \"[$KEEP]\"").await, "[]");
    }

    #[tokio::test]
    async fn restart_gives_a_fresh_shell() {
        let ws = TempDir::new("restart");
        let ctx = ctx(&ws.0);
        let mut tool = bash(30);
        ok(&mut tool, &ctx, "export KEEP=1").await;
        let out = tool
            .call(json!({"command": "", "restart": true}), &ctx)
            .await
            .unwrap()
            .text;
        assert!(out.contains("fresh shell"), "{out}");
        assert_eq!(ok(&mut tool, &ctx, "echo \"[$KEEP]\"").await, "[]");
        ok(&mut tool, &ctx, "export KEEP=2").await;
        let out = tool
            .call(
                json!({"command": "echo \"[$KEEP]\"", "restart": true}),
                &ctx,
            )
            .await
            .unwrap()
            .text;
        assert!(out.contains("restarted") && out.ends_with("[]"), "{out}");
    }

    #[tokio::test]
    async fn an_abandoned_call_does_not_confuse_the_next() {
        let ws = TempDir::new("abandon");
        let ctx = ctx(&ws.0);
        let mut tool = bash(30);
        let call = tool.call(json!({ "command": "sleep 0.3; echo late" }), &ctx);
        assert!(
            tokio::time::timeout(Duration::from_millis(100), call)
                .await
                .is_err()
        );
        let out = ok(&mut tool, &ctx, "echo now").await;
        assert!(
            out.contains("interrupted") && out.ends_with("\nnow") && !out.contains("late"),
            "{out}"
        );
    }

    #[tokio::test]
    async fn timeout_kills_the_shell_and_its_children() {
        let ws = TempDir::new("timeout");
        let ctx = ctx(&ws.0);
        let mut tool = bash(1);
        ok(&mut tool, &ctx, "mkdir d && cd d").await;
        let started = std::time::Instant::now();
        let in_session = unique_sleep(11);
        let err = fail(
            &mut tool,
            &ctx,
            &format!("echo begun; setsid sleep {in_session} & sleep 31.7 | cat"),
        )
        .await;
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(
            err.contains("timed out after 1 s") && err.contains("begun"),
            "{err}"
        );
        // The working directory is back to the workspace.
        let canon = ws.0.canonicalize().unwrap();
        assert_eq!(
            ok(&mut tool, &ctx, "pwd -P").await,
            canon.display().to_string()
        );
        // Nothing from the killed command is left running, even what left its group.
        assert_ended("31.7", false);
        assert_ended(&in_session, true);
    }

    #[tokio::test]
    async fn background_jobs_live_with_the_shell_and_end_with_it() {
        let ws = TempDir::new("jobs");
        let ctx = ctx(&ws.0);
        let mut tool = bash(30);
        let (job, restarted, dropped) = (unique_sleep(12), unique_sleep(13), unique_sleep(14));
        ok(
            &mut tool,
            &ctx,
            &format!("setsid sleep {job} > /dev/null 2>&1 &"),
        )
        .await;
        // A background job outlives the call that started it, as the tool promises...
        let running =
            format!("timeout 10 sh -c 'until pgrep -f -x \"sleep {job}\"; do sleep 0.05; done'");
        ok(&mut tool, &ctx, &running).await;
        // ...and ends with the shell, even having left its process group.
        ok(&mut tool, &ctx, &format!("setsid sleep {restarted} &")).await;
        fail(&mut tool, &ctx, "exit 0").await;
        assert_ended(&job, true);
        assert_ended(&restarted, true);
        ok(&mut tool, &ctx, &format!("setsid sleep {dropped} &")).await;
        drop(tool);
        assert_ended(&dropped, true);
    }
}
