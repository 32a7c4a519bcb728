//! OAuth 2.1 for remote (streamable HTTP) MCP servers, on rmcp's `auth` feature: discovery
//! from the server's 401 challenge (RFC 9728 protected-resource metadata, then RFC 8414
//! authorization-server metadata), the client-credentials grant for unattended nodes, the
//! PKCE authorization-code grant for a person at the CLI (`login`: the URL is printed and
//! the code comes back on a loopback redirect), and the tokens of each server kept in a
//! file of its own (mode 0600) and refreshed with the refresh token when they expire, one
//! process at a time (a lock file beside the tokens).
//! Errors name the server, the step that failed and what to do.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rmcp::transport::auth::{
    AuthClient, AuthError, AuthorizationManager, ClientCredentialsConfig, CredentialRefreshGuard,
    CredentialStore, OAuthClientConfig, StoredCredentials,
};

/// How a server's tokens are obtained (`oauth` in the servers file).
#[derive(Debug, Clone, PartialEq)]
pub struct McpOAuth {
    pub grant: OAuthGrant,
    /// Registered at the authorization server; without one the client registers itself
    /// (dynamic client registration) when a person signs in.
    pub client_id: Option<String>,
    pub client_secret: Option<Secret>,
    pub scopes: Vec<String>,
    /// Where this server's tokens are kept.
    pub token_file: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OAuthGrant {
    /// The node signs in itself with its client id and secret.
    ClientCredentials,
    /// A person signs in once (`manus-rt mcp-login SERVER`); the tokens are refreshed after.
    AuthorizationCode,
}

/// A client secret: the name of the environment variable that holds it, or (discouraged)
/// the value itself.
#[derive(Clone, PartialEq)]
pub enum Secret {
    Env(String),
    Value(String),
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Secret::Env(name) => write!(f, "Env({name})"),
            Secret::Value(_) => f.write_str("Value(<redacted>)"),
        }
    }
}

impl Secret {
    fn read(&self, server: &str) -> Result<String, String> {
        match self {
            Secret::Value(v) => Ok(v.clone()),
            Secret::Env(name) => std::env::var(name).map_err(|_| {
                format!(
                    "OAuth for the MCP server `{server}`: the environment variable `{name}` \
                     (its `client_secret_env`) is not set; set it to the client secret"
                )
            }),
        }
    }
}

/// The tokens of one server in a file of its own, written whole (mode 0600) and renamed
/// into place, so a crash leaves the old tokens or the new ones.
struct TokenFile(PathBuf);

fn store_error(path: &Path, what: &str, e: impl std::fmt::Display) -> AuthError {
    AuthError::CredentialStoreError(format!("{what} {} ({e})", path.display()))
}

#[async_trait]
impl CredentialStore for TokenFile {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        match tokio::fs::read(&self.0).await {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| store_error(&self.0, "could not read the tokens in", e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(store_error(&self.0, "could not read", e)),
        }
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.0.clone();
        let text = serde_json::to_vec(&credentials)
            .map_err(|e| store_error(&path, "could not encode the tokens for", e))?;
        tokio::task::spawn_blocking(move || {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let fresh = path.with_extension("json.new");
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&fresh)?;
            file.write_all(&text)?;
            file.sync_all()?;
            std::fs::rename(&fresh, &path)
        })
        .await
        .map_err(|e| store_error(&self.0, "could not write", e))?
        .map_err(|e| store_error(&self.0, "could not write", e))
    }

    /// Other processes (the service, a CLI run) may refresh the same tokens, and a refresh
    /// token is often good for one use: a refresh holds an exclusive lock on `ID.json.lock`.
    async fn acquire_refresh_guard(&self) -> Result<Option<CredentialRefreshGuard>, AuthError> {
        let path = self.0.with_extension("json.lock");
        let lock = path.clone();
        let file = tokio::task::spawn_blocking(move || lock_file(&lock))
            .await
            .map_err(|e| store_error(&path, "could not lock", e))?
            .map_err(|e| store_error(&path, "could not lock", e))?;
        Ok(Some(CredentialRefreshGuard::new(file)))
    }

    async fn clear(&self) -> Result<(), AuthError> {
        match tokio::fs::remove_file(&self.0).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(store_error(&self.0, "could not remove", e))
            }
            _ => Ok(()),
        }
    }
}

/// Longest wait for another process's refresh of the same tokens.
const LOCK_WAIT: Duration = Duration::from_secs(60);

/// Open and lock `path` exclusively (flock), waiting at most `LOCK_WAIT`; closing the file
/// releases the lock.
fn lock_file(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)?;
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        // SAFETY: flock on a descriptor this function owns; no memory is involved.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(file);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::WouldBlock {
            return Err(e);
        }
        if Instant::now() >= deadline {
            return Err(std::io::Error::other(format!(
                "another process has been refreshing these tokens for {}s",
                LOCK_WAIT.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Ask the server without a token; its 401 names the protected-resource metadata (RFC
/// 9728), which names the authorization server, whose metadata (RFC 8414) is read. The
/// manager comes back with that metadata and this server's token file.
async fn discover(
    server: &str,
    url: &str,
    oauth: &McpOAuth,
) -> Result<AuthorizationManager, String> {
    let step = |what: &str, e: &dyn std::fmt::Display| {
        format!("OAuth for the MCP server `{server}` ({url}): {what} failed ({e})")
    };
    let probe = crate::tls::client()
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .body(r#"{"jsonrpc":"2.0","id":0,"method":"ping"}"#)
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .map_err(|e| step("reaching the server", &e))?;
    let challenge = probe
        .headers()
        .get(reqwest::header::WWW_AUTHENTICATE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut manager = AuthorizationManager::new(url)
        .await
        .map_err(|e| step("setting up", &e))?;
    let found = manager
        .resolve_metadata_from_challenge(challenge.as_deref())
        .await
        .map_err(|e| {
            step(
                "discovery (protected-resource and authorization-server metadata)",
                &e,
            )
        })?;
    if !found.source.is_discovered() {
        return Err(format!(
            "OAuth for the MCP server `{server}` ({url}): the server publishes no OAuth metadata \
             (no RFC 9728 protected-resource metadata, no RFC 8414 authorization-server metadata); \
             it may not use OAuth: remove `oauth` from its entry, or give its token in `headers`"
        ));
    }
    manager.set_metadata(found.metadata);
    manager.set_credential_store(TokenFile(oauth.token_file.clone()));
    Ok(manager)
}

/// Renew a client-credentials token this long before it expires (rmcp treats a token as
/// expired 30 s early, and a client-credentials token has no refresh token).
const RENEW_EARLY: Duration = Duration::from_secs(32);

/// An HTTP client for the server that sends its access token, refreshing it when it
/// expires. The client-credentials grant gets a fresh token here, and says by when the
/// session must be opened again for the next one; the authorization-code grant needs a
/// person to have signed in (`login`) before.
pub async fn client(
    server: &str,
    url: &str,
    oauth: &McpOAuth,
) -> Result<(AuthClient<reqwest::Client>, Option<Instant>), String> {
    let mut manager = discover(server, url, oauth).await?;
    let fail = |what: &str, e: AuthError| {
        format!("OAuth for the MCP server `{server}` ({url}): {what} failed ({e})")
    };
    if oauth.grant == OAuthGrant::ClientCredentials {
        let config = client_credentials(server, url, oauth)?;
        manager
            .validate_client_credentials_metadata(&config)
            .map_err(|e| fail("checking the authorization server's metadata", e))?;
        manager
            .configure_client_credentials(&config)
            .map_err(|e| fail("setting up the client", e))?;
        let token = manager
            .exchange_client_credentials(&config)
            .await
            .map_err(|e| {
                format!(
                    "OAuth for the MCP server `{server}` ({url}): the client-credentials grant \
                     failed ({e}); check its `client_id` and client secret"
                )
            })?;
        let life = serde_json::to_value(&token)
            .ok()
            .and_then(|t| t.get("expires_in").and_then(|v| v.as_u64()));
        let renew =
            life.map(|secs| Instant::now() + Duration::from_secs(secs).saturating_sub(RENEW_EARLY));
        return Ok((AuthClient::new(crate::tls::client(), manager), renew));
    }
    let stored = manager
        .initialize_from_store()
        .await
        .map_err(|e| fail("reading its stored tokens", e))?;
    if !stored {
        return Err(format!(
            "OAuth for the MCP server `{server}` ({url}): nobody has signed in yet; run \
             `manus-rt mcp-login {server}` at a terminal"
        ));
    }
    if let Some(id) = &oauth.client_id {
        let mut config = OAuthClientConfig::new(id.clone(), url);
        if let Some(secret) = &oauth.client_secret {
            config = config.with_client_secret(secret.read(server)?);
        }
        manager
            .configure_client(config)
            .map_err(|e| fail("setting up the client", e))?;
    }
    match manager.get_access_token().await {
        Ok(_) => Ok((AuthClient::new(crate::tls::client(), manager), None)),
        Err(AuthError::AuthorizationRequired) => Err(format!(
            "OAuth for the MCP server `{server}` ({url}): the sign-in has expired and could not \
             be refreshed; run `manus-rt mcp-login {server}` again"
        )),
        Err(e) => Err(fail("refreshing the access token", e)),
    }
}

fn client_credentials(
    server: &str,
    url: &str,
    oauth: &McpOAuth,
) -> Result<ClientCredentialsConfig, String> {
    let (Some(client_id), Some(secret)) = (&oauth.client_id, &oauth.client_secret) else {
        return Err(format!(
            "OAuth for the MCP server `{server}`: the client-credentials grant needs `client_id` \
             and `client_secret_env`"
        ));
    };
    Ok(ClientCredentialsConfig::ClientSecret {
        client_id: client_id.clone(),
        client_secret: secret.read(server)?,
        scopes: oauth.scopes.clone(),
        resource: Some(url.to_string()),
    })
}

/// Sign a person in with the PKCE authorization-code grant: `show` gets the URL to open,
/// the authorization server's answer comes back to a listener on 127.0.0.1 (a free port),
/// and the code is exchanged for tokens, which are stored. Waits at most `wait`.
pub async fn login(
    server: &str,
    url: &str,
    oauth: &McpOAuth,
    wait: Duration,
    show: impl FnOnce(&str),
) -> Result<(), String> {
    if oauth.grant != OAuthGrant::AuthorizationCode {
        return Err(format!(
            "the MCP server `{server}` uses the client-credentials grant, which needs no sign-in; \
             its tokens are fetched when it is first used"
        ));
    }
    let mut manager = discover(server, url, oauth).await?;
    let fail = |what: &str, e: AuthError| {
        format!("OAuth sign-in for the MCP server `{server}` ({url}): {what} failed ({e})")
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| {
            format!("OAuth sign-in for `{server}`: could not listen on 127.0.0.1 ({e})")
        })?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    let redirect = format!("http://127.0.0.1:{port}/callback");
    let scopes: Vec<&str> = oauth.scopes.iter().map(String::as_str).collect();
    match &oauth.client_id {
        Some(id) => {
            let mut config = OAuthClientConfig::new(id.clone(), redirect.clone());
            if let Some(secret) = &oauth.client_secret {
                config = config.with_client_secret(secret.read(server)?);
            }
            manager
                .configure_client(config)
                .map_err(|e| fail("setting up the client", e))?;
        }
        None => {
            manager
                .register_client("manus-rt", &redirect, &scopes)
                .await
                .map_err(|e| {
                    fail(
                        "dynamic client registration (give a `client_id` if the server has none)",
                        e,
                    )
                })?;
        }
    }
    let address = manager
        .get_authorization_url(&scopes)
        .await
        .map_err(|e| fail("building the authorization URL", e))?;
    show(&address);
    let query = tokio::time::timeout(wait, callback(listener))
        .await
        .map_err(|_| {
            format!(
                "OAuth sign-in for `{server}`: no answer from the browser within {}s; run \
                 `manus-rt mcp-login {server}` again",
                wait.as_secs()
            )
        })?
        .map_err(|e| format!("OAuth sign-in for `{server}`: the redirect failed ({e})"))?;
    if let Some(error) = query.get("error") {
        return Err(format!(
            "OAuth sign-in for `{server}`: the authorization server refused ({error}{})",
            query
                .get("error_description")
                .map(|d| format!(": {d}"))
                .unwrap_or_default()
        ));
    }
    let (Some(code), Some(state)) = (query.get("code"), query.get("state")) else {
        return Err(format!(
            "OAuth sign-in for `{server}`: the redirect carried no `code` and `state`"
        ));
    };
    manager
        .exchange_code_for_token_with_issuer(code, state, query.get("iss").map(String::as_str))
        .await
        .map_err(|e| fail("exchanging the code for tokens", e))?;
    Ok(())
}

/// Serve the loopback redirect until it arrives once; its query parameters.
async fn callback(listener: tokio::net::TcpListener) -> std::io::Result<HashMap<String, String>> {
    use axum::extract::Query;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<HashMap<String, String>>(1);
    let app = axum::Router::new().route(
        "/callback",
        axum::routing::get(move |Query(query): Query<HashMap<String, String>>| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(query).await;
                "Signed in to the MCP server; you can close this page and return to the terminal."
            }
        }),
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await
    });
    let query = rx.recv().await;
    let _ = stop.send(());
    let _ = served.await;
    query.ok_or_else(|| std::io::Error::other("the listener stopped"))
}
