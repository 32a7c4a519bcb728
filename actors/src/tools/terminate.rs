//! `terminate`: the model says the current task is finished, well or not.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{Builtin, Tool, ToolCtx, ToolFuture, ToolOutput, args};
use crate::llm::ToolSpec;
use crate::protocol::TerminateStatus;

const NAME: &str = "terminate";

pub const TOOL: Builtin = Builtin::new(NAME, |_| Box::new(Terminate));

pub struct Terminate;

/// A call's arguments.
#[derive(Deserialize, JsonSchema)]
struct Args {
    /// How the task ended.
    status: Status,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Status {
    Success,
    Failure,
}

/// Whether `call` is `terminate` with status success.
pub fn claims_success(call: &crate::llm::ToolCall) -> bool {
    call.function.name == NAME
        && serde_json::from_str::<Value>(&call.function.arguments)
            .ok()
            .and_then(|args| args::parse::<Args>(NAME, &args).ok())
            .is_some_and(|a| matches!(a.status, Status::Success))
}

impl Tool for Terminate {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: NAME.into(),
            description: "Finish the current task. Call it once the task is done (status success) or when it \
                cannot be done (status failure); say why in your message before calling it."
                .into(),
            parameters: args::schema::<Args>(),
            variants: None,
        }
    }

    fn call<'a>(&'a mut self, args: Value, _ctx: &'a ToolCtx) -> ToolFuture<'a> {
        Box::pin(async move {
            let Args { status } = args::parse(NAME, &args)?;
            let (status, word) = match status {
                Status::Success => (TerminateStatus::Success, "success"),
                Status::Failure => (TerminateStatus::Failure, "failure"),
            };
            Ok(ToolOutput {
                text: format!("The task has ended with status {word}."),
                terminate: Some(status),
            })
        })
    }
}
