//! The one gap of path-based rules that must be closed before code starts: a hard link in
//! the workspace to a file elsewhere. Landlock grants by where a path lies, so through such
//! a link confined code could read or rewrite the outside file (`~/.bashrc` linked in by
//! mistake, say). Confined code cannot make one (Landlock refuses links that would carry a
//! file into more rights), so only links already there matter: before each confined
//! command starts, every file of the workspace with more than one link must have all its
//! links inside the workspace, or the command is refused with the files named.

use std::collections::HashMap;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Entries looked at, at most; a workspace larger than this is refused rather than trusted.
const MOST: usize = 500_000;

/// `Ok` when no file of `workspace` is linked from outside it; otherwise an error naming
/// them and what to do.
pub(super) fn check(workspace: &Path) -> io::Result<()> {
    // (device, inode) → (links the file has, the paths of it found here)
    let mut linked: HashMap<(u64, u64), (u64, Vec<PathBuf>)> = HashMap::new();
    let walk = walkdir::WalkDir::new(workspace)
        .follow_links(false)
        .same_file_system(true);
    for (seen, entry) in walk.into_iter().enumerate() {
        if seen == MOST {
            return Err(io::Error::other(format!(
                "the workspace `{}` holds more than {MOST} entries: too many to check for \
                 hard links to files outside it before confining code; clear it out",
                workspace.display()
            )));
        }
        // A folder that cannot be read holds nothing confined code can reach either.
        let Ok(entry) = entry else { continue };
        let Ok(meta) = entry.metadata() else { continue };
        if meta.is_file() && meta.nlink() > 1 {
            linked
                .entry((meta.dev(), meta.ino()))
                .or_insert_with(|| (meta.nlink(), vec![]))
                .1
                .push(entry.into_path());
        }
    }
    let mut outside: Vec<String> = linked
        .into_values()
        .filter(|(links, here)| (here.len() as u64) < *links)
        .map(|(links, here)| {
            format!(
                "`{}` ({links} links, {} in the workspace)",
                here[0].display(),
                here.len()
            )
        })
        .collect();
    if outside.is_empty() {
        return Ok(());
    }
    outside.sort();
    Err(io::Error::other(format!(
        "the workspace holds hard links to files outside it, which confined code could read \
         and change through them: {}. Remove them, or replace each with a copy \
         (`cp --remove-destination`), then try again",
        outside.join(", ")
    )))
}
