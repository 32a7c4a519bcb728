//! `terminate`: the model says the current task is finished, well or not.

use serde_json::{Value, json};

use super::{Tool, ToolCtx, ToolError, ToolFuture, ToolOutput, str_arg};
use crate::llm::ToolSpec;
use crate::protocol::TerminateStatus;

pub struct Terminate;

impl Tool for Terminate {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "terminate".into(),
            description: "Finish the current task. Call it once the task is done (status success) or when it \
                cannot be done (status failure); say why in your message before calling it."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {"status": {"type": "string", "enum": ["success", "failure"], "description": "How the task ended."}},
                "required": ["status"]
            }),
        }
    }

    fn call<'a>(&'a mut self, args: Value, _ctx: &'a ToolCtx) -> ToolFuture<'a> {
        Box::pin(async move {
            let status = match str_arg(&args, "status", "terminate")? {
                "success" => TerminateStatus::Success,
                "failure" => TerminateStatus::Failure,
                other => {
                    return Err(ToolError::new(format!(
                        "terminate: status must be \"success\" or \"failure\", got \"{other}\""
                    )));
                }
            };
            let word = if status == TerminateStatus::Success {
                "success"
            } else {
                "failure"
            };
            Ok(ToolOutput {
                text: format!("The task has ended with status {word}."),
                terminate: Some(status),
            })
        })
    }
}
