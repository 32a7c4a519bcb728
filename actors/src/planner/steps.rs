//! How the planner runs its plan's steps: starting every ready step on an agent of its kind
//! (within `max_parallel_steps`), starting each step's timeout when its agent begins it, and
//! settling how each ended (retry, block what needs it, revise the plan, stop, or go on).
//! Which steps are ready is the plan's (`plan::graph`); a step that waits for approval is
//! `approvals`', a revision of the plan `revisions`', and ending the flow `finish`'s.

use std::time::{Duration, Instant};

use ractor::{Actor, ActorRef};

use super::approvals::paused;
use super::finish::finish;
use super::revisions::{start_review, start_revision};
use super::{OnStepFailure, PlannerState};
use crate::agent::ExecutorAgent;
use crate::plan::{NOTE_CHARS, StepStatus};
use crate::protocol::{
    AgentMsg, FlowEvent, FlowMsg, FlowStatus, StepOutcome, StepReport, StepRequest,
};

/// A timeout message on its way to this planner: dropping it cancels it. Its timer task
/// holds the planner's actor until it fires, so one left asleep for `flow_timeout` after
/// its flow ended would keep the planner's memory that long.
pub(super) struct Deadline(
    pub(super) tokio::task::JoinHandle<Result<(), ractor::MessagingErr<FlowMsg>>>,
);

impl Drop for Deadline {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A step sent to an agent and not yet ended.
pub(super) struct Running {
    pub(super) step: usize,
    /// The agent's kind.
    pub(super) agent: String,
    pub(super) agent_ref: ActorRef<AgentMsg>,
    /// When the step was sent, then when its agent began it.
    pub(super) started: Instant,
    /// The step's timeout, from when its agent began it.
    deadline: Option<Deadline>,
    pub(super) span: tracing::Span,
}

/// Move the flow on: block the steps that can no longer run, then revise the plan, stop,
/// or start every ready step there is room for; finish once nothing runs and nothing can
/// start.
pub(super) async fn advance(myself: &ActorRef<FlowMsg>, st: &mut PlannerState) {
    for (step, needs) in st.plan.block_dependents() {
        let notes = st.plan.steps[step].notes.clone();
        st.emit(FlowEvent::StepBlocked { step, needs, notes });
    }
    if st.revising || st.plan_signoff.is_some() {
        // Nothing new starts until the revised plan is back, or the plan is signed off;
        // running steps go on.
        return;
    }
    let unfinished = st.plan.unfinished();
    if let Some(&first) = unfinished.first() {
        match st.settings.on_step_failure {
            OnStepFailure::Stop => {
                let why = format!(
                    "step {first} ended {} and on_step_failure = \"stop\"",
                    st.plan.steps[first].status.as_str()
                );
                finish(myself, st, FlowStatus::Failed, why).await;
                return;
            }
            OnStepFailure::Replan if st.replans_tried < st.settings.max_replans => {
                start_revision(myself, st, &unfinished);
                return;
            }
            OnStepFailure::Replan | OnStepFailure::Continue => {}
        }
    }
    let room = (st.settings.max_parallel_steps as usize).saturating_sub(st.running.len());
    for step in st.plan.ready().into_iter().take(room) {
        if let Err(why) = send_step(myself, st, step, None, None).await {
            finish(myself, st, FlowStatus::Failed, why).await;
            return;
        }
    }
    if !st.running.is_empty() || !st.pending.is_empty() {
        // Running steps end, and paused ones go on once a person decides.
        return;
    }
    let bad: Vec<String> = st
        .plan
        .live()
        .filter(|(_, s)| s.status != StepStatus::Completed)
        .map(|(i, s)| format!("step {i} {}", s.status.as_str()))
        .collect();
    if bad.is_empty() {
        finish(
            myself,
            st,
            FlowStatus::Completed,
            "every step completed".into(),
        )
        .await;
    } else {
        let mut why = format!("not every step completed: {}", bad.join(", "));
        if st.settings.on_step_failure == OnStepFailure::Replan {
            why += &format!(
                " (after {} of {} revisions allowed by [flow] max_replans)",
                st.replans_tried, st.settings.max_replans
            );
        }
        finish(myself, st, FlowStatus::Failed, why).await;
    }
}

/// The agent kind a step goes to: its tag if the pool has that agent, else the primary.
fn route(st: &PlannerState, step: usize) -> String {
    st.plan.steps[step]
        .tag()
        .and_then(|tag| st.specs.iter().find(|s| s.name.eq_ignore_ascii_case(&tag)))
        .map(|s| s.name.clone())
        .unwrap_or_else(|| st.settings.primary_agent.clone())
}

/// Send `step` to an agent of its kind: one of the flow's idle ones, or a new one. A new
/// attempt, or (`continued`) a paused one going on.
pub(super) async fn send_step(
    myself: &ActorRef<FlowMsg>,
    st: &mut PlannerState,
    step: usize,
    continued: Option<crate::protocol::Continued>,
    agent: Option<ActorRef<AgentMsg>>,
) -> Result<(), String> {
    let kind = route(st, step);
    let agent_ref = match agent.or_else(|| st.idle.get_mut(&kind).and_then(Vec::pop)) {
        Some(agent) => agent,
        None => {
            let spec = st
                .specs
                .iter()
                .find(|s| s.name == kind)
                .ok_or_else(|| format!("no agent `{kind}` in the pool"))?
                .clone();
            Actor::spawn_linked(None, ExecutorAgent, spec, myself.get_cell())
                .await
                .map_err(|e| format!("cannot start agent `{kind}`: {e}"))?
                .0
        }
    };
    let builds_on: Vec<(usize, String)> = st.plan.steps[step]
        .depends_on
        .iter()
        .flatten()
        .map(|&d| (d, crate::text::clip(&st.plan.steps[d].notes, NOTE_CHARS)))
        .collect();
    let s = &mut st.plan.steps[step];
    s.status = StepStatus::InProgress;
    if continued.is_none() {
        s.attempts += 1;
    }
    s.agent = Some(kind.clone());
    let attempt = s.attempts;
    let body = s.body().to_string();
    let dispatch = st.next_dispatch;
    st.next_dispatch += 1;
    let span = tracing::info_span!(
        parent: &st.span,
        "step",
        otel.name = format!("step {step}"),
        manus.step.index = step,
        manus.step.attempt = attempt,
        manus.step.status = tracing::field::Empty,
        gen_ai.agent.name = %kind,
    );
    let req = StepRequest {
        flow_id: st.id.clone(),
        dispatch,
        step_index: step,
        step: body,
        task: st.task.clone(),
        earlier: st.earlier.clone(),
        plan_view: st.plan.view(),
        builds_on,
        continued,
        recorded: st.recorded.remove(&step).unwrap_or_default(),
        replay: st.replay.remove(&step).unwrap_or_default(),
        flow: myself.clone(),
        budgeted: st.settings.max_tokens.is_some() || st.settings.max_cost.is_some(),
        events: st.events.clone(),
        span: span.clone(),
    };
    // If the agent is gone, the refused message drops its report, which fails the step.
    let report = StepReport::new(myself.clone(), dispatch);
    let _ = agent_ref.send_message(AgentMsg::RunStep(req, report));
    st.running.insert(
        dispatch,
        Running {
            step,
            agent: kind,
            agent_ref,
            started: Instant::now(),
            deadline: None,
            span,
        },
    );
    // The step's timeout starts when the agent begins it (`StepBegan`), not while it waits
    // for a replica; the flow's timeout covers the wait.
    Ok(())
}

/// The agent began the step sent under `dispatch`: publish it and start its timeout.
pub(super) fn began(
    myself: &ActorRef<FlowMsg>,
    st: &mut PlannerState,
    dispatch: u64,
    queued: Duration,
) {
    let Some(run) = st.running.get_mut(&dispatch) else {
        return;
    };
    run.started = Instant::now();
    let event = FlowEvent::StepStarted {
        step: run.step,
        agent: run.agent.clone(),
        attempt: st.plan.steps[run.step].attempts,
        queued_ms: queued.as_millis() as u64,
    };
    run.deadline = Some(Deadline(
        myself.send_after(st.settings.step_timeout, move || FlowMsg::StepTimedOut {
            dispatch,
        }),
    ));
    st.emit(event);
}

/// Record how the step sent under `dispatch` ended, then move the flow on.
/// `stopped`: its agent was already stopped (after a timeout).
pub(super) async fn ended(
    myself: &ActorRef<FlowMsg>,
    st: &mut PlannerState,
    dispatch: u64,
    outcome: StepOutcome,
    stopped: bool,
) {
    let Some(mut run) = st.running.remove(&dispatch) else {
        return;
    };
    if let Some(pause) = outcome.pause.clone() {
        paused(myself, st, run, outcome, pause).await;
        return;
    }
    // End the step's span here: the flow may finish below, and its span closes only after
    // its children have.
    run.span
        .record("manus.step.status", outcome.status.as_str());
    drop(std::mem::replace(&mut run.span, tracing::Span::none()));
    // Usage arrived already, call by call, as Spent messages.
    let elapsed_ms = run.started.elapsed().as_millis() as u64;
    let s = &mut st.plan.steps[run.step];
    s.elapsed_ms += elapsed_ms;
    s.notes = outcome.summary.clone();
    s.brief = outcome.brief.clone();
    let retry =
        outcome.status != StepStatus::Completed && s.attempts <= st.settings.max_step_retries;
    s.status = if retry {
        StepStatus::NotStarted
    } else {
        outcome.status
    };
    st.emit(FlowEvent::StepFinished {
        step: run.step,
        agent: run.agent.clone(),
        status: outcome.status,
        summary: outcome.summary,
        usage: outcome.usage,
        elapsed_ms,
    });
    let step = run.step;
    if outcome.status == StepStatus::Completed {
        st.idle.entry(run.agent).or_default().push(run.agent_ref);
        if st.settings.review_after_each_step
            && !st.revising
            && st.replans_tried < st.settings.max_replans
            && st
                .plan
                .live()
                .any(|(_, s)| s.status == StepStatus::NotStarted)
        {
            start_review(myself, st, step);
        }
    } else if !stopped {
        // The agent may hold broken state (a crashed worker, a wedged shell): the step's
        // next attempt, or the kind's next step, starts clean.
        run.agent_ref.kill();
    }
    advance(myself, st).await;
}
