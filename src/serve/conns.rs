//! The service's accept loop: HTTP/1.1 connections (hyper) to a router. A connection has
//! `HEADER_READ` to send each request's head, and at most `max_connections` are open at
//! once, and never more than half the process's descriptor limit (the rest is the
//! runtime's: the store, model connections, tools): when that many are, the oldest idle one (waiting for a request's head, whether a
//! half-sent request or a kept-alive connection between requests) is closed to make room,
//! so half-sent requests cannot lock out a client that sends whole ones. A connection whose
//! response is still being sent (an event stream) is never closed for room, so the router
//! lets long answers (streams, waits) hold at most `long_held` of them: the rest are left
//! for short requests (health checks, cancels). Knows nothing of the routes.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc, watch};
use tower_service::Service;

/// How long a client has to send a request's head (line and headers).
pub const HEADER_READ: Duration = Duration::from_secs(10);

/// Serve `router` on `listener` until `shutdown` resolves, then let the open connections
/// finish their requests (the caller bounds how long it waits).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    max_connections: usize,
    shutdown: impl Future<Output = ()>,
) {
    let max_connections = cap(max_connections);
    let open = Arc::new(Open::default());
    let (stop, stopping) = watch::channel(false);
    // Each connection holds a sender; when all are dropped, every connection has ended.
    let (alive, mut ended) = mpsc::channel::<()>(1);
    let mut shutdown = std::pin::pin!(shutdown);
    let mut next_id = 0u64;
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors: close an idle connection, and let the
                    // ones at work go on; any other failure concerned one connection.
                    if e.raw_os_error().is_some_and(is_fd_exhaustion) {
                        open.evict_idle();
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        if open.len() >= max_connections && !open.evict_idle() {
            // Every connection is at work: this one is refused (closed unanswered).
            continue;
        }
        next_id += 1;
        let conn = open.insert(next_id);
        let task = Connection {
            id: next_id,
            conn,
            open: open.clone(),
            router: router.clone(),
            stopping: stopping.clone(),
            _alive: alive.clone(),
        };
        tokio::spawn(task.run(stream));
    }
    let _ = stop.send(true);
    drop(alive);
    let _ = ended.recv().await;
}

/// How many connections `serve` keeps open at most: `max_connections`, and never more than
/// half the descriptor limit.
pub fn cap(max_connections: usize) -> usize {
    max_connections.min(descriptor_room())
}

/// Of the connections `serve` keeps open for `max_connections`, how many answers that take
/// long (event streams, blocking waits) may hold at once: all but an eighth (at least one
/// is kept back, unless there is only one). The loop makes room only by closing a connection
/// that is not answering, so what is kept back is what health checks and cancels get in by.
pub fn long_held(max_connections: usize) -> usize {
    let cap = cap(max_connections);
    cap.saturating_sub((cap / 8).max(1)).max(1)
}

/// Half the process's soft descriptor limit (unbounded if it cannot be read).
fn descriptor_room() -> usize {
    use nix::sys::resource::{Resource, getrlimit};
    getrlimit(Resource::RLIMIT_NOFILE)
        .map_or(usize::MAX, |(soft, _)| {
            usize::try_from(soft / 2).unwrap_or(usize::MAX)
        })
        .max(1)
}

/// EMFILE (this process) or ENFILE (the system): no descriptor for a new connection.
fn is_fd_exhaustion(errno: i32) -> bool {
    const EMFILE: i32 = 24;
    const ENFILE: i32 = 23;
    errno == EMFILE || errno == ENFILE
}

/// The open connections, oldest first.
#[derive(Default)]
struct Open {
    conns: Mutex<BTreeMap<u64, Arc<Conn>>>,
}

/// One open connection, as the accept loop sees it.
#[derive(Default)]
struct Conn {
    /// Requests being answered (until the response's body is sent or dropped).
    busy: AtomicUsize,
    /// Told to close: room is needed.
    close: Notify,
}

impl Open {
    fn len(&self) -> usize {
        self.conns.lock().map_or(0, |c| c.len())
    }

    fn insert(&self, id: u64) -> Arc<Conn> {
        let conn = Arc::new(Conn::default());
        if let Ok(mut conns) = self.conns.lock() {
            conns.insert(id, conn.clone());
        }
        conn
    }

    fn remove(&self, id: u64) {
        if let Ok(mut conns) = self.conns.lock() {
            conns.remove(&id);
        }
    }

    /// Close the oldest connection that is not answering a request; false if all are.
    fn evict_idle(&self) -> bool {
        let Ok(mut conns) = self.conns.lock() else {
            return false;
        };
        let idle = conns
            .iter()
            .find(|(_, c)| c.busy.load(Ordering::Acquire) == 0)
            .map(|(id, _)| *id);
        match idle.and_then(|id| conns.remove(&id)) {
            Some(conn) => {
                conn.close.notify_one();
                true
            }
            None => false,
        }
    }
}

/// Marks its connection busy while it lives: from a request's arrival until its response's
/// body is sent or dropped.
struct Busy(Arc<Conn>);

impl Busy {
    fn enter(conn: &Arc<Conn>) -> Busy {
        conn.busy.fetch_add(1, Ordering::AcqRel);
        Busy(conn.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A connection's task and what it needs.
struct Connection {
    id: u64,
    conn: Arc<Conn>,
    open: Arc<Open>,
    router: Router,
    stopping: watch::Receiver<bool>,
    /// Dropped when the connection ends (see `serve`).
    _alive: mpsc::Sender<()>,
}

impl Connection {
    async fn run(mut self, stream: tokio::net::TcpStream) {
        let (conn, router) = (self.conn.clone(), self.router.clone());
        let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            let busy = Busy::enter(&conn);
            let mut router = router.clone();
            async move {
                let response = router.call(req.map(Body::new)).await;
                // The connection stays busy until the body is sent (or the client leaves).
                response.map(|r| {
                    r.map(|body| {
                        Body::new(body.map_frame(move |frame| {
                            let _busy = &busy;
                            frame
                        }))
                    })
                })
            }
        });
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_READ);
        let http = builder.serve_connection(TokioIo::new(stream), service);
        let mut http = std::pin::pin!(http);
        let mut stopping = false;
        loop {
            tokio::select! {
                _ = http.as_mut() => break,
                // Dropping the connection closes its socket.
                () = self.conn.close.notified() => break,
                _ = self.stopping.wait_for(|s| *s), if !stopping => {
                    stopping = true;
                    http.as_mut().graceful_shutdown();
                }
            }
        }
        self.open.remove(self.id);
    }
}
