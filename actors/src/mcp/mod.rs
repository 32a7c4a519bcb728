//! MCP both ways. As a client, each configured server gets a connection actor
//! (`client.rs`) that owns its session; an agent's tool set gains the server's tools as
//! `mcp_{server}_{tool}` (`McpToolset`), and calls travel agent → tool worker → connection.
//! As a server (`server.rs`), manus-rt offers its own tools to any MCP client; over HTTP,
//! `sessions.rs` caps its sessions and closes idle ones. A remote server behind OAuth
//! 2.1 gets its tokens from `oauth.rs`. What a server asks back during
//! our calls (elicitation, sampling, roots, progress) is `asks.rs`'s, for the calling flow.

mod asks;
pub mod client;
mod elicit;
mod oauth;
mod output;
mod resources;
mod served_files;
pub mod server;
pub mod sessions;
mod sse;

pub use asks::Sampling;
pub use elicit::declined;
pub use oauth::{McpOAuth, OAuthGrant, Secret, login};

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use crate::llm::ToolSpec;
pub use crate::protocol::{McpCaller, McpHandle, McpRoute};
use crate::protocol::{McpMsg, McpOutput, McpToolInfo, answered};

/// One MCP server from the servers file, as data.
#[derive(Debug, Clone, PartialEq)]
pub struct McpServerSpec {
    /// The id in the servers file; tool names carry it.
    pub id: String,
    pub transport: McpTransport,
    /// Longest wait for one tool call; past it the server counts as hung.
    pub call_timeout: Duration,
    /// Longest wait to connect and list tools.
    pub connect_timeout: Duration,
    /// What the server's sampling requests get (`[mcp] sampling`).
    pub sampling: Sampling,
    /// How a remote server's OAuth tokens are obtained, when it needs them.
    pub oauth: Option<McpOAuth>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum McpTransport {
    /// A child process speaking MCP on stdin/stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
    },
    /// Streamable HTTP (the current remote transport).
    StreamableHttp {
        url: String,
        headers: BTreeMap<String, String>,
    },
    /// The legacy HTTP+SSE transport (an SSE stream plus a POST endpoint it names).
    Sse {
        url: String,
        headers: BTreeMap<String, String>,
    },
}

impl McpTransport {
    /// How the server is reached, for messages.
    pub fn describe(&self) -> String {
        match self {
            McpTransport::Stdio { command, args, .. } => {
                format!(
                    "stdio `{}`",
                    [command.clone()]
                        .iter()
                        .chain(args)
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(" ")
                )
            }
            McpTransport::StreamableHttp { url, .. } => format!("streamable HTTP {url}"),
            McpTransport::Sse { url, .. } => format!("SSE {url}"),
        }
    }
}

impl McpHandle {
    /// The server's current tools (cached by the connection until they change).
    pub async fn tools(&self) -> Result<std::sync::Arc<Vec<McpToolInfo>>, String> {
        // Connecting may start a process and list tools; the actor bounds both.
        let wait = self
            .connect_timeout
            .saturating_mul(2)
            .saturating_add(Duration::from_secs(5));
        let call = self.conn.call(McpMsg::Tools, Some(wait)).await;
        answered(call, &format!("the MCP server `{}`", self.server), wait)
    }
}

impl McpRoute {
    /// Call the tool for `caller`, whose flow answers what the server asks meanwhile; an
    /// `Err` is an observation for the model. Dropping the future (a cancelled step) cancels
    /// the call at the server.
    pub async fn call(
        &self,
        args: serde_json::Value,
        traceparent: Option<String>,
        caller: Option<McpCaller>,
    ) -> Result<McpOutput, String> {
        let args = match args {
            serde_json::Value::Object(map) => map,
            _ => serde_json::Map::new(),
        };
        // A question to the person or a sampling approval may hold the call as long as
        // `ask_human` may wait.
        let asking = caller.as_ref().map_or(Duration::ZERO, |c| c.ask_timeout);
        let wait = self
            .handle
            .call_timeout
            .saturating_add(asking)
            .saturating_add(self.handle.connect_timeout)
            .saturating_add(Duration::from_secs(5));
        if self.resources {
            let uri = args.get("uri").and_then(|u| u.as_str()).map(str::to_string);
            let answer = self
                .handle
                .conn
                .call(|reply| McpMsg::Resources { uri, reply }, Some(wait))
                .await;
            let who = format!("the MCP server `{}`", self.handle.server);
            return answered(answer, &who, wait);
        }
        let tool = self.tool.clone();
        let answer = self
            .handle
            .conn
            .call(
                |reply| McpMsg::Call {
                    tool,
                    args,
                    traceparent,
                    caller: caller.map(Box::new),
                    reply,
                },
                Some(wait),
            )
            .await;
        answered(
            answer,
            &format!("the MCP server `{}`", self.handle.server),
            wait,
        )
    }
}

/// Longest tool name the model APIs accept.
const MAX_NAME: usize = 64;

/// `mcp_{server}_{tool}` with every character outside `[A-Za-z0-9_-]` made `_`, cut to 64
/// characters, and made distinct from every name in `taken` by a numeric suffix.
pub fn tool_name(server: &str, tool: &str, taken: &HashSet<String>) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let mut base = format!("mcp_{}_{}", clean(server), clean(tool));
    base.truncate(MAX_NAME);
    let mut name = base.clone();
    let mut n = 2;
    while taken.contains(&name) {
        let suffix = format!("_{n}");
        let mut cut = base.clone();
        cut.truncate(MAX_NAME - suffix.len());
        name = format!("{cut}{suffix}");
        n += 1;
    }
    name
}

/// The MCP part of an agent's tool set at one moment: the specs to show the model and where
/// each name leads, plus a note for each server that could not be reached.
#[derive(Debug, Default)]
pub struct McpToolset {
    pub specs: Vec<ToolSpec>,
    pub routes: HashMap<String, McpRoute>,
    pub unavailable: Vec<String>,
}

impl McpToolset {
    /// Ask each server for its tools; names avoid `builtin` and each other. A server that
    /// cannot be reached contributes no tools and a line in `unavailable`.
    pub async fn gather(handles: &[McpHandle], builtin: &[String]) -> McpToolset {
        let mut set = McpToolset::default();
        let mut taken: HashSet<String> = builtin.iter().cloned().collect();
        for handle in handles {
            match handle.tools().await {
                Ok(tools) => {
                    for tool in tools.iter() {
                        let name = tool_name(&handle.server, &tool.name, &taken);
                        taken.insert(name.clone());
                        set.specs.push(ToolSpec {
                            name: name.clone(),
                            description: tool.description.clone(),
                            parameters: tool.schema.clone(),
                            variants: None,
                        });
                        set.routes.insert(
                            name,
                            McpRoute {
                                handle: handle.clone(),
                                tool: tool.name.clone(),
                                resources: tool.resources,
                            },
                        );
                    }
                }
                Err(e) => set.unavailable.push(e),
            }
        }
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sanitised_cut_and_distinct() {
        let none = HashSet::new();
        assert_eq!(
            tool_name("everything", "get-sum", &none),
            "mcp_everything_get-sum"
        );
        assert_eq!(
            tool_name("my server", "read.file/v2", &none),
            "mcp_my_server_read_file_v2"
        );
        let long = tool_name("s", &"x".repeat(100), &none);
        assert_eq!(long.len(), 64);
        let taken: HashSet<String> = [long.clone()].into();
        let second = tool_name("s", &"x".repeat(100), &taken);
        assert!(second.len() == 64 && second.ends_with("_2"), "{second}");
        let taken: HashSet<String> = ["mcp_a_b".to_string(), "mcp_a_b_2".to_string()].into();
        assert_eq!(tool_name("a", "b", &taken), "mcp_a_b_3");
        // Two tools that clean to the same name.
        let taken: HashSet<String> = ["mcp_a_b_c".to_string()].into();
        assert_eq!(tool_name("a", "b.c", &taken), "mcp_a_b_c_2");
    }
}
