//! What the commands read from the terminal and the process: a line of stdin, and the
//! signals that stop a server.

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
