//! `run-flow TASK` (planned) and `run TASK` (the primary agent alone): one flow, followed in
//! the terminal; `--record` writes its model exchanges to a cassette.

use std::process::ExitCode;

use manus_rt::{Config, FlowMode};

use super::args::RunArgs;
use super::{exit, flow};

pub async fn run(config: Config, args: RunArgs, mode: FlowMode) -> ExitCode {
    let Some(runtime) = flow::start(config, args.record.as_deref()).await else {
        return exit::not_started();
    };
    let followed = flow::drive(
        &runtime,
        &args.task,
        args.json,
        mode,
        args.approvals.on_approval,
        args.continues,
    )
    .await;
    if let Some(outcome) = followed.as_ref().and_then(|f| f.outcome())
        && runtime.store().is_some()
        && !args.json
    {
        eprintln!(
            "note: to follow up on this run: manus-rt run-flow --continue {} \"…\" (or manus-rt chat --continue {0})",
            outcome.flow_id
        );
    }
    runtime.shutdown().await;
    exit::of_followed(followed.as_ref())
}
