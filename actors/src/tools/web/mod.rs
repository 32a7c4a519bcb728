//! What the web tools share: reading HTML (`html`), pages as markdown (`markdown`), fetching
//! pages over HTTP (`fetch`), the search engines (`search`), and the HTTP client they all
//! use (`WebClient`).

use std::sync::OnceLock;

pub mod fetch;
pub mod html;
pub mod markdown;
pub mod search;

/// The web tools' HTTP client, built when a tool first goes to the web (its TLS reads the
/// system's root certificates at the first HTTPS page: `crate::tls`). Tools are made for
/// every step, so there is one per process; a `WebClient` is only the way to it, and costs
/// nothing to make.
#[derive(Clone, Copy, Default)]
pub struct WebClient;

impl WebClient {
    /// The process's client, built on the first call.
    pub fn client(self) -> &'static reqwest::Client {
        static HTTP: OnceLock<reqwest::Client> = OnceLock::new();
        HTTP.get_or_init(crate::tls::client)
    }
}
