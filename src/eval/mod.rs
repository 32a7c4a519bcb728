//! `manus-rt eval`: how well a model and a config do. A suite is a directory of cases (a
//! task, input files, checks); each case runs as a flow of its own, in a fresh workspace
//! and runtime, as many times as asked and several at once; the checks' verdicts become a
//! report (pass@1, pass@k, pass^k, tokens, cost, time). The format is `evals/README.md`.
//!
//! `case` reads case files, `checks` judges a finished run, `run` makes one run of one
//! case, `site` serves a case's pages to its browser, `report` tallies and prints. This
//! module only schedules the runs. Nothing here knows the CLI.

pub mod case;
pub mod checks;
pub mod report;
mod run;
mod site;

use std::path::PathBuf;
use std::sync::Arc;

use tokio::task::JoinSet;

use crate::Config;

pub use case::{Case, load_suite};
pub use report::Report;
pub use run::CaseRun;

/// How to run a suite.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// Runs per case.
    pub repeat: u32,
    /// Runs at once.
    pub parallel: usize,
    /// Where the runs' workspaces go.
    pub out: PathBuf,
    /// Write each case's model exchanges to its `cassette.jsonl`.
    pub record: bool,
}

/// Run every case `schedule.repeat` times, at most `schedule.parallel` at once; `done`
/// hears of each run as it ends (with how many have ended). The runs, in the order they
/// ended.
pub async fn run_suite(
    config: &Config,
    cases: Vec<Case>,
    schedule: &Schedule,
    mut done: impl FnMut(&CaseRun, usize),
) -> Vec<CaseRun> {
    let cases: Arc<Vec<Case>> = Arc::new(cases);
    let config = Arc::new(config.clone());
    let mut queue = (0..cases.len())
        .flat_map(|i| (1..=schedule.repeat).map(move |attempt| (i, attempt)))
        .collect::<std::collections::VecDeque<_>>();
    let mut running = JoinSet::new();
    let mut which = std::collections::HashMap::new();
    let mut runs = vec![];
    loop {
        while running.len() < schedule.parallel.max(1)
            && let Some((i, attempt)) = queue.pop_front()
        {
            let (config, cases, schedule) = (config.clone(), cases.clone(), schedule.clone());
            let task = running.spawn(async move {
                run::run_case(&config, &cases[i], attempt, &schedule.out, schedule.record).await
            });
            which.insert(task.id(), (i, attempt));
        }
        let run = match running.join_next_with_id().await {
            Some(Ok((_, run))) => run,
            Some(Err(e)) => {
                let (i, attempt) = which[&e.id()];
                let name = &cases[i].name;
                let workspace = run::workspace_of(&schedule.out, name, attempt);
                let mut broke = CaseRun::new(name, attempt, workspace);
                broke.error = Some(format!("the run broke down: {e}"));
                broke
            }
            None => return runs,
        };
        runs.push(run);
        done(runs.last().expect("just pushed"), runs.len());
    }
}
