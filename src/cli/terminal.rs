//! What the commands read from the terminal and the process: a line of stdin, and the
//! signals that stop a server (and how long a stopping server may take).

/// One line from stdin, read off the async runtime's threads.
pub async fn read_answer() -> String {
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        match std::io::stdin().read_line(&mut line) {
            Ok(0) | Err(_) => "(no answer: standard input is closed)".to_string(),
            Ok(_) => line.trim().to_string(),
        }
    })
    .await
    .unwrap_or_default()
}

/// Lines of stdin, each read when asked for, on a thread of its own: not the async
/// runtime's blocking pool, so a read still waiting when the command ends never keeps the
/// process, and not ahead of time, so a flow's questions (`read_answer`) get the lines typed
/// while it runs.
pub struct Prompt {
    ask: std::sync::mpsc::Sender<()>,
    lines: tokio::sync::mpsc::UnboundedReceiver<Option<String>>,
}

impl Prompt {
    pub fn new() -> Prompt {
        let (ask, asked) = std::sync::mpsc::channel::<()>();
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for () in asked {
                let mut line = String::new();
                let read = match std::io::stdin().read_line(&mut line) {
                    Ok(0) | Err(_) => None,
                    Ok(_) => Some(line.trim_end_matches(['\n', '\r']).to_string()),
                };
                let closed = read.is_none();
                if tx.send(read).is_err() || closed {
                    break;
                }
            }
        });
        Prompt { ask, lines }
    }

    /// The next line, or `None` once stdin is closed.
    pub async fn line(&mut self) -> Option<String> {
        self.ask.send(()).ok()?;
        self.lines.recv().await.flatten()
    }
}

/// Resolves on Ctrl-C or SIGTERM, for servers that stop cleanly either way.
pub async fn stop_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

/// Run the server `serve` makes until it ends, or until 5 s after Ctrl-C or SIGTERM: it is
/// given a future that resolves on the signal, to stop accepting and finish open requests;
/// event streams still open 5 s later are cut.
pub async fn serve_until_stopped<S: Future<Output = ()>>(
    serve: impl FnOnce(std::pin::Pin<Box<dyn Future<Output = ()> + Send>>) -> S,
) {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        stop_signal().await;
        let _ = stop.send(true);
    });
    let mut graceful = stopped.clone();
    let server = serve(Box::pin(async move {
        let _ = graceful.wait_for(|s| *s).await;
    }));
    let mut late = stopped;
    tokio::select! {
        () = server => {}
        _ = async move {
            let _ = late.wait_for(|s| *s).await;
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
        } => {}
    }
}
