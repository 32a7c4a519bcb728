//! `tools list`: every tool this build has, with its description and its arguments' schema.

use std::process::ExitCode;

use manus_rt::engine::tools::{KNOWN_TOOLS, ToolSettings, make_tool};

pub fn run() -> ExitCode {
    let settings = ToolSettings::default();
    for name in KNOWN_TOOLS {
        if let Some(tool) = make_tool(name, &settings) {
            let spec = tool.spec();
            println!(
                "{}\n  {}\n  arguments: {}\n",
                spec.name,
                spec.description.replace('\n', "\n  "),
                spec.parameters
            );
        }
    }
    ExitCode::SUCCESS
}
