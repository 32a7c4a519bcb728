//! The `manus-rt` command line: run a planned flow or a single agent, resume or fork a run, list and
//! show runs, check a config, list the tools, check the sandbox, run an agent on one MCP
//! server, serve our tools over MCP, serve the runtime over HTTP. Progress goes to stderr (a
//! live board on a terminal, plain lines otherwise); the result goes to stdout (`--json` for
//! machines). Exit codes in `exit`.
//!
//! `args` is the shape of the command line; each command has a module of its own, which knows
//! no other command; `flow` is what the flow-running commands share, `terminal` the stdin and
//! signal helpers.

mod approvals;
mod args;
mod chat;
mod config_check;
mod eval;
mod exit;
mod flow;
mod fork;
mod mcp_login;
mod mcp_server;
mod memory;
mod probe;
mod resume;
mod run;
mod run_mcp;
mod runs;
mod sandbox_doctor;
mod serve;
mod terminal;
mod tools_list;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use manus_rt::{Config, FlowMode, telemetry};

use args::{Cli, Command, ConfigAction, LogFormat, SandboxAction, ToolsAction};

/// Parse the arguments, load the config (exit 2 if it is invalid), start the logs and the
/// trace export, run the command, and send the last spans before exiting.
pub async fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut config = match Config::locate(cli.config.as_deref()) {
        Ok(c) => c,
        Err(e) => return exit::not_started_because(format!("invalid config: {e}")),
    };
    // Only the commands that talk to a model look for one.
    if matches!(
        cli.command,
        Command::RunFlow(_)
            | Command::Run(_)
            | Command::Chat(_)
            | Command::Config { .. }
            | Command::Serve { .. }
            | Command::Eval(_)
    ) {
        config.find_model().await;
    }
    let format = match cli.log_format {
        LogFormat::Text => telemetry::LogFormat::Text,
        LogFormat::Json => telemetry::LogFormat::Json,
    };
    let telemetry = telemetry::init(&config.telemetry, format);
    let code = match cli.command {
        Command::RunFlow(args) => run::run(config, args, FlowMode::Plan).await,
        Command::Run(args) => run::run(config, args, FlowMode::Single).await,
        Command::Chat(args) => chat::run(config, args).await,
        Command::Resume(args) => resume::run(config, args).await,
        Command::Fork(args) => fork::run(config, args).await,
        Command::Runs { action } => runs::run(&config, action).await,
        Command::Config {
            action: ConfigAction::Check { probe },
        } => config_check::run(&config, probe).await,
        Command::Tools {
            action: ToolsAction::List,
        } => tools_list::run(),
        Command::Sandbox {
            action: SandboxAction::Doctor,
        } => sandbox_doctor::run(&config).await,
        Command::RunMcp(args) => run_mcp::run(config, args).await,
        Command::McpServer(args) => mcp_server::run(config, args).await,
        Command::McpLogin { server, wait_secs } => {
            mcp_login::run(&config, &server, Duration::from_secs(wait_secs)).await
        }
        Command::Serve { bind } => serve::run(config, &bind).await,
        Command::Approvals { action } => approvals::run(&config, action).await,
        Command::Eval(args) => eval::run(config, args).await,
        Command::Memory { action } => memory::run(&config, action).await,
    };
    // The last spans of a short run are still in the batch: send them before exiting.
    telemetry.shutdown().await;
    code
}
