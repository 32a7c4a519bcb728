//! One HTTP exchange with a model server, through reqwest: post the body and read the
//! answer, whole or as an event stream, within the idle and total limits. The client decides
//! what the status means and whether to retry. Knows nothing of the wire format or of
//! retrying.
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use reqwest::header::{CONTENT_TYPE, HeaderName, HeaderValue, RETRY_AFTER};

/// An idle connection older than this is not reused: servers close idle ones sooner (uvicorn
/// after 5 s), and a fresh connection costs less than a request sent on one being closed.
const IDLE_LIMIT: Duration = Duration::from_secs(4);

/// The reqwest client for model calls, built on first need, which a run that replays a
/// cassette never has. Its TLS reads the system's root certificates only at the first HTTPS
/// handshake (`crate::tls`), so a run whose models are all plain HTTP never reads them.
/// Clones share one client, and so one set of connections: the runtime gives the planners'
/// clients a `LazyHttp` of their own.
#[derive(Clone, Default)]
pub struct LazyHttp(Arc<OnceLock<Result<reqwest::Client, String>>>);

impl LazyHttp {
    fn get(&self) -> Result<&reqwest::Client, Failure> {
        let built = self.0.get_or_init(|| {
            crate::tls::client_builder()
                .pool_idle_timeout(IDLE_LIMIT)
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
    /// Where to post, or why nothing can be: a URL that does not parse, a key a header
    /// cannot carry.
    url: Result<reqwest::Url, String>,
    http: LazyHttp,
    /// The headers every request carries (the key's among them), made once.
    headers: Vec<(HeaderName, HeaderValue)>,
}

/// What the server answered.
pub(super) struct Answer {
    pub status: u16,
    pub retry_after: Option<Duration>,
    /// The bytes as they came (an event stream's too).
    pub body: Bytes,
    /// The answer was an event stream (its events went to the caller as they came), and
    /// whether it ended with `[DONE]`.
    pub streamed: Option<bool>,
}

/// Why there is no answer.
pub(super) enum Failure {
    /// Nothing came for the idle limit: no head, or no next piece.
    Idle,
    /// The answer was not whole within the total limit.
    Timeout,
    /// The answer passed the byte limit.
    TooLarge,
    Connect,
    Other(String),
    /// The request cannot be made at all (a bad URL or key): trying again cannot help.
    Unsendable(String),
}

impl Route {
    /// The way to `url`, with `headers` on every request (their values kept out of logs).
    pub fn new(url: &str, http: LazyHttp, headers: &[(&'static str, String)]) -> Route {
        let made: Result<Vec<_>, _> = headers
            .iter()
            .map(|(name, value)| {
                HeaderValue::from_str(value).map(|mut value| {
                    value.set_sensitive(true);
                    (HeaderName::from_static(name), value)
                })
            })
            .collect();
        let Ok(headers) = made else {
            // Sending without the key would only earn a 401 that blames the key's value.
            let why = "the API key holds characters an HTTP header cannot carry";
            return Route {
                url: Err(why.into()),
                http,
                headers: vec![],
            };
        };
        Route {
            url: reqwest::Url::parse(url).map_err(|e| format!("{url} is not a URL: {e}")),
            http,
            headers,
        }
    }

    /// Post `body` as JSON and read the answer: its head within `idle`, then a whole body
    /// within `idle`, or an event stream piece by piece (each event's data to `on_event`
    /// as it comes) with no gap longer than `idle`; all of it within `total`, and no more
    /// than `limit` bytes of it, whole or streamed (a body that says it is longer is not
    /// read at all). On a failure the response is dropped unread, which closes the
    /// connection, so a server computing an abandoned answer can stop.
    pub async fn exchange(
        &self,
        body: &Bytes,
        idle: Duration,
        total: Duration,
        limit: usize,
        on_event: &mut (dyn FnMut(&str) + Send),
    ) -> Result<Answer, Failure> {
        let began = std::time::Instant::now();
        let url = self
            .url
            .as_ref()
            .map_err(|why| Failure::Unsendable(why.clone()))?;
        let mut rb = self
            .http
            .get()?
            .post(url.clone())
            .timeout(total)
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .body(body.clone());
        for (name, value) in &self.headers {
            rb = rb.header(name, value);
        }
        let failure = |e: reqwest::Error| {
            if e.is_timeout() {
                Failure::Timeout
            } else if e.is_connect() {
                Failure::Connect
            } else {
                Failure::Other(with_causes(&e.without_url()))
            }
        };
        let resp = tokio::time::timeout(idle, rb.send())
            .await
            .map_err(|_| Failure::Idle)?
            .map_err(failure)?;
        let status = resp.status().as_u16();
        let retry_after = retry_after(resp.headers());
        let events = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !events || !(200..300).contains(&status) {
            let body = tokio::time::timeout(idle, read_whole(resp, limit))
                .await
                .map_err(|_| Failure::Idle)?
                .map_err(|e| e.map_or(Failure::TooLarge, failure))?;
            return Ok(Answer {
                status,
                retry_after,
                body,
                streamed: None,
            });
        }
        let raw = Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = raw.clone();
        // Past the limit the bytes end in an error, which ends the events.
        let over = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let said_over = over.clone();
        let bytes = resp.bytes_stream().map(move |chunk| {
            let chunk = chunk.map_err(std::io::Error::other)?;
            let mut kept = kept.lock().unwrap_or_else(|p| p.into_inner());
            if kept.len() + chunk.len() > limit {
                said_over.store(true, std::sync::atomic::Ordering::Relaxed);
                return Err(std::io::Error::other("the answer is too large"));
            }
            kept.extend_from_slice(&chunk);
            Ok(chunk)
        });
        let mut stream = crate::sse::Events::new(bytes);
        let mut done = false;
        while let Some((_, data)) = tokio::time::timeout(idle, stream.next())
            .await
            .map_err(|_| Failure::Idle)?
        {
            if data.trim() == "[DONE]" {
                done = true;
                break;
            }
            on_event(&data);
        }
        drop(stream);
        if over.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(Failure::TooLarge);
        }
        // The total limit ends the body as an error, which ends the events: say so, rather
        // than that the answer broke off.
        if !done && began.elapsed() >= total {
            return Err(Failure::Timeout);
        }
        let body = std::mem::take(&mut *raw.lock().unwrap_or_else(|p| p.into_inner()));
        Ok(Answer {
            status,
            retry_after,
            body: body.into(),
            streamed: Some(done),
        })
    }
}

/// A whole body, read piece by piece up to `limit` bytes; `Err(None)` past them, without
/// reading the rest.
async fn read_whole(
    mut resp: reqwest::Response,
    limit: usize,
) -> Result<Bytes, Option<reqwest::Error>> {
    let said = resp.content_length().unwrap_or(0);
    if said > limit as u64 {
        return Err(None);
    }
    let mut body = Vec::with_capacity(said as usize);
    while let Some(chunk) = resp.chunk().await.map_err(Some)? {
        if body.len() + chunk.len() > limit {
            return Err(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.into())
}

/// `Retry-After` in seconds, when the server gives it so. A wait too long for a `Duration`
/// (`1e20`) is the longest one; the retry policy caps every wait anyway.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    headers
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(|s| Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX))
}

/// An error with what caused it, as one line (reqwest's own message is terse).
fn with_causes(e: &dyn std::error::Error) -> String {
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
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    #[test]
    fn a_retry_after_past_any_duration_is_the_longest_wait_not_a_panic() {
        let mut headers = reqwest::header::HeaderMap::new();
        for (value, wait) in [
            ("1e20", Some(Duration::MAX)),
            ("2.5", Some(Duration::from_millis(2500))),
            ("-1", None),
            ("NaN", None),
            ("inf", None),
            ("soon", None),
        ] {
            headers.insert(RETRY_AFTER, HeaderValue::from_static(value));
            assert_eq!(retry_after(&headers), wait, "{value}");
        }
        let policy = crate::llm::retry::RetryPolicy::default();
        assert_eq!(policy.delay(1, Some(Duration::MAX)), policy.max_delay);
    }

    const ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";

    /// The byte limit of the exchanges here.
    const LIMIT: usize = 1 << 20;

    /// Read one request (its head, then as many body bytes as its `content-length` says);
    /// its head, or `None` if the client closed first.
    async fn read_request(conn: &mut TcpStream) -> Option<String> {
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            if let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&seen[..end]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse().unwrap());
                if seen.len() >= end + 4 + length {
                    return Some(head);
                }
            }
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
    }

    /// A server on 127.0.0.1 that writes `answer` to each request, and closes a connection
    /// after `per_conn` requests. Returns its chat-completions URL and how many connections
    /// it took.
    async fn server(per_conn: usize, answer: &'static [u8]) -> (String, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    for _ in 0..per_conn {
                        if read_request(&mut conn).await.is_none() {
                            return;
                        }
                        conn.write_all(answer).await.unwrap();
                    }
                });
            }
        });
        let url = format!("http://127.0.0.1:{port}/v1/chat/completions");
        (url, accepted)
    }

    async fn answered(route: &Route) -> Bytes {
        let body = Bytes::from_static(b"{}");
        match route
            .exchange(
                &body,
                Duration::from_secs(5),
                Duration::from_secs(5),
                LIMIT,
                &mut |_| {},
            )
            .await
        {
            Ok(answer) if answer.status == 200 => answer.body,
            Ok(answer) => panic!("status {}", answer.status),
            Err(Failure::Timeout | Failure::Idle) => panic!("timed out"),
            Err(Failure::TooLarge) => panic!("too large"),
            Err(Failure::Connect) => panic!("could not connect"),
            Err(Failure::Other(why) | Failure::Unsendable(why)) => panic!("{why}"),
        }
    }

    #[test]
    fn the_key_goes_in_its_header_marked_sensitive() {
        use crate::llm::Provider;
        let http = LazyHttp::default();
        let openai = &crate::llm::wire::OPENAI;
        let local = Route::new(
            "http://127.0.0.1:8000/v1",
            http.clone(),
            &openai.headers(None),
        );
        assert!(local.url.is_ok() && local.headers.is_empty());
        let remote = Route::new(
            "https://api.example.com/v1/chat/completions",
            http.clone(),
            &openai.headers(Some("sk-1")),
        );
        let (name, value) = &remote.headers[0];
        assert_eq!(
            (name.as_str(), value.to_str().unwrap()),
            ("authorization", "Bearer sk-1")
        );
        assert!(value.is_sensitive());
        let azure = Route::new(
            "http://127.0.0.1:1/x?api-version=1",
            http,
            &crate::llm::wire::AZURE.headers(Some("k")),
        );
        assert_eq!(azure.headers[0].0.as_str(), "api-key");
    }

    #[tokio::test]
    async fn a_bad_url_a_bad_key_and_a_closed_port_are_told_apart() {
        let http = LazyHttp::default();
        let body = Bytes::from_static(b"{}");
        let bad = Route::new("not a url", http.clone(), &[]);
        match bad
            .exchange(
                &body,
                Duration::from_secs(5),
                Duration::from_secs(5),
                LIMIT,
                &mut |_| {},
            )
            .await
        {
            Err(Failure::Unsendable(why)) => assert!(why.contains("not a URL"), "{why}"),
            _ => panic!("a bad URL must fail as such"),
        }
        // A key a header cannot carry is refused, not silently left off.
        let url = "http://127.0.0.1:1/v1";
        let bad_key = Route::new(url, http.clone(), &[("authorization", "sk-\n1".into())]);
        match bad_key
            .exchange(
                &body,
                Duration::from_secs(5),
                Duration::from_secs(5),
                LIMIT,
                &mut |_| {},
            )
            .await
        {
            Err(Failure::Unsendable(why)) => assert!(why.contains("API key"), "{why}"),
            _ => panic!("a key with a newline must fail as such"),
        }
        // A port nothing listens on (bound, then closed), over plain HTTP and over HTTPS.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        for scheme in ["http", "https"] {
            let url = format!("{scheme}://127.0.0.1:{port}/v1");
            let closed = Route::new(&url, http.clone(), &[]);
            assert!(matches!(
                closed
                    .exchange(
                        &body,
                        Duration::from_secs(5),
                        Duration::from_secs(5),
                        LIMIT,
                        &mut |_| {}
                    )
                    .await,
                Err(Failure::Connect)
            ));
        }
    }

    /// The request a server reads: one `Host` header, with the port, and the key.
    #[tokio::test]
    async fn a_request_carries_one_host_header_and_the_key() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            let head = read_request(&mut conn).await.unwrap();
            conn.write_all(ANSWER).await.unwrap();
            head
        });
        let url = format!("http://127.0.0.1:{port}/v1/chat/completions");
        let route = Route::new(
            &url,
            LazyHttp::default(),
            &[("authorization", "Bearer sk-1".into())],
        );
        assert_eq!(&answered(&route).await[..], b"{}");
        let head = server.await.unwrap();
        assert!(
            head.starts_with("post /v1/chat/completions http/1.1"),
            "{head}"
        );
        let hosts: Vec<&str> = head.lines().filter(|l| l.starts_with("host:")).collect();
        assert_eq!(hosts, [format!("host: 127.0.0.1:{port}")], "{head}");
        assert!(head.contains("authorization: bearer sk-1"), "{head}");
        assert!(head.contains("content-type: application/json"), "{head}");
    }

    /// Calls one after another share a connection, and so do clients that share a
    /// `LazyHttp`; a client with a `LazyHttp` of its own (the planners') has its own.
    #[tokio::test]
    async fn calls_share_the_connections_of_their_lazy_http_only() {
        let (url, accepted) = server(usize::MAX, ANSWER).await;
        let shared = LazyHttp::default();
        let a = Route::new(&url, shared.clone(), &[]);
        let b = Route::new(&url, shared, &[]);
        for route in [&a, &b, &a] {
            assert_eq!(&answered(route).await[..], b"{}");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
        let own = Route::new(&url, LazyHttp::default(), &[]);
        assert_eq!(&answered(&own).await[..], b"{}");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    /// As when a server's keep-alive runs out between two calls: the connection it closed
    /// is not used again, and the call goes out on a new one.
    #[tokio::test]
    async fn a_connection_the_server_closed_while_idle_is_replaced() {
        let (url, accepted) = server(1, ANSWER).await;
        let route = Route::new(&url, LazyHttp::default(), &[]);
        for _ in 0..3 {
            assert_eq!(&answered(&route).await[..], b"{}");
            // Let the server's close arrive.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn an_answer_that_closes_its_connection_is_read_whole_and_the_next_call_connects_anew() {
        let closing = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\n{}";
        let (url, accepted) = server(1, closing).await;
        let route = Route::new(&url, LazyHttp::default(), &[]);
        for round in 1..=2 {
            assert_eq!(&answered(&route).await[..], b"{}");
            assert_eq!(accepted.load(Ordering::SeqCst), round);
        }
    }

    #[tokio::test]
    async fn a_server_that_hangs_up_mid_answer_is_an_error_and_the_next_call_connects_anew() {
        let half = b"HTTP/1.1 200 OK\r\ncontent-length: 20\r\n\r\n{\"id\":";
        let (url, accepted) = server(1, half).await;
        let route = Route::new(&url, LazyHttp::default(), &[]);
        let body = Bytes::from_static(b"{}");
        for round in 1..=2 {
            match route
                .exchange(
                    &body,
                    Duration::from_secs(5),
                    Duration::from_secs(5),
                    LIMIT,
                    &mut |_| {},
                )
                .await
            {
                Err(Failure::Other(why)) => assert!(why.contains("message"), "{why}"),
                _ => panic!("a cut answer must fail"),
            }
            assert_eq!(accepted.load(Ordering::SeqCst), round);
        }
    }

    #[tokio::test]
    async fn a_call_that_times_out_leaves_no_connection_behind() {
        // A server that reads the request and never answers.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            assert!(read_request(&mut conn).await.is_some());
            // Holds the connection until the client lets go of it.
            let mut rest = Vec::new();
            conn.read_to_end(&mut rest).await.unwrap();
        });
        let url = format!("http://127.0.0.1:{port}/v1");
        let route = Route::new(&url, LazyHttp::default(), &[]);
        let body = Bytes::from_static(b"{}");
        assert!(matches!(
            route
                .exchange(
                    &body,
                    Duration::from_millis(100),
                    Duration::from_secs(5),
                    LIMIT,
                    &mut |_| {}
                )
                .await,
            Err(Failure::Idle)
        ));
        // The connection was closed, so the server's read ends.
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("the abandoned connection is closed")
            .unwrap();
    }

    #[test]
    fn retry_after_takes_only_sane_seconds() {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_static(" 1.5 "));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(1500)));
        for odd in ["-1", "NaN", "Wed, 21 Oct 2026 07:28:00 GMT"] {
            h.insert(RETRY_AFTER, HeaderValue::from_static(odd));
            assert_eq!(retry_after(&h), None, "{odd}");
        }
    }
}
