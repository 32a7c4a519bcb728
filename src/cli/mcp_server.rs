//! `mcp-server`: offer manus-rt's tools to one MCP client on stdio, or over streamable HTTP
//! at `/mcp`, with the workspace and sandbox settings agents get. Over HTTP it takes the
//! service's bearer tokens (`[server] api_tokens`, `MANUS_API_TOKENS`), refuses to listen
//! beyond loopback without them, and bounds connections as `serve` does.

use std::process::ExitCode;
use std::sync::Arc;

use axum::extract::Request;
use axum::middleware::{self, Next};
use manus_rt::engine::mcp::server;
use manus_rt::serve::{bearer_refusal, conns, listen};
use manus_rt::{Config, Runtime};

use super::args::{McpServerArgs, McpTransportArg};
use super::exit;
use super::terminal::serve_until_stopped;

/// Serve the tools until the client leaves (stdio) or Ctrl-C (HTTP).
pub async fn run(config: Config, args: McpServerArgs) -> ExitCode {
    let service = config.server.clone();
    let http = config.mcp_http.clone();
    let listener = match args.transport {
        McpTransportArg::Stdio => None,
        McpTransportArg::Http => match listen(&args.bind, &service).await {
            Ok(l) => Some(l),
            Err(e) => return exit::not_started_because(e),
        },
    };
    let runtime = match Runtime::builder().config(config).start().await {
        Ok(r) => r,
        Err(e) => return exit::not_started_because(e),
    };
    let serve = runtime.serve_settings();
    let offered = serve.tools.join(", ");
    let served = match listener {
        None => {
            eprintln!("manus-rt: serving {offered} over MCP on stdio");
            server::serve_stdio(serve).await
        }
        Some(listener) => {
            let at = match listener.local_addr() {
                Ok(a) => a,
                Err(e) => return exit::not_started_because(format!("{}: {e}", args.bind)),
            };
            let tokens: Arc<[String]> = service.api_tokens.clone().into();
            let auth = if tokens.is_empty() {
                "no auth: set [server] api_tokens for bearer tokens"
            } else {
                "bearer tokens required"
            };
            let app = server::http_router(serve, &http, at).layer(middleware::from_fn(
                move |req: Request, next: Next| {
                    let tokens = tokens.clone();
                    async move {
                        match bearer_refusal(&tokens, req.headers()) {
                            Some(refused) => refused,
                            None => next.run(req).await,
                        }
                    }
                },
            ));
            eprintln!(
                "manus-rt: serving {offered} over MCP at http://{at}/mcp ({auth}; Ctrl-C or SIGTERM stops)"
            );
            let max = service.max_connections;
            serve_until_stopped(|stopping| conns::serve(listener, app, max, stopping)).await;
            Ok(())
        }
    };
    runtime.shutdown().await;
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => exit::failed_because(e),
    }
}
