//! `recall`: the full text of a tool output that memory compaction replaced by a stub. It
//! is not a worker's tool: the agent that pruned the output holds its text and answers the
//! call itself; this module owns the call's arguments and the spec the model sees.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::ToolError;
use super::args;
use crate::llm::ToolSpec;

pub const NAME: &str = "recall";

/// What to read back.
#[derive(Deserialize, JsonSchema)]
pub struct Recall {
    /// The reference a pruned output's stub names ("r3").
    pub reference: String,
}

pub fn spec() -> ToolSpec {
    ToolSpec {
        name: NAME.into(),
        description: "Read again, in full, a tool output that was pruned from your memory to \
            save context. A pruned output is replaced by a note that names its reference."
            .into(),
        parameters: args::schema::<Recall>(),
        variants: None,
    }
}

/// Read a `recall` call's arguments.
pub fn read_call(args: &Value) -> Result<Recall, ToolError> {
    args::parse(NAME, args)
}
