//! `run-mcp`: the config's primary agent with the `mcp` profile and the tools of one MCP
//! server (of the servers file, a stdio command or a URL), for one prompt or one per line
//! of stdin.

use std::process::ExitCode;
use std::time::Duration;

use manus_rt::engine::agent::profile;
use manus_rt::engine::mcp::{McpServerSpec, McpTransport};
use manus_rt::{Config, FlowMode};

use super::args::OnApproval;
use super::args::RunMcpArgs;
use super::terminal::read_answer;
use super::{exit, flow};

pub async fn run(mut config: Config, args: RunMcpArgs) -> ExitCode {
    let server = match chosen_server(&config, &args) {
        Ok(s) => s,
        Err(why) => return exit::not_started_because(why),
    };
    let primary = config.flow.primary_agent.clone();
    let Some((agent, _)) = config.agents.iter_mut().find(|(a, _)| a.name == primary) else {
        return exit::not_started_because(format!(
            "the primary agent `{primary}` is not in the pool"
        ));
    };
    let Some(mcp_profile) = profile::builtin("mcp") else {
        return exit::not_started_because("this build has no `mcp` agent profile");
    };
    agent.profile = mcp_profile;
    agent.mcp_servers = vec![server.id.clone()];
    config.mcp_servers = vec![server];
    let Some(runtime) = flow::start(config, None).await else {
        return exit::not_started();
    };
    let mut last = None;
    if let Some(prompt) = &args.prompt {
        last = flow::drive(
            &runtime,
            prompt,
            args.json,
            FlowMode::Single,
            OnApproval::Reject,
            None,
        )
        .await;
    } else if args.interactive {
        loop {
            eprint!("mcp> ");
            let line = read_answer().await;
            if line.is_empty() || line.starts_with("(no answer") {
                break;
            }
            last = flow::drive(
                &runtime,
                &line,
                args.json,
                FlowMode::Single,
                OnApproval::Reject,
                None,
            )
            .await;
        }
    } else {
        eprintln!("manus-rt: give a request with -p \"...\", or -i to type requests");
        runtime.shutdown().await;
        return exit::not_started();
    }
    runtime.shutdown().await;
    match last {
        None if args.interactive => ExitCode::SUCCESS,
        last => exit::of_followed(last.as_ref()),
    }
}

/// The server the arguments name: one of the servers file by id, or one described on the
/// command line (which gets the file's first call timeout, else 120 s).
fn chosen_server(config: &Config, args: &RunMcpArgs) -> Result<McpServerSpec, String> {
    if let Some(id) = &args.server {
        return config
            .mcp_servers
            .iter()
            .find(|s| &s.id == id)
            .cloned()
            .ok_or_else(|| {
                let known: Vec<&str> = config.mcp_servers.iter().map(|s| s.id.as_str()).collect();
                format!(
                    "no MCP server `{id}` in the servers file; servers: {}",
                    if known.is_empty() {
                        "none (add config/mcp.json)".to_string()
                    } else {
                        known.join(", ")
                    }
                )
            });
    }
    let transport = match (&args.stdio, &args.url) {
        (Some(cmd), _) => {
            let mut words = cmd.split_whitespace().map(String::from);
            let command = words.next().ok_or("--stdio needs a command")?;
            McpTransport::Stdio {
                command,
                args: words.collect(),
                env: Default::default(),
            }
        }
        (None, Some(url)) if args.sse => McpTransport::Sse {
            url: url.clone(),
            headers: Default::default(),
        },
        (None, Some(url)) => McpTransport::StreamableHttp {
            url: url.clone(),
            headers: Default::default(),
        },
        (None, None) => unreachable!("clap requires one source"),
    };
    Ok(McpServerSpec {
        id: "server".into(),
        transport,
        call_timeout: config
            .mcp_servers
            .first()
            .map_or(Duration::from_secs(120), |s| s.call_timeout),
        connect_timeout: Duration::from_secs(30),
        sampling: config.mcp_sampling,
        oauth: None,
    })
}
