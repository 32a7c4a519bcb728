//! The executor-agent actor: runs one plan step at a time as a think/act loop of model
//! calls and tool calls, and supervises the tool worker that holds its tools.
//!
//! Each step starts from clean working memory and a fresh round counter; only the step's
//! outcome goes back to the planner. Nothing an agent learns leaks into the next step or
//! the next flow except through the plan's notes.
//!
//! This module is the actor: it waits for a replica permit, runs the step and reports how
//! it ended. The step itself is `step`'s (the loop), `act`'s (the tool calls),
//! `compaction`'s, `nudges`' and `prompts`'; what an agent is, `spec`'s.

mod act;
mod code;
mod compaction;
#[cfg(test)]
mod fuzz;
pub mod memory;
mod nudges;
pub mod profile;
mod prompts;
mod replay;
mod spec;
mod step;

pub use profile::{Action, AgentProfile};
pub use prompts::earlier_turns;
pub use spec::AgentSpec;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use tracing::Instrument;

use crate::protocol::{AgentMsg, FlowEvent, FlowMsg, ToolMsg};
use step::StepRun;

pub struct ExecutorAgent;

pub struct AgentState {
    /// Shared by every flow's agent of this kind.
    spec: Arc<AgentSpec>,
    /// Started on the first tool call, so an idle agent is one small actor.
    worker: Option<ActorRef<ToolMsg>>,
    /// The model refused images once: from then on none are sent.
    text_only: bool,
    /// In code mode, the interpreter its cells run in, from its first cell on.
    interpreter: Option<crate::tools::python::session::Interpreter>,
    /// In code mode, the cell waiting for a decision while its step is paused.
    open_cell: Option<code::OpenCell>,
}

impl Actor for ExecutorAgent {
    type Msg = AgentMsg;
    type State = AgentState;
    type Arguments = Arc<AgentSpec>;

    async fn pre_start(
        &self,
        _myself: ActorRef<AgentMsg>,
        spec: Arc<AgentSpec>,
    ) -> Result<AgentState, ActorProcessingErr> {
        Ok(AgentState {
            spec,
            worker: None,
            text_only: false,
            interpreter: None,
            open_cell: None,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<AgentMsg>,
        msg: AgentMsg,
        state: &mut AgentState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            AgentMsg::RunStep(req, report) => {
                let span = tracing::info_span!(
                    parent: &req.span,
                    "invoke_agent",
                    otel.name = format!("invoke_agent {}", state.spec.name),
                    gen_ai.operation.name = "invoke_agent",
                    gen_ai.agent.name = %state.spec.name,
                    gen_ai.request.model = %state.spec.llm.model(),
                    manus.step.index = req.step_index,
                    manus.step.status = tracing::field::Empty,
                    manus.agent.rounds = tracing::field::Empty,
                    gen_ai.usage.input_tokens = tracing::field::Empty,
                    gen_ai.usage.output_tokens = tracing::field::Empty,
                    manus.cost = tracing::field::Empty,
                );
                let asked = Instant::now();
                let slots = state.spec.slots.clone();
                let permit = match slots.try_acquire_owned() {
                    Ok(p) => p,
                    Err(_) => {
                        tracing::debug!(agent = %state.spec.name, "all {} replicas busy; the step waits its turn", state.spec.replicas);
                        state
                            .spec
                            .slots
                            .clone()
                            .acquire_owned()
                            .instrument(span.clone())
                            .await?
                    }
                };
                // Wait for the planner to publish StepStarted before emitting anything.
                let queued = asked.elapsed();
                let _ = req
                    .flow
                    .call(
                        |ack| FlowMsg::StepBegan {
                            dispatch: req.dispatch,
                            queued,
                            ack,
                        },
                        Some(Duration::from_secs(30)),
                    )
                    .await;
                let mut run = StepRun::new(state, &req, &myself);
                let mut outcome = run.run().instrument(span.clone()).await;
                run.brief(&mut outcome).instrument(span.clone()).await;
                drop(permit);
                run.replay_report();
                run.emit(FlowEvent::StepMemory {
                    step: req.step_index,
                    agent: run.state.spec.name.clone(),
                    messages: run.memory.request(None).into_iter().cloned().collect(),
                });
                drop(run);
                span.record("manus.step.status", outcome.status.as_str());
                span.record("manus.agent.rounds", outcome.rounds);
                span.record("gen_ai.usage.input_tokens", outcome.usage.prompt_tokens);
                span.record(
                    "gen_ai.usage.output_tokens",
                    outcome.usage.completion_tokens,
                );
                span.record("manus.cost", outcome.usage.cost);
                // Close this step's spans before the planner hears of the outcome: it may end
                // the flow at once, and the flow's span must close with nothing open below it.
                drop(span);
                drop(req);
                report.send(outcome);
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        myself: ActorRef<AgentMsg>,
        _state: &mut AgentState,
    ) -> Result<(), ActorProcessingErr> {
        myself.stop_children(None);
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<AgentMsg>,
        evt: SupervisionEvent,
        state: &mut AgentState,
    ) -> Result<(), ActorProcessingErr> {
        // The worker is replaced where its crash is noticed (in the step); here we only log.
        if let SupervisionEvent::ActorFailed(cell, err) = evt {
            tracing::warn!(agent = %state.spec.name, worker = %cell.get_id(), "tool worker crashed: {err}");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::prompts::step_prompt;
    use super::*;
    use crate::llm::{Cassette, LlmClient, LlmSettings};
    use crate::plan::{Plan, StepStatus};
    use crate::protocol::{StepOutcome, StepReport, StepRequest};
    use crate::tools::tests::PANICS;
    use crate::tools::{self, ToolSettings};
    use serde_json::{Value, json};
    use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

    const BASH: &str = tools::bash::TOOL.name;
    const TERMINATE: &str = tools::terminate::TOOL.name;

    /// Stands in for a planner: passes on how steps ended, takes the agent's other casts and
    /// answers nothing.
    struct Sink;
    impl Actor for Sink {
        type Msg = FlowMsg;
        type State = UnboundedSender<StepOutcome>;
        type Arguments = UnboundedSender<StepOutcome>;
        async fn pre_start(
            &self,
            _m: ActorRef<FlowMsg>,
            ended: Self::Arguments,
        ) -> Result<Self::State, ActorProcessingErr> {
            Ok(ended)
        }
        async fn handle(
            &self,
            _m: ActorRef<FlowMsg>,
            msg: FlowMsg,
            ended: &mut Self::State,
        ) -> Result<(), ActorProcessingErr> {
            if let FlowMsg::StepDone { outcome, .. } = msg {
                let _ = ended.send(outcome);
            }
            Ok(())
        }
    }

    fn tool_reply(name: &str, args: serde_json::Value) -> serde_json::Value {
        json!({"id": "r", "model": "m", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null,
            "tool_calls": [{"id": format!("call_{name}"), "type": "function",
                            "function": {"name": name, "arguments": args.to_string()}}]}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
    }

    /// Step 0 of a one-step plan, for `flow`, its events into `events`.
    fn step_request(
        step: &str,
        flow: &ActorRef<FlowMsg>,
        events: UnboundedSender<FlowEvent>,
    ) -> StepRequest {
        StepRequest {
            flow_id: "f".into(),
            dispatch: 0,
            step_index: 0,
            step: step.into(),
            task: "t".into(),
            earlier: None,
            plan_view: Plan::new("p", "t", vec![step.into()]).view(),
            builds_on: vec![],
            continued: None,
            recorded: vec![],
            replay: Default::default(),
            flow: flow.clone(),
            budgeted: false,
            events: crate::protocol::EventSink::new(events, None, false),
            span: tracing::Span::none(),
        }
    }

    /// A `manus` agent with these tools and replica permits, whose model replays `replies`
    /// to any request whose first user message is `first_user`.
    fn agent_spec(
        workspace: &std::path::Path,
        tools: &[&str],
        permits: usize,
        first_user: &str,
        replies: Vec<Value>,
    ) -> AgentSpec {
        let request = json!({"messages": [{"role": "user", "content": first_user}]});
        let lines: Vec<String> = replies
            .into_iter()
            .map(|response| json!({"request": request, "response": response}).to_string())
            .collect();
        let cassette = Arc::new(Cassette::parse("test", &lines.join("\n")).unwrap());
        let mut llm = LlmClient::new(
            Arc::new(LlmSettings::replay("default", cassette)),
            crate::llm::LazyHttp::default(),
            None,
        );
        crate::llm::rewind([&mut llm], crate::llm::ReplayFrom::Start);
        let mut profile = crate::agent::profile::builtin("manus").unwrap();
        profile.tools = tools.iter().map(|t| t.to_string()).collect();
        let tool_specs =
            crate::tools::worker::specs_for(&profile.tools, &ToolSettings::default()).into();
        AgentSpec {
            name: "manus".into(),
            description: "d".into(),
            replicas: 1,
            slots: std::sync::Arc::new(tokio::sync::Semaphore::new(permits)),
            tool_specs,
            llm,
            tool_settings: ToolSettings::default(),
            workspace: workspace.to_path_buf(),
            sandbox: None,
            browser: None,
            mcp: vec![],
            approvals: Default::default(),
            compact_llm: None,
            system: AgentSpec::opening(&profile, workspace, "manus"),
            profile,
            memory: None,
        }
    }

    /// The next step outcome the sink passed on; a missing one fails the test.
    async fn next_outcome(
        outcomes: &mut tokio::sync::mpsc::UnboundedReceiver<StepOutcome>,
    ) -> StepOutcome {
        tokio::time::timeout(Duration::from_secs(10), outcomes.recv())
            .await
            .expect("no step outcome within 10 s")
            .unwrap()
    }

    #[tokio::test]
    async fn a_step_its_agent_never_finishes_comes_back_failed() {
        let (ended, mut outcomes) = unbounded_channel();
        let (sink, _) = Actor::spawn(None, Sink, ended).await.unwrap();
        let (events, _rx) = unbounded_channel();
        let req = step_request("wait for a replica", &sink, events);
        // No replica permit is free, so the step waits until its agent is killed.
        let finish = vec![tool_reply(TERMINATE, json!({"status": "success"}))];
        let spec = agent_spec(&std::env::temp_dir(), &[TERMINATE], 0, "", finish);
        let (agent, handle) = Actor::spawn(None, ExecutorAgent, Arc::new(spec))
            .await
            .unwrap();
        let report = StepReport::new(sink.clone(), 7);
        agent.send_message(AgentMsg::RunStep(req, report)).unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(outcomes.try_recv().is_err(), "the step is still waiting");
        agent.kill();
        handle.await.unwrap();
        let outcome = next_outcome(&mut outcomes).await;
        assert_eq!(outcome.status, StepStatus::Failed);
        assert!(
            outcome.summary.contains("stopped before finishing"),
            "{outcome:?}"
        );

        // A step sent to an agent that is already gone fails the same way.
        let (events, _rx) = unbounded_channel();
        let req = step_request("too late", &sink, events);
        let refused = agent.send_message(AgentMsg::RunStep(req, StepReport::new(sink.clone(), 8)));
        assert!(refused.is_err());
        drop(refused);
        let outcome = next_outcome(&mut outcomes).await;
        assert_eq!(outcome.status, StepStatus::Failed);
        assert!(outcomes.try_recv().is_err(), "each report is sent once");
        sink.stop(None);
    }

    #[tokio::test]
    async fn a_panicking_tool_is_an_observation_and_its_worker_restarts() {
        let workspace =
            std::env::temp_dir().join(format!("manus-agent-panic-{}", std::process::id()));
        std::fs::create_dir_all(&workspace).unwrap();
        let (ended, mut outcomes) = unbounded_channel();
        let (sink, _) = Actor::spawn(None, Sink, ended).await.unwrap();
        let (events, mut rx) = unbounded_channel();
        let req = step_request("crash then recover", &sink, events);
        // The model's side, as a cassette: crash the worker, use the shell, finish.
        let replies = vec![
            tool_reply(PANICS, json!({})),
            tool_reply(BASH, json!({"command": "echo still here"})),
            tool_reply(TERMINATE, json!({"status": "success"})),
        ];
        let tools = [PANICS, BASH, TERMINATE];
        let spec = agent_spec(&workspace, &tools, 1, &step_prompt(&req), replies);
        let (agent, _) = Actor::spawn(None, ExecutorAgent, Arc::new(spec))
            .await
            .unwrap();
        let report = StepReport::new(sink.clone(), 0);
        agent.send_message(AgentMsg::RunStep(req, report)).unwrap();
        let outcome = outcomes.recv().await.unwrap();
        assert_eq!(outcome.status, StepStatus::Completed, "{}", outcome.summary);
        let mut finished = vec![];
        while let Ok(e) = rx.try_recv() {
            if let FlowEvent::ToolFinished {
                tool, ok, output, ..
            } = e
            {
                finished.push((tool, ok, output));
            }
        }
        assert_eq!(finished[0].0, PANICS);
        assert!(
            !finished[0].1
                && finished[0].2.contains("crashed")
                && finished[0].2.contains("restarted"),
            "{finished:?}"
        );
        assert_eq!(
            (finished[1].0.as_str(), finished[1].1),
            (BASH, true),
            "{finished:?}"
        );
        assert!(finished[1].2.contains("still here"), "{finished:?}");
        agent.stop(None);
        sink.stop(None);
        let _ = std::fs::remove_dir_all(&workspace);
    }
}
