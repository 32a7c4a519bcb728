//! This process's threads as `/proc` shows them: the directories of those with a given name,
//! and whether they run in the idle scheduling class.

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

/// Assert that this process has threads named `name` (every one there is: other tests in
/// the process may run their own) and that each runs in Linux's idle scheduling class,
/// while the calling thread keeps the normal class.
pub fn assert_in_idle_class(name: &str) {
    let threads = named(name);
    assert!(!threads.is_empty(), "no thread named {name}");
    for thread in &threads {
        assert_eq!(policy(thread), Some(i64::from(libc::SCHED_IDLE)), "{name}");
    }
    let own = policy(Path::new("/proc/thread-self"));
    assert_eq!(
        own,
        Some(i64::from(libc::SCHED_OTHER)),
        "other threads keep the normal class"
    );
}

/// The scheduling policy (`SCHED_*`) of the thread whose `/proc` directory is `task`: field
/// 41 of its `stat`, the 39th after the command name.
fn policy(task: &Path) -> Option<i64> {
    let stat = std::fs::read_to_string(task.join("stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(38)?
        .parse()
        .ok()
}
