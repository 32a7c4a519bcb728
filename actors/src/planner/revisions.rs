//! Revising the plan: after a step ended without completing (`on_step_failure =
//! "replan"`) or, with `review_after_each_step`, after one completed. The model call runs
//! off the mailbox (`calls::revise_plan`) and its answer comes back as `PlanRevised`, whose
//! steps are then taken into the plan as it is by then.

use ractor::ActorRef;

use super::approvals::ask_signoff;
use super::{PlannerState, calls};
use crate::plan::Needs;
use crate::protocol::{FlowEvent, FlowMsg};

/// Ask the model, off the mailbox, to revise the plan because `unfinished` steps ended
/// without completing; the answer comes back as `PlanRevised`.
pub(super) fn start_revision(
    myself: &ActorRef<FlowMsg>,
    st: &mut PlannerState,
    unfinished: &[usize],
) {
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
pub(super) fn start_review(myself: &ActorRef<FlowMsg>, st: &mut PlannerState, step: usize) {
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
