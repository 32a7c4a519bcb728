//! How the planner runs its plan's steps: starting every ready step on an agent of its kind
//! (within `max_parallel_steps`), starting each step's timeout when its agent begins it,
//! settling how each ended (retry, block what needs it, revise the plan, stop, or go on),
//! picking an interrupted flow up again, and ending the flow. Which steps are ready is the
//! plan's (`plan::graph`); the model calls are `calls`'.

use std::time::{Duration, Instant};

use ractor::{Actor, ActorRef};

use super::calls;
use super::{OnStepFailure, PlannerState};
use crate::agent::ExecutorAgent;
use crate::plan::{NOTE_CHARS, Needs, Plan, StepStatus};
use crate::protocol::{
    AgentMsg, FlowEvent, FlowMode, FlowMsg, FlowOutcome, FlowStatus, StepOutcome, StepReport,
    StepRequest,
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
    started: Instant,
    /// The step's timeout, from when its agent began it.
    deadline: Option<Deadline>,
    span: tracing::Span,
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
async fn send_step(
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
        plan_view: st.plan.view(),
        builds_on,
        continued,
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

/// The step of `run` stopped before a tool call that needs approval: keep where it stood,
/// ask for a decision, and move the flow on (other steps go on meanwhile).
async fn paused(
    myself: &ActorRef<FlowMsg>,
    st: &mut PlannerState,
    mut run: Running,
    outcome: StepOutcome,
    pause: crate::protocol::Pause,
) {
    run.span
        .record("manus.step.status", outcome.status.as_str());
    drop(std::mem::replace(&mut run.span, tracing::Span::none()));
    let s = &mut st.plan.steps[run.step];
    s.elapsed_ms += run.started.elapsed().as_millis() as u64;
    s.status = StepStatus::AwaitingApproval;
    s.notes = outcome.summary;
    s.brief = None;
    let id = st.next_approval;
    st.next_approval += 1;
    let p = super::PausedStep {
        id,
        step: run.step,
        agent: run.agent.clone(),
        rounds: outcome.rounds,
        pause,
        decision: None,
        agent_ref: Some(run.agent_ref),
    };
    publish_request(myself, st, &p);
    st.pending.insert(id, p);
    advance(myself, st).await;
}

/// Publish paused step `p`'s approval request and start its timeout.
fn publish_request(myself: &ActorRef<FlowMsg>, st: &mut PlannerState, p: &super::PausedStep) {
    st.emit(FlowEvent::ApprovalRequested {
        id: p.id,
        step: Some(p.step),
        agent: p.agent.clone(),
        tool: p.pause.call.function.name.clone(),
        arguments: p.pause.call.function.arguments.clone(),
        why: p.pause.why.clone(),
        call_id: p.pause.call.id.clone(),
        round: p.rounds,
    });
    wait_for_decision(myself, st, p.id);
}

/// Ask a person to sign the plan off (`[flow] plan_approval`): no step starts until then.
/// The request's arguments are the steps not yet done, as a `planning` call gives them.
pub(super) fn ask_signoff(myself: &ActorRef<FlowMsg>, st: &mut PlannerState, why: &str) {
    let id = st.next_approval;
    st.next_approval += 1;
    request_signoff(myself, st, id, why.to_string());
}

fn request_signoff(myself: &ActorRef<FlowMsg>, st: &mut PlannerState, id: u64, why: String) {
    if let Some(old) = st.plan_signoff.take() {
        // A newer version of the plan is what needs signing now.
        st.approval_deadlines.remove(&old);
        st.emit(FlowEvent::ApprovalDecided {
            id: old,
            step: None,
            decision: crate::protocol::Decision::now(
                false,
                None,
                Some("superseded by a newer version of the plan".into()),
                "planner",
            ),
        });
    }
    let steps: Vec<serde_json::Value> = st
        .plan
        .live()
        .filter(|(_, s)| s.status != StepStatus::Completed)
        .map(|(i, s)| serde_json::json!({"step": i, "text": s.text, "depends_on": s.depends_on}))
        .collect();
    st.emit(FlowEvent::ApprovalRequested {
        id,
        step: None,
        agent: "planner".into(),
        tool: "plan".into(),
        arguments: serde_json::json!({ "steps": steps }).to_string(),
        why,
        call_id: String::new(),
        round: 0,
    });
    st.plan_signoff = Some(id);
    wait_for_decision(myself, st, id);
}

/// A person decided on the plan's sign-off: its steps may start, or the flow ends.
pub(super) async fn signed_off(
    myself: &ActorRef<FlowMsg>,
    st: &mut PlannerState,
    id: u64,
    decision: crate::protocol::Decision,
) {
    st.plan_signoff = None;
    st.emit(FlowEvent::ApprovalDecided {
        id,
        step: None,
        decision: decision.clone(),
    });
    if decision.approve {
        advance(myself, st).await;
    } else {
        let why = format!(
            "{} did not sign the plan off: {}",
            decision.by,
            decision.reason.as_deref().unwrap_or("no reason given")
        );
        finish(myself, st, FlowStatus::Failed, why).await;
    }
}

/// Start request `id`'s `[approvals] timeout_secs`, if there is one: then it is decided as
/// `on_timeout` says.
fn wait_for_decision(myself: &ActorRef<FlowMsg>, st: &mut PlannerState, id: u64) {
    let Some((wait, approve)) = st.settings.approval_timeout else {
        return;
    };
    let secs = wait.as_secs();
    let timer = myself.send_after(wait, move || FlowMsg::Decide {
        approval_id: id,
        decision: crate::protocol::Decision::now(
            approve,
            None,
            (!approve).then(|| {
                format!(
                    "no one decided within {secs}s ([approvals] timeout_secs), so it was rejected"
                )
            }),
            "timeout",
        ),
    });
    st.approval_deadlines.insert(id, Deadline(timer));
}

/// A person decided on `paused`'s call: publish it, and send the step on from where it
/// stopped, to an agent of its kind.
pub(super) async fn decided(
    myself: &ActorRef<FlowMsg>,
    st: &mut PlannerState,
    paused: super::PausedStep,
    decision: crate::protocol::Decision,
) {
    st.emit(FlowEvent::ApprovalDecided {
        id: paused.id,
        step: Some(paused.step),
        decision: decision.clone(),
    });
    let continued = crate::protocol::Continued {
        memory: paused.pause.memory,
        rounds: paused.rounds,
        call_id: paused.pause.call.id,
        decision,
    };
    let agent = paused
        .agent_ref
        .filter(|a| !matches!(a.get_status(), ractor::ActorStatus::Stopped));
    if let Err(why) = send_step(myself, st, paused.step, Some(continued), agent).await {
        finish(myself, st, FlowStatus::Failed, why).await;
    }
}

/// Ask the model, off the mailbox, to revise the plan because `unfinished` steps ended
/// without completing; the answer comes back as `PlanRevised`.
fn start_revision(myself: &ActorRef<FlowMsg>, st: &mut PlannerState, unfinished: &[usize]) {
    st.revising = true;
    st.replans_tried += 1;
    let why = unfinished
        .iter()
        .map(|&i| {
            let s = &st.plan.steps[i];
            format!("step {i} ended {}: {}", s.status.as_str(), s.notes)
        })
        .collect::<Vec<_>>()
        .join("; ");
    tracing::info!(flow = %st.id, "revising the plan ({} of {}): {why}", st.replans_tried, st.settings.max_replans);
    ask_revision(myself, st, why, false);
}

/// Let the model look at the plan after `step` completed and revise the steps not yet
/// started if they no longer fit; it may keep them. Only a review that revises counts
/// toward `max_replans`.
fn start_review(myself: &ActorRef<FlowMsg>, st: &mut PlannerState, step: usize) {
    st.revising = true;
    let why = format!("step {step} completed: {}", st.plan.steps[step].notes);
    ask_revision(myself, st, why, true);
}

/// The revision call, off the mailbox; its answer comes back as `PlanRevised`.
fn ask_revision(myself: &ActorRef<FlowMsg>, st: &PlannerState, why: String, review: bool) {
    let (caller, plan, me) = (st.caller(), st.plan.clone(), myself.clone());
    let replace = plan.replaceable();
    st.planning.handle().spawn(async move {
        let (steps, usage) = calls::revise_plan(caller, plan, why.clone(), review).await;
        let _ = me.send_message(FlowMsg::PlanRevised {
            steps,
            replace,
            usage,
            why,
            review,
        });
    });
}

/// Take the revised steps into the plan (against the plan as it is now, which may have
/// moved on while the model thought; steps whose dependencies no longer fit are kept in
/// order), and publish the revision.
pub(super) fn revised(
    myself: &ActorRef<FlowMsg>,
    st: &mut PlannerState,
    steps: Option<Vec<(String, Needs)>>,
    replace: &[usize],
    why: String,
    review: bool,
) {
    let Some(steps) = steps else {
        if review {
            tracing::debug!(flow = %st.id, "review: the model kept the plan");
        } else {
            tracing::warn!(flow = %st.id, "the plan was not revised: the model gave no usable steps");
        }
        return;
    };
    if review {
        st.replans_tried += 1;
    }
    let previous = st.plan.clone();
    let applied = st.plan.revise(steps.clone(), replace).or_else(|e| {
        tracing::warn!(flow = %st.id, "the revised steps no longer fit the plan ({e}); they run in order");
        st.plan
            .revise(steps.into_iter().map(|(t, _)| (t, None)).collect(), replace)
    });
    match applied {
        Ok(r) => {
            tracing::info!(flow = %st.id, revision = st.plan.revision, "plan revised: steps {:?} replaced by {:?}", r.replaced, r.added);
            st.emit(FlowEvent::PlanRevised {
                previous,
                plan: st.plan.clone(),
                reason: why,
            });
            if st.settings.plan_approval {
                let why = format!("revision {} of the plan needs sign-off", st.plan.revision);
                ask_signoff(myself, st, &why);
            }
        }
        Err(e) => tracing::warn!(flow = %st.id, "the plan was not revised: {e}"),
    }
}

/// Continue an interrupted flow from `plan`: completed and finally failed steps stand,
/// steps that were running (or were to be retried) start over, and the flow moves on.
pub(super) async fn resume(myself: &ActorRef<FlowMsg>, st: &mut PlannerState, mut plan: Plan) {
    let (paused, signoff) = std::mem::take(&mut st.resume_paused);
    let mut rerun = reopen(&mut plan, st.settings.max_step_retries);
    // A step that waited for approval waits on, unless where it stood was not kept.
    for (i, s) in plan.steps.iter_mut().enumerate() {
        if s.status == StepStatus::AwaitingApproval && !paused.iter().any(|p| p.step == i) {
            s.status = StepStatus::NotStarted;
            s.attempts = s.attempts.saturating_sub(1);
            rerun.push(i);
        }
    }
    st.replans_tried = plan.revision;
    st.plan = plan;
    st.emit(FlowEvent::Resumed {
        plan: Some(st.plan.clone()),
        usage: st.usage,
        rerun,
    });
    for p in paused {
        st.next_approval = st.next_approval.max(p.id + 1);
        match p.decision.clone() {
            Some(decision) => decided(myself, st, p, decision).await,
            None => {
                publish_request(myself, st, &p);
                st.pending.insert(p.id, p);
            }
        }
    }
    // The store hands back only a sign-off still waiting, or one refused.
    if let Some((id, decision)) = signoff {
        st.next_approval = st.next_approval.max(id + 1);
        match decision {
            Some(decision) => {
                signed_off(myself, st, id, decision).await;
                return;
            }
            None => {
                let why = "the plan needs sign-off before any step runs".to_string();
                request_signoff(myself, st, id, why);
            }
        }
    }
    advance(myself, st).await;
}

/// Put an interrupted plan back as the planner would have left it: a live step in progress
/// is not started (its interrupted attempt is not counted), and a failed or blocked step
/// with attempts left is not started either, as after `ended`. Returns the steps that were
/// in progress.
pub(super) fn reopen(plan: &mut Plan, max_step_retries: u32) -> Vec<usize> {
    let mut rerun = vec![];
    for (i, s) in plan.steps.iter_mut().enumerate() {
        if !s.is_live() {
            continue;
        }
        match s.status {
            StepStatus::InProgress => {
                s.status = StepStatus::NotStarted;
                s.attempts = s.attempts.saturating_sub(1);
                rerun.push(i);
            }
            StepStatus::Failed | StepStatus::Blocked if s.attempts <= max_step_retries => {
                s.status = StepStatus::NotStarted;
            }
            _ => {}
        }
    }
    rerun
}

/// End the flow: stop the steps still running, summarise, publish the outcome and stop
/// the tree.
pub(super) async fn finish(
    myself: &ActorRef<FlowMsg>,
    st: &mut PlannerState,
    status: FlowStatus,
    reason: String,
) {
    for (_, run) in std::mem::take(&mut st.running) {
        run.agent_ref.kill();
        run.span.record("manus.step.status", "failed");
        let s = &mut st.plan.steps[run.step];
        s.status = StepStatus::Failed;
        s.notes = format!("stopped: {reason}");
    }
    // Requests no one decided are closed, so nothing lists them as waiting.
    let ended = |reason: &str| {
        crate::protocol::Decision::now(
            false,
            None,
            Some(format!("the flow ended: {reason}")),
            "planner",
        )
    };
    for (id, p) in std::mem::take(&mut st.pending) {
        let s = &mut st.plan.steps[p.step];
        s.status = StepStatus::Failed;
        s.notes = format!("stopped while waiting for approval: {reason}");
        st.emit(FlowEvent::ApprovalDecided {
            id,
            step: Some(p.step),
            decision: ended(&reason),
        });
    }
    if let Some(id) = st.plan_signoff.take() {
        st.emit(FlowEvent::ApprovalDecided {
            id,
            step: None,
            decision: ended(&reason),
        });
    }
    st.approval_deadlines.clear();
    for (_, port) in st.questions.drain() {
        let _ = port.send(Err(format!("the flow ended: {reason}")));
    }
    let summary = match (st.mode, status) {
        (FlowMode::Plan, FlowStatus::Completed | FlowStatus::Failed)
            if !st.plan.steps.is_empty() =>
        {
            let call = st
                .planning
                .handle()
                .spawn(calls::summarise(st.caller(), st.plan.clone()));
            match call.await {
                Ok((summary, usage)) => {
                    st.spend("planner", usage);
                    summary
                }
                Err(e) => {
                    tracing::warn!(flow = %st.id, "could not summarise the run: the planning thread stopped ({e})");
                    String::new()
                }
            }
        }
        _ => st
            .plan
            .live()
            .last()
            .map(|(_, s)| s.notes.clone())
            .unwrap_or_default(),
    };
    st.span.record("manus.flow.status", format!("{status:?}"));
    st.span.record("manus.flow.reason", reason.as_str());
    st.span.record("manus.plan.revisions", st.plan.revision);
    st.span
        .record("gen_ai.usage.input_tokens", st.usage.prompt_tokens);
    st.span
        .record("gen_ai.usage.output_tokens", st.usage.completion_tokens);
    st.span.record("manus.cost", st.usage.cost);
    if status != FlowStatus::Completed {
        st.span.record("otel.status_code", "ERROR");
    }
    let outcome = FlowOutcome {
        flow_id: st.id.clone(),
        status,
        reason,
        plan: st.plan.clone(),
        summary,
        usage: st.usage,
        usage_by_agent: std::mem::take(&mut st.by_agent),
        elapsed_ms: st.started.elapsed().as_millis() as u64,
    };
    if let Some(sandbox) = &st.sandbox {
        let _ = sandbox.send_message(crate::protocol::SandboxMsg::Release {
            flow_id: st.id.clone(),
        });
    }
    if let Some(browser) = &st.browser {
        let _ = browser.send_message(crate::protocol::BrowserMsg::Release {
            flow_id: st.id.clone(),
        });
    }
    // Close the flow's span now, not whenever the actor is dropped, so it is exported before
    // anyone who sees FlowFinished flushes the traces and exits.
    drop(std::mem::replace(&mut st.span, tracing::Span::none()));
    st.emit(FlowEvent::FlowFinished { outcome });
    myself.stop(None);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reopen_restarts_the_running_step_and_steps_with_retries_left() {
        let mut plan = Plan::new("p", "T", (0..5).map(|i| format!("s{i}")).collect());
        let set = |plan: &mut Plan, i: usize, status, attempts| {
            plan.steps[i].status = status;
            plan.steps[i].attempts = attempts;
        };
        set(&mut plan, 0, StepStatus::Completed, 1);
        set(&mut plan, 1, StepStatus::Failed, 2); // out of retries: stands
        set(&mut plan, 2, StepStatus::Blocked, 1); // would have been retried
        set(&mut plan, 3, StepStatus::InProgress, 2); // the interrupted attempt
        plan.steps[3].notes = "first attempt failed".into();
        let rerun = reopen(&mut plan, 1);
        assert_eq!(rerun, [3]);
        let statuses: Vec<_> = plan.steps.iter().map(|s| s.status).collect();
        assert_eq!(
            statuses,
            [
                StepStatus::Completed,
                StepStatus::Failed,
                StepStatus::NotStarted,
                StepStatus::NotStarted,
                StepStatus::NotStarted
            ]
        );
        assert_eq!(
            plan.steps[3].attempts, 1,
            "the interrupted attempt is not counted"
        );
        assert_eq!(
            plan.steps[3].notes, "first attempt failed",
            "notes stay, so the step's prompt is the one it had"
        );
    }
}
