//! One HTTP exchange with a model server: post the body, within the time limit, and read the
//! whole answer. The client decides what the status means and whether to retry.
//!
//! A plain-HTTP endpoint that no proxy setting covers (a local vLLM, Ollama or llama.cpp
//! server, where calls are many and fast) is reached over hyper's HTTP/1 connections,
//! driven by the calling task itself (`direct`): the same HTTP/1 code reqwest wraps, without
//! its connection tasks, URL re-parsing, and the redirect and retry layers it adds to every
//! request, which a model call does not use. Everything else (HTTPS, proxies) goes through
//! reqwest.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE, HOST, HeaderName, HeaderValue, RETRY_AFTER};
use http_body_util::Full;
use hyper_util::client::proxy::matcher::Matcher;

use super::direct::{self, Endpoint};

/// The reqwest client for model calls that do not go direct (HTTPS, proxies), built on
/// first need: building it loads the system's root certificates (several milliseconds of a
/// cold start), which a run against a local model never uses. Clones share one client.
#[derive(Clone, Default)]
pub struct LazyHttp(Arc<OnceLock<Result<reqwest::Client, String>>>);

impl LazyHttp {
    fn get(&self) -> Result<&reqwest::Client, Failure> {
        let built = self.0.get_or_init(|| {
            reqwest::Client::builder()
                .build()
                .map_err(|e| format!("cannot set up the HTTP client: {}", with_causes(&e)))
        });
        built
            .as_ref()
            .map_err(|why| Failure::Unsendable(why.clone()))
    }
}

/// How one endpoint is reached, worked out once per client.
pub(super) struct Route {
    way: Way,
    /// The key's header, made once.
    auth: Option<(HeaderName, HeaderValue)>,
}

enum Way {
    /// The server (with its idle connections: one set per `Route`, so per model profile of
    /// a runtime, shared by its clones), the URL's path and query, and its `Host` header,
    /// made once.
    Direct(Box<Endpoint>, http::Uri, HeaderValue),
    Reqwest(LazyHttp, reqwest::Url),
    /// The URL does not parse: every attempt says so.
    Invalid(String),
}

/// What the server answered.
pub(super) struct Answer {
    pub status: u16,
    pub retry_after: Option<Duration>,
    pub body: Bytes,
}

/// Why there is no answer.
pub(super) enum Failure {
    Timeout,
    Connect,
    Other(String),
    /// The request cannot be made at all (a bad URL or key): trying again cannot help.
    Unsendable(String),
}

impl Route {
    /// The way to `url`; `api_key_header` names the header the key goes in (`None`: a
    /// bearer token).
    pub fn new(
        url: &str,
        http: LazyHttp,
        api_key: Option<&str>,
        api_key_header: Option<&'static str>,
    ) -> Route {
        let auth = api_key.map(|key| {
            let (name, value) = match api_key_header {
                Some(name) => (HeaderName::from_static(name), key.to_string()),
                None => (AUTHORIZATION, format!("Bearer {key}")),
            };
            HeaderValue::from_str(&value).map(|mut value| {
                value.set_sensitive(true);
                (name, value)
            })
        });
        let Ok(auth) = auth.transpose() else {
            // Sending without the key would only earn a 401 that blames the key's value.
            let why = "the API key holds characters an HTTP header cannot carry";
            return Route {
                way: Way::Invalid(why.into()),
                auth: None,
            };
        };
        let way = match reqwest::Url::parse(url) {
            Err(e) => Way::Invalid(format!("{url} is not a URL: {e}")),
            Ok(parsed) => {
                let direct_to = (parsed.scheme() == "http")
                    .then(|| parsed.as_str().parse::<http::Uri>().ok())
                    .flatten()
                    .filter(|uri| Matcher::from_system().intercept(uri).is_none())
                    .and_then(|uri| direct_way(&uri));
                direct_to.unwrap_or(Way::Reqwest(http, parsed))
            }
        };
        Route { way, auth }
    }

    /// Whether requests skip reqwest (for tests).
    #[cfg(test)]
    pub fn is_direct(&self) -> bool {
        matches!(self.way, Way::Direct(..))
    }

    /// Post `body` as JSON and read the whole answer, all within `limit`.
    pub async fn exchange(&self, body: &Bytes, limit: Duration) -> Result<Answer, Failure> {
        match &self.way {
            Way::Direct(endpoint, path, host) => {
                let mut req = http::Request::post(path.clone())
                    .header(HOST, host.clone())
                    .header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                if let Some((name, value)) = &self.auth {
                    req = req.header(name, value);
                }
                let req = req
                    .body(Full::new(body.clone()))
                    .map_err(|e| Failure::Other(e.to_string()))?;
                let exchange = async {
                    let (head, body) = endpoint.exchange(req).await.map_err(|e| match e {
                        direct::Error::Connect => Failure::Connect,
                        direct::Error::Http(why) => Failure::Other(why),
                    })?;
                    Ok(Answer {
                        status: head.status.as_u16(),
                        retry_after: retry_after(&head.headers),
                        body,
                    })
                };
                tokio::time::timeout(limit, exchange)
                    .await
                    .map_err(|_| Failure::Timeout)?
            }
            Way::Reqwest(http, url) => {
                let mut rb = http
                    .get()?
                    .post(url.clone())
                    .timeout(limit)
                    .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
                    .body(body.clone());
                if let Some((name, value)) = &self.auth {
                    rb = rb.header(name, value);
                }
                let failure = |e: reqwest::Error| {
                    if e.is_timeout() {
                        Failure::Timeout
                    } else if e.is_connect() {
                        Failure::Connect
                    } else {
                        Failure::Other(e.to_string())
                    }
                };
                let resp = rb.send().await.map_err(failure)?;
                let status = resp.status().as_u16();
                let retry_after = retry_after(resp.headers());
                let body = resp.bytes().await.map_err(failure)?;
                Ok(Answer {
                    status,
                    retry_after,
                    body,
                })
            }
            Way::Invalid(why) => Err(Failure::Unsendable(why.clone())),
        }
    }
}

/// The direct way to a plain-HTTP `uri`: its server, the path and query a request line
/// carries, and the `Host` header (the host, and the port unless it is 80).
fn direct_way(uri: &http::Uri) -> Option<Way> {
    let host = uri.host()?;
    let port = uri.port_u16().unwrap_or(80);
    let value = if port == 80 {
        host.to_string()
    } else {
        format!("{host}:{port}")
    };
    let header = HeaderValue::from_str(&value).ok()?;
    let path = uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .parse()
        .ok()?;
    Some(Way::Direct(
        Box::new(Endpoint::new(host, port)),
        path,
        header,
    ))
}

/// `Retry-After` in seconds, when the server gives it so.
fn retry_after(headers: &http::HeaderMap) -> Option<Duration> {
    headers
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
}

/// An error with what caused it, as one line (hyper's own message is terse).
pub(super) fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_goes_direct_and_https_through_reqwest() {
        let http = LazyHttp::default();
        let local = Route::new(
            "http://127.0.0.1:8000/v1/chat/completions",
            http.clone(),
            None,
            None,
        );
        assert!(local.is_direct() && local.auth.is_none());
        let host_of = |url: &str| match Route::new(url, http.clone(), None, None).way {
            Way::Direct(_, _, host) => host,
            _ => panic!("{url} must go direct"),
        };
        assert_eq!(host_of("http://127.0.0.1:8000/v1"), "127.0.0.1:8000");
        assert_eq!(host_of("http://localhost/v1"), "localhost");
        assert_eq!(host_of("http://localhost:80/v1"), "localhost");
        assert_eq!(host_of("http://[::1]:8080/v1"), "[::1]:8080");
        let remote = Route::new(
            "https://api.example.com/v1/chat/completions",
            http.clone(),
            Some("sk-1"),
            None,
        );
        assert!(!remote.is_direct());
        let (name, value) = remote.auth.unwrap();
        assert_eq!(
            (name.as_str(), value.to_str().unwrap()),
            ("authorization", "Bearer sk-1")
        );
        assert!(value.is_sensitive());
        let azure = Route::new(
            "http://127.0.0.1:1/x?api-version=1",
            http,
            Some("k"),
            Some("api-key"),
        );
        assert_eq!(azure.auth.unwrap().0.as_str(), "api-key");
    }

    #[tokio::test]
    async fn a_bad_url_a_bad_key_and_a_closed_port_are_told_apart() {
        let http = LazyHttp::default();
        let body = Bytes::from_static(b"{}");
        let bad = Route::new("not a url", http.clone(), None, None);
        match bad.exchange(&body, Duration::from_secs(5)).await {
            Err(Failure::Unsendable(why)) => assert!(why.contains("not a URL"), "{why}"),
            _ => panic!("a bad URL must fail as such"),
        }
        // A key a header cannot carry is refused, not silently left off.
        let url = "http://127.0.0.1:1/v1";
        let bad_key = Route::new(url, http.clone(), Some("sk-\n1"), None);
        match bad_key.exchange(&body, Duration::from_secs(5)).await {
            Err(Failure::Unsendable(why)) => assert!(why.contains("API key"), "{why}"),
            _ => panic!("a key with a newline must fail as such"),
        }
        // A port nothing listens on (bound, then closed).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let closed = Route::new(
            &format!("http://127.0.0.1:{port}/v1"),
            http.clone(),
            None,
            None,
        );
        assert!(closed.is_direct());
        assert!(matches!(
            closed.exchange(&body, Duration::from_secs(5)).await,
            Err(Failure::Connect)
        ));
        // Over HTTPS, through the reqwest client, built for this first call.
        let tls = Route::new(&format!("https://127.0.0.1:{port}/v1"), http, None, None);
        assert!(!tls.is_direct());
        assert!(matches!(
            tls.exchange(&body, Duration::from_secs(5)).await,
            Err(Failure::Connect)
        ));
    }

    /// The request a server reads: one `Host` header, the one made with the route.
    #[tokio::test]
    async fn a_direct_request_carries_one_host_header() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            // The head, then the two bytes of body.
            while !seen.windows(6).any(|w| w == b"\r\n\r\n{}") {
                let n = conn.read(&mut buf).await.unwrap();
                assert!(n > 0, "the client closed before sending its request");
                seen.extend_from_slice(&buf[..n]);
            }
            let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
            conn.write_all(answer).await.unwrap();
            String::from_utf8(seen).unwrap()
        });
        let url = format!("http://127.0.0.1:{port}/v1/chat/completions");
        let route = Route::new(&url, LazyHttp::default(), None, None);
        let body = Bytes::from_static(b"{}");
        let Ok(answer) = route.exchange(&body, Duration::from_secs(5)).await else {
            panic!("the exchange failed");
        };
        assert_eq!((answer.status, &answer.body[..]), (200, &b"{}"[..]));
        let head = server.await.unwrap().to_ascii_lowercase();
        let hosts: Vec<&str> = head.lines().filter(|l| l.starts_with("host:")).collect();
        assert_eq!(hosts, [format!("host: 127.0.0.1:{port}")], "{head}");
    }

    #[test]
    fn retry_after_takes_only_sane_seconds() {
        let mut h = http::HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_static(" 1.5 "));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(1500)));
        for odd in ["-1", "NaN", "Wed, 21 Oct 2026 07:28:00 GMT"] {
            h.insert(RETRY_AFTER, HeaderValue::from_static(odd));
            assert_eq!(retry_after(&h), None, "{odd}");
        }
    }
}
