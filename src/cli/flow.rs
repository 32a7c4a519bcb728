//! Running flows in the terminal, for `run-flow`, `run`, `resume` and `run-mcp`: start the
//! runtime and say where answers come from and where tools run, submit a task, and follow a
//! flow (the board on stderr, questions and approvals answered from stdin, Ctrl-C cancels,
//! the result on stdout; a run no one can approve for stops, to be resumed).

use std::io::IsTerminal;
use std::path::Path;
use std::time::Duration;

use manus_rt::approvals::{edited_arguments, local_user};
use manus_rt::board::{Board, final_report};
use manus_rt::engine::plan::StepStatus;
use manus_rt::engine::protocol::Decision;
use manus_rt::{Config, FlowEvent, FlowHandle, FlowMode, FlowOutcome, Runtime, SubmitOptions};

use super::args::OnApproval;
use super::terminal::read_answer;

/// Start the runtime and say where the model's answers come from and where tools run.
pub async fn start(config: Config, record: Option<&Path>) -> Option<Runtime> {
    let replaying = config.llm.values().any(|l| l.cassette.is_some());
    if let Some(found) = &config.model_source {
        eprintln!("note: {found}");
    }
    let mut builder = Runtime::builder().config(config);
    if let Some(path) = record {
        builder = builder.record(path);
    }
    let runtime = match builder.start().await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("manus-rt: {e}");
            return None;
        }
    };
    if replaying {
        eprintln!(
            "note: the model's answers are replayed from a recorded cassette (api_type = \"replay\"); the tools run for real."
        );
    }
    eprintln!("{}", sandbox_note(runtime.config()));
    if let Some(store) = runtime.store() {
        eprintln!(
            "note: runs are recorded in {}; if this process dies mid-flow, `manus-rt resume ID` continues the run",
            store.url()
        );
    }
    Some(runtime)
}

/// How long a flow no one here can approve for must stay quiet, with requests waiting and
/// no step running, before the run is stopped for `manus-rt approvals` and `resume`.
const SETTLE: Duration = Duration::from_millis(500);

/// A timer that does not fire in a flow's life.
const NEVER: Duration = Duration::from_secs(365 * 24 * 3600);

/// How following a flow ended: the flow ended, or it waits for approvals no one here can
/// give, and was left for `manus-rt approvals` and `resume`.
pub enum Followed {
    /// Boxed: an outcome is far larger than a pause.
    Ended(Box<FlowOutcome>),
    Paused {
        run_id: String,
        waiting: usize,
    },
}

impl Followed {
    pub fn outcome(&self) -> Option<&FlowOutcome> {
        match self {
            Followed::Ended(o) => Some(o),
            Followed::Paused { .. } => None,
        }
    }
}

/// Run one task to its end, showing its progress; how it ended, or `None` if it could not
/// start. With `continues`, the task is the next turn of that run's conversation.
pub async fn drive(
    runtime: &Runtime,
    task: &str,
    json: bool,
    mode: FlowMode,
    on_approval: OnApproval,
    continues: Option<String>,
) -> Option<Followed> {
    // The board shows the model's text as it comes; `--json` prints only the outcome.
    let options = SubmitOptions {
        mode,
        deltas: !json,
        continues,
        // With [memory], the notes of whoever runs the CLI here.
        user: Some(local_user()),
    };
    match runtime.submit(task, options).await {
        Ok(flow) => Some(follow(flow, json, on_approval).await),
        Err(e) => {
            eprintln!("manus-rt: {e}");
            None
        }
    }
}

/// Ask at the terminal about approval request `id`: `y` approves, `n REASON` rejects,
/// `e ARGUMENTS` approves with other arguments (JSON).
async fn ask_approval() -> Decision {
    loop {
        eprint!("approve? y = yes, n REASON = no, e {{JSON}} = yes with these arguments> ");
        let line = read_answer().await;
        let (word, rest) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        let rest = rest.trim();
        let decision = |approve: bool, arguments: Option<String>, reason: Option<String>| {
            Decision::now(approve, arguments, reason, local_user())
        };
        match word {
            "y" | "yes" => return decision(true, None, None),
            "n" | "no" => {
                let reason = (!rest.is_empty()).then(|| rest.to_string());
                return decision(false, None, reason);
            }
            "e" | "edit" => match edited_arguments(rest) {
                Ok(arguments) => return decision(true, Some(arguments), None),
                Err(why) => eprintln!("{why}"),
            },
            _ if line.starts_with("(no answer") => {
                return decision(
                    false,
                    None,
                    Some("no one answered: standard input closed".into()),
                );
            }
            _ => {}
        }
    }
}

/// Why a request was refused when no one can answer it here.
const NO_ONE: &str = "no one could be asked (a run without a terminal, --on-approval reject)";

/// Show a flow's progress, answer its questions and approvals from stdin (or, when no one
/// can, do what `on_approval` says), and return how it ended.
pub async fn follow(mut flow: FlowHandle, json: bool, on_approval: OnApproval) -> Followed {
    let live = std::io::stderr().is_terminal();
    let someone = !json && std::io::stdin().is_terminal();
    let mut board = Board::new(std::io::stderr(), live);
    let mut ticker = tokio::time::interval(Duration::from_millis(250));
    // Not polled for a while (no plan yet, an answer being read): no burst of redraws after.
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    // When no one can decide here and nothing runs but requests wait, the run stops: once
    // the flow has been quiet for `SETTLE` (steps it was about to start would have started).
    let settle = tokio::time::sleep(NEVER);
    tokio::pin!(settle);
    let outcome = loop {
        tokio::select! {
            _ = &mut settle => {
                return Followed::Paused { run_id: flow.id.clone(), waiting: board.view().approvals.len() };
            }
            event = flow.next_event() => match event {
                Some(FlowEvent::FlowFinished { outcome }) => {
                    if !json {
                        board.on_event(&FlowEvent::FlowFinished { outcome: outcome.clone() });
                    }
                    break outcome;
                }
                Some(e) => {
                    board.on_event(&e);
                    match e {
                        // An MCP server's form, with no one here to fill it in, is declined.
                        FlowEvent::Question { id, form: Some(_), .. } if !someone || on_approval == OnApproval::Reject => {
                            flow.answer(id, manus_rt::engine::mcp::declined(NO_ONE));
                        }
                        FlowEvent::Question { id, .. } => {
                            let answer = read_answer().await;
                            flow.answer(id, answer);
                        }
                        FlowEvent::ApprovalRequested { id, .. } if someone => {
                            decide(&flow, id, ask_approval().await).await;
                        }
                        FlowEvent::ApprovalRequested { id, .. } if on_approval == OnApproval::Reject => {
                            decide(&flow, id, Decision::now(
                                false,
                                None,
                                Some(NO_ONE.into()),
                                local_user(),
                            )).await;
                        }
                        _ => {}
                    }
                    let view = board.view();
                    let running = view.plan.as_ref().is_some_and(|p| p.count(StepStatus::InProgress) > 0);
                    let stop = !someone && on_approval == OnApproval::Stop;
                    let wait = if stop && !view.approvals.is_empty() && !running {
                        SETTLE
                    } else {
                        NEVER
                    };
                    settle.as_mut().reset(tokio::time::Instant::now() + wait);
                }
                None => unreachable!("next_event yields FlowFinished before None"),
            },
            // Polled only while the board shows times that move, so nothing else wakes a
            // waiting flow's process.
            _ = ticker.tick(), if board.ticks() => board.tick(),
            _ = tokio::signal::ctrl_c() => {
                eprintln!("\nmanus-rt: cancelling the flow…");
                flow.cancel();
            }
        }
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&outcome).unwrap_or_default()
        );
    } else if !live {
        // Plain mode already printed the report on stderr; stdout gets the result alone.
        println!(
            "{}",
            if outcome.summary.is_empty() {
                final_report(&outcome)
            } else {
                outcome.summary.clone()
            }
        );
    }
    Followed::Ended(Box::new(outcome))
}

/// Hand the flow a decision made here, saying so when another one was recorded first
/// (`manus-rt approvals` from another terminal) or the store cannot take it (the request
/// then stays open, for `manus-rt approvals`).
async fn decide(flow: &FlowHandle, id: u64, decision: Decision) {
    match flow.decide(id, decision).await {
        Ok(true) => {}
        Ok(false) => eprintln!(
            "manus-rt: approval request {id} was decided elsewhere first; that decision stands"
        ),
        Err(e) => eprintln!(
            "manus-rt: cannot record the decision on approval request {id} ({e}); it stays open: decide it with `manus-rt approvals`"
        ),
    }
}

/// Where code the model writes runs, and with what rights: the first note of a run and of a
/// service's start (never silently unsafe).
pub(super) fn sandbox_note(config: &manus_rt::Config) -> String {
    match &config.sandbox {
        Some(s) => format!(
            "note: code and files live in a sandbox container per flow ({} via {}, in {}){}",
            s.image,
            s.engines_text(),
            s.work_dir,
            match &s.mount {
                Some(host) => format!(", which sees {} on this machine", host.display()),
                None => String::new(),
            }
        ),
        None => match &config.tools.confine {
            Some(c) => format!(
                "note: code runs on this machine confined to {} (Landlock and seccomp; network {})",
                config.workspace.display(),
                c.network
            ),
            None => match &config.unconfined {
                Some(warning) => format!("WARNING: {warning}"),
                None => format!(
                    "note: tools run on this machine in {}; code the model writes runs with your \
                     user's rights ([sandbox] mode = \"process\" confines it to the workspace)",
                    config.workspace.display()
                ),
            },
        },
    }
}
