//! The planner's own model calls: making the plan, revising it, and summarising the run.
//! Each runs off the planner's mailbox on the runtime's planning thread, holding one of the
//! runtime's `planner_replicas` permits; the plan and revisions come back to the planner as
//! messages, the summary to `finish`, which waits for it. Knows nothing of how steps are
//! dispatched.
//!
//! A plan or revision whose dependencies do not form a graph goes back to the model once,
//! with the reason, as the `planning` call's result; if the second answer is no better, its
//! steps are kept without dependencies (in order), and the log says so.

use std::sync::{Arc, LazyLock};
use std::time::Instant;

use serde_json::Value;
use tokio::sync::Semaphore;
use tracing::Instrument;

use super::prompts;
use crate::llm::{
    ChatRequest, ChatResponse, LlmClient, LlmError, Message, ToolCall, ToolChoice, ToolSet, Usage,
};
use crate::plan::{Needs, Plan};
use crate::protocol::{EventSink, FlowEvent};
use crate::tools::planning::{Command, planning_spec, read_call, split_steps};

/// One model call of the planner's own, made once one of the runtime's `planner_replicas`
/// permits is free, counted and published.
async fn planner_chat(
    llm: &LlmClient,
    slots: &Semaphore,
    events: &EventSink,
    request: &ChatRequest<'_>,
) -> Result<ChatResponse, LlmError> {
    // The semaphore is never closed, so this waits for a permit and never fails.
    let _permit = slots.acquire().await.ok();
    events
        .may_act()
        .map_err(|why| LlmError::new(crate::llm::LlmErrorKind::Network, why))?;
    let started = Instant::now();
    let resp = llm.chat(request).await?;
    events.send(FlowEvent::LlmCalled {
        agent: "planner".into(),
        step: None,
        model: llm.model().to_string(),
        usage: resp.usage,
        elapsed_ms: started.elapsed().as_millis() as u64,
    });
    Ok(resp)
}

/// The planning call's system message for a runtime whose pool is `pool`: made and frozen
/// once per runtime, so every flow's planning call sends the same JSON without making it.
pub fn planning_opening(pool: &[crate::agent::AgentSpec]) -> Arc<Message> {
    let agents: Vec<(String, String)> = pool
        .iter()
        .map(|s| (s.name.to_ascii_uppercase(), s.description.clone()))
        .collect();
    let mut system = Message::system(prompts::planner_system(&agents));
    system.freeze();
    Arc::new(system)
}

/// The summary call's system message, made and frozen once.
static SUMMARY_OPENING: LazyLock<Message> = LazyLock::new(|| {
    let mut system = Message::system(prompts::SUMMARY_SYSTEM);
    system.freeze();
    system
});

/// The end-of-run pass's system message, made and frozen once.
static DISTILL_OPENING: LazyLock<Message> = LazyLock::new(|| {
    let mut system = Message::system(prompts::DISTILL_SYSTEM);
    system.freeze();
    system
});

/// What the planning and revision calls offer the model: the planning tool, made once.
static PLANNER_TOOLS: LazyLock<ToolSet> = LazyLock::new(|| ToolSet::new(vec![planning_spec()]));

/// What every planner call needs, cloned out of the planner so the call runs outside it.
#[derive(Clone)]
pub(super) struct Caller {
    pub id: String,
    pub task: String,
    /// In a follow-up turn, what the thread's earlier turns did.
    pub earlier: Option<Arc<str>>,
    pub system: Arc<Message>,
    pub llm: LlmClient,
    pub slots: Arc<Semaphore>,
    pub events: EventSink,
    pub span: tracing::Span,
}

/// A plan as the model gave it: its id and title, and the steps (text, and the numbers of
/// the steps each needs).
#[derive(Clone)]
pub(super) struct Proposed {
    id: String,
    title: String,
    pub(super) steps: Vec<(String, Needs)>,
}

/// How an exchange about the plan ended.
enum Answer {
    /// Steps `check` accepted.
    Accepted(Proposed),
    /// Steps refused twice: the last ones (if readable), and why.
    Refused(Option<Proposed>, String),
    /// The model gave no steps at all.
    NoSteps(String),
    /// The model call failed.
    CallFailed(String),
}

/// What one answer held.
enum Read {
    Steps(Proposed, Option<ToolCall>),
    /// A planning call whose arguments do not fit, and why.
    Unfit(ToolCall, String),
    Nothing(String),
}

/// One exchange about the plan: the model's answer, read and then checked by `check`; an
/// answer refused goes back to the model once, with the reason, as the call's result.
/// `revision`: `None` for the first plan, else whether it is a review (whose answer
/// without a planning call keeps the plan, even if its text lists steps).
async fn converse(
    caller: &Caller,
    user: Message,
    revision: Option<bool>,
    check: impl Fn(&Proposed) -> Result<(), String>,
) -> (Answer, Usage) {
    let mut usage = Usage::default();
    let mut messages: Vec<Message> = vec![user];
    let mut refused: Option<(Option<Proposed>, String)> = None;
    for attempt in 0..2u32 {
        let mut all: Vec<&Message> = vec![&caller.system];
        all.extend(messages.iter());
        let request = ChatRequest {
            messages: all,
            tools: PLANNER_TOOLS.clone(),
            tool_choice: ToolChoice::Auto,
        };
        let span = if revision.is_some() {
            tracing::info_span!(parent: &caller.span, "replan", manus.attempt = attempt)
        } else {
            tracing::info_span!(parent: &caller.span, "plan", manus.attempt = attempt)
        };
        let resp = match planner_chat(&caller.llm, &caller.slots, &caller.events, &request)
            .instrument(span)
            .await
        {
            Ok(r) => r,
            Err(e) => {
                let why = format!("the planner's model call failed: {e}");
                return match refused {
                    Some((steps, _)) => (Answer::Refused(steps, why), usage),
                    None => (Answer::CallFailed(why), usage),
                };
            }
        };
        usage.add(resp.usage);
        let (call, why, steps) = match read_steps(caller, &resp, revision != Some(true)) {
            Read::Steps(steps, call) => match check(&steps) {
                Ok(()) => return (Answer::Accepted(steps), usage),
                Err(why) => (call, why, Some(steps)),
            },
            Read::Unfit(call, why) => (Some(call), why, None),
            Read::Nothing(why) => {
                return match refused {
                    Some((steps, first)) => (Answer::Refused(steps, first), usage),
                    None => (Answer::NoSteps(why), usage),
                };
            }
        };
        tracing::info!(flow = %caller.id, attempt, "the model's plan was refused: {why}");
        refused = Some((steps.or_else(|| refused.and_then(|r| r.0)), why.clone()));
        let Some(call) = call else { break };
        messages.push(resp.message);
        messages.push(Message::tool(
            &call,
            format!("planning: refused: {why}. Call `planning` again with corrected steps."),
        ));
    }
    let (steps, why) = refused.unwrap_or((None, "no steps".into()));
    (Answer::Refused(steps, why), usage)
}

/// The steps of the model's first `planning` call that has any, and that call; or, with no
/// such call, the steps listed in its text (a model without function calling).
fn read_steps(caller: &Caller, resp: &ChatResponse, from_text: bool) -> Read {
    let mut unfit = None;
    for call in resp
        .message
        .tool_calls
        .iter()
        .filter(|c| c.function.name == "planning")
    {
        let mut args: Value = match serde_json::from_str(&call.function.arguments) {
            Ok(v) => v,
            Err(e) => {
                let why = format!("the arguments are not JSON ({e})");
                unfit.get_or_insert((call.clone(), why));
                continue;
            }
        };
        // Ids must not depend on the flow id: a replayed run has to send the same prompts.
        for (key, value) in [
            ("command", Value::from("create")),
            ("plan_id", Value::from(DEFAULT_ID)),
            ("title", Value::from(prompts::title_from(&caller.task))),
        ] {
            if args.get(key).is_none() {
                args[key] = value;
            }
        }
        let read = read_call(&args).and_then(|command| match command {
            Command::Create { steps, .. }
            | Command::Update {
                steps: Some(steps), ..
            } => split_steps(steps),
            _ => Err(crate::tools::ToolError::new(
                "planning: give the plan with command \"create\" (or \"update\") and `steps`",
            )),
        });
        match read {
            Ok(steps) => {
                let text = |key: &str| args[key].as_str().unwrap_or_default().to_string();
                let (id, title) = (text("plan_id"), text("title"));
                let title = if title.is_empty() {
                    prompts::title_from(&caller.task)
                } else {
                    title
                };
                let proposed = Proposed { id, title, steps };
                return Read::Steps(proposed, Some(call.clone()));
            }
            Err(e) => {
                tracing::warn!(flow = %caller.id, "the planner's planning call was unusable: {e}");
                unfit.get_or_insert((call.clone(), e.0));
            }
        }
    }
    let listed = match from_text {
        true => prompts::steps_from_text(resp.message.text()),
        false => vec![],
    };
    match unfit {
        _ if !listed.is_empty() => {
            let steps = listed.into_iter().map(|t| (t, None)).collect();
            let (id, title) = (DEFAULT_ID.into(), prompts::title_from(&caller.task));
            Read::Steps(Proposed { id, title, steps }, None)
        }
        Some((call, why)) => Read::Unfit(call, why),
        None => Read::Nothing("the model made no planning call and listed no steps".into()),
    }
}

/// The id every flow's plan gets.
const DEFAULT_ID: &str = "plan";

/// Ask the model for a plan. A plan whose dependencies do not form a graph is refused once;
/// then its steps run in order. A model that makes no plan gets the task as its one step.
pub(super) async fn make_plan(caller: Caller) -> (Result<Plan, String>, Usage) {
    let user = Message::user(prompts::planner_user(
        &caller.task,
        caller.earlier.as_deref(),
    ));
    let in_order = |p: &Proposed| {
        Plan::new(
            &p.id,
            &p.title,
            p.steps.iter().map(|(t, _)| t.clone()).collect(),
        )
    };
    let graph = |p: &Proposed| -> Result<Plan, String> {
        if p.steps.is_empty() {
            return Err("the plan needs at least one step".into());
        }
        let mut plan = in_order(p);
        plan.depend(p.steps.iter().map(|(_, d)| d.clone()).collect())?;
        Ok(plan)
    };
    let (answer, usage) = converse(&caller, user, None, |steps| graph(steps).map(drop)).await;
    let plan = match answer {
        Answer::Accepted(steps) => graph(&steps),
        Answer::Refused(Some(steps), why) => {
            tracing::warn!(flow = %caller.id, "the plan's dependencies were refused twice ({why}); its steps run one at a time, in order");
            Ok(in_order(&steps))
        }
        Answer::CallFailed(why) => Err(why),
        Answer::Refused(None, why) | Answer::NoSteps(why) => {
            tracing::info!(flow = %caller.id, "no usable plan ({why}); the task is the plan's one step");
            let title = prompts::title_from(&caller.task);
            Ok(Plan::new(DEFAULT_ID, title, vec![caller.task.clone()]))
        }
    };
    (plan, usage)
}

/// Ask the model to revise what has not completed of `plan`, for `why` (after a failure),
/// or, in a `review` after a completed step, whether to. The steps come back checked
/// against `plan` as it was; `None` when the model gave none (a review: kept the plan).
pub(super) async fn revise_plan(
    caller: Caller,
    plan: Plan,
    why: String,
    review: bool,
) -> (Option<Vec<(String, Needs)>>, Usage) {
    let user = if review {
        Message::user(prompts::review_user(
            &caller.task,
            caller.earlier.as_deref(),
            &plan,
            &why,
        ))
    } else {
        Message::user(prompts::revise_user(
            &caller.task,
            caller.earlier.as_deref(),
            &plan,
            &why,
        ))
    };
    let replace = plan.replaceable();
    let check = |p: &Proposed| plan.clone().revise(p.steps.clone(), &replace).map(drop);
    let (answer, usage) = converse(&caller, user, Some(review), check).await;
    let steps = match answer {
        Answer::Accepted(p) => Some(p.steps),
        Answer::Refused(Some(p), why) => {
            tracing::warn!(flow = %caller.id, "the revised plan was refused twice ({why}); its steps run in order");
            Some(p.steps.into_iter().map(|(t, _)| (t, None)).collect())
        }
        Answer::NoSteps(_) if review => None,
        Answer::Refused(None, why) | Answer::NoSteps(why) | Answer::CallFailed(why) => {
            tracing::warn!(flow = %caller.id, "no revised plan: {why}");
            None
        }
    };
    (steps, usage)
}

/// The end-of-run pass: ask the model what of the run is worth keeping for later runs and
/// keep each such fact in `book` (at most `DISTILLED` of them, none when it says none).
/// What it spent; a failed call or save is logged, never felt by the flow.
pub(super) async fn distill(
    caller: Caller,
    plan: Plan,
    summary: String,
    book: Arc<dyn crate::tools::memory::MemoryBook>,
) -> Usage {
    let ask = Message::user(prompts::distill_user(&caller.task, &plan, &summary));
    let request = ChatRequest {
        messages: vec![&DISTILL_OPENING, &ask],
        tools: ToolSet::default(),
        tool_choice: ToolChoice::None,
    };
    let span = tracing::info_span!(parent: &caller.span, "distill");
    let resp = match planner_chat(&caller.llm, &caller.slots, &caller.events, &request)
        .instrument(span)
        .await
    {
        Ok(resp) => resp,
        Err(e) => {
            tracing::warn!(flow = %caller.id, "no end-of-run notes: {e}");
            return Usage::default();
        }
    };
    for fact in prompts::read_facts(resp.message.text())
        .into_iter()
        .take(prompts::DISTILLED)
    {
        let from = crate::tools::memory::Provenance {
            run_id: caller.id.clone(),
            step: None,
            agent: "planner".into(),
        };
        if let Err(e) = book.save(fact, from).await {
            tracing::warn!(flow = %caller.id, "an end-of-run note was not kept: {e}");
        }
    }
    resp.usage
}

/// The model's account of the run; empty if the call fails (the outcome stands anyway).
pub(super) async fn summarise(caller: Caller, plan: Plan) -> (String, Usage) {
    let report = Message::user(prompts::summary_user(&caller.task, &plan));
    let request = ChatRequest {
        messages: vec![&SUMMARY_OPENING, &report],
        tools: ToolSet::default(),
        tool_choice: ToolChoice::None,
    };
    let span = tracing::info_span!(parent: &caller.span, "summarise");
    match planner_chat(&caller.llm, &caller.slots, &caller.events, &request)
        .instrument(span)
        .await
    {
        Ok(resp) => {
            let said = resp.message.text().trim();
            // A degenerate repetition is cut (and marked) before anything else is said of it.
            if let Some(cut) = super::repeats::cut(said) {
                return (cut, resp.usage);
            }
            let summary = said.to_string();
            let summary = if resp.finish_reason.as_deref() == Some("length") {
                // Never passed off as whole.
                format!("{summary} […] (the summary was cut off at the profile's max_tokens)")
            } else {
                summary
            };
            (summary, resp.usage)
        }
        Err(e) => {
            tracing::warn!(flow = %caller.id, "could not summarise the run: {e}");
            (String::new(), Usage::default())
        }
    }
}
