//! `runs list`, `runs show ID` and `runs prune`: the recorded runs, read (or pruned) in the
//! store without starting any flow; a running run whose process is gone shows as
//! `interrupted`.

use std::process::ExitCode;

use manus_rt::store::{Retention, RunStatus, RunStore, StoreError, StoredRun, now_ms};
use manus_rt::{Config, FlowEvent};

use super::args::RunsAction;
use super::exit;

pub async fn run(config: &Config, action: RunsAction) -> ExitCode {
    let Some(url) = &config.store else {
        return exit::not_started_because(format!(
            "runs are not stored ([store] enabled = false in {})",
            config.source
        ));
    };
    let store = match RunStore::open(url).await {
        Ok(s) => s,
        Err(e) => return exit::not_started_because(e),
    };
    let shown = match action {
        RunsAction::List { limit, json } => list_runs(&store, limit, json).await,
        RunsAction::Show { id, json } => show_run(&store, &id, json).await,
        RunsAction::Prune {
            keep_days,
            keep_runs,
            json,
        } => {
            let retention = Retention {
                keep_days: keep_days.or(config.retention.keep_days),
                keep_runs: keep_runs.or(config.retention.keep_runs),
            };
            prune_runs(&store, retention, json).await
        }
    };
    store.close().await;
    match shown {
        Ok(code) => code,
        Err(e) => exit::not_started_because(e),
    }
}

async fn prune_runs(
    store: &RunStore,
    retention: Retention,
    json: bool,
) -> Result<ExitCode, StoreError> {
    if !retention.bounded() {
        eprintln!(
            "manus-rt: nothing to prune: give --keep-days/--keep-runs or set [store] keep_days/keep_runs"
        );
        return Ok(exit::not_started());
    }
    let pruned = store.prune(retention).await?;
    if json {
        println!("{}", serde_json::json!(pruned));
    } else {
        println!("pruned {} run(s)", pruned.len());
    }
    Ok(ExitCode::SUCCESS)
}

/// A run's status as `runs` shows it: `interrupted` for a running run whose process is gone.
/// `running`, `awaiting_approval` (a step waits for a person), `interrupted` (its process
/// is gone; `interrupted (approval)` when a step also waits), or how it ended.
fn status_of(run: &StoredRun, interrupted: &[(String, Option<String>)]) -> String {
    let waiting = run.status == RunStatus::Running
        && run
            .plan
            .as_ref()
            .is_some_and(|p| p.count(manus_rt::engine::plan::StepStatus::AwaitingApproval) > 0);
    match (interrupted.iter().any(|(id, _)| id == &run.id), waiting) {
        (true, true) => "interrupted (approval)".into(),
        (true, false) => "interrupted".into(),
        (false, true) => "awaiting_approval".into(),
        (false, false) => run.status.to_string(),
    }
}

async fn list_runs(store: &RunStore, limit: usize, json: bool) -> Result<ExitCode, StoreError> {
    let runs = store.list(limit).await?;
    let interrupted = store.interrupted().await?;
    if json {
        let rows: Vec<serde_json::Value> = runs
            .iter()
            .map(|r| {
                let (done, total) = r.progress();
                serde_json::json!({
                    "id": r.id, "status": status_of(r, &interrupted), "task": r.task,
                    "steps_completed": done, "steps": total, "usage": r.usage,
                    "created_at": r.created_at, "updated_at": r.updated_at,
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).unwrap_or_default()
        );
        return Ok(ExitCode::SUCCESS);
    }
    if runs.is_empty() {
        println!("no runs in {}", store.url());
        return Ok(ExitCode::SUCCESS);
    }
    let now = now_ms();
    println!(
        "{:<28} {:<22} {:>5} {:>9} {:>8}  TASK",
        "ID", "STATUS", "STEPS", "TOKENS", "AGE"
    );
    for r in &runs {
        let (done, total) = r.progress();
        println!(
            "{:<28} {:<22} {:>5} {:>9} {:>8}  {}",
            r.id,
            status_of(r, &interrupted),
            format!("{done}/{total}"),
            r.usage.total(),
            age(now - r.created_at),
            r.task
                .replace('\n', " ")
                .chars()
                .take(60)
                .collect::<String>()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `42s`, `5m`, `3h`, `2d`.
fn age(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

async fn show_run(store: &RunStore, id: &str, json: bool) -> Result<ExitCode, StoreError> {
    let Some(run) = store.get(id).await? else {
        eprintln!(
            "manus-rt: no run `{id}` in {} (`manus-rt runs list` shows the runs)",
            store.url()
        );
        return Ok(exit::not_started());
    };
    let events = store.events(id).await?;
    let memories = store.memories(id).await?;
    let place = store.turn_of(id).await?;
    let turns = store.turns(&place.thread).await?;
    if json {
        let all = serde_json::json!({"run": run, "thread": place, "events": events, "memories": memories});
        println!("{}", serde_json::to_string_pretty(&all).unwrap_or_default());
        return Ok(ExitCode::SUCCESS);
    }
    let status = status_of(&run, &store.interrupted().await?);
    let (done, total) = run.progress();
    println!(
        "run {} · {status} · {done}/{total} steps completed · {} tokens in {} model calls · {}s",
        run.id,
        run.usage.total(),
        run.usage.calls,
        run.elapsed_ms / 1000
    );
    println!("task: {}", run.task);
    if turns.len() > 1 {
        println!(
            "conversation {}: this is turn {} of {}",
            place.thread,
            place.turn,
            turns.len()
        );
        for (n, turn) in &turns {
            let here = if turn.id == run.id { "▸" } else { " " };
            println!("  {here} turn {n}: {} ({})", turn.id, turn.status.as_str());
        }
    }
    println!();
    let mut view = manus_rt::view::FlowView::default();
    for e in &events {
        view.apply(&e.event);
    }
    if let Some(f) = &view.fork {
        println!(
            "forked from run {} at step {} (workspace {}): {} recorded answer(s) replayed, {} tool result(s) differ from the record",
            f.from,
            f.at_step,
            f.workspace,
            f.replayed,
            f.differed.len()
        );
        for (step, d) in &f.differed {
            println!("  step {step}: {}", manus_rt::board::diff_line(d));
        }
        println!();
    }
    match &run.plan {
        Some(plan) => println!("{}", plan.view()),
        None => println!("(no plan yet: it was planning)\n"),
    }
    let revisions: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.event {
            FlowEvent::PlanRevised {
                previous,
                plan,
                reason,
            } => {
                let replaced: Vec<String> = (0..previous.steps.len())
                    .filter(|&i| plan.steps[i].replaced_in == Some(plan.revision))
                    .map(|i| i.to_string())
                    .collect();
                let added: Vec<String> = (previous.steps.len()..plan.steps.len())
                    .map(|i| i.to_string())
                    .collect();
                Some(format!(
                    "  revision {}: step(s) {} replaced by {} — after: {}",
                    plan.revision,
                    replaced.join(", "),
                    added.join(", "),
                    reason.replace('\n', " ")
                ))
            }
            _ => None,
        })
        .collect();
    if !revisions.is_empty() {
        println!("Plan revisions (each version is stored with its event):");
        for r in &revisions {
            println!("{r}");
        }
        println!();
    }
    if !memories.is_empty() {
        println!("Agent memories (each step's working memory when it ended):");
        for m in &memories {
            println!(
                "  step {} attempt {} ({}): {} messages",
                m.step,
                m.attempt,
                m.agent,
                m.messages.len()
            );
        }
    }
    println!("{} events stored", events.len());
    if let Some(o) = &run.outcome {
        println!("\nended {}: {}", status, o.reason);
        if !o.summary.is_empty() {
            println!("\n{}", o.summary);
        }
    } else if status.starts_with("interrupted") {
        println!("\nmanus-rt resume {} continues it", run.id);
    }
    Ok(ExitCode::SUCCESS)
}
