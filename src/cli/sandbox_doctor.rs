//! `sandbox doctor`: each check of the Docker engine and the sandbox image on a line; exit 0
//! only if all pass.

use std::process::ExitCode;

use manus_rt::Config;

use super::exit;

pub async fn run(config: &Config) -> ExitCode {
    let Some(settings) = &config.sandbox else {
        println!(
            "✗ the sandbox is off in {}: set [sandbox] use_sandbox = true",
            config.source
        );
        return exit::failed();
    };
    let checks = settings.doctor().await;
    for c in &checks {
        println!("{} {}", if c.ok { "✓" } else { "✗" }, c.what);
    }
    if checks.iter().all(|c| c.ok) {
        ExitCode::SUCCESS
    } else {
        exit::failed()
    }
}
