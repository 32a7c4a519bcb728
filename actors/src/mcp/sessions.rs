//! The MCP server's HTTP sessions: rmcp's in-memory session manager, wrapped to know what
//! each session is doing, so that one idle for too long is closed (its tool worker, and so
//! its shell, go with it) and no more than a set number are open at once.
//!
//! rmcp's own keep-alive is off: it counts only messages, so it would close a session in
//! the middle of a long tool call. Here a session is idle when no request of it is running
//! and none has arrived for the idle time. The cap is checked by the caller (`refusal`)
//! before an `initialize` goes in, one `initialize` at a time (`opening`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use futures_util::{Stream, StreamExt};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::WorkerTransport;
use rmcp::transport::streamable_http_server::SessionManager;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError, LocalSessionWorker, SessionConfig,
};
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionId};

/// When each open session last did something, and how many of its requests are running.
type Table = Arc<Mutex<HashMap<SessionId, Activity>>>;

#[derive(Debug)]
struct Activity {
    last: Instant,
    running: usize,
}

/// rmcp's session manager with a cap and an idle timeout.
pub struct Sessions {
    inner: LocalSessionManager,
    table: Table,
    max: usize,
    idle: Duration,
    /// Held while an `initialize` is checked against the cap and let in, so two at once
    /// cannot both take the last place.
    pub opening: tokio::sync::Mutex<()>,
}

impl Sessions {
    /// A manager for at most `max` sessions, each closed after `idle` without a request, and
    /// the task that closes them; it ends when the manager is dropped.
    pub fn start(max: usize, idle: Duration) -> Arc<Sessions> {
        let mut inner = LocalSessionManager::default();
        let mut config = SessionConfig::default();
        config.keep_alive = None;
        inner.session_config = config;
        let sessions = Arc::new(Sessions {
            inner,
            table: Table::default(),
            max,
            idle,
            opening: tokio::sync::Mutex::new(()),
        });
        tokio::spawn(reap(Arc::downgrade(&sessions), idle));
        sessions
    }

    /// How many sessions are open.
    pub fn open(&self) -> usize {
        self.lock().len()
    }

    /// Why a new session cannot open now, if it cannot.
    pub fn refusal(&self) -> Option<String> {
        let open = self.open();
        (open >= self.max).then(|| {
            format!(
                "this server already holds its maximum of {} MCP sessions ([mcp] max_sessions); \
                 end one (DELETE /mcp with its Mcp-Session-Id) or wait: a session with no \
                 request for {} s is closed",
                self.max,
                self.idle.as_secs()
            )
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Activity>> {
        self.table
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Note that session `id` did something now.
    fn touch(&self, id: &SessionId) {
        if let Some(a) = self.lock().get_mut(id) {
            a.last = Instant::now();
        }
    }

    /// Mark a request of session `id` as running until the guard is dropped.
    fn running(&self, id: &SessionId) -> Running {
        if let Some(a) = self.lock().get_mut(id) {
            a.running += 1;
            a.last = Instant::now();
        }
        Running {
            table: self.table.clone(),
            id: id.clone(),
        }
    }

    /// Close every session idle for longer than the idle time; how many were closed.
    pub async fn close_idle(&self) -> usize {
        let idle: Vec<SessionId> = self
            .lock()
            .iter()
            .filter(|(_, a)| a.running == 0 && a.last.elapsed() >= self.idle)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &idle {
            tracing::info!(session = %id, "closing an MCP session idle for {} s", self.idle.as_secs());
            if let Err(e) = self.close_session(id).await {
                tracing::warn!(session = %id, "the idle MCP session did not close cleanly: {e}");
            }
        }
        idle.len()
    }
}

/// Close idle sessions every quarter of the idle time (between 0.1 and 15 s), for as long
/// as the manager lives.
async fn reap(sessions: Weak<Sessions>, idle: Duration) {
    let tick = (idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(15));
    loop {
        tokio::time::sleep(tick).await;
        let Some(sessions) = sessions.upgrade() else {
            return;
        };
        sessions.close_idle().await;
    }
}

/// A running request of a session; dropping it (its response stream ended or was dropped)
/// makes the session's idle time start again.
struct Running {
    table: Table,
    id: SessionId,
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(a) = table.get_mut(&self.id) {
            a.running = a.running.saturating_sub(1);
            a.last = Instant::now();
        }
    }
}

impl SessionManager for Sessions {
    type Error = LocalSessionManagerError;
    type Transport = WorkerTransport<LocalSessionWorker>;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let (id, transport) = self.inner.create_session().await?;
        let fresh = Activity {
            last: Instant::now(),
            running: 0,
        };
        self.lock().insert(id.clone(), fresh);
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        let _running = self.running(id);
        self.inner.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.inner.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.lock().remove(id);
        self.inner.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let running = self.running(id);
        let stream = self.inner.create_stream(id, message).await?;
        // The guard lives as long as the response stream.
        Ok(stream.map(move |m| {
            let _ = &running;
            m
        }))
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.touch(id);
        self.inner.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.touch(id);
        self.inner.create_standalone_stream(id).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.touch(id);
        self.inner.resume(id, last_event_id).await
    }
}
