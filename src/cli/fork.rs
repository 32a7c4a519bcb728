//! `fork RUN --at-step N`: a new run made from a finished one in a fresh workspace, its
//! steps before N replayed from the record (no model call) and step N on run live; its
//! progress shown as `run-flow` shows it, then what the replay gave: how many answers were
//! replayed and each tool result that differed from the record.

use std::process::ExitCode;

use manus_rt::view::FlowView;
use manus_rt::{Config, ForkOptions};

use super::args::ForkArgs;
use super::{exit, flow};

pub async fn run(config: Config, args: ForkArgs) -> ExitCode {
    let Some(runtime) = flow::start(config, None).await else {
        return exit::not_started();
    };
    let options = ForkOptions {
        at_step: args.at_step,
        task: args.task,
        step_text: args.step_text,
        workspace: args.workspace,
    };
    let followed = match runtime.fork(&args.id, options).await {
        Ok(handle) => {
            let id = handle.id.clone();
            let followed = flow::follow(handle, args.json, args.approvals.on_approval).await;
            report(&runtime, &id).await;
            Some(followed)
        }
        Err(e) => {
            eprintln!("manus-rt: {e}");
            None
        }
    };
    runtime.shutdown().await;
    exit::of_followed(followed.as_ref())
}

/// The fork's origin and replay, from its stored events, on stderr.
async fn report(runtime: &manus_rt::Runtime, id: &str) {
    let Some(store) = runtime.store() else { return };
    let Ok(events) = store.events(id).await else {
        return;
    };
    let mut view = FlowView::default();
    for e in &events {
        view.apply(&e.event);
    }
    let Some(fork) = view.fork else { return };
    eprintln!(
        "fork {id} of run {} at step {}: {} recorded answer(s) replayed, {} tool result(s) differ from the record; workspace {}",
        fork.from,
        fork.at_step,
        fork.replayed,
        fork.differed.len(),
        fork.workspace
    );
    for (step, d) in &fork.differed {
        eprintln!("  step {step}: {}", manus_rt::board::diff_line(d));
    }
}
