//! `serve`: the HTTP service (routes in `manus_rt::serve`) until Ctrl-C or SIGTERM; on
//! start it resumes the runs a killed predecessor left mid-flow, unless configured not to;
//! a cluster node instead claims queued runs, and drains on stop.

use std::process::ExitCode;

use manus_rt::serve::App;
use manus_rt::{Config, Runtime};

use super::exit;
use super::terminal::serve_until_stopped;

fn runtime_node_name(c: &manus_rt::settings::ClusterSettings) -> String {
    c.node_id
        .clone()
        .unwrap_or_else(|| "(named by its host)".into())
}

pub async fn run(config: Config, bind: &str) -> ExitCode {
    let settings = config.server.clone();
    let listener = match manus_rt::serve::listen(bind, &settings).await {
        Ok(l) => l,
        Err(e) => return exit::not_started_because(e),
    };
    let runtime = match Runtime::builder().config(config).start().await {
        Ok(r) => r,
        Err(e) => return exit::not_started_because(e),
    };
    let at = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| bind.to_string());
    eprintln!(
        "manus-rt: serving on http://{at} ({}; API described at /openapi.json)",
        if settings.api_tokens.is_empty() {
            "no auth: set [server] api_tokens for bearer tokens"
        } else {
            "bearer tokens required"
        }
    );
    eprintln!("{}", super::flow::sandbox_note(runtime.config()));
    // Runs a killed predecessor left mid-flow continue here, unless configured otherwise;
    // in a cluster, whichever node has room takes them over when their lease lapses.
    let cluster = runtime.config().cluster.clone();
    let store_url = runtime.config().store.clone();
    let mut resumed = vec![];
    if settings.resume_on_start && cluster.is_none() {
        for id in runtime.interrupted_runs().await.unwrap_or_default() {
            match runtime.resume(&id).await {
                Ok(handle) => {
                    eprintln!("manus-rt: resuming interrupted run {id}");
                    resumed.push(handle);
                }
                Err(e) => eprintln!("manus-rt: run {id} cannot be resumed: {e}"),
            }
        }
    }
    let app = App::new(runtime, settings);
    for handle in resumed {
        app.track(handle);
    }
    if let (Some(c), Some(url)) = (&cluster, &store_url) {
        eprintln!(
            "manus-rt: cluster node {}: takes up to {} flow(s) at once from the shared queue",
            runtime_node_name(c),
            c.max_flows
        );
        app.start_claiming(url);
    }
    serve_until_stopped(|stopping| manus_rt::serve::run(listener, app.clone(), stopping)).await;
    if let Some(c) = &cluster {
        eprintln!(
            "manus-rt: draining: no more flows are taken; running ones get {} s to finish ([cluster] drain_secs)",
            c.drain.as_secs()
        );
        app.drain(c.drain).await;
    }
    app.shutdown().await;
    ExitCode::SUCCESS
}
