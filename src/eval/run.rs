//! One run of one case: a fresh workspace with the case's files, the case's own cassette
//! (for replay profiles that name `{case}`) and site, a runtime of its own, the flow followed
//! to its end (questions answered from the case, approvals decided as it says, cancelled at
//! its time limit), then the checks; then each later turn the same way, in the same runtime
//! and workspace, once the one before has been checked. Knows nothing of suites, repeats or
//! reports.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::engine::protocol::Decision;
use crate::{Config, FlowEvent, FlowOutcome, Runtime, SubmitOptions};
use serde::{Deserialize, Serialize};

use super::case::Case;
use super::checks::{Call, Check, Run, Verdict, status_word};
use super::site::Site;
use manus_actors::tools::memory;

/// What one run of a case came to.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaseRun {
    pub case: String,
    /// Which repeat, from 1.
    pub attempt: u32,
    pub run_id: String,
    /// Every check passed.
    pub passed: bool,
    /// The flow's status (`completed`, `failed`, …); empty when it could not run.
    pub status: String,
    pub verdicts: Vec<Verdict>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost: f64,
    pub model_calls: u64,
    pub elapsed_ms: u64,
    pub tool_calls: Vec<Call>,
    pub workspace: PathBuf,
    /// Why the harness could not run the case (not a failure of the model or runtime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Where a run keeps its workspace: `out/CASE/ATTEMPT/workspace`.
pub fn workspace_of(out: &Path, case: &str, attempt: u32) -> PathBuf {
    out.join(case).join(attempt.to_string()).join("workspace")
}

/// Run `case` once with `config` (attempt `attempt`), its workspace under `out`; with
/// `record`, the model exchanges go to the case's `cassette.jsonl`.
pub async fn run_case(
    config: &Config,
    case: &Case,
    attempt: u32,
    out: &Path,
    record: bool,
) -> CaseRun {
    let workspace = workspace_of(out, &case.name, attempt);
    let mut run = CaseRun::new(&case.name, attempt, workspace.clone());
    if let Err(why) = follow(config, case, &workspace, record, &mut run).await {
        run.error = Some(why);
    }
    run.passed = run.error.is_none() && run.verdicts.iter().all(|v| v.passed);
    run
}

impl CaseRun {
    /// Take in turn `n`'s flow: its checks' verdicts (named by the turn when the case has
    /// several), its status (the last turn's is the run's), usage, time and calls.
    async fn take(
        &mut self,
        n: usize,
        several: bool,
        turn: (FlowOutcome, Vec<Call>),
        checks: &[Check],
    ) {
        let (outcome, calls) = turn;
        let evidence = Run {
            outcome: &outcome,
            calls: &calls,
            workspace: &self.workspace,
        };
        for check in checks {
            let mut verdict = check.verdict(&evidence).await;
            if several {
                verdict.check = format!("turn {n}: {}", verdict.check);
            }
            self.verdicts.push(verdict);
        }
        if n == 0 {
            self.run_id = outcome.flow_id.clone();
        }
        self.status = status_word(outcome.status);
        self.input_tokens += outcome.usage.prompt_tokens;
        self.output_tokens += outcome.usage.completion_tokens;
        self.cost += outcome.usage.cost;
        self.model_calls += outcome.usage.calls;
        self.elapsed_ms += outcome.elapsed_ms;
        self.tool_calls.extend(calls);
    }
}

impl CaseRun {
    /// A run not yet made.
    pub fn new(case: &str, attempt: u32, workspace: PathBuf) -> CaseRun {
        CaseRun {
            case: case.to_string(),
            attempt,
            run_id: String::new(),
            passed: false,
            status: String::new(),
            verdicts: vec![],
            input_tokens: 0,
            output_tokens: 0,
            cost: 0.0,
            model_calls: 0,
            elapsed_ms: 0,
            tool_calls: vec![],
            workspace,
            error: None,
        }
    }
}

/// Prepare the workspace, start a runtime for the case, run its flow and then each later
/// turn's to the end, checking each before the next starts, into `run`.
async fn follow(
    config: &Config,
    case: &Case,
    workspace: &Path,
    record: bool,
    run: &mut CaseRun,
) -> Result<(), String> {
    fresh_workspace(workspace, &case.files())?;
    let mut config = config.for_case(&case.dir)?;
    config.workspace = workspace.to_path_buf();
    if case.memory {
        config.memory.get_or_insert_with(Default::default);
        for (agent, _) in &mut config.agents {
            for tool in [memory::SAVE, memory::SEARCH] {
                if !agent.profile.tools.iter().any(|t| t == tool) {
                    agent.profile.tools.push(tool.to_string());
                }
            }
        }
    }
    if !case.turns.is_empty() || case.memory {
        // Turns are linked, and notes kept, in a run store: the run's own, beside its
        // workspace.
        let store = workspace.with_file_name("runs.db");
        for file in ["runs.db", "runs.db-wal", "runs.db-shm"] {
            let _ = std::fs::remove_file(workspace.with_file_name(file));
        }
        config.store = Some(crate::store::StoreUrl::Sqlite(store));
    }
    if let Some(action) = case.action {
        for (agent, _) in &mut config.agents {
            agent.profile.action = action;
        }
    }
    let site = match case.site().is_dir() {
        true => Some(Site::start(case.site()).await?),
        false => None,
    };
    if let Some(site) = &site {
        config.browser.extra_args.push(site.chromium_arg());
    }
    let cassette = case.dir.join("cassette.jsonl");
    let recording = cassette.with_extension("jsonl.recording");
    let mut builder = Runtime::builder().config(config);
    if record {
        builder = builder.record(&recording);
    }
    let runtime = builder
        .start()
        .await
        .map_err(|e| format!("the runtime did not start: {e}"))?;
    let several = !case.turns.is_empty();
    let first = std::iter::once((case.task.as_str(), false, &case.answers, &case.checks));
    let later = case
        .turns
        .iter()
        .map(|t| (t.task.as_str(), t.new_thread, &t.answers, &t.checks));
    let mut followed = Ok(());
    let mut previous: Option<String> = None;
    for (n, (task, new_thread, answers, checks)) in first.chain(later).enumerate() {
        let options = SubmitOptions {
            mode: case.mode,
            deltas: false,
            continues: previous.take().filter(|_| !new_thread),
            ..Default::default()
        };
        match runtime.submit(task, options).await {
            Ok(flow) => {
                previous = Some(flow.id.clone());
                let turn = watch(flow, case, answers).await;
                run.take(n, several, turn, checks).await;
            }
            Err(e) => {
                followed = Err(match n {
                    0 => format!("the flow did not start: {e}"),
                    _ => format!("turn {n} did not start: {e}"),
                });
                break;
            }
        }
    }
    runtime.shutdown().await;
    if record && recording.exists() {
        std::fs::rename(&recording, &cassette)
            .map_err(|e| format!("cannot write {}: {e}", cassette.display()))?;
    }
    followed
}

/// Follow the flow: answer its questions with `answers` and its approvals as the case says,
/// keep its tool calls, cancel it at the case's time limit.
async fn watch(
    mut flow: crate::FlowHandle,
    case: &Case,
    answers: &[String],
) -> (FlowOutcome, Vec<Call>) {
    let started = Instant::now();
    let deadline = case
        .deadline
        .map(|d| tokio::time::Instant::from_std(started + d));
    let never = tokio::time::Instant::now() + std::time::Duration::from_secs(365 * 24 * 3600);
    let timer = tokio::time::sleep_until(deadline.unwrap_or(never));
    tokio::pin!(timer);
    let mut answers = answers.iter();
    let mut calls = vec![];
    loop {
        tokio::select! {
            event = flow.next_event() => match event {
                Some(FlowEvent::FlowFinished { outcome }) => return (outcome, calls),
                Some(FlowEvent::ToolCalled { step, tool, arguments, .. }) => {
                    let arguments = serde_json::from_str(&arguments)
                        .unwrap_or(serde_json::Value::String(arguments));
                    calls.push(Call { step, tool, arguments });
                }
                Some(FlowEvent::Question { id, .. }) => {
                    let answer = answers.next().map_or("(no answer)", String::as_str);
                    flow.answer(id, answer);
                }
                Some(FlowEvent::ApprovalRequested { id, .. }) => {
                    let reason = (!case.approve).then(|| "the eval case rejects calls that need approval".into());
                    let decision = Decision::now(case.approve, None, reason, "eval");
                    if let Err(e) = flow.decide(id, decision).await {
                        tracing::warn!("cannot record the decision on approval {id}: {e}");
                    }
                }
                Some(_) => {}
                None => unreachable!("next_event yields FlowFinished before None"),
            },
            _ = &mut timer => {
                tracing::info!(case = %case.name, "the case's time limit passed; cancelling its flow");
                flow.cancel();
                timer.as_mut().reset(never);
            }
        }
    }
}

/// An empty workspace at `path` holding a copy of `files` (if the case has any).
fn fresh_workspace(path: &Path, files: &Path) -> Result<(), String> {
    let why = |e: std::io::Error| format!("cannot prepare the workspace {}: {e}", path.display());
    if path.exists() {
        std::fs::remove_dir_all(path).map_err(why)?;
    }
    std::fs::create_dir_all(path).map_err(why)?;
    if files.is_dir() {
        copy_tree(files, path).map_err(|e| format!("cannot copy {}: {e}", files.display()))?;
    }
    Ok(())
}

/// Copy the files and directories under `from` into `to`; symbolic links are refused.
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            std::fs::create_dir_all(&target)?;
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target)?;
        } else {
            return Err(std::io::Error::other(format!(
                "{} is not a plain file or directory",
                entry.path().display()
            )));
        }
    }
    Ok(())
}
