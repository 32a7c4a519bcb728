//! `resume ID`: continue an interrupted run, showing its progress as `run-flow` does.

use std::process::ExitCode;

use manus_rt::Config;

use super::args::ResumeArgs;
use super::{exit, flow};

pub async fn run(config: Config, args: ResumeArgs) -> ExitCode {
    let Some(runtime) = flow::start(config, args.record.as_deref()).await else {
        return exit::not_started();
    };
    let followed = match runtime.resume(&args.id).await {
        Ok(handle) => Some(flow::follow(handle, args.json, args.approvals.on_approval).await),
        Err(e) => {
            eprintln!("manus-rt: {e}");
            None
        }
    };
    runtime.shutdown().await;
    exit::of_followed(followed.as_ref())
}
