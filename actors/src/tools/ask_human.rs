//! `ask_human`: a question to the person behind the flow. The question travels to the
//! flow's planner, which publishes it as a `FlowEvent::Question`; whoever drives the flow
//! (the CLI on a terminal, an embedder through the Runtime API) answers it. Nothing here
//! reads a terminal.

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{Builtin, Tool, ToolCtx, ToolError, ToolFuture, ToolOutput, ToolSettings, args};
use crate::llm::ToolSpec;
use crate::protocol::Unanswered;

const NAME: &str = "ask_human";

/// `ask_human` waits for the answer up to `[tools] ask_timeout`.
pub const TOOL: Builtin =
    Builtin::new(NAME, |s| Box::new(AskHuman::new(s))).with_deadline(|s| Some(s.ask_timeout));

/// A call's arguments.
#[derive(Deserialize, JsonSchema)]
struct Args {
    /// The question, self-contained.
    inquire: String,
}

pub struct AskHuman {
    timeout: Duration,
}

impl AskHuman {
    pub fn new(settings: &ToolSettings) -> Self {
        AskHuman {
            timeout: settings.ask_timeout,
        }
    }
}

impl Tool for AskHuman {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: NAME.into(),
            description: "Ask the person you are working for a question and wait for the answer. Use it when \
                you need a decision, a preference or information only they have."
                .into(),
            parameters: args::schema::<Args>(),
            variants: None,
        }
    }

    fn call<'a>(&'a mut self, args: Value, ctx: &'a ToolCtx) -> ToolFuture<'a> {
        Box::pin(async move {
            let Args { inquire } = args::parse(NAME, &args)?;
            let flow = ctx
                .flow
                .as_ref()
                .ok_or_else(|| ToolError::new("ask_human: nobody is attached to answer"))?;
            match flow.ask(inquire, self.timeout).await {
                Ok(text) => Ok(ToolOutput::text(format!("The human answered: {text}"))),
                Err(Unanswered::Refused(why)) => {
                    Err(ToolError::new(format!("ask_human: no answer: {why}")))
                }
                Err(Unanswered::TimedOut) => Err(ToolError::new(format!(
                    "ask_human: no answer within {}s; carry on with your best judgement",
                    self.timeout.as_secs()
                ))),
                Err(Unanswered::Undelivered(e)) => Err(ToolError::new(format!(
                    "ask_human: the flow could not take the question: {e}"
                ))),
            }
        })
    }
}
