//! The direct route's HTTP/1 connections to one plain-HTTP model server, and the exchange
//! over one of them. Owns `Endpoint` (where the server is, and its idle connections).
//!
//! A call drives its connection in the caller's own task: the request is written, and the
//! answer read, by the agent that asked, with no connection task in between. Through a
//! pooled client, each call costs hops between the caller's task and the connection's
//! (the request handed over, the answer's head and body handed back), and under load each
//! hop waits its turn behind every other ready task.
//!
//! An idle connection is not polled, so it does not see the server close it until it is
//! next taken. It is checked then: one that has ended, or has been idle longer than
//! `IDLE_LIMIT`, is dropped, and one that turns out closed before the request was written
//! gives the request back, to go out on a fresh connection. Only a request that may have
//! reached the server fails.

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{Connection, SendRequest, handshake};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Longer idle than this and a connection is not reused: servers close idle ones sooner
/// (uvicorn after 5 s), and a fresh connection costs less than a failed first write.
const IDLE_LIMIT: Duration = Duration::from_secs(4);

/// The state machine that does a connection's reading and writing, polled only while a
/// call is on it (or to check it when taken), and never again once it has ended.
struct Drive {
    conn: Pin<Box<Connection<TokioIo<TcpStream>, Full<Bytes>>>>,
    ended: bool,
}

impl Drive {
    /// Let the connection read and write what it can; true once it has ended.
    fn poll_ended(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.ended && self.conn.as_mut().poll(cx).is_ready() {
            self.ended = true;
        }
        self.ended
    }
}

/// One HTTP/1 connection: the handle requests go in by, and its state machine.
struct Conn {
    send: SendRequest<Full<Bytes>>,
    drive: Drive,
    idle_since: Instant,
}

/// Why an exchange has no answer.
pub(super) enum Error {
    /// No connection could be made.
    Connect,
    /// The connection failed, or the server closed it without answering.
    Http(String),
}

impl From<hyper::Error> for Error {
    fn from(e: hyper::Error) -> Error {
        Error::Http(super::http::with_causes(&e))
    }
}

/// What a connection that ended with no answer is reported as.
const CLOSED: &str = "the model server closed the connection without answering";

/// A plain-HTTP model server: its address, and the connections to it now idle.
pub(super) struct Endpoint {
    /// `host:port`, as `TcpStream::connect` takes it.
    addr: String,
    idle: Mutex<Vec<Conn>>,
}

impl Endpoint {
    /// The server at `host`, as a URI writes it (an IPv6 literal in brackets), and `port`.
    pub fn new(host: &str, port: u16) -> Endpoint {
        Endpoint {
            addr: format!("{host}:{port}"),
            idle: Mutex::new(Vec::new()),
        }
    }

    /// Send `req` and read the whole answer: its status, headers and body.
    pub async fn exchange(
        &self,
        mut req: http::Request<Full<Bytes>>,
    ) -> Result<(http::response::Parts, Bytes), Error> {
        loop {
            let (mut conn, fresh) = match self.take_idle() {
                Some(conn) => (conn, false),
                None => (self.connect().await?, true),
            };
            match alongside(&mut conn.drive, conn.send.ready()).await {
                Some(Ok(())) => {}
                // A fresh connection that cannot take a request: the server is refusing.
                Some(Err(e)) if fresh => return Err(e.into()),
                None if fresh => return Err(Error::Http(CLOSED.into())),
                // It ended while idle, and nothing was sent on it.
                _ => continue,
            }
            let resp = match alongside(&mut conn.drive, conn.send.try_send_request(req)).await {
                Some(Ok(resp)) => resp,
                Some(Err(mut unsent)) => match unsent.take_message() {
                    // Closed before the request was written: it goes out on another one.
                    Some(back) if !fresh => {
                        req = back;
                        continue;
                    }
                    _ => return Err(unsent.into_error().into()),
                },
                None => return Err(Error::Http(CLOSED.into())),
            };
            let (head, body) = resp.into_parts();
            let body = match alongside(&mut conn.drive, body.collect()).await {
                Some(Ok(body)) => body.to_bytes(),
                Some(Err(e)) => return Err(e.into()),
                None => return Err(Error::Http(CLOSED.into())),
            };
            self.put_back(conn);
            return Ok((head, body));
        }
    }

    /// The most recently used idle connection still open, dropping the stale ones.
    fn take_idle(&self) -> Option<Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let fresh_from = idle
            .iter()
            .position(|c| c.idle_since.elapsed() < IDLE_LIMIT)
            .unwrap_or(idle.len());
        idle.drain(..fresh_from);
        while let Some(mut conn) = idle.pop() {
            if conn.open() {
                return Some(conn);
            }
        }
        None
    }

    fn put_back(&self, mut conn: Conn) {
        if conn.open() {
            conn.idle_since = Instant::now();
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            idle.push(conn);
        }
    }

    async fn connect(&self) -> Result<Conn, Error> {
        let tcp = TcpStream::connect(&self.addr)
            .await
            .map_err(|_| Error::Connect)?;
        // A request goes out at once, not when Nagle allows.
        tcp.set_nodelay(true).map_err(|_| Error::Connect)?;
        let (send, drive) = handshake(TokioIo::new(tcp)).await?;
        Ok(Conn {
            send,
            drive: Drive {
                conn: Box::pin(drive),
                ended: false,
            },
            idle_since: Instant::now(),
        })
    }
}

impl Conn {
    /// Whether the connection is still open: polled once, it reads what the server sent
    /// since (a close, say) without waiting for more.
    fn open(&mut self) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        !self.send.is_closed() && !self.drive.poll_ended(&mut cx)
    }
}

/// Run `work` while driving the connection, so the caller's task does the connection's
/// reading and writing. `None`: the connection ended before `work` finished.
async fn alongside<F: Future>(drive: &mut Drive, work: F) -> Option<F::Output> {
    let mut work = pin!(work);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = work.as_mut().poll(cx) {
            return Poll::Ready(Some(out));
        }
        let ended = drive.poll_ended(cx);
        // What the connection just read is handed over now, in this same poll: otherwise
        // it would wake this task, which would go to the back of the run queue.
        match work.as_mut().poll(cx) {
            Poll::Ready(out) => Poll::Ready(Some(out)),
            Poll::Pending if ended => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    const ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";

    /// Read one request (its head, then as many body bytes as its `content-length` says);
    /// false if the client closed first.
    async fn read_request(conn: &mut TcpStream) -> bool {
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
                    return true;
                }
            }
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
    }

    /// A server on 127.0.0.1 that writes `answer` to each request, and closes a connection
    /// after `per_conn` requests. Returns its endpoint and how many connections it took.
    async fn server(per_conn: usize, answer: &'static [u8]) -> (Endpoint, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    for _ in 0..per_conn {
                        if !read_request(&mut conn).await {
                            return;
                        }
                        conn.write_all(answer).await.unwrap();
                    }
                });
            }
        });
        (Endpoint::new("127.0.0.1", port), accepted)
    }

    fn request() -> http::Request<Full<Bytes>> {
        http::Request::post("/v1/chat/completions")
            .header(http::header::HOST, "127.0.0.1")
            .body(Full::new(Bytes::from_static(b"{}")))
            .unwrap()
    }

    async fn answered(endpoint: &Endpoint) -> Bytes {
        match endpoint.exchange(request()).await {
            Ok((head, body)) if head.status == 200 => body,
            Ok((head, _)) => panic!("status {}", head.status),
            Err(Error::Connect) => panic!("could not connect"),
            Err(Error::Http(why)) => panic!("{why}"),
        }
    }

    #[tokio::test]
    async fn calls_one_after_another_share_one_connection() {
        let (endpoint, accepted) = server(usize::MAX, ANSWER).await;
        for _ in 0..3 {
            assert_eq!(&answered(&endpoint).await[..], b"{}");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    /// As when a server's keep-alive runs out between two calls: the connection it closed
    /// is found closed when taken, and the call goes out on a new one.
    #[tokio::test]
    async fn a_connection_the_server_closed_while_idle_is_replaced() {
        let (endpoint, accepted) = server(1, ANSWER).await;
        for _ in 0..3 {
            assert_eq!(&answered(&endpoint).await[..], b"{}");
            // Let the server's close arrive.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn an_answer_that_closes_its_connection_is_read_whole_and_the_next_call_connects_anew() {
        let closing = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\n{}";
        let (endpoint, accepted) = server(1, closing).await;
        for round in 1..=2 {
            assert_eq!(&answered(&endpoint).await[..], b"{}");
            assert!(endpoint.idle.lock().unwrap().is_empty());
            assert_eq!(accepted.load(Ordering::SeqCst), round);
        }
    }

    #[tokio::test]
    async fn a_server_that_hangs_up_mid_answer_is_an_error_and_the_next_call_connects_anew() {
        let half = b"HTTP/1.1 200 OK\r\ncontent-length: 20\r\n\r\n{\"id\":";
        let (endpoint, accepted) = server(1, half).await;
        for round in 1..=2 {
            match endpoint.exchange(request()).await {
                Err(Error::Http(why)) => assert!(why.contains("message"), "{why}"),
                _ => panic!("a cut answer must fail"),
            }
            assert_eq!(accepted.load(Ordering::SeqCst), round);
        }
    }

    #[tokio::test]
    async fn a_call_given_up_leaves_no_connection_behind() {
        // A server that reads the request and never answers.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            assert!(read_request(&mut conn).await);
            // Holds the connection until the client lets go of it.
            let mut rest = Vec::new();
            conn.read_to_end(&mut rest).await.unwrap();
        });
        let endpoint = Endpoint::new("127.0.0.1", port);
        let call = endpoint.exchange(request());
        let given_up = tokio::time::timeout(Duration::from_millis(100), call).await;
        assert!(given_up.is_err(), "the server never answers");
        assert!(endpoint.idle.lock().unwrap().is_empty());
        // The connection was closed, so the server's read ends.
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("the abandoned connection is closed")
            .unwrap();
    }

    #[test]
    fn an_ipv6_host_is_connected_to_in_brackets() {
        // A URI's host keeps an IPv6 literal's brackets, which the address needs.
        let uri: http::Uri = "http://[::1]:8080/v1".parse().unwrap();
        let addr = Endpoint::new(uri.host().unwrap(), 8080).addr;
        assert_eq!(addr, "[::1]:8080");
        assert!(addr.parse::<std::net::SocketAddr>().is_ok());
        assert_eq!(Endpoint::new("localhost", 80).addr, "localhost:80");
    }
}
