//! `python_execute`'s own cost per call: a fresh interpreter for every call
//! (`[tools] python_session = "call"`) against the agent's kept interpreter (`"flow"`, the
//! default), on the host unconfined (`[sandbox] mode = "none"`), on the host confined
//! (`"process"`, the default, where the kernel can: what confinement adds is the difference
//! between the two host rows), and, when a Docker engine is named, in a flow's container.
//!
//! Each way runs a trivial cell (`x = 1`) `CALLS` times (default 200) through the tool
//! itself, after one warm-up call that starts the interpreter (and the container), and
//! prints the median, the 90th percentile and the mean per call. `PYTHON` names the host's
//! interpreter (default `python3`; a version manager's shim, such as pyenv's, is a shell
//! script that costs about 100 ms a start, so name the interpreter itself). The container figures need
//! `MANUS_TEST_DOCKER_HOST` (a Docker engine's URL, as `scripts/test.sh` sets it) and
//! `MANUS_TEST_SANDBOX_IMAGE` (default `manus-rt-sandbox:test-v2`); without them they are
//! skipped.
//!
//! `cargo bench --bench python_cells` prints the figures; it asserts nothing.

use std::time::{Duration, Instant};

use manus_rt::engine::confine::{ConfineSettings, Network, Support};
use manus_rt::engine::sandbox::{DockerHost, SandboxHandle, SandboxSettings, SandboxSupervisor};
use manus_rt::engine::tools::python::PythonSession;
use manus_rt::engine::tools::{ToolCtx, ToolSettings, make_tool};
use serde_json::json;

fn calls() -> usize {
    std::env::var("CALLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200)
}

/// Per-call times of `calls` trivial cells, after a warm-up call.
async fn measure(
    session: PythonSession,
    confine: Option<ConfineSettings>,
    ctx: &ToolCtx,
    calls: usize,
) -> Vec<Duration> {
    let settings = ToolSettings {
        python_session: session,
        confine,
        python: std::env::var("PYTHON").unwrap_or_else(|_| "python3".into()),
        ..ToolSettings::default()
    };
    let mut tool = make_tool("python_execute", &settings).expect("a built-in tool");
    let cell = json!({ "code": "x = 1" });
    tool.call(cell.clone(), ctx)
        .await
        .expect("the warm-up call runs");
    let mut times = Vec::with_capacity(calls);
    for _ in 0..calls {
        let started = Instant::now();
        tool.call(cell.clone(), ctx).await.expect("the cell runs");
        times.push(started.elapsed());
    }
    times
}

fn print(place: &str, session: &str, mut times: Vec<Duration>) -> f64 {
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mean = times.iter().sum::<Duration>() / times.len() as u32;
    println!(
        "{place:<10} {session:<6} median {:>7.3} ms  p90 {:>7.3} ms  mean {:>7.3} ms  ({} calls)",
        ms(times[times.len() / 2]),
        ms(times[times.len() * 9 / 10]),
        ms(mean),
        times.len()
    );
    ms(times[times.len() / 2])
}

/// The medians of a fresh and a kept interpreter per call, printed.
async fn both(place: &str, confine: Option<ConfineSettings>, ctx: &ToolCtx) -> (f64, f64) {
    let n = calls();
    let fresh = print(
        place,
        "call",
        measure(PythonSession::Call, confine.clone(), ctx, n).await,
    );
    let kept = print(
        place,
        "flow",
        measure(PythonSession::Flow, confine, ctx, n).await,
    );
    println!(
        "{place:<10} a kept interpreter is {:.1}x cheaper per call (medians)",
        fresh / kept
    );
    (fresh, kept)
}

/// Process mode's settings, as `[sandbox]`'s defaults make them.
fn confined() -> ConfineSettings {
    ConfineSettings {
        network: Network::Off,
        memory_limit: 512 << 20,
        processes: 256,
        file_size: 4 << 30,
        open_files: 1024,
        cpu_time: 3600,
    }
}

/// A sandbox supervisor on the named engine, or why there is none.
async fn sandbox(workspace: &std::path::Path) -> Result<SandboxHandle, String> {
    let url = std::env::var("MANUS_TEST_DOCKER_HOST")
        .map_err(|_| "MANUS_TEST_DOCKER_HOST is not set".to_string())?;
    let image = std::env::var("MANUS_TEST_SANDBOX_IMAGE")
        .unwrap_or_else(|_| "manus-rt-sandbox:test-v2".into());
    let settings = SandboxSettings {
        hosts: vec![DockerHost { url, tls: None }],
        image,
        work_dir: "/workspace".into(),
        memory_limit: 256 << 20,
        cpu_limit: 1.0,
        pids_limit: 64,
        network_enabled: false,
        idle_timeout: Duration::from_secs(600),
        max_sandboxes: 4,
        mount: Some(workspace.to_path_buf()),
    };
    let docker = settings.hosts[0].connect().await?;
    settings.check_image(&docker).await?;
    let (supervisor, _) = ractor::Actor::spawn(
        None,
        SandboxSupervisor,
        (vec![Some(docker)], settings.clone()),
    )
    .await
    .map_err(|e| e.to_string())?;
    Ok(SandboxHandle {
        supervisor,
        work_dir: settings.work_dir,
        memory_limit: settings.memory_limit,
    })
}

#[tokio::main]
async fn main() {
    let workspace = std::env::temp_dir().join(format!("manus-bench-python-{}", std::process::id()));
    std::fs::create_dir_all(&workspace).unwrap();
    let mut ctx = ToolCtx {
        flow_id: format!("bench-python-{}", std::process::id()),
        agent: "bench".into(),
        workspace: workspace.clone(),
        flow: None,
        sandbox: None,
        browser: None,
        llm: None,
        memory: None,
        step: None,
    };
    println!("python_execute per call, a trivial cell (`x = 1`):");
    let (open_fresh, open_kept) = both("host", None, &ctx).await;
    if Support::here().full() {
        let (fresh, kept) = both("confined", Some(confined()), &ctx).await;
        println!(
            "confinement adds {:.3} ms to a fresh interpreter's call and {:.3} ms to a kept \
             one's (medians)",
            fresh - open_fresh,
            kept - open_kept
        );
    } else {
        println!("confined   skipped: {}", Support::here().describe());
    }
    match sandbox(&workspace).await {
        Ok(handle) => {
            ctx.sandbox = Some(handle.clone());
            both("container", None, &ctx).await;
            let _ =
                handle
                    .supervisor
                    .send_message(manus_rt::engine::protocol::SandboxMsg::Release {
                        flow_id: ctx.flow_id.clone(),
                    });
            tokio::time::sleep(Duration::from_secs(2)).await;
            handle.supervisor.stop(None);
        }
        Err(why) => println!("container  skipped: {why}"),
    }
    let _ = std::fs::remove_dir_all(&workspace);
}
