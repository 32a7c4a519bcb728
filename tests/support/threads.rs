//! This process's threads as `/proc` shows them: the directories of those with a given name.

use std::path::PathBuf;

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
