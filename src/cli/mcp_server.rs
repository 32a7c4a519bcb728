//! `mcp-server`: offer manus-rt's tools to one MCP client on stdio, or over streamable HTTP
//! at `/mcp`, with the workspace and sandbox settings agents get. Over HTTP it takes the
//! service's bearer tokens (`[server] api_tokens`, `MANUS_API_TOKENS`) and, with `[mcp]
//! oauth_issuer`, access tokens of that authorization server (`serve::oauth`, whose
//! protected-resource metadata it serves); it refuses to listen beyond loopback with
//! neither, and bounds connections as `serve` does.

use std::process::ExitCode;
use std::sync::Arc;

use axum::extract::Request;
use axum::http::header;
use axum::middleware::{self, Next};
use manus_rt::engine::mcp::server;
use manus_rt::serve::oauth::{METADATA_PATH, ResourceServer};
use manus_rt::serve::{bearer_refusal, conns, listen};
use manus_rt::{Config, Runtime};

use super::args::{McpServerArgs, McpTransportArg};
use super::exit;
use super::terminal::serve_until_stopped;

/// Serve the tools until the client leaves (stdio) or Ctrl-C (HTTP).
pub async fn run(config: Config, args: McpServerArgs) -> ExitCode {
    let service = config.server.clone();
    let http = config.mcp_http.clone();
    let oauth = config.mcp_oauth.clone();
    // Access tokens are as much a guard as static ones for listening beyond loopback:
    // `listen` only asks whether a guard is set, so a placeholder stands for them there (the
    // tokens checked below are `service.api_tokens`, without it).
    let mut guard = service.clone();
    if oauth.is_some() {
        guard.api_tokens.push(String::new());
    }
    let listener = match args.transport {
        McpTransportArg::Stdio => None,
        McpTransportArg::Http => match listen(&args.bind, &guard).await {
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
            let resource = oauth.map(|o| Arc::new(ResourceServer::new(o, at)));
            let auth = match (&resource, tokens.is_empty()) {
                (Some(_), _) => "access tokens of [mcp] oauth_issuer or bearer tokens required",
                (None, true) => "no auth: set [server] api_tokens for bearer tokens",
                (None, false) => "bearer tokens required",
            };
            let checks = resource.clone();
            let app = server::http_router(serve, &http, at).layer(middleware::from_fn(
                move |req: Request, next: Next| {
                    let (tokens, checks) = (tokens.clone(), checks.clone());
                    async move {
                        let given = req
                            .headers()
                            .get(header::AUTHORIZATION)
                            .and_then(|v| v.to_str().ok())
                            .and_then(|v| v.strip_prefix("Bearer "));
                        let refused = match &checks {
                            Some(_) if given.is_some_and(|t| tokens.iter().any(|s| s == t)) => None,
                            Some(checks) => checks.refusal(given).await,
                            None => bearer_refusal(&tokens, req.headers()),
                        };
                        match refused {
                            Some(refused) => refused,
                            None => next.run(req).await,
                        }
                    }
                },
            ));
            // The metadata is public: it is how a client finds where to get a token.
            let app = match resource {
                None => app,
                Some(resource) => {
                    let answer = axum::Json(resource.metadata());
                    let metadata = axum::routing::get(move || async move { answer });
                    app.route(METADATA_PATH, metadata.clone())
                        .route(&format!("{METADATA_PATH}/mcp"), metadata)
                }
            };
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
