//! `mcp-login SERVER`: a person signs in to a remote MCP server of the servers file with the
//! OAuth authorization-code grant (PKCE); the tokens are stored for the server's later use.

use std::process::ExitCode;
use std::time::Duration;

use manus_rt::Config;
use manus_rt::engine::mcp::{self, McpTransport};

use super::exit;

pub async fn run(config: &Config, server: &str, wait: Duration) -> ExitCode {
    let Some(spec) = config.mcp_servers.iter().find(|s| s.id == server) else {
        let known: Vec<&str> = config.mcp_servers.iter().map(|s| s.id.as_str()).collect();
        return exit::not_started_because(format!(
            "no MCP server `{server}` in the servers file (it has: {})",
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        ));
    };
    let (McpTransport::StreamableHttp { url, .. }, Some(oauth)) = (&spec.transport, &spec.oauth)
    else {
        return exit::not_started_because(format!(
            "the MCP server `{server}` has no `oauth` entry in the servers file, so there is nothing to sign in to"
        ));
    };
    let signed = mcp::login(server, url, oauth, wait, |address| {
        println!(
            "Open this address in a browser to sign in to the MCP server `{server}`:\n{address}"
        );
    })
    .await;
    match signed {
        Ok(()) => {
            println!(
                "Signed in to `{server}`; the tokens are in {}",
                oauth.token_file.display()
            );
            ExitCode::SUCCESS
        }
        Err(why) => exit::failed_because(why),
    }
}
