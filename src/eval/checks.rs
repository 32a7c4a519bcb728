//! The checks a case makes of a finished run, and their verdicts: the flow's status, files of
//! the workspace, a command's exit code, the final answer, the tool trajectory (EXACT,
//! IN_ORDER and ANY_ORDER as Google ADK defines them), and the token, call and time limits.
//! Knows nothing of case files or of how the run was made: it reads a `Run`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::{FlowOutcome, FlowStatus};
use manus_actors::tools::{WorkspaceFileError, open_workspace_file};
use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One check of a case.
#[derive(Debug)]
pub enum Check {
    /// The flow ended with this status.
    Status(FlowStatus),
    File {
        /// Relative to the workspace, checked to stay inside it.
        path: String,
        rule: FileRule,
    },
    /// `sh -c run` in the workspace exits 0.
    Command { run: String, timeout: Duration },
    /// The flow's final answer (its summary).
    Answer(TextRule),
    Trajectory {
        mode: MatchMode,
        expected: Vec<Expected>,
        /// Only the calls made for this plan step.
        step: Option<usize>,
    },
    /// Input and output tokens of all the flow's model calls, at most.
    Tokens(u64),
    /// Model calls, at most.
    ModelCalls(u64),
    /// Wall time of the flow, at most, in seconds.
    Seconds(u64),
}

#[derive(Debug)]
pub enum FileRule {
    Exists,
    Absent,
    Text(TextRule),
}

/// What a text must hold: every `contains` string, a match of `matches`, and `equals` (the
/// whole text, trailing whitespace ignored).
#[derive(Debug)]
pub struct TextRule {
    pub contains: Vec<String>,
    pub matches: Option<Regex>,
    pub equals: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MatchMode {
    /// The calls are exactly the expected ones, in order, and no others.
    Exact,
    /// The expected calls appear in order; others may come between.
    InOrder,
    /// Each expected call appears (as often as listed), in any order; others may too.
    AnyOrder,
}

/// An expected call: its tool, and the arguments that must be equal (others are not
/// compared).
#[derive(Debug)]
pub struct Expected {
    pub tool: String,
    pub arguments: Map<String, Value>,
}

/// A tool call an agent made.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Call {
    pub step: usize,
    pub tool: String,
    pub arguments: Value,
}

/// What the checks read: how the flow ended, its calls, and its workspace.
pub struct Run<'a> {
    pub outcome: &'a FlowOutcome,
    pub calls: &'a [Call],
    pub workspace: &'a Path,
}

/// A check's result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Verdict {
    pub check: String,
    pub passed: bool,
    /// What was found, when it failed (or what was measured).
    pub detail: String,
}

impl Check {
    /// The check's short name, as the table's columns show it.
    pub fn name(&self) -> String {
        match self {
            Check::Status(_) => "status".into(),
            Check::File { path, .. } => format!("file {path}"),
            Check::Command { .. } => "command".into(),
            Check::Answer(_) => "answer".into(),
            Check::Trajectory { step: None, .. } => "trajectory".into(),
            Check::Trajectory { step: Some(s), .. } => format!("trajectory of step {s}"),
            Check::Tokens(_) => "tokens".into(),
            Check::ModelCalls(_) => "model calls".into(),
            Check::Seconds(_) => "time".into(),
        }
    }

    pub async fn verdict(&self, run: &Run<'_>) -> Verdict {
        let outcome = run.outcome;
        let result = match self {
            Check::Status(want) => {
                if outcome.status == *want {
                    Ok(String::new())
                } else {
                    Err(format!(
                        "the flow ended {} ({}), not {}",
                        status_word(outcome.status),
                        outcome.reason,
                        status_word(*want)
                    ))
                }
            }
            Check::File { path, rule } => file(run.workspace, path, rule),
            Check::Command {
                run: command,
                timeout,
            } => shell(run.workspace, command, *timeout).await,
            Check::Answer(rule) => rule
                .check(&outcome.summary)
                .map_err(|why| format!("the answer {why}")),
            Check::Trajectory {
                mode,
                expected,
                step,
            } => {
                let calls: Vec<&Call> = run
                    .calls
                    .iter()
                    .filter(|c| step.is_none_or(|s| c.step == s))
                    .collect();
                trajectory(*mode, expected, &calls)
            }
            Check::Tokens(most) => at_most(outcome.usage.total(), *most, "tokens"),
            Check::ModelCalls(most) => at_most(outcome.usage.calls, *most, "model calls"),
            Check::Seconds(most) => at_most(outcome.elapsed_ms / 1000, *most, "s"),
        };
        let (passed, detail) = match result {
            Ok(d) => (true, d),
            Err(d) => (false, d),
        };
        Verdict {
            check: self.name(),
            passed,
            detail,
        }
    }
}

/// A flow status as the case file spells it.
pub fn status_word(status: FlowStatus) -> String {
    serde_json::to_value(status)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default()
}

fn at_most(measured: u64, most: u64, unit: &str) -> Result<String, String> {
    let said = format!("{measured} {unit} (limit {most})");
    if measured <= most {
        Ok(said)
    } else {
        Err(said)
    }
}

impl TextRule {
    /// Ok, or what the text lacks ("lacks …", "does not match …").
    pub fn check(&self, text: &str) -> Result<String, String> {
        if let Some(missing) = self.contains.iter().find(|c| !text.contains(c.as_str())) {
            return Err(format!("lacks {missing:?}: {}", excerpt(text)));
        }
        if let Some(re) = &self.matches
            && !re.is_match(text)
        {
            return Err(format!("does not match /{re}/: {}", excerpt(text)));
        }
        if let Some(want) = &self.equals
            && text.trim_end() != want.trim_end()
        {
            return Err(format!("is not the expected text: {}", excerpt(text)));
        }
        Ok(String::new())
    }
}

/// The start of a text, on one line, for a verdict.
fn excerpt(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.is_empty() {
        return "(empty)".into();
    }
    let mut short: String = line.chars().take(160).collect();
    if short.len() < line.len() {
        short.push('…');
    }
    format!("{short:?}")
}

/// The most of a file a check reads: a larger one fails its check as too large.
pub const MAX_FILE_BYTES: u64 = 8 << 20;

/// A file of the workspace. `path` was checked to be relative without `..`.
fn file(workspace: &Path, path: &str, rule: &FileRule) -> Result<String, String> {
    match rule {
        FileRule::Absent => absent(workspace, path),
        FileRule::Exists => beneath(workspace, path, "the workspace").map(|_| String::new()),
        FileRule::Text(rule) => {
            let text = read_beneath(workspace, path, "the workspace")?;
            rule.check(&text).map_err(|why| format!("{path} {why}"))
        }
    }
}

/// Nothing at all is at `path`: not a file, a folder, a pipe, nor a link (even one to
/// nothing).
fn absent(workspace: &Path, path: &str) -> Result<String, String> {
    use std::io::ErrorKind::{NotADirectory, NotFound};
    match std::fs::symlink_metadata(workspace.join(path)) {
        Err(e) if matches!(e.kind(), NotFound | NotADirectory) => Ok(String::new()),
        Err(e) => Err(format!("cannot tell whether {path} is there: {e}")),
        Ok(m) if m.file_type().is_symlink() => Err(format!("{path} exists (a symbolic link)")),
        Ok(_) => Err(format!("{path} exists")),
    }
}

/// Where `path` (relative, no `..`) leads under `root`, links followed, relative to it,
/// and `root` without links: Err when nothing is there or it leads out of `root` (`what`
/// names it).
fn beneath(root: &Path, path: &str, what: &str) -> Result<(PathBuf, PathBuf), String> {
    let root = root
        .canonicalize()
        .map_err(|e| format!("cannot open {what}: {e}"))?;
    let full = root.join(path).canonicalize().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!("{path} does not exist"),
        _ => format!("cannot reach {path}: {e}"),
    })?;
    match full.strip_prefix(&root) {
        Ok(rel) => Ok((rel.to_path_buf(), root)),
        Err(_) => Err(format!("{path} leads outside {what}")),
    }
}

/// The text of the regular file at `path` under `root` (`what` names it): a link is
/// followed only where it stays under `root`, and what it leads to is read by the file
/// tools' rule (a regular file, opened without waiting, so a named pipe cannot hold the
/// check), at most `MAX_FILE_BYTES`.
pub fn read_beneath(root: &Path, path: &str, what: &str) -> Result<String, String> {
    let (rel, root) = beneath(root, path, what)?;
    let read = open_workspace_file(&root, &rel, MAX_FILE_BYTES).and_then(|(file, size)| {
        // No more than the size it had when opened: it may grow.
        let mut bytes = Vec::with_capacity(size as usize);
        std::io::Read::read_to_end(&mut std::io::Read::take(file, size), &mut bytes)
            .map(|_| bytes)
            .map_err(WorkspaceFileError::Io)
    });
    match read {
        Ok(bytes) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
        Err(e @ WorkspaceFileError::TooLarge { .. }) => {
            Err(format!("{path} is too large to check: {e}"))
        }
        Err(e) => Err(format!("cannot read {path}: {e}")),
    }
}

/// Run `command` with `sh -c` in the workspace; exit 0 passes. Killed at `timeout`.
async fn shell(workspace: &Path, command: &str, timeout: Duration) -> Result<String, String> {
    let child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(workspace)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot run sh: {e}"))?;
    let out = match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => return Err(format!("the command failed to run: {e}")),
        Err(_) => {
            return Err(format!(
                "the command ran past {} s and was killed",
                timeout.as_secs()
            ));
        }
    };
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(String::new())
    } else {
        Err(format!(
            "exit {}: {}",
            out.status
                .code()
                .map_or("by signal".into(), |c| c.to_string()),
            excerpt(&said)
        ))
    }
}

impl Expected {
    fn matches(&self, call: &Call) -> bool {
        call.tool == self.tool
            && self
                .arguments
                .iter()
                .all(|(k, v)| call.arguments.get(k) == Some(v))
    }

    fn describe(&self) -> String {
        if self.arguments.is_empty() {
            self.tool.clone()
        } else {
            format!("{}{}", self.tool, Value::Object(self.arguments.clone()))
        }
    }
}

/// Whether `calls` follow `expected` the way `mode` says; Err says how they do not.
pub fn trajectory(
    mode: MatchMode,
    expected: &[Expected],
    calls: &[&Call],
) -> Result<String, String> {
    let made = || {
        let names: Vec<&str> = calls.iter().map(|c| c.tool.as_str()).collect();
        if names.is_empty() {
            "no calls were made".to_string()
        } else {
            format!("the calls were {}", names.join(", "))
        }
    };
    let wanted = || {
        expected
            .iter()
            .map(Expected::describe)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let ok = match mode {
        MatchMode::Exact => {
            calls.len() == expected.len() && expected.iter().zip(calls).all(|(e, c)| e.matches(c))
        }
        MatchMode::InOrder => {
            // Taking the earliest call that fits each expected one never misses a fit.
            let mut rest = calls.iter();
            expected.iter().all(|e| rest.any(|c| e.matches(c)))
        }
        MatchMode::AnyOrder => {
            // Expected calls with arguments pick first, so a bare name cannot take the one
            // call a more particular expectation needs.
            let mut used = vec![false; calls.len()];
            let mut order: Vec<&Expected> = expected.iter().collect();
            order.sort_by_key(|e| std::cmp::Reverse(e.arguments.len()));
            order.iter().all(|e| {
                let found = (0..calls.len()).find(|&i| !used[i] && e.matches(calls[i]));
                found.inspect(|&i| used[i] = true).is_some()
            })
        }
    };
    let how = match mode {
        MatchMode::Exact => "exactly",
        MatchMode::InOrder => "in order",
        MatchMode::AnyOrder => "in any order",
    };
    if ok {
        Ok(String::new())
    } else {
        Err(format!("expected {how}: {}; {}", wanted(), made()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(tool: &str, arguments: Value) -> Call {
        Call {
            step: 0,
            tool: tool.into(),
            arguments,
        }
    }

    fn expect(tool: &str, arguments: Value) -> Expected {
        Expected {
            tool: tool.into(),
            arguments: arguments.as_object().cloned().unwrap_or_default(),
        }
    }

    fn check(mode: MatchMode, expected: &[Expected], calls: &[Call]) -> bool {
        let refs: Vec<&Call> = calls.iter().collect();
        trajectory(mode, expected, &refs).is_ok()
    }

    #[test]
    fn the_three_match_modes() {
        let calls = [
            call("bash", json!({"command": "ls"})),
            call("python_execute", json!({"code": "1"})),
            call("bash", json!({"command": "wc"})),
            call("terminate", json!({"status": "success"})),
        ];
        let names = |ts: &[&str]| ts.iter().map(|t| expect(t, json!({}))).collect::<Vec<_>>();
        let all = names(&["bash", "python_execute", "bash", "terminate"]);
        assert!(check(MatchMode::Exact, &all, &calls));
        assert!(!check(
            MatchMode::Exact,
            &names(&["bash", "python_execute", "terminate"]),
            &calls
        ));
        assert!(check(
            MatchMode::InOrder,
            &names(&["bash", "bash", "terminate"]),
            &calls
        ));
        assert!(!check(
            MatchMode::InOrder,
            &names(&["terminate", "bash"]),
            &calls
        ));
        assert!(check(
            MatchMode::AnyOrder,
            &names(&["terminate", "bash", "bash"]),
            &calls
        ));
        assert!(!check(
            MatchMode::AnyOrder,
            &names(&["bash", "bash", "bash"]),
            &calls
        ));
        // Arguments named must be equal; the ones not named are not compared.
        let wc = expect("bash", json!({"command": "wc"}));
        assert!(check(
            MatchMode::InOrder,
            &[wc, expect("terminate", json!({}))],
            &calls
        ));
        let ls_after_wc = [
            expect("bash", json!({"command": "wc"})),
            expect("bash", json!({"command": "ls"})),
        ];
        assert!(!check(MatchMode::InOrder, &ls_after_wc, &calls));
        // A bare name does not take the call a particular expectation needs.
        let any = [
            expect("bash", json!({})),
            expect("bash", json!({"command": "ls"})),
        ];
        assert!(check(MatchMode::AnyOrder, &any, &calls));
    }

    #[test]
    fn a_failed_trajectory_says_what_was_made() {
        let calls = [call("bash", json!({}))];
        let refs: Vec<&Call> = calls.iter().collect();
        let why = trajectory(
            MatchMode::Exact,
            &[expect("python_execute", json!({}))],
            &refs,
        )
        .unwrap_err();
        assert!(
            why.contains("expected exactly: python_execute") && why.contains("the calls were bash"),
            "{why}"
        );
    }

    /// A check of `path` under `workspace`, given 60 s: a check that hangs fails here.
    fn judged(workspace: &Path, path: &str, rule: FileRule) -> Result<String, String> {
        let (tx, rx) = std::sync::mpsc::channel();
        let (workspace, path) = (workspace.to_path_buf(), path.to_string());
        std::thread::spawn(move || tx.send(file(&workspace, &path, &rule)));
        rx.recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("the check hung"))
    }

    fn contains(text: &str) -> FileRule {
        FileRule::Text(TextRule {
            contains: vec![text.into()],
            matches: None,
            equals: None,
        })
    }

    /// What a model may leave in the workspace to trip the checks: a named pipe (read, it
    /// would wait forever), a 1 GiB sparse file (read whole, 1 GiB of memory), links out of
    /// the workspace and links to nothing.
    #[test]
    fn file_checks_refuse_what_they_cannot_safely_read() {
        let base = std::env::temp_dir().join(format!("manus-eval-files-{}", std::process::id()));
        let (ws, elsewhere) = (base.join("ws"), base.join("elsewhere"));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::fs::write(ws.join("a.txt"), "hello").unwrap();
        std::fs::write(elsewhere.join("secret"), "hello").unwrap();
        let fifo = std::ffi::CString::new(ws.join("pipe").into_os_string().into_encoded_bytes());
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.unwrap().as_ptr(), 0o644) }, 0);
        std::fs::File::create(ws.join("big"))
            .and_then(|f| f.set_len(1 << 30))
            .unwrap();
        let link = |target: &Path, name: &str| std::os::unix::fs::symlink(target, ws.join(name));
        link(Path::new("a.txt"), "inside").unwrap();
        link(&elsewhere.join("secret"), "outside").unwrap();
        link(Path::new("nothing-here"), "dangling").unwrap();

        let pipe = judged(&ws, "pipe", contains("x")).unwrap_err();
        assert!(pipe.contains("named pipe"), "{pipe}");
        let big = judged(&ws, "big", contains("x")).unwrap_err();
        assert!(big.contains("too large to check"), "{big}");
        let out = judged(&ws, "outside", contains("hello")).unwrap_err();
        assert!(out.contains("leads outside the workspace"), "{out}");
        judged(&ws, "inside", contains("hello")).unwrap();
        let dangling = judged(&ws, "dangling", FileRule::Absent).unwrap_err();
        assert!(dangling.contains("a symbolic link"), "{dangling}");
        let gone = judged(&ws, "dangling", FileRule::Exists).unwrap_err();
        assert!(gone.contains("does not exist"), "{gone}");
        judged(&ws, "missing", FileRule::Absent).unwrap();
        judged(&ws, "a.txt/below", FileRule::Absent).unwrap();
        assert!(judged(&ws, "pipe", FileRule::Absent).is_err());
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn text_rules() {
        let rule = TextRule {
            contains: vec!["25".into()],
            matches: Some(Regex::new(r"\b1060\b").unwrap()),
            equals: None,
        };
        assert!(rule.check("there are 25 primes; sum 1060").is_ok());
        assert!(
            rule.check("there are 25 primes")
                .unwrap_err()
                .contains("does not match")
        );
        assert!(rule.check("sum 1060").unwrap_err().contains("lacks \"25\""));
    }
}
