//! The exit codes every command shares: 0 it did its job (the flow completed), 1 it ran and
//! did not (the flow failed, a check failed, the server stopped on an error), 2 it could not
//! start (config, store, server, flow submission). Why goes to stderr, prefixed `manus-rt:`.

use std::fmt::Display;
use std::process::ExitCode;

use manus_rt::{FlowOutcome, FlowStatus};

/// Exit 1: it ran and did not do its job.
pub fn failed() -> ExitCode {
    ExitCode::from(1)
}

/// Exit 2: it could not start.
pub fn not_started() -> ExitCode {
    ExitCode::from(2)
}

/// Say why on stderr, then exit 1.
pub fn failed_because(why: impl Display) -> ExitCode {
    eprintln!("manus-rt: {why}");
    failed()
}

/// Say why on stderr, then exit 2.
pub fn not_started_because(why: impl Display) -> ExitCode {
    eprintln!("manus-rt: {why}");
    not_started()
}

/// How a followed flow ended: as `of_flow`, or 3 if it stopped to wait for approvals no
/// one at this terminal could give (saying how to go on).
pub fn of_followed(followed: Option<&super::flow::Followed>) -> ExitCode {
    match followed {
        Some(super::flow::Followed::Paused { run_id, waiting }) => {
            eprintln!(
                "manus-rt: run {run_id} waits for approval of {waiting} tool call(s) and was \
                 stopped. `manus-rt approvals list {run_id}` shows them; `manus-rt approvals \
                 approve {run_id} N` or `reject {run_id} N --reason \"…\"` decides; then \
                 `manus-rt resume {run_id}` goes on."
            );
            ExitCode::from(3)
        }
        other => of_flow(other.and_then(|f| f.outcome())),
    }
}

/// 0 if the flow completed, 1 if it ended otherwise, 2 if it never started.
pub fn of_flow(outcome: Option<&FlowOutcome>) -> ExitCode {
    match outcome {
        Some(o) if o.status == FlowStatus::Completed => ExitCode::SUCCESS,
        Some(_) => failed(),
        None => not_started(),
    }
}
