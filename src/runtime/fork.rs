//! `Runtime::fork`: a new run made from a finished one, in a fresh workspace. The steps
//! before the fork's step that completed run again on their recorded model answers (no
//! model call; their tools run for real and rebuild the files), then the flow goes on live
//! from that step, on the stored plan (optionally with the task or that step's text
//! edited). The record is read by `crate::forks`; the planner takes it as a `Resume` with
//! the steps to replay and a `Fork`. A fork interrupted goes on in its workspace, replaying
//! the steps it had not yet (`fork_left`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use manus_actors::plan::{Plan, StepStatus};
use manus_actors::planner::{Fork, Resume};
use manus_actors::protocol::{FlowEvent, StepReplay};

use super::{FlowHandle, Run, Runtime, RuntimeError, new_flow_id};
use crate::store::{RunStatus, StoredEvent, StoredRun};

/// What to fork a run at, and what to change.
#[derive(Debug, Clone, Default)]
pub struct ForkOptions {
    /// The step the fork goes live from (numbered from 0, as the plan shows them).
    pub at_step: usize,
    /// The task, edited; the original's when `None`.
    pub task: Option<String>,
    /// Step `at_step`'s text, edited (its `[AGENT]` tag included, if it should have one).
    pub step_text: Option<String>,
    /// Where the fork's agents work: a directory that does not exist or is empty. `None`:
    /// a new one, `<workspace>-forks/<fork's id>` beside the runtime's workspace.
    pub workspace: Option<PathBuf>,
}

impl Runtime {
    /// Fork finished run `run_id` at step `options.at_step` (see the module's doc). The
    /// fork's `FlowEvent::Forked` names where it came from and its workspace; each replayed
    /// step reports its answers and any tool result that differs (`StepReplayed`).
    pub async fn fork(
        &self,
        run_id: &str,
        options: ForkOptions,
    ) -> Result<FlowHandle, RuntimeError> {
        let store = self.store.as_ref().ok_or(RuntimeError::NoStore)?;
        let run = store
            .get(run_id)
            .await?
            .ok_or_else(|| RuntimeError::UnknownRun(run_id.to_string()))?;
        if matches!(run.status, RunStatus::Running | RunStatus::Queued) {
            return Err(RuntimeError::NotEnded {
                id: run.id,
                status: run.status,
            });
        }
        let Some(mut plan) = run.plan else {
            return Err(RuntimeError::NoPlan(run.id));
        };
        let at = options.at_step;
        if plan.steps.get(at).is_none_or(|s| !s.is_live()) {
            let live: Vec<String> = plan
                .steps
                .iter()
                .enumerate()
                .filter(|(_, s)| s.is_live())
                .map(|(i, _)| i.to_string())
                .collect();
            return Err(RuntimeError::StepOutOfRange {
                id: run.id,
                at,
                steps: live.join(", "),
            });
        }
        if self.config.sandbox.is_some() {
            return Err(RuntimeError::ForkRefused(
                "a fork needs a fresh workspace of its own, and a sandboxed runtime has one for \
                 all its flows; fork with a runtime without [sandbox] use_sandbox"
                    .into(),
            ));
        }
        if store.lease_clock().is_some() {
            return Err(RuntimeError::ForkRefused(
                "forks run on a single node: a cluster's runs are claimed from its queue by \
                 whichever node has room, and a fork's workspace is one node's; fork with a \
                 runtime without [cluster]"
                    .into(),
            ));
        }
        let events = store.events(&run.id).await?;
        let steps = crate::forks::recorded_steps(&plan, &events, at);
        // A fork of a follow-up turn reads the same earlier turns (it is not a turn of
        // their thread itself), and is its user's.
        let (turn, user) = self.place(&run.id).await?;
        let id = new_flow_id();
        let workspace = fresh_workspace(
            options
                .workspace
                .unwrap_or_else(|| forks_dir(&self.config.workspace).join(&id)),
        )?;
        for (i, s) in plan.steps.iter_mut().enumerate() {
            if !s.is_live() {
                continue;
            }
            let mut fresh = manus_actors::plan::PlanStep::new(std::mem::take(&mut s.text));
            fresh.depends_on = s.depends_on.take();
            if i == at
                && let Some(text) = &options.step_text
            {
                fresh.text = text.clone();
            }
            fresh.status = StepStatus::NotStarted;
            *s = fresh;
        }
        self.start_flow(Run {
            id,
            task: options.task.unwrap_or(run.task),
            mode: run.mode,
            resume: Some(Resume {
                plan: Some(plan),
                replay: steps,
                fork: Some(Fork {
                    from: run.id,
                    at_step: at,
                    workspace: workspace.display().to_string(),
                }),
                ..Default::default()
            }),
            deltas: false,
            seq: 0,
            created_at: crate::store::now_ms(),
            workspace: Some(workspace),
            turn,
            user,
        })
        .await
    }
}

/// A flow's copy of the pool, made to work in `dir`: its tools and its system messages.
pub(super) fn work_in(pool: &mut [manus_actors::agent::AgentSpec], dir: &std::path::Path) {
    for agent in pool {
        agent.workspace = dir.to_path_buf();
        agent.system = manus_actors::agent::AgentSpec::opening(&agent.profile, dir, &agent.name);
    }
}

impl Runtime {
    /// Where an interrupted fork (whose events are `events`) goes on: its workspace, and
    /// the steps it was to replay that have not completed, read again from the run it was
    /// forked from (none if that run is gone: they run live). `None` if it is no fork.
    pub(super) async fn fork_left(
        &self,
        plan: Option<&Plan>,
        events: &[StoredEvent],
    ) -> Result<Option<(PathBuf, BTreeMap<usize, StepReplay>)>, RuntimeError> {
        let Some((from, at_step, workspace)) = events.iter().find_map(|e| match &e.event {
            FlowEvent::Forked {
                from,
                at_step,
                workspace,
                ..
            } => Some((from, *at_step, PathBuf::from(workspace))),
            _ => None,
        }) else {
            return Ok(None);
        };
        let store = self.store.as_ref().ok_or(RuntimeError::NoStore)?;
        let mut left = match store.get(from).await? {
            Some(StoredRun { plan: Some(p), .. }) => {
                crate::forks::recorded_steps(&p, &store.events(from).await?, at_step)
            }
            _ => {
                tracing::warn!(run = %from, "the run this fork was made from is gone: its steps run live");
                BTreeMap::new()
            }
        };
        let done = |i: &usize| {
            plan.and_then(|p| p.steps.get(*i))
                .is_some_and(|s| s.status == StepStatus::Completed)
        };
        left.retain(|i, _| !done(i));
        Ok(Some((workspace, left)))
    }
}

/// Where forks get their workspaces when none is given: beside the runtime's workspace.
fn forks_dir(workspace: &std::path::Path) -> PathBuf {
    let mut name = workspace.file_name().unwrap_or_default().to_os_string();
    name.push("-forks");
    workspace.with_file_name(name)
}

/// `dir` made (if need be) and checked empty, as its canonical path.
fn fresh_workspace(dir: PathBuf) -> Result<PathBuf, RuntimeError> {
    let failed = |source| RuntimeError::Workspace {
        path: dir.clone(),
        source,
    };
    std::fs::create_dir_all(&dir).map_err(failed)?;
    if std::fs::read_dir(&dir).map_err(failed)?.next().is_some() {
        return Err(failed(std::io::Error::other(
            "it is not empty; a fork rebuilds its files in a fresh workspace",
        )));
    }
    dir.canonicalize().map_err(failed)
}
