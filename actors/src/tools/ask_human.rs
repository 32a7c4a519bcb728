//! `ask_human`: a question to the person behind the flow. The question travels to the
//! flow's planner, which publishes it as a `FlowEvent::Question`; whoever drives the flow
//! (the CLI on a terminal, an embedder through the Runtime API) answers it. Nothing here
//! reads a terminal.

use std::time::Duration;

use serde_json::{Value, json};

use super::{Tool, ToolCtx, ToolError, ToolFuture, ToolOutput, ToolSettings, str_arg};
use crate::llm::ToolSpec;
use crate::protocol::Unanswered;

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
            name: "ask_human".into(),
            description: "Ask the person you are working for a question and wait for the answer. Use it when \
                you need a decision, a preference or information only they have."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {"inquire": {"type": "string", "description": "The question, self-contained."}},
                "required": ["inquire"]
            }),
        }
    }

    fn call<'a>(&'a mut self, args: Value, ctx: &'a ToolCtx) -> ToolFuture<'a> {
        Box::pin(async move {
            let inquire = str_arg(&args, "inquire", "ask_human")?.to_string();
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
