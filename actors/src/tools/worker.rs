//! The tool-worker actor: owns one agent's tool instances and runs its calls one at a time,
//! in the context (`ToolCtx`) it was started with. A tool that panics takes this actor down
//! with it; the agent that supervises it reports the crash to the model and starts a fresh
//! worker.

use std::collections::BTreeMap;
use std::time::Instant;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tracing::Instrument;

use super::{Tool, ToolCtx, ToolSettings, clip, make_tool};
use crate::llm::ToolSpec;
use crate::protocol::{McpCaller, ToolMsg, ToolResult};

pub struct ToolWorker;

pub struct WorkerArgs {
    pub tools: Vec<String>,
    pub settings: ToolSettings,
    /// Where every call runs: the agent's flow, workspace, sandbox, browser and model.
    pub ctx: ToolCtx,
}

pub struct WorkerState {
    tools: BTreeMap<String, Box<dyn Tool>>,
    ctx: ToolCtx,
    /// Whether (and how much of) arguments and results go on spans.
    capture_content: Option<usize>,
    /// How long a question to the person waits (an MCP server's too).
    ask_timeout: std::time::Duration,
}

/// The specs of a tool list, in order, for the model. Unknown names are skipped (config
/// validation reports them before any agent starts).
pub fn specs_for(names: &[String], settings: &ToolSettings) -> Vec<ToolSpec> {
    names
        .iter()
        .filter_map(|n| make_tool(n, settings))
        .map(|t| t.spec())
        .collect()
}

impl Actor for ToolWorker {
    type Msg = ToolMsg;
    type State = WorkerState;
    type Arguments = WorkerArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<ToolMsg>,
        args: WorkerArgs,
    ) -> Result<WorkerState, ActorProcessingErr> {
        let tools = args
            .tools
            .iter()
            .filter_map(|n| Some((n.clone(), make_tool(n, &args.settings)?)))
            .collect();
        Ok(WorkerState {
            tools,
            ctx: args.ctx,
            capture_content: args.settings.capture_content,
            ask_timeout: args.settings.ask_timeout,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<ToolMsg>,
        msg: ToolMsg,
        state: &mut WorkerState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ToolMsg::Call(inv, reply) => {
                let name = inv.call.function.name.clone();
                let span = tracing::info_span!(
                    parent: &inv.span,
                    "execute_tool",
                    otel.name = format!("execute_tool {name}"),
                    gen_ai.operation.name = "execute_tool",
                    gen_ai.tool.name = %name,
                    gen_ai.tool.call.id = %inv.call.id,
                    gen_ai.tool.call.arguments = tracing::field::Empty,
                    gen_ai.tool.call.result = tracing::field::Empty,
                    otel.status_code = tracing::field::Empty,
                    error.type = tracing::field::Empty,
                );
                if let Some(max) = state.capture_content {
                    span.record(
                        "gen_ai.tool.call.arguments",
                        clip(&inv.call.function.arguments, max),
                    );
                }
                let started = Instant::now();
                if let Some(link) = state.ctx.flow.as_mut() {
                    link.for_call(&inv.call.id);
                }
                if let Some(route) = &inv.mcp {
                    let caller = state.ctx.flow.clone().map(|link| McpCaller {
                        link,
                        llm: state.ctx.llm.clone(),
                        workspace: state.ctx.workspace.clone(),
                        ask_timeout: state.ask_timeout,
                        span: span.clone(),
                    });
                    let called = route
                        .call(inv.args, traceparent(&span), caller)
                        .instrument(span.clone())
                        .await;
                    let (ok, output, images) = match called {
                        Ok(out) => (!out.is_error, out.text, out.images),
                        Err(e) => (false, e, vec![]),
                    };
                    if !ok {
                        span.record("error.type", "tool_error");
                        span.record("otel.status_code", "ERROR");
                    }
                    if let Some(max) = state.capture_content {
                        span.record("gen_ai.tool.call.result", clip(&output, max));
                    }
                    let _ = reply.send(ToolResult {
                        ok,
                        output,
                        terminate: None,
                        elapsed: started.elapsed(),
                        images,
                    });
                    return Ok(());
                }
                let Some(tool) = state.tools.get_mut(&name) else {
                    let _ = reply.send(ToolResult {
                        ok: false,
                        output: format!("no tool named `{name}` is available to this agent"),
                        terminate: None,
                        elapsed: started.elapsed(),
                        images: vec![],
                    });
                    return Ok(());
                };
                state.ctx.step = inv.step;
                let result = match tool
                    .call(inv.args, &state.ctx)
                    .instrument(span.clone())
                    .await
                {
                    Ok(out) => ToolResult {
                        ok: true,
                        output: out.text,
                        terminate: out.terminate,
                        elapsed: started.elapsed(),
                        images: vec![],
                    },
                    Err(e) => {
                        span.record("error.type", "tool_error");
                        span.record("otel.status_code", "ERROR");
                        ToolResult {
                            ok: false,
                            output: e.0,
                            terminate: None,
                            elapsed: started.elapsed(),
                            images: vec![],
                        }
                    }
                };
                if let Some(max) = state.capture_content {
                    span.record("gen_ai.tool.call.result", clip(&result.output, max));
                }
                let _ = reply.send(result);
            }
        }
        Ok(())
    }
}

/// The W3C `traceparent` of `span`, when spans are exported, for an MCP call's `_meta`.
fn traceparent(span: &tracing::Span) -> Option<String> {
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    sc.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        )
    })
}
