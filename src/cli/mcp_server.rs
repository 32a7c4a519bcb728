//! `mcp-server`: offer manus-rt's tools to one MCP client on stdio, or over streamable HTTP
//! at `/mcp`, with the workspace and sandbox settings agents get.

use std::process::ExitCode;

use manus_rt::engine::mcp::server;
use manus_rt::{Config, Runtime};

use super::args::{McpServerArgs, McpTransportArg};
use super::exit;
use super::terminal::stop_signal;

/// Serve the tools until the client leaves (stdio) or Ctrl-C (HTTP).
pub async fn run(config: Config, args: McpServerArgs) -> ExitCode {
    let runtime = match Runtime::builder().config(config).start().await {
        Ok(r) => r,
        Err(e) => return exit::not_started_because(e),
    };
    let serve = runtime.serve_settings();
    let offered = serve.tools.join(", ");
    let served = match args.transport {
        McpTransportArg::Stdio => {
            eprintln!("manus-rt: serving {offered} over MCP on stdio");
            server::serve_stdio(serve).await
        }
        McpTransportArg::Http => match tokio::net::TcpListener::bind(&args.bind).await {
            Ok(listener) => {
                let at = listener
                    .local_addr()
                    .map(|a| a.to_string())
                    .unwrap_or(args.bind.clone());
                eprintln!(
                    "manus-rt: serving {offered} over MCP at http://{at}/mcp (Ctrl-C or SIGTERM stops)"
                );
                server::serve_http(serve, listener, stop_signal()).await
            }
            Err(e) => Err(format!("cannot listen on {}: {e}", args.bind)),
        },
    };
    runtime.shutdown().await;
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => exit::failed_because(e),
    }
}
