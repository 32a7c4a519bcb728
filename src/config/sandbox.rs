//! `[sandbox]`: whether code runs in a container per flow, and the container's image,
//! limits and workspace, checked. Unless the file names the Docker engine, `resolve` takes
//! `DOCKER_HOST` from the environment (a `unix://` one).

use std::path::Path;
use std::time::Duration;

use manus_actors::sandbox::SandboxSettings;

use super::error::{Lines, Problem};
use super::file::SandboxToml;

/// The engine's socket when neither the file nor `DOCKER_HOST` names one.
pub(super) const DEFAULT_DOCKER_HOST: &str = "unix:///var/run/docker.sock";

/// The sandbox's settings when `use_sandbox = true`, and whether the file named the engine.
pub(super) fn build(
    sb: &SandboxToml,
    workspace: &Path,
    lines: Lines,
) -> Result<Option<(SandboxSettings, bool)>, Problem> {
    let memory_limit = match &sb.memory_limit {
        Some(m) => parse_bytes(m.get_ref()).ok_or_else(|| {
            Problem::at(
                lines.of(m),
                "[sandbox] memory_limit",
                format!(
                    "[sandbox] memory_limit = \"{}\": use a size such as \"512m\" or \"2g\"",
                    m.get_ref()
                ),
            )
        })?,
        None => 512 * 1024 * 1024,
    };
    if !sb.use_sandbox.unwrap_or(false) {
        return Ok(None);
    }
    let settings = SandboxSettings {
        docker_host: sb
            .docker_host
            .clone()
            .unwrap_or_else(|| DEFAULT_DOCKER_HOST.into()),
        image: sb
            .image
            .clone()
            .unwrap_or_else(|| "manus-rt-sandbox:latest".into()),
        work_dir: sb.work_dir.clone().unwrap_or_else(|| "/workspace".into()),
        memory_limit,
        cpu_limit: sb.cpu_limit.unwrap_or(1.0),
        pids_limit: sb.pids_limit.unwrap_or(256),
        network_enabled: sb.network_enabled.unwrap_or(false),
        idle_timeout: Duration::from_secs(sb.idle_timeout_secs.unwrap_or(600)),
        max_sandboxes: sb.max_sandboxes.unwrap_or(8).max(1),
        mount: sb
            .mount_workspace
            .unwrap_or(false)
            .then(|| workspace.to_path_buf()),
    };
    if !settings.work_dir.starts_with('/') {
        return Err(Problem::at(
            None,
            "[sandbox] work_dir",
            format!(
                "[sandbox] work_dir = \"{}\" must be an absolute path",
                settings.work_dir
            ),
        ));
    }
    Ok(Some((settings, sb.docker_host.is_some())))
}

/// `512m`, `2g`, `1048576` → bytes.
pub(super) fn parse_bytes(s: &str) -> Option<i64> {
    let s = s.trim().to_ascii_lowercase();
    let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: i64 = digits.parse().ok()?;
    let mult = match unit.trim_end_matches('b') {
        "" => 1,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult).filter(|b| *b > 0)
}
