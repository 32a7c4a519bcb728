//! Approvals the planner asks a person for, and what it does with their decisions: a step
//! that stopped before a tool call needing approval (kept where it stood, its request
//! published, then sent on from there once decided), the plan's sign-off (`[flow]
//! plan_approval`: no step starts until it is given), and the `[approvals] timeout_secs`
//! timer that decides a request no one did.

use ractor::ActorRef;

use super::PlannerState;
use super::finish::finish;
use super::steps::{Deadline, Running, advance, send_step};
use crate::plan::StepStatus;
use crate::protocol::{FlowEvent, FlowMsg, FlowStatus, StepOutcome};

/// The step of `run` stopped before a tool call that needs approval: keep where it stood,
/// ask for a decision, and move the flow on (other steps go on meanwhile).
pub(super) async fn paused(
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
        interrupted: None,
        agent_ref: Some(run.agent_ref),
    };
    publish_request(myself, st, &p);
    st.pending.insert(id, p);
    advance(myself, st).await;
}

/// A tool call in progress waits for a person (`FlowMsg::Hold`): publish the request as
/// its step's, start its timeout, and keep where the decision goes.
#[expect(clippy::too_many_arguments, reason = "the fields of FlowMsg::Hold")]
pub(super) fn hold(
    myself: &ActorRef<FlowMsg>,
    st: &mut PlannerState,
    agent: String,
    from: ractor::ActorId,
    call_id: Option<String>,
    tool: String,
    arguments: String,
    why: String,
    reply: ractor::RpcReplyPort<crate::protocol::Decision>,
) {
    let id = st.next_approval;
    st.next_approval += 1;
    let step = st.step_of(from);
    st.emit(FlowEvent::ApprovalRequested {
        id,
        step,
        agent,
        tool,
        arguments,
        why,
        call_id: call_id.unwrap_or_default(),
        round: 0,
    });
    st.held.insert(id, (step, reply));
    wait_for_decision(myself, st, id);
}

/// A person decided on held request `id`: say so and hand the decision to the call.
pub(super) fn let_go(st: &mut PlannerState, id: u64, decision: crate::protocol::Decision) {
    st.approval_deadlines.remove(&id);
    let Some((step, reply)) = st.held.remove(&id) else {
        return;
    };
    st.emit(FlowEvent::ApprovalDecided {
        id,
        step,
        decision: decision.clone(),
    });
    let _ = reply.send(decision);
}

/// Publish paused step `p`'s approval request and start its timeout.
pub(super) fn publish_request(
    myself: &ActorRef<FlowMsg>,
    st: &mut PlannerState,
    p: &super::PausedStep,
) {
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

/// A person decided on `paused`'s call: record the decision, and only once it is recorded
/// send the step on from where it stopped, to an agent of its kind. A decision the store
/// could not take is tried again shortly, the step still paused: a call must never run on
/// a decision that a restart would not find (it would be asked again, or run twice).
pub(super) async fn decided(
    myself: &ActorRef<FlowMsg>,
    st: &mut PlannerState,
    paused: super::PausedStep,
    decision: crate::protocol::Decision,
) {
    let recorded = st
        .events
        .send_durably(FlowEvent::ApprovalDecided {
            id: paused.id,
            step: Some(paused.step),
            decision: decision.clone(),
        })
        .await;
    if let Err(why) = recorded {
        tracing::warn!(flow = %st.id, "cannot record the decision on approval {} yet ({why}); trying again", paused.id);
        let approval_id = paused.id;
        st.pending.insert(approval_id, paused);
        let again = decision.clone();
        let timer = myself.send_after(RECORD_AGAIN, move || FlowMsg::Decide {
            approval_id,
            decision: again,
        });
        st.approval_deadlines.insert(approval_id, Deadline(timer));
        return;
    }
    go_on(myself, st, paused, decision).await;
}

/// How long a decision that could not be recorded waits before it is tried again.
const RECORD_AGAIN: std::time::Duration = std::time::Duration::from_secs(1);

/// Send paused step `paused` on with `decision` (recorded), to an agent of its kind.
pub(super) async fn go_on(
    myself: &ActorRef<FlowMsg>,
    st: &mut PlannerState,
    paused: super::PausedStep,
    decision: crate::protocol::Decision,
) {
    let continued = crate::protocol::Continued {
        memory: paused.pause.memory,
        rounds: paused.rounds,
        call_id: paused.pause.call.id,
        decision,
        interrupted: paused.interrupted,
    };
    let agent = paused
        .agent_ref
        .filter(|a| !matches!(a.get_status(), ractor::ActorStatus::Stopped));
    if let Err(why) = send_step(myself, st, paused.step, Some(continued), agent).await {
        finish(myself, st, FlowStatus::Failed, why).await;
    }
}

/// Ask a person to sign the plan off (`[flow] plan_approval`): no step starts until then.
/// The request's arguments are the steps not yet done, as a `planning` call gives them.
pub(super) fn ask_signoff(myself: &ActorRef<FlowMsg>, st: &mut PlannerState, why: &str) {
    let id = st.next_approval;
    st.next_approval += 1;
    request_signoff(myself, st, id, why.to_string());
}

pub(super) fn request_signoff(
    myself: &ActorRef<FlowMsg>,
    st: &mut PlannerState,
    id: u64,
    why: String,
) {
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
