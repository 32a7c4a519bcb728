//! The settings of the service (`[server]`) and of a cluster node (`[cluster]`), as data
//! with the checks that read them. A leaf: `config/` builds them from the file, `serve`
//! and `cluster` run with them, and this module knows nothing of any of those.

use std::time::Duration;

/// `[server]`, as data.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// Bearer tokens accepted on /v1 and /metrics; empty means no auth.
    pub api_tokens: Vec<String>,
    /// Largest request body accepted.
    pub max_body_bytes: usize,
    /// Resume the runs a dead process left running when the service starts
    /// (`[server] resume_on_start`).
    pub resume_on_start: bool,
    /// How many finished flows the service holds in memory (`[server] keep_finished_flows`):
    /// past that, the one that finished first is dropped from its table (the run store keeps
    /// its record), so a service that runs for months does not grow with every flow.
    pub keep_finished: usize,
    /// Hosts (names or addresses, no port) accepted in the `Host` header besides loopback
    /// (`[server] allowed_hosts`). Without tokens only these and loopback are answered; with
    /// tokens, any host unless this list is set.
    pub allowed_hosts: Vec<String>,
    /// Connections open at once (`[server] max_connections`); past it the oldest idle one
    /// is closed to make room.
    pub max_connections: usize,
    /// How long a blocking A2A `SendMessage` waits for its task to end or to need input
    /// (`[server] blocking_wait_secs`); past it the task is answered as it stands.
    pub blocking_wait: Duration,
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            api_tokens: vec![],
            max_body_bytes: 64 * 1024,
            resume_on_start: true,
            keep_finished: 10_000,
            allowed_hosts: vec![],
            max_connections: 512,
            blocking_wait: Duration::from_secs(60),
        }
    }
}

/// The `Host` names every service answers: this machine's loopback.
pub const LOOPBACK_HOSTS: [&str; 3] = ["127.0.0.1", "localhost", "[::1]"];

impl ServerSettings {
    /// Whether a request naming `host` (a `Host` header: name or address, maybe a port)
    /// is answered. Without tokens a web page could reach a loopback service through a
    /// name it controls (DNS rebinding): only loopback names and `allowed_hosts` pass.
    pub fn host_allowed(&self, host: Option<&str>) -> bool {
        if self.allowed_hosts.is_empty() && !self.api_tokens.is_empty() {
            return true;
        }
        let Some(name) = host
            .and_then(|h| h.parse::<axum::http::uri::Authority>().ok())
            .map(|a| a.host().to_ascii_lowercase())
        else {
            return false;
        };
        LOOPBACK_HOSTS.contains(&name.as_str())
            || self
                .allowed_hosts
                .iter()
                .any(|h| h.eq_ignore_ascii_case(&name))
    }

    /// Why the service must not listen on `addr`, if it must not: beyond loopback without
    /// tokens, anyone who reaches the address could run the agents' tools (bash, Python)
    /// as this user.
    pub fn refuse_to_listen(&self, addr: std::net::SocketAddr) -> Option<String> {
        (self.api_tokens.is_empty() && !addr.ip().is_loopback()).then(|| {
            format!(
                "refusing to listen on {addr} without bearer tokens: anyone who can reach that \
                 address could run the agents' tools (bash, Python) as this user. Set [server] \
                 api_tokens (or MANUS_API_TOKENS), or bind a loopback address such as \
                 127.0.0.1:8080"
            )
        })
    }
}

/// `[cluster]` as configured.
#[derive(Debug, Clone)]
pub struct ClusterSettings {
    /// The node's name (`node_id`, `MANUS_NODE_ID`); by default its host's name. The store
    /// adds the process id and start time, so a restarted node never renews an old lease.
    pub node_id: Option<String>,
    /// How long a node's runs stay its own without a renewal (its heartbeat renews them
    /// three times per lease).
    pub lease: Duration,
    /// Flows this node runs at once; it claims no more (by default 8, or fewer if its
    /// `[flow] planner_replicas` are fewer).
    pub max_flows: usize,
    /// On `SIGTERM`, how long the node's flows get to finish before it hands the rest to
    /// the other nodes.
    pub drain: Duration,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        ClusterSettings {
            node_id: None,
            lease: Duration::from_secs(10),
            max_flows: 8,
            drain: Duration::from_secs(30),
        }
    }
}
