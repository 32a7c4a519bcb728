//! The Planner actor: one per flow. It asks the model for a plan whose steps carry
//! `[AGENT]` tags, routes each step to the flow's agent of that kind, keeps every step's
//! status honest, enforces the step and flow timeouts and the retry budget, relays
//! `ask_human` questions, and has the model summarise the run at the end.
//!
//! The planner never waits on an agent inside a handler: a step is sent with a report that
//! the agent sends back as a `StepDone` message, so cancellation, timeouts and answers to
//! questions are handled while a step runs.

mod prompts;
mod spec;

pub use spec::{FlowSettings, FlowSpec, OnStepFailure, Resume};

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use serde_json::Value;
use tokio::sync::Semaphore;
use tracing::Instrument;

use crate::agent::{AgentSpec, ExecutorAgent};
use crate::background::PlanningThread;
use crate::llm::{
    ChatRequest, ChatResponse, LlmClient, LlmError, Message, ToolChoice, ToolSet, Usage,
};
use crate::plan::{Plan, StepStatus};
use crate::protocol::{
    AgentMsg, EventSink, FlowEvent, FlowMode, FlowMsg, FlowOutcome, FlowStatus, StepOutcome,
    StepReport, StepRequest,
};
use crate::tools::planning::{Command, planning_spec, read_call};

pub struct Planner;

/// A timeout message on its way to this planner: dropping it cancels it. Its timer task
/// holds the planner's actor until it fires, so one left asleep for `flow_timeout` after
/// its flow ended would keep the planner's memory that long.
struct Deadline(tokio::task::JoinHandle<Result<(), ractor::MessagingErr<FlowMsg>>>);

impl Drop for Deadline {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The step being run right now.
struct Running {
    dispatch: u64,
    step: usize,
    agent: String,
    /// When the step was sent, then when its agent began it.
    started: Instant,
    /// The step's timeout, from when its agent began it.
    deadline: Option<Deadline>,
    span: tracing::Span,
}

pub struct PlannerState {
    id: String,
    task: String,
    mode: FlowMode,
    settings: FlowSettings,
    llm: LlmClient,
    planner_slots: Arc<Semaphore>,
    /// Where the planning and summary calls run: the runtime's planning thread.
    planning: Arc<PlanningThread>,
    events: EventSink,
    specs: Vec<Arc<AgentSpec>>,
    /// The planning call's system message, shared by every flow of the runtime.
    planning_opening: Arc<Message>,
    /// The flow's agent of each kind it has used so far, by name: started on the flow's
    /// first step of that kind. Steps run one at a time, so one of each serves the flow;
    /// the kind's `replicas` bound how many of its steps run at once across flows.
    agents: HashMap<String, ActorRef<AgentMsg>>,
    plan: Plan,
    running: Option<Running>,
    next_dispatch: u64,
    usage: Usage,
    by_agent: BTreeMap<String, Usage>,
    questions: HashMap<u64, RpcReplyPort<Result<String, String>>>,
    sandbox: Option<ActorRef<crate::protocol::SandboxMsg>>,
    browser: Option<ActorRef<crate::protocol::BrowserMsg>>,
    next_question: u64,
    started: Instant,
    /// The flow's timeout, set on `Begin`.
    deadline: Option<Deadline>,
    /// An interrupted flow's state, taken on `Begin`.
    resume: Option<Resume>,
    span: tracing::Span,
}

impl PlannerState {
    /// Why the flow must stop for its token or cost budget, if it must.
    fn over_budget(&self) -> Option<String> {
        let u = &self.usage;
        if let Some(max) = self.settings.max_tokens
            && u.total() > max
        {
            return Some(format!(
                "the flow used {} tokens, over its budget ([flow] max_tokens = {max})",
                u.total()
            ));
        }
        if let Some(max) = self.settings.max_cost
            && u.cost > max
        {
            return Some(format!(
                "the flow cost {:.4}, over its budget ([flow] max_cost = {max})",
                u.cost
            ));
        }
        None
    }

    /// Count tokens spent by `who` (an agent's name, or `planner`).
    fn spend(&mut self, who: &str, usage: Usage) {
        self.usage.add(usage);
        self.by_agent.entry(who.to_string()).or_default().add(usage);
    }

    fn emit(&self, e: FlowEvent) {
        self.events.send(e);
    }

    /// The agent a step goes to: its tag if the pool has that agent, else the primary.
    fn route(&self, step: usize) -> String {
        self.plan.steps[step]
            .tag()
            .and_then(|tag| {
                self.specs
                    .iter()
                    .find(|s| s.name.eq_ignore_ascii_case(&tag))
            })
            .map(|s| s.name.clone())
            .unwrap_or_else(|| self.settings.primary_agent.clone())
    }
}

impl Actor for Planner {
    type Msg = FlowMsg;
    type State = PlannerState;
    type Arguments = FlowSpec;

    async fn pre_start(
        &self,
        _myself: ActorRef<FlowMsg>,
        spec: FlowSpec,
    ) -> Result<PlannerState, ActorProcessingErr> {
        let span = tracing::info_span!(
            parent: None,
            "invoke_workflow",
            otel.name = "invoke_workflow planning_flow",
            otel.status_code = tracing::field::Empty,
            gen_ai.operation.name = "invoke_workflow",
            manus.flow.id = %spec.id,
            manus.flow.mode = ?spec.mode,
            manus.flow.status = tracing::field::Empty,
            manus.flow.reason = tracing::field::Empty,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            manus.cost = tracing::field::Empty,
        );
        let pool: Vec<Arc<AgentSpec>> = spec.pool.into_iter().map(Arc::new).collect();
        let before = spec.resume.clone().unwrap_or_default();
        Ok(PlannerState {
            id: spec.id,
            task: spec.task,
            mode: spec.mode,
            settings: spec.settings,
            llm: spec.planner_llm,
            planner_slots: spec.planner_slots,
            planning: spec.planning,
            events: spec.events,
            specs: pool,
            planning_opening: spec.planning_opening,
            agents: HashMap::new(),
            plan: Plan::default(),
            running: None,
            next_dispatch: 0,
            usage: before.usage,
            by_agent: before.usage_by_agent,
            sandbox: spec.sandbox,
            browser: spec.browser,
            questions: HashMap::new(),
            next_question: 1,
            started: Instant::now()
                .checked_sub(before.elapsed)
                .unwrap_or_else(Instant::now),
            deadline: None,
            resume: spec.resume,
            span,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<FlowMsg>,
        msg: FlowMsg,
        st: &mut PlannerState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            FlowMsg::Begin => {
                st.emit(FlowEvent::FlowStarted {
                    flow_id: st.id.clone(),
                    task: st.task.clone(),
                });
                let left = st
                    .settings
                    .flow_timeout
                    .saturating_sub(st.started.elapsed());
                st.deadline = Some(Deadline(myself.send_after(left, || FlowMsg::FlowTimedOut)));
                match st.resume.take() {
                    Some(Resume {
                        plan: Some(plan), ..
                    }) => resume(&myself, st, plan).await,
                    Some(_) => {
                        // Interrupted while planning: say so, and plan again.
                        st.emit(FlowEvent::Resumed {
                            plan: None,
                            usage: st.usage,
                            rerun: vec![],
                        });
                        make_plan(&myself, st);
                    }
                    None => make_plan(&myself, st),
                }
            }
            FlowMsg::PlanMade { plan, usage } => {
                st.spend("planner", usage);
                match plan {
                    Ok(_) if st.over_budget().is_some() => {
                        let why = st.over_budget().unwrap_or_default();
                        finish(&myself, st, FlowStatus::BudgetExceeded, why).await;
                    }
                    Ok(plan) => {
                        st.plan = plan;
                        st.emit(FlowEvent::PlanCreated {
                            plan: st.plan.clone(),
                        });
                        dispatch_next(&myself, st).await;
                    }
                    Err(why) => finish(&myself, st, FlowStatus::Failed, why).await,
                }
            }
            FlowMsg::Spent {
                agent,
                usage,
                go_on,
            } => {
                st.spend(&agent, usage);
                if let Some(r) = &st.running {
                    st.plan.steps[r.step].usage.add(usage);
                }
                let over = st.over_budget();
                if let Some(reply) = go_on {
                    let _ = reply.send(over.is_none());
                }
                if let Some(why) = over {
                    finish(&myself, st, FlowStatus::BudgetExceeded, why).await;
                }
            }
            FlowMsg::StepBegan {
                dispatch,
                queued,
                ack,
            } => {
                step_began(&myself, st, dispatch, queued);
                let _ = ack.send(());
            }
            FlowMsg::StepDone { dispatch, outcome } => {
                if st.running.as_ref().is_some_and(|r| r.dispatch == dispatch) {
                    step_ended(&myself, st, outcome, false).await;
                }
            }
            FlowMsg::StepTimedOut { dispatch } => {
                if let Some(r) = st.running.as_ref().filter(|r| r.dispatch == dispatch) {
                    // The agent is mid-step in an unknown state: retire it.
                    let agent = r.agent.clone();
                    retire_agent(st, &agent);
                    let secs = st.settings.step_timeout.as_secs();
                    let outcome = StepOutcome {
                        status: StepStatus::Failed,
                        summary: format!(
                            "the step ran past step_timeout_secs ({secs}s) and was stopped"
                        ),
                        usage: Usage::default(),
                        rounds: 0,
                    };
                    step_ended(&myself, st, outcome, true).await;
                }
            }
            FlowMsg::FlowTimedOut => {
                let secs = st.settings.flow_timeout.as_secs();
                finish(
                    &myself,
                    st,
                    FlowStatus::TimedOut,
                    format!("the flow ran past flow_timeout_secs ({secs}s)"),
                )
                .await;
            }
            FlowMsg::Cancel => {
                finish(
                    &myself,
                    st,
                    FlowStatus::Cancelled,
                    "the flow was cancelled".into(),
                )
                .await
            }
            FlowMsg::Ask {
                agent,
                inquire,
                reply,
            } => {
                let id = st.next_question;
                st.next_question += 1;
                st.questions.insert(id, reply);
                st.emit(FlowEvent::Question { id, agent, inquire });
            }
            FlowMsg::Answer { question_id, text } => match st.questions.remove(&question_id) {
                Some(port) => {
                    let _ = port.send(Ok(text));
                }
                None => {
                    tracing::warn!(flow = %st.id, "answer to unknown or already answered question {question_id}")
                }
            },
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        myself: ActorRef<FlowMsg>,
        _st: &mut PlannerState,
    ) -> Result<(), ActorProcessingErr> {
        myself.stop_children(None);
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<FlowMsg>,
        evt: SupervisionEvent,
        st: &mut PlannerState,
    ) -> Result<(), ActorProcessingErr> {
        // A crashed agent's step comes back as a failed StepDone (its report is dropped);
        // the flow's next step of that kind starts a fresh agent.
        let gone = match evt {
            SupervisionEvent::ActorFailed(cell, err) => {
                tracing::warn!(flow = %st.id, agent = %cell.get_id(), "agent crashed: {err}");
                cell.get_id()
            }
            SupervisionEvent::ActorTerminated(cell, ..) => cell.get_id(),
            _ => return Ok(()),
        };
        st.agents.retain(|_, a| a.get_id() != gone);
        Ok(())
    }
}

/// Make the flow's plan off the mailbox (the task itself in `Single` mode); it comes back
/// as `PlanMade`.
fn make_plan(myself: &ActorRef<FlowMsg>, st: &PlannerState) {
    match st.mode {
        FlowMode::Single => {
            let plan = Plan::new("run", "Single agent run", vec![st.task.clone()]);
            let _ = myself.send_message(FlowMsg::PlanMade {
                plan: Ok(plan),
                usage: Usage::default(),
            });
        }
        FlowMode::Plan => {
            let job = PlanJob::new(st);
            let me = myself.clone();
            st.planning.handle().spawn(async move {
                let (plan, usage) = job.run().await;
                let _ = me.send_message(FlowMsg::PlanMade { plan, usage });
            });
        }
    }
}

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
    let started = Instant::now();
    let resp = llm.chat(request).await?;
    events.send(FlowEvent::LlmCalled {
        agent: "planner".into(),
        model: llm.model().to_string(),
        usage: resp.usage,
        elapsed_ms: started.elapsed().as_millis() as u64,
    });
    Ok(resp)
}

/// The planning call's system message for a runtime whose pool is `pool`: made and frozen
/// once per runtime, so every flow's planning call sends the same JSON without making it.
pub fn planning_opening(pool: &[AgentSpec]) -> Arc<Message> {
    let agents: Vec<(String, String)> = pool
        .iter()
        .map(|s| (s.name.to_ascii_uppercase(), s.description.clone()))
        .collect();
    let mut system = Message::system(prompts::planner_system(&agents));
    system.freeze();
    Arc::new(system)
}

/// The summary call's system message, made and frozen once.
static SUMMARY_OPENING: std::sync::LazyLock<Message> = std::sync::LazyLock::new(|| {
    let mut system = Message::system(prompts::SUMMARY_SYSTEM);
    system.freeze();
    system
});

/// What the planning call offers the model: the planning tool, made once.
static PLANNER_TOOLS: std::sync::LazyLock<ToolSet> =
    std::sync::LazyLock::new(|| ToolSet::new(vec![planning_spec()]));

/// The planning call, with everything it needs, so it can run outside the actor.
struct PlanJob {
    id: String,
    task: String,
    system: Arc<Message>,
    llm: LlmClient,
    slots: Arc<Semaphore>,
    events: EventSink,
    span: tracing::Span,
}

impl PlanJob {
    fn new(st: &PlannerState) -> Self {
        PlanJob {
            id: st.id.clone(),
            task: st.task.clone(),
            system: st.planning_opening.clone(),
            llm: st.llm.clone(),
            slots: st.planner_slots.clone(),
            events: st.events.clone(),
            span: st.span.clone(),
        }
    }

    /// Ask the model for a plan; fall back to a plan of its own words, or to the task itself.
    async fn run(self) -> (Result<Plan, String>, Usage) {
        let task = Message::user(prompts::planner_user(&self.task));
        let request = ChatRequest {
            messages: vec![&self.system, &task],
            tools: PLANNER_TOOLS.clone(),
            tool_choice: ToolChoice::Auto,
        };
        let span = tracing::info_span!(parent: &self.span, "plan");
        let resp = match planner_chat(&self.llm, &self.slots, &self.events, &request)
            .instrument(span)
            .await
        {
            Ok(r) => r,
            Err(e) => {
                return (
                    Err(format!("the planner's model call failed: {e}")),
                    Usage::default(),
                );
            }
        };
        (Ok(self.read_plan(&resp)), resp.usage)
    }

    fn read_plan(&self, resp: &ChatResponse) -> Plan {
        // Ids must not depend on the flow id: a replayed run has to send the same prompts.
        const DEFAULT_ID: &str = "plan";
        for call in resp
            .message
            .tool_calls
            .iter()
            .filter(|c| c.function.name == "planning")
        {
            let mut args: Value = match serde_json::from_str(&call.function.arguments) {
                Ok(v) => v,
                Err(e) => {
                    tracing::warn!(flow = %self.id, "the planner's planning call has malformed arguments: {e}");
                    continue;
                }
            };
            if args.get("command").is_none() {
                args["command"] = "create".into();
            }
            if args.get("plan_id").is_none() {
                args["plan_id"] = DEFAULT_ID.into();
            }
            if args.get("title").is_none() {
                args["title"] = Value::String(prompts::title_from(&self.task));
            }
            match read_call(&args) {
                Ok(Command::Create {
                    plan_id,
                    title,
                    steps,
                }) => return Plan::new(plan_id, title, steps),
                Ok(_) => {
                    tracing::warn!(flow = %self.id, "the planner's planning call made no plan")
                }
                Err(e) => {
                    tracing::warn!(flow = %self.id, "the planner's planning call was unusable: {e}")
                }
            }
        }
        // No usable tool call: a model without function calling may still have listed steps.
        let listed = prompts::steps_from_text(resp.message.text());
        let steps = if listed.is_empty() {
            vec![self.task.clone()]
        } else {
            listed
        };
        tracing::info!(flow = %self.id, "the model made no planning call; using {} step(s) from its text or the task", steps.len());
        Plan::new(DEFAULT_ID, prompts::title_from(&self.task), steps)
    }
}

/// Send the first unfinished step to its agent, or finish when none is left.
async fn dispatch_next(myself: &ActorRef<FlowMsg>, st: &mut PlannerState) {
    let Some(step) = st.plan.steps.iter().position(|s| !s.status.is_final()) else {
        let bad: Vec<String> = st
            .plan
            .steps
            .iter()
            .enumerate()
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
            finish(
                myself,
                st,
                FlowStatus::Failed,
                format!("not every step completed: {}", bad.join(", ")),
            )
            .await;
        }
        return;
    };
    let agent = st.route(step);
    let target = match agent_for(myself, st, &agent).await {
        Ok(target) => target,
        Err(why) => {
            finish(myself, st, FlowStatus::Failed, why).await;
            return;
        }
    };
    let s = &mut st.plan.steps[step];
    s.status = StepStatus::InProgress;
    s.attempts += 1;
    s.agent = Some(agent.clone());
    let attempt = s.attempts;
    let body = s.body().to_string();
    let dispatch = st.next_dispatch;
    st.next_dispatch += 1;
    let step_span = tracing::info_span!(
        parent: &st.span,
        "step",
        otel.name = format!("step {step}"),
        manus.step.index = step,
        manus.step.attempt = attempt,
        manus.step.status = tracing::field::Empty,
        gen_ai.agent.name = %agent,
    );
    let req = StepRequest {
        flow_id: st.id.clone(),
        dispatch,
        step_index: step,
        step: body,
        task: st.task.clone(),
        plan_view: st.plan.view(),
        flow: myself.clone(),
        budgeted: st.settings.max_tokens.is_some() || st.settings.max_cost.is_some(),
        events: st.events.clone(),
        span: step_span.clone(),
    };
    // If the agent is gone, the refused message drops its report, which fails the step.
    let report = StepReport::new(myself.clone(), dispatch);
    let _ = target.send_message(AgentMsg::RunStep(req, report));
    st.running = Some(Running {
        dispatch,
        step,
        agent,
        started: Instant::now(),
        deadline: None,
        span: step_span,
    });
    // The step's timeout starts when the agent begins it (`StepBegan`), not while it waits
    // for a replica; the flow's timeout covers the wait.
}

/// The agent began the step sent under `dispatch`: publish it and start its timeout.
fn step_began(myself: &ActorRef<FlowMsg>, st: &mut PlannerState, dispatch: u64, queued: Duration) {
    let Some(run) = st.running.as_mut().filter(|r| r.dispatch == dispatch) else {
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

/// Continue an interrupted flow from `plan`: completed and finally failed steps stand, a
/// step that was running (or was to be retried) starts over, and the next one is sent.
async fn resume(myself: &ActorRef<FlowMsg>, st: &mut PlannerState, mut plan: Plan) {
    let rerun = reopen(&mut plan, st.settings.max_step_retries);
    st.plan = plan;
    st.emit(FlowEvent::Resumed {
        plan: Some(st.plan.clone()),
        usage: st.usage,
        rerun,
    });
    let failed = st
        .plan
        .steps
        .iter()
        .position(|s| s.status.is_final() && s.status != StepStatus::Completed);
    match failed {
        Some(step) if st.settings.on_step_failure == OnStepFailure::Stop => {
            let why = format!(
                "step {step} ended {} and on_step_failure = \"stop\"",
                st.plan.steps[step].status.as_str()
            );
            finish(myself, st, FlowStatus::Failed, why).await;
        }
        _ => dispatch_next(myself, st).await,
    }
}

/// Put an interrupted plan back as the planner would have left it: a step in progress is
/// not started (its interrupted attempt is not counted), and a failed or blocked step with
/// attempts left is not started either, as after `step_ended`. Returns the steps that were
/// in progress.
fn reopen(plan: &mut Plan, max_step_retries: u32) -> Vec<usize> {
    let mut rerun = vec![];
    for (i, s) in plan.steps.iter_mut().enumerate() {
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

/// Record how a step attempt ended, then retry it, stop the flow, or move on.
/// `fresh`: the agent was already retired (after a timeout), so a retry starts a new one.
async fn step_ended(
    myself: &ActorRef<FlowMsg>,
    st: &mut PlannerState,
    outcome: StepOutcome,
    fresh: bool,
) {
    let Some(mut run) = st.running.take() else {
        return;
    };
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
    if retry && !fresh {
        // The agent may hold broken state (a crashed worker, a wedged shell): start clean.
        retire_agent(st, &run.agent);
    } else if !retry
        && outcome.status != StepStatus::Completed
        && st.settings.on_step_failure == OnStepFailure::Stop
    {
        let why = format!(
            "step {} ended {} and on_step_failure = \"stop\"",
            run.step,
            outcome.status.as_str()
        );
        finish(myself, st, FlowStatus::Failed, why).await;
        return;
    }
    dispatch_next(myself, st).await;
}

/// The flow's agent of kind `name`, started if the flow has none (yet, or since one was
/// retired).
async fn agent_for(
    myself: &ActorRef<FlowMsg>,
    st: &mut PlannerState,
    name: &str,
) -> Result<ActorRef<AgentMsg>, String> {
    if let Some(agent) = st.agents.get(name) {
        return Ok(agent.clone());
    }
    let spec = st
        .specs
        .iter()
        .find(|s| s.name == name)
        .ok_or_else(|| format!("no agent `{name}` in the pool"))?
        .clone();
    let (agent, _) = Actor::spawn_linked(None, ExecutorAgent, spec, myself.get_cell())
        .await
        .map_err(|e| format!("cannot start agent `{name}`: {e}"))?;
    st.agents.insert(name.to_string(), agent.clone());
    Ok(agent)
}

/// Kill the flow's agent of kind `name`; its next step starts a fresh one.
fn retire_agent(st: &mut PlannerState, name: &str) {
    if let Some(agent) = st.agents.remove(name) {
        agent.kill();
    }
}

/// End the flow: settle the plan, summarise, publish the outcome and stop the tree.
async fn finish(
    myself: &ActorRef<FlowMsg>,
    st: &mut PlannerState,
    status: FlowStatus,
    reason: String,
) {
    if let Some(run) = st.running.take() {
        retire_agent(st, &run.agent);
        let s = &mut st.plan.steps[run.step];
        s.status = StepStatus::Failed;
        s.notes = format!("stopped: {reason}");
    }
    for (_, port) in st.questions.drain() {
        let _ = port.send(Err(format!("the flow ended: {reason}")));
    }
    let summary = match (st.mode, status) {
        (FlowMode::Plan, FlowStatus::Completed | FlowStatus::Failed)
            if !st.plan.steps.is_empty() =>
        {
            summarise(st).await
        }
        _ => st
            .plan
            .steps
            .last()
            .map(|s| s.notes.clone())
            .unwrap_or_default(),
    };
    st.span.record("manus.flow.status", format!("{status:?}"));
    st.span.record("manus.flow.reason", reason.as_str());
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

/// The model's account of the run; empty if the call fails (the outcome stands anyway).
async fn summarise(st: &mut PlannerState) -> String {
    let report = Message::user(prompts::summary_user(&st.task, &st.plan));
    let (llm, slots, events) = (st.llm.clone(), st.planner_slots.clone(), st.events.clone());
    let span = tracing::info_span!(parent: &st.span, "summarise");
    let call = st.planning.handle().spawn(
        async move {
            let request = ChatRequest {
                messages: vec![&SUMMARY_OPENING, &report],
                tools: ToolSet::default(),
                tool_choice: ToolChoice::None,
            };
            planner_chat(&llm, &slots, &events, &request).await
        }
        .instrument(span),
    );
    match call.await {
        Ok(Ok(resp)) => {
            st.spend("planner", resp.usage);
            let summary = resp.message.text().trim().to_string();
            if resp.finish_reason.as_deref() == Some("length") {
                // Never passed off as whole.
                format!("{summary} […] (the summary was cut off at the profile's max_tokens)")
            } else {
                summary
            }
        }
        Ok(Err(e)) => {
            tracing::warn!(flow = %st.id, "could not summarise the run: {e}");
            String::new()
        }
        Err(e) => {
            tracing::warn!(flow = %st.id, "could not summarise the run: the planning thread stopped ({e})");
            String::new()
        }
    }
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
