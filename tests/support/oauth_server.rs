//! A minimal OAuth 2.1 authorization server on 127.0.0.1 for the MCP OAuth tests: RFC 8414
//! metadata, `/register` (RFC 7591 dynamic client registration of public clients),
//! `/authorize` (approves at once and redirects with a code), `/token` for the
//! authorization_code (checking the PKCE verifier), client_credentials and refresh_token
//! grants, and `/introspect` (RFC 7662) for the resource server. It counts the grants it
//! served, so tests can see a refresh happen.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Form, Json, Router, routing};
use base64::Engine;
use serde_json::{Value, json};
use sha2::Digest;

/// The one registered client.
pub const CLIENT_ID: &str = "manus-node";
pub const CLIENT_SECRET: &str = "node-secret";

#[derive(Default)]
struct Books {
    /// code → (client id, PKCE challenge, redirect URI, resource)
    codes: HashMap<String, (String, String, String, String)>,
    /// access token → (client id, expiry in epoch seconds, resource)
    access: HashMap<String, (String, u64, String)>,
    /// refresh token → (client id, resource)
    refresh: HashMap<String, (String, String)>,
    grants: HashMap<String, u32>,
    /// Clients registered through `/register`.
    registered: Vec<String>,
    counter: u64,
}

struct Shared {
    issuer: String,
    token_life: Duration,
    /// How long a refresh_token grant is held before it is answered.
    refresh_delay: Mutex<Duration>,
    books: Mutex<Books>,
}

pub struct AuthServer {
    pub issuer: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for AuthServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl AuthServer {
    /// Serve on a free port; access tokens last `token_life`.
    pub async fn start(token_life: Duration) -> AuthServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let issuer = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
        let shared = Arc::new(Shared {
            issuer: issuer.clone(),
            token_life,
            refresh_delay: Mutex::default(),
            books: Mutex::default(),
        });
        let app = Router::new()
            .route(
                "/.well-known/oauth-authorization-server",
                routing::get(metadata),
            )
            .route("/register", routing::post(register))
            .route("/authorize", routing::get(authorize))
            .route("/token", routing::post(token))
            .route("/introspect", routing::post(introspect))
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        AuthServer {
            issuer,
            shared,
            task,
        }
    }

    /// Hold each refresh for `delay`, so refreshes of two processes overlap.
    pub fn slow_refresh(&self, delay: Duration) {
        *self.shared.refresh_delay.lock().unwrap() = delay;
    }

    /// How many tokens each grant type has issued.
    pub fn grants(&self, grant: &str) -> u32 {
        let books = self.shared.books.lock().unwrap();
        books.grants.get(grant).copied().unwrap_or(0)
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

async fn metadata(State(s): State<Arc<Shared>>) -> Json<Value> {
    let at = |path: &str| format!("{}{path}", s.issuer);
    Json(json!({
        "issuer": s.issuer,
        "authorization_endpoint": at("/authorize"),
        "token_endpoint": at("/token"),
        "introspection_endpoint": at("/introspect"),
        "registration_endpoint": at("/register"),
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "client_credentials", "refresh_token"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["client_secret_post", "client_secret_basic", "none"],
        "scopes_supported": ["mcp"],
    }))
}

fn refuse(error: &str, why: &str) -> Response {
    (
        axum::http::StatusCode::BAD_REQUEST,
        Json(json!({"error": error, "error_description": why})),
    )
        .into_response()
}

async fn authorize(
    State(s): State<Arc<Shared>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let field = |k: &str| q.get(k).cloned().unwrap_or_default();
    let client = field("client_id");
    let mut books = s.books.lock().unwrap();
    if client != CLIENT_ID && !books.registered.contains(&client) {
        return refuse("invalid_client", "unknown client");
    }
    if field("code_challenge_method") != "S256" || field("code_challenge").is_empty() {
        return refuse("invalid_request", "PKCE with S256 is required");
    }
    let redirect = field("redirect_uri");
    if !redirect.starts_with("http://127.0.0.1:") {
        return refuse("invalid_request", "the redirect must be a loopback address");
    }
    books.counter += 1;
    let code = format!("code-{}", books.counter);
    books.codes.insert(
        code.clone(),
        (
            client,
            field("code_challenge"),
            redirect.clone(),
            field("resource"),
        ),
    );
    let state = field("state");
    Redirect::to(&format!("{redirect}?code={code}&state={state}")).into_response()
}

async fn register(State(s): State<Arc<Shared>>, Json(asked): Json<Value>) -> Response {
    let mut books = s.books.lock().unwrap();
    books.counter += 1;
    let id = format!("registered-{}", books.counter);
    books.registered.push(id.clone());
    let mut answer = asked;
    answer["client_id"] = json!(id);
    (axum::http::StatusCode::CREATED, Json(answer)).into_response()
}

/// The client's id and secret, from HTTP Basic or the form.
fn client_of(headers: &axum::http::HeaderMap, form: &HashMap<String, String>) -> (String, String) {
    if let Some(basic) = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
        && let Ok(raw) = base64::engine::general_purpose::STANDARD.decode(basic)
        && let Some((id, secret)) = String::from_utf8_lossy(&raw).split_once(':')
    {
        return (id.to_string(), secret.to_string());
    }
    let field = |k: &str| form.get(k).cloned().unwrap_or_default();
    (field("client_id"), field("client_secret"))
}

async fn token(
    State(s): State<Arc<Shared>>,
    headers: axum::http::HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let field = |k: &str| form.get(k).cloned().unwrap_or_default();
    let (client, secret) = client_of(&headers, &form);
    let grant = field("grant_type");
    if grant == "refresh_token" {
        let delay = *s.refresh_delay.lock().unwrap();
        tokio::time::sleep(delay).await;
    }
    let mut books = s.books.lock().unwrap();
    let (client, resource) = match grant.as_str() {
        "client_credentials" => {
            if client != CLIENT_ID || secret != CLIENT_SECRET {
                return refuse("invalid_client", "wrong client id or secret");
            }
            (client, field("resource"))
        }
        "authorization_code" => {
            let Some((owner, challenge, redirect, resource)) = books.codes.remove(&field("code"))
            else {
                return refuse("invalid_grant", "unknown or used code");
            };
            let verified = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(sha2::Sha256::digest(field("code_verifier").as_bytes()));
            if verified != challenge {
                return refuse("invalid_grant", "the PKCE verifier does not match");
            }
            if owner != client || redirect != field("redirect_uri") {
                return refuse("invalid_grant", "the code was issued to another client");
            }
            (owner, resource)
        }
        "refresh_token" => match books.refresh.remove(&field("refresh_token")) {
            Some((owner, resource)) if owner == client => (owner, resource),
            _ => return refuse("invalid_grant", "unknown refresh token"),
        },
        other => return refuse("unsupported_grant_type", other),
    };
    *books.grants.entry(grant.clone()).or_default() += 1;
    books.counter += 1;
    let access = format!("access-{}", books.counter);
    let expires = now() + s.token_life.as_secs();
    books
        .access
        .insert(access.clone(), (client.clone(), expires, resource.clone()));
    let mut answer = json!({
        "access_token": access,
        "token_type": "Bearer",
        "expires_in": s.token_life.as_secs(),
        "scope": "mcp",
    });
    if grant != "client_credentials" {
        let refresh = format!("refresh-{}", books.counter);
        books.refresh.insert(refresh.clone(), (client, resource));
        answer["refresh_token"] = json!(refresh);
    }
    Json(answer).into_response()
}

async fn introspect(
    State(s): State<Arc<Shared>>,
    Form(form): Form<HashMap<String, String>>,
) -> Json<Value> {
    let books = s.books.lock().unwrap();
    match form.get("token").and_then(|t| books.access.get(t)) {
        Some((client, expires, resource)) if *expires > now() => Json(json!({
            "active": true,
            "client_id": client,
            "scope": "mcp",
            "exp": expires,
            "aud": resource,
        })),
        _ => Json(json!({"active": false})),
    }
}
