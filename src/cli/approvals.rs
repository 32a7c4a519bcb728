//! `approvals list [RUN]`, `approvals approve RUN N`, `approvals reject RUN N --reason …`:
//! the tool calls waiting for a person, read and decided in the run store, from any
//! terminal: a run still running in a process gets the decision from there within a
//! second; a stopped one when `resume` picks it up.

use std::process::ExitCode;

use manus_rt::Config;
use manus_rt::approvals::{PendingApproval, edited_arguments, local_user, pending};
use manus_rt::engine::protocol::Decision;
use manus_rt::store::{RunStatus, RunStore, StoreError};

use super::args::ApprovalsAction;
use super::exit;

pub async fn run(config: &Config, action: ApprovalsAction) -> ExitCode {
    let Some(url) = &config.store else {
        return exit::not_started_because(format!(
            "approvals are kept in the run store, and runs are not stored ([store] enabled = false in {})",
            config.source
        ));
    };
    let store = match RunStore::open(url).await {
        Ok(s) => s,
        Err(e) => return exit::not_started_because(e),
    };
    let done = match action {
        ApprovalsAction::List { run, json } => list(&store, run.as_deref(), json).await,
        ApprovalsAction::Approve { run, id, arguments } => {
            let arguments = match arguments.as_deref().map(edited_arguments).transpose() {
                Ok(a) => a,
                Err(why) => {
                    store.close().await;
                    return exit::not_started_because(format!("--arguments: {why}"));
                }
            };
            decide(&store, &run, id, true, arguments, None).await
        }
        ApprovalsAction::Reject { run, id, reason } => {
            decide(&store, &run, id, false, None, Some(reason)).await
        }
    };
    store.close().await;
    match done {
        Ok(code) => code,
        Err(e) => exit::not_started_because(e),
    }
}

async fn list(store: &RunStore, run: Option<&str>, json: bool) -> Result<ExitCode, StoreError> {
    let runs: Vec<String> = match run {
        Some(id) => vec![id.to_string()],
        None => store
            .list(1000)
            .await?
            .into_iter()
            .filter(|r| r.status == RunStatus::Running)
            .map(|r| r.id)
            .collect(),
    };
    let mut rows: Vec<(String, PendingApproval)> = vec![];
    for id in runs {
        let outside = store.decisions(&id).await?;
        for p in pending(&store.events(&id).await?, &outside) {
            rows.push((id.clone(), p));
        }
    }
    if json {
        let all: Vec<_> = rows
            .iter()
            .map(|(run, p)| serde_json::json!({"run": run, "approval": p}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&all).unwrap_or_default());
        return Ok(ExitCode::SUCCESS);
    }
    if rows.is_empty() {
        println!("no tool call waits for approval");
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<28} {:>3} {:>4} {:<14} {:<18} CALL · WHY",
        "RUN", "N", "STEP", "AGENT", "TOOL"
    );
    for (run, p) in &rows {
        println!(
            "{:<28} {:>3} {:>4} {:<14} {:<18} {} · {}",
            run,
            p.id,
            p.request.step.map_or("plan".to_string(), |s| s.to_string()),
            p.request.agent,
            p.request.tool,
            p.request.arguments.replace('\n', " "),
            p.request.why
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn decide(
    store: &RunStore,
    run: &str,
    id: u64,
    approve: bool,
    arguments: Option<String>,
    reason: Option<String>,
) -> Result<ExitCode, StoreError> {
    let Some(stored) = store.get(run).await? else {
        return Ok(exit::not_started_because(format!(
            "no run `{run}` in {} (`manus-rt approvals list` shows what waits)",
            store.url()
        )));
    };
    let outside = store.decisions(run).await?;
    let Some(request) = pending(&store.events(run).await?, &outside)
        .into_iter()
        .find(|p| p.id == id)
    else {
        return Ok(exit::not_started_because(format!(
            "run {run} has no undecided approval request {id} (`manus-rt approvals list {run}` shows its requests)"
        )));
    };
    if stored.status != RunStatus::Running {
        return Ok(exit::not_started_because(format!(
            "run {run} has ended ({})",
            stored.status
        )));
    }
    let decision = Decision::now(approve, arguments, reason, local_user());
    if !store.decide(run, id, decision, false).await? {
        return Ok(exit::not_started_because(format!(
            "request {id} of run {run} was decided already"
        )));
    }
    let live = !store.interrupted().await?.iter().any(|(r, _)| r == run);
    let verb = if approve { "approved" } else { "rejected" };
    let next = if live {
        "the process running it goes on within a second".to_string()
    } else {
        format!("`manus-rt resume {run}` goes on")
    };
    println!(
        "{verb} request {id} of run {run} ({} {}); {next}",
        request.request.tool, request.request.arguments
    );
    Ok(ExitCode::SUCCESS)
}
