//! `sandbox doctor`: what each `[sandbox] mode` can do here, a check on each line (for
//! container mode, of the Docker engine and the sandbox image); exit 0 only if the mode the
//! config chose works here.

use std::process::ExitCode;

use manus_rt::engine::confine::Support;
use manus_rt::{Config, SandboxMode};

use super::exit;

pub async fn run(config: &Config) -> ExitCode {
    let mark = |ok: bool| if ok { "✓" } else { "✗" };
    let here = Support::here();
    println!(
        "{} mode none: always available; code runs with your rights",
        mark(true)
    );
    println!("{} mode process: {}", mark(here.full()), here.describe());
    for gap in here.gaps() {
        println!("  ! {gap}");
    }
    let container_ok = match &config.sandbox {
        None => {
            println!(
                "  mode container: not checked ([sandbox] mode = \"container\" to check the engine)"
            );
            true
        }
        Some(settings) => {
            println!("  mode container:");
            let checks = settings.doctor().await;
            for c in &checks {
                println!("{} {}", mark(c.ok), c.what);
            }
            checks.iter().all(|c| c.ok)
        }
    };
    let (name, ok) = match config.sandbox_mode {
        SandboxMode::None => ("none", true),
        SandboxMode::Process => ("process", here.full()),
        SandboxMode::Container => ("container", container_ok),
    };
    println!(
        "{} {}: [sandbox] mode = \"{name}\"",
        mark(ok),
        config.source
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        exit::failed()
    }
}
