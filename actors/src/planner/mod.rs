//! The Planner actor: one per flow. It asks the model for a plan whose steps carry
//! `[AGENT]` tags and may name the steps they need, runs every step whose needs are met at
//! once (each on an agent of its tag's kind, within `max_parallel_steps`), keeps every
//! step's status honest, enforces the step and flow timeouts, the retry budget and the
//! token budget, revises the plan when a step fails for good (`on_step_failure =
//! "replan"`), relays `ask_human` questions, and has the model summarise the run at the end.
//!
//! The planner never waits on an agent inside a handler: a step is sent with a report that
//! the agent sends back as a `StepDone` message, and its own model calls run on the
//! planning thread and come back as messages, so cancellation, timeouts and answers to
//! questions are handled while steps run and while the model plans. The one call it waits
//! for is the closing summary, in `finish`, once the flow is ending.
//!
//! Which steps may run when is the plan's (`plan::graph`); this module decides what to do
//! about it (`steps`; approvals in `approvals`, revisions in `revisions`, `resume` and
//! `finish`) and makes the model calls (`calls`).

mod approvals;
mod calls;
mod finish;
mod prompts;
mod repeats;
mod resume;
mod revisions;
mod spec;
mod steps;

pub use calls::planning_opening;
pub use spec::{FlowSettings, FlowSpec, Fork, OnStepFailure, PausedStep, Resume, Turn};

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use tokio::sync::Semaphore;

use crate::agent::AgentSpec;
use crate::background::PlanningThread;
use crate::llm::{LlmClient, Message, Usage};
use crate::plan::{Plan, StepStatus};
use crate::protocol::{AgentMsg, EventSink, FlowEvent, FlowMode, FlowMsg, FlowStatus, StepOutcome};
use steps::{Deadline, Running};

pub struct Planner;

pub struct PlannerState {
    id: String,
    task: String,
    /// In a follow-up turn, what the thread's earlier turns did (`Turn::earlier`).
    earlier: Option<Arc<str>>,
    /// Where the end-of-run pass keeps notes (`FlowSpec::distill`).
    distill: Option<Arc<dyn crate::tools::memory::MemoryBook>>,
    mode: FlowMode,
    settings: FlowSettings,
    llm: LlmClient,
    planner_slots: Arc<Semaphore>,
    /// Where the planning, revision and summary calls run: the runtime's planning thread.
    planning: Arc<PlanningThread>,
    events: EventSink,
    specs: Vec<Arc<AgentSpec>>,
    /// The planning call's system message, shared by every flow of the runtime.
    planning_opening: Arc<Message>,
    /// The flow's agents that have no step now, by kind: a step takes one, or starts one;
    /// a step that completed gives its agent back. Several steps of a kind at once each
    /// have their own; the kind's `replicas` bound how many run at once across flows.
    idle: HashMap<String, Vec<ActorRef<AgentMsg>>>,
    plan: Plan,
    /// The steps sent and not yet ended, by dispatch number.
    running: BTreeMap<u64, Running>,
    /// A revision call is out: no new step starts until it is back.
    revising: bool,
    /// Revisions counted against `[flow] max_replans`: every one asked for after a
    /// failure, whether or not the model gave one, and every review that revised.
    replans_tried: u32,
    next_dispatch: u64,
    usage: Usage,
    by_agent: BTreeMap<String, Usage>,
    questions: HashMap<u64, RpcReplyPort<Result<String, String>>>,
    /// Steps stopped before a tool call that needs approval, by approval number.
    pending: BTreeMap<u64, PausedStep>,
    /// The plan's sign-off request, while no step may start (`[flow] plan_approval`).
    plan_signoff: Option<u64>,
    /// Tool calls in progress that wait for a decision (`FlowMsg::Hold`), by approval number.
    held: HashMap<u64, (Option<usize>, RpcReplyPort<crate::protocol::Decision>)>,
    /// `[approvals] timeout_secs` of each pending request, which then decides it.
    approval_deadlines: HashMap<u64, Deadline>,
    next_approval: u64,
    sandbox: Option<ActorRef<crate::protocol::SandboxMsg>>,
    browser: Option<ActorRef<crate::protocol::BrowserMsg>>,
    next_question: u64,
    started: Instant,
    /// The flow's timeout, set on `Begin`.
    deadline: Option<Deadline>,
    /// An interrupted flow's state, taken on `Begin`.
    resume: Option<Resume>,
    /// The resumed flow's paused steps and plan sign-off, taken when it picks its plan up.
    resume_paused: (
        Vec<PausedStep>,
        Option<(u64, Option<crate::protocol::Decision>)>,
    ),
    /// A resumed flow's code-mode steps' recorded rounds, handed to each step when it goes
    /// on (`send_step`).
    recorded: BTreeMap<usize, Vec<crate::protocol::RecordedRound>>,
    /// A new fork's origin, announced when it picks its plan up.
    fork: Option<spec::Fork>,
    /// Steps to run on recorded answers, each handed to its step when it starts.
    replay: BTreeMap<usize, crate::protocol::StepReplay>,
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

    /// The running step whose agent is the actor `from`.
    fn step_of(&self, from: ractor::ActorId) -> Option<usize> {
        self.running
            .values()
            .find(|r| r.agent_ref.get_id() == from)
            .map(|r| r.step)
    }

    /// What the planner's model calls need, to run off the mailbox.
    fn caller(&self) -> calls::Caller {
        calls::Caller {
            id: self.id.clone(),
            task: self.task.clone(),
            earlier: self.earlier.clone(),
            system: self.planning_opening.clone(),
            llm: self.llm.clone(),
            slots: self.planner_slots.clone(),
            events: self.events.clone(),
            span: self.span.clone(),
        }
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
            manus.thread.id = spec.turn.as_ref().map_or(spec.id.as_str(), |t| t.thread.as_str()),
            manus.thread.turn = spec.turn.as_ref().map_or(0, |t| t.number),
            manus.flow.status = tracing::field::Empty,
            manus.flow.reason = tracing::field::Empty,
            manus.plan.revisions = tracing::field::Empty,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            manus.cost = tracing::field::Empty,
        );
        let pool: Vec<Arc<AgentSpec>> = spec.pool.into_iter().map(Arc::new).collect();
        let before = spec.resume.clone().unwrap_or_default();
        Ok(PlannerState {
            id: spec.id,
            task: spec.task,
            earlier: spec.turn.map(|t| t.earlier),
            distill: spec.distill,
            mode: spec.mode,
            settings: spec.settings,
            llm: spec.planner_llm,
            planner_slots: spec.planner_slots,
            planning: spec.planning,
            events: spec.events,
            specs: pool,
            planning_opening: spec.planning_opening,
            idle: HashMap::new(),
            plan: Plan::default(),
            running: BTreeMap::new(),
            revising: false,
            replans_tried: 0,
            next_dispatch: 0,
            usage: before.usage,
            by_agent: before.usage_by_agent,
            sandbox: spec.sandbox,
            browser: spec.browser,
            questions: HashMap::new(),
            pending: BTreeMap::new(),
            plan_signoff: None,
            held: HashMap::new(),
            approval_deadlines: HashMap::new(),
            next_approval: before.next_approval.max(1),
            next_question: before.next_question.max(1),
            started: Instant::now()
                .checked_sub(before.elapsed)
                .unwrap_or_else(Instant::now),
            deadline: None,
            resume_paused: (before.paused, before.plan_signoff),
            recorded: before.recorded,
            fork: before.fork,
            replay: before.replay,
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
                    }) => resume::resume(&myself, st, plan).await,
                    Some(_) => {
                        // Interrupted while planning: say so, and plan again.
                        st.emit(FlowEvent::Resumed {
                            plan: None,
                            usage: st.usage,
                            rerun: vec![],
                            goes_on: vec![],
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
                        finish::finish(&myself, st, FlowStatus::BudgetExceeded, why).await;
                    }
                    Ok(plan) => {
                        st.plan = plan;
                        st.emit(FlowEvent::PlanCreated {
                            plan: st.plan.clone(),
                        });
                        if st.settings.plan_approval && st.mode == FlowMode::Plan {
                            approvals::ask_signoff(
                                &myself,
                                st,
                                "the plan needs sign-off before any step runs",
                            );
                        }
                        steps::advance(&myself, st).await;
                    }
                    Err(why) => finish::finish(&myself, st, FlowStatus::Failed, why).await,
                }
            }
            FlowMsg::PlanRevised {
                steps,
                replace,
                usage,
                why,
                review,
            } => {
                st.revising = false;
                st.spend("planner", usage);
                if let Some(over) = st.over_budget() {
                    finish::finish(&myself, st, FlowStatus::BudgetExceeded, over).await;
                    return Ok(());
                }
                revisions::revised(&myself, st, steps, &replace, why, review);
                steps::advance(&myself, st).await;
            }
            FlowMsg::Spent {
                agent,
                from,
                usage,
                go_on,
            } => {
                st.spend(&agent, usage);
                if let Some(step) = st.step_of(from) {
                    st.plan.steps[step].usage.add(usage);
                }
                let over = st.over_budget();
                if let Some(reply) = go_on {
                    let _ = reply.send(over.is_none());
                }
                if let Some(why) = over {
                    finish::finish(&myself, st, FlowStatus::BudgetExceeded, why).await;
                }
            }
            FlowMsg::StepBegan {
                dispatch,
                queued,
                ack,
            } => {
                steps::began(&myself, st, dispatch, queued);
                let _ = ack.send(());
            }
            FlowMsg::StepDone { dispatch, outcome } => {
                if st.running.contains_key(&dispatch) {
                    steps::ended(&myself, st, dispatch, outcome, false).await;
                }
            }
            FlowMsg::StepTimedOut { dispatch } => {
                if let Some(r) = st.running.get(&dispatch) {
                    // The agent is mid-step in an unknown state: stop it. Its report, dropped,
                    // comes back for a dispatch no longer running, and is ignored.
                    r.agent_ref.kill();
                    let secs = st.settings.step_timeout.as_secs();
                    let outcome = StepOutcome {
                        status: StepStatus::Failed,
                        summary: format!(
                            "the step ran past step_timeout_secs ({secs}s) and was stopped"
                        ),
                        usage: Usage::default(),
                        rounds: 0,
                        pause: None,
                        brief: None,
                    };
                    steps::ended(&myself, st, dispatch, outcome, true).await;
                }
            }
            FlowMsg::FlowTimedOut => {
                let secs = st.settings.flow_timeout.as_secs();
                finish::finish(
                    &myself,
                    st,
                    FlowStatus::TimedOut,
                    format!("the flow ran past flow_timeout_secs ({secs}s)"),
                )
                .await;
            }
            FlowMsg::Cancel => {
                finish::finish(
                    &myself,
                    st,
                    FlowStatus::Cancelled,
                    "the flow was cancelled".into(),
                )
                .await
            }
            FlowMsg::Ask {
                agent,
                from,
                call_id,
                inquire,
                form,
                reply,
            } => {
                let id = st.next_question;
                st.next_question += 1;
                st.questions.insert(id, reply);
                let step = st.step_of(from);
                st.emit(FlowEvent::Question {
                    id,
                    agent,
                    step,
                    inquire,
                    call_id,
                    form,
                });
            }
            FlowMsg::Hold {
                agent,
                from,
                call_id,
                tool,
                arguments,
                why,
                reply,
            } => approvals::hold(
                &myself, st, agent, from, call_id, tool, arguments, why, reply,
            ),
            FlowMsg::Decide {
                approval_id,
                decision,
            } if st.held.contains_key(&approval_id) => approvals::let_go(st, approval_id, decision),
            FlowMsg::Progress {
                agent,
                from,
                call_id,
                progress,
                total,
                message,
            } => {
                let step = st.step_of(from);
                st.emit(FlowEvent::ToolProgress {
                    step,
                    agent,
                    call_id,
                    progress,
                    total,
                    message,
                });
            }
            FlowMsg::Decide {
                approval_id,
                decision,
            } if st.plan_signoff == Some(approval_id) => {
                st.approval_deadlines.remove(&approval_id);
                approvals::signed_off(&myself, st, approval_id, decision).await
            }
            FlowMsg::Decide {
                approval_id,
                decision,
            } => match st.pending.remove(&approval_id) {
                Some(paused) => {
                    st.approval_deadlines.remove(&approval_id);
                    approvals::decided(&myself, st, paused, decision).await
                }
                None => {
                    tracing::warn!(flow = %st.id, "decision on unknown or already decided approval {approval_id}")
                }
            },
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
        // the flow's next step of that kind takes another agent or starts a fresh one.
        let gone = match evt {
            SupervisionEvent::ActorFailed(cell, err) => {
                tracing::warn!(flow = %st.id, agent = %cell.get_id(), "agent crashed: {err}");
                cell.get_id()
            }
            SupervisionEvent::ActorTerminated(cell, ..) => cell.get_id(),
            _ => return Ok(()),
        };
        for agents in st.idle.values_mut() {
            agents.retain(|a| a.get_id() != gone);
        }
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
            let caller = st.caller();
            let me = myself.clone();
            st.planning.handle().spawn(async move {
                let (plan, usage) = calls::make_plan(caller).await;
                let _ = me.send_message(FlowMsg::PlanMade { plan, usage });
            });
        }
    }
}
