//! Running flows in the terminal, for `run-flow`, `run`, `resume` and `run-mcp`: start the
//! runtime and say where answers come from and where tools run, submit a task, and follow a
//! flow (the board on stderr, questions answered from stdin, Ctrl-C cancels, the result on
//! stdout).

use std::io::IsTerminal;
use std::path::Path;
use std::time::Duration;

use manus_rt::board::{Board, final_report};
use manus_rt::{Config, FlowEvent, FlowHandle, FlowMode, FlowOutcome, Runtime, SubmitOptions};

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
    match &runtime.config().sandbox {
        Some(s) => eprintln!(
            "note: code and files live in a sandbox container per flow ({} via {}, in {}){}",
            s.image,
            s.docker_host,
            s.work_dir,
            match &s.mount {
                Some(host) => format!(", which sees {} on this machine", host.display()),
                None => String::new(),
            }
        ),
        None => eprintln!(
            "note: tools run on this machine, in {}",
            runtime.config().workspace.display()
        ),
    }
    if let Some(store) = runtime.store() {
        eprintln!(
            "note: runs are recorded in {}; if this process dies mid-flow, `manus-rt resume ID` continues the run",
            store.url()
        );
    }
    Some(runtime)
}

/// Run one task to its end, showing its progress; the outcome, or `None` if it could not
/// start.
pub async fn drive(
    runtime: &Runtime,
    task: &str,
    json: bool,
    mode: FlowMode,
) -> Option<FlowOutcome> {
    // The board shows the model's text as it comes; `--json` prints only the outcome.
    let options = SubmitOptions {
        mode,
        deltas: !json,
    };
    match runtime.submit(task, options).await {
        Ok(flow) => Some(follow(flow, json).await),
        Err(e) => {
            eprintln!("manus-rt: {e}");
            None
        }
    }
}

/// Show a flow's progress, answer its questions from stdin, and return how it ended.
pub async fn follow(mut flow: FlowHandle, json: bool) -> FlowOutcome {
    let live = std::io::stderr().is_terminal();
    let mut board = Board::new(std::io::stderr(), live);
    let mut ticker = tokio::time::interval(Duration::from_millis(250));
    let outcome = loop {
        tokio::select! {
            event = flow.next_event() => match event {
                Some(FlowEvent::FlowFinished { outcome }) => {
                    if !json {
                        board.on_event(&FlowEvent::FlowFinished { outcome: outcome.clone() });
                    }
                    break outcome;
                }
                Some(e) => {
                    board.on_event(&e);
                    if let FlowEvent::Question { id, .. } = e {
                        let answer = read_answer().await;
                        flow.answer(id, answer);
                    }
                }
                None => unreachable!("next_event yields FlowFinished before None"),
            },
            _ = ticker.tick() => board.tick(),
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
    outcome
}
