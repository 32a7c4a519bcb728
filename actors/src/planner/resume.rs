//! Picking an interrupted flow up again: its stored plan put back as the planner would
//! have left it (steps that were running start over), its paused steps and plan sign-off
//! waiting on or decided, and the flow moved on. A fork starts the same way from the plan
//! of the run it was forked from, with the recorded steps it replays.

use ractor::ActorRef;

use super::PlannerState;
use super::approvals::{decided, go_on, publish_request, request_signoff, signed_off};
use super::steps::advance;
use crate::plan::{Plan, StepStatus};
use crate::protocol::{FlowEvent, FlowMsg};

/// Continue an interrupted flow from `plan`: completed and finally failed steps stand,
/// steps that were running (or were to be retried) start over, and the flow moves on.
pub(super) async fn resume(myself: &ActorRef<FlowMsg>, st: &mut PlannerState, mut plan: Plan) {
    let (paused, signoff) = std::mem::take(&mut st.resume_paused);
    // A step that went on from an approval and was interrupted goes on from there again.
    for p in &paused {
        if let Some(s) = plan.steps.get_mut(p.step) {
            s.status = StepStatus::AwaitingApproval;
        }
    }
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
    let (goes_on, rerun) = rerun
        .into_iter()
        .partition(|step| st.recorded.contains_key(step));
    match st.fork.take() {
        Some(fork) => st.emit(FlowEvent::Forked {
            from: fork.from,
            at_step: fork.at_step,
            workspace: fork.workspace,
            plan: st.plan.clone(),
        }),
        None => st.emit(FlowEvent::Resumed {
            plan: Some(st.plan.clone()),
            usage: st.usage,
            rerun,
            goes_on,
        }),
    }
    for p in paused {
        st.next_approval = st.next_approval.max(p.id + 1);
        match p.decision.clone() {
            // Handed on before the interruption: its decision is recorded already.
            Some(decision) if p.interrupted.is_some() => go_on(myself, st, p, decision).await,
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
fn reopen(plan: &mut Plan, max_step_retries: u32) -> Vec<usize> {
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
