//! This process's threads as `/proc` shows them: the directories of those with a given name,
//! and a thread's scheduling policy.

use std::path::{Path, PathBuf};

/// `/proc/self/task/TID` of each of this process's threads named `name` (its `comm`).
pub fn named(name: &str) -> Vec<PathBuf> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return vec![];
    };
    tasks
        .flatten()
        .map(|task| task.path())
        .filter(|task| std::fs::read_to_string(task.join("comm")).is_ok_and(|c| c.trim() == name))
        .collect()
}

/// The scheduling policy (`SCHED_*`) of the thread whose `/proc` directory is `task`: field
/// 41 of its `stat`, the 39th after the command name.
pub fn policy(task: &Path) -> Option<i64> {
    let stat = std::fs::read_to_string(task.join("stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(38)?
        .parse()
        .ok()
}
