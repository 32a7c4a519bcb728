//! Ending the flow: the steps still running stopped, requests no one decided closed,
//! questions answered with the reason, the run summarised (by the model in plan mode), with
//! `[memory] distill` what is worth keeping saved as notes, the outcome published, the flow's sandbox and browser released, and the actor tree stopped.

use ractor::ActorRef;

use super::{PlannerState, calls};
use crate::plan::StepStatus;
use crate::protocol::{FlowEvent, FlowMode, FlowMsg, FlowOutcome, FlowStatus};

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
    if let Some(book) = st.distill.clone()
        && matches!(status, FlowStatus::Completed | FlowStatus::Failed)
    {
        let call = st.planning.handle().spawn(calls::distill(
            st.caller(),
            st.plan.clone(),
            summary.clone(),
            book,
        ));
        match call.await {
            Ok(usage) => st.spend("planner", usage),
            Err(e) => {
                tracing::warn!(flow = %st.id, "no end-of-run notes: the planning thread stopped ({e})")
            }
        }
    }
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
