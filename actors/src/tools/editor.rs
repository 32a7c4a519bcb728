//! The `str_replace_editor` tool: view, create and edit text files inside the workspace,
//! keeping a per-file history so edits can be undone. Paths are resolved and confined by
//! `files.rs`, so the same rules hold on the host and in the sandbox.

use std::collections::HashMap;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::files::{Files, Kind, Target};
use super::{Builtin, Tool, ToolCtx, ToolError, ToolFuture, ToolOutput, args, clip, json_kind};
use crate::llm::ToolSpec;

const NAME: &str = "str_replace_editor";

pub const TOOL: Builtin = Builtin::new(NAME, |_| Box::new(StrReplaceEditor::default()));
/// Most characters of a view or snippet shown to the model.
const MAX_VIEW: usize = 16_000;
/// Unchanged lines shown on each side of an edit.
const CONTEXT_LINES: usize = 4;

/// A call's arguments.
#[derive(Deserialize, JsonSchema)]
struct Args {
    #[serde(flatten)]
    command: Command,
    /// The file (or, for `view`, directory) to work on: relative to the workspace, or
    /// absolute inside it.
    path: String,
}

/// What to do: view, create, str_replace, insert or undo_edit.
#[derive(Deserialize, JsonSchema)]
#[serde(tag = "command", rename_all = "snake_case")]
#[schemars(transform = args::flat_tagged)]
enum Command {
    View {
        /// For `view` of a file: [first, last] line numbers to show, counting from 1; last =
        /// -1 means through the end.
        #[serde(default, deserialize_with = "line_pair")]
        #[schemars(with = "Option<[i64; 2]>")]
        view_range: Option<(i64, i64)>,
    },
    Create {
        /// For `create`: the whole content of the new file.
        file_text: String,
    },
    StrReplace {
        /// For `str_replace`: the text to replace, copied exactly (whitespace too). It must
        /// occur exactly once in the file, so include enough surrounding lines.
        old_str: String,
        /// For `str_replace`: the replacement text (leave out to delete `old_str`).
        new_str: Option<String>,
    },
    Insert {
        /// For `insert`: the line number after which `new_str` goes; 0 inserts at the very
        /// top.
        insert_line: i64,
        /// For `insert`: the lines to add.
        new_str: String,
    },
    UndoEdit,
}

/// `view_range` as its two numbers (null counts as absent).
fn line_pair<'de, D: Deserializer<'de>>(d: D) -> Result<Option<(i64, i64)>, D::Error> {
    let v = Value::deserialize(d)?;
    let pair = match &v {
        Value::Null => return Ok(None),
        Value::Array(a) => match a.as_slice() {
            [start, end] => start.as_i64().zip(end.as_i64()),
            _ => None,
        },
        _ => None,
    };
    pair.map(Some).ok_or_else(|| {
        D::Error::custom(format!(
            "{NAME}: `view_range` must be two whole numbers [first, last], like [10, 40] or \
             [10, -1] for line 10 to the end; got {}",
            shown_value(&v)
        ))
    })
}

/// File viewer and editor, with undo.
#[derive(Default)]
pub struct StrReplaceEditor {
    /// For each edited file (by resolved path), its earlier contents, oldest first.
    history: HashMap<PathBuf, Vec<String>>,
}

impl StrReplaceEditor {
    async fn run(&mut self, args: Value, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let Args { command, path } = args::parse(NAME, &args)?;
        let files = Files::new(NAME, ctx);
        let target = files.resolve(&path).await?;
        let text = match command {
            Command::View { view_range } => view(&files, &target, view_range).await?,
            Command::Create { file_text } => create(&files, &target, &file_text).await?,
            Command::StrReplace { old_str, new_str } => {
                let new = new_str.unwrap_or_default();
                self.str_replace(&files, &target, &old_str, &new).await?
            }
            Command::Insert {
                insert_line,
                new_str,
            } => self.insert(&files, &target, insert_line, &new_str).await?,
            Command::UndoEdit => self.undo(&files, &target).await?,
        };
        Ok(ToolOutput::text(text))
    }

    async fn str_replace(
        &mut self,
        files: &Files<'_>,
        target: &Target,
        old: &str,
        new: &str,
    ) -> Result<String, ToolError> {
        if old.is_empty() {
            return Err(fail("`old_str` is empty; give the exact text to replace"));
        }
        let text = read_text(files, target, TOO_LARGE_TO_EDIT).await?;
        let found = occurrences(&text, old);
        let at = match found.as_slice() {
            [] => {
                return Err(fail(format!(
                    "`old_str` does not occur in `{}`, so nothing was changed. It must match the \
                     file exactly, whitespace and indentation included; `view` the file and copy \
                     the text.",
                    target.shown
                )));
            }
            [at] => *at,
            several => {
                let lines: Vec<String> = several
                    .iter()
                    .map(|&i| line_of(&text, i).to_string())
                    .collect();
                return Err(fail(format!(
                    "`old_str` occurs {} times in `{}` (starting on lines {}), so nothing was \
                     changed. Include more of the surrounding text so that it matches exactly one \
                     place.",
                    several.len(),
                    target.shown,
                    lines.join(", ")
                )));
            }
        };
        let updated = format!("{}{new}{}", &text[..at], &text[at + old.len()..]);
        self.save(files, target, text, &updated).await?;
        let first = line_of(&updated, at);
        let last = first + new.matches('\n').count();
        Ok(format!(
            "Replaced the text in `{}`. {}Check that the result is what you meant; `undo_edit` \
             reverts it.",
            target.shown,
            snippet(&updated, first, last)
        ))
    }

    async fn insert(
        &mut self,
        files: &Files<'_>,
        target: &Target,
        after: i64,
        new: &str,
    ) -> Result<String, ToolError> {
        let after = u64::try_from(after).map_err(|_| {
            fail(format!(
                "argument `insert_line` must be a whole number of 0 or more, got {after}"
            ))
        })?;
        let text = read_text(files, target, TOO_LARGE_TO_EDIT).await?;
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        let after = usize::try_from(after).unwrap_or(usize::MAX);
        if after > lines.len() {
            return Err(fail(format!(
                "`insert_line` {after} is past the end of `{}`, which has {} lines; use 0 to \
                 insert at the top or {} to append",
                target.shown,
                lines.len(),
                lines.len()
            )));
        }
        let mut updated = String::with_capacity(text.len() + new.len() + 2);
        updated.extend(lines[..after].iter().copied());
        if !updated.is_empty() && !updated.ends_with('\n') {
            updated.push('\n');
        }
        updated.push_str(new);
        if !new.ends_with('\n') {
            updated.push('\n');
        }
        updated.extend(lines[after..].iter().copied());
        self.save(files, target, text, &updated).await?;
        let inserted = new.strip_suffix('\n').unwrap_or(new).matches('\n').count() + 1;
        Ok(format!(
            "Inserted {inserted} line(s) after line {after} of `{}`. {}Check the placement and \
             indentation; `undo_edit` reverts it.",
            target.shown,
            snippet(&updated, after + 1, after + inserted)
        ))
    }

    async fn undo(&mut self, files: &Files<'_>, target: &Target) -> Result<String, ToolError> {
        let earlier = self.history.get_mut(&target.path);
        let Some(previous) = earlier.as_ref().and_then(|h| h.last()) else {
            return Err(fail(format!(
                "there is no edit of `{}` to undo (only edits made with this tool can be undone)",
                target.shown
            )));
        };
        files.write(target, previous.as_bytes()).await?;
        let left = earlier.map_or(0, |h| {
            h.pop();
            h.len()
        });
        Ok(format!(
            "Restored `{}` to how it was before its last edit; {left} earlier edit(s) of it can \
             still be undone.",
            target.shown
        ))
    }

    /// Write the new content and remember the old one for `undo_edit`.
    async fn save(
        &mut self,
        files: &Files<'_>,
        target: &Target,
        old: String,
        new: &str,
    ) -> Result<(), ToolError> {
        files.write(target, new.as_bytes()).await?;
        self.history
            .entry(target.path.clone())
            .or_default()
            .push(old);
        Ok(())
    }
}

impl Tool for StrReplaceEditor {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: NAME.into(),
            description: "View, create and edit text files in the workspace. `view` prints a file \
                          with line numbers (or lists a directory two levels deep); `create` \
                          writes a new file; `str_replace` swaps one exact, unique piece of text \
                          for another; `insert` adds text after a given line; `undo_edit` reverts \
                          the latest edit of a file. Paths may be relative to the workspace or \
                          absolute inside it; anything outside the workspace is refused."
                .into(),
            parameters: args::schema::<Args>(),
            variants: args::variants::<Args>(),
        }
    }

    fn call<'a>(&'a mut self, args: Value, ctx: &'a ToolCtx) -> ToolFuture<'a> {
        Box::pin(self.run(args, ctx))
    }
}

/// What to do with a file too large to edit here.
const TOO_LARGE_TO_EDIT: &str = "edit it with bash (sed) or python_execute instead";
/// What to do with a file too large to view whole.
const TOO_LARGE_TO_VIEW: &str = "view a part with `view_range` (for example [1, 200]), which \
                                 reads the file in pieces, or search it with bash (grep)";

/// Refuse a directory or a missing file with what to do instead.
fn need_file(target: &Target) -> Result<(), ToolError> {
    match target.kind {
        Kind::Dir => Err(fail(format!(
            "`{}` is a directory; this command needs a file",
            target.shown
        ))),
        Kind::Missing => Err(fail(format!(
            "`{}` does not exist; `create` makes a new file",
            target.shown
        ))),
        Kind::File(_) => Ok(()),
    }
}

fn not_text(target: &Target) -> ToolError {
    fail(format!(
        "`{}` is not UTF-8 text; this editor only handles text files",
        target.shown
    ))
}

/// The file's content as text, with errors that say what to do instead (`too_large`, for
/// a file over `files::MAX_READ`).
async fn read_text(
    files: &Files<'_>,
    target: &Target,
    too_large: &str,
) -> Result<String, ToolError> {
    need_file(target)?;
    String::from_utf8(files.read(target, too_large).await?).map_err(|_| not_text(target))
}

async fn view(
    files: &Files<'_>,
    target: &Target,
    range: Option<(i64, i64)>,
) -> Result<String, ToolError> {
    if target.kind == Kind::Dir {
        if range.is_some() {
            return Err(fail(format!(
                "`{}` is a directory; `view_range` only applies to files",
                target.shown
            )));
        }
        return list_dir(files, target).await;
    }
    let (body, first, last, total) = match range {
        None => {
            let text = read_text(files, target, TOO_LARGE_TO_VIEW).await?;
            let lines: Vec<&str> = text.lines().collect();
            if lines.is_empty() {
                return Ok(format!("`{}` is empty.", target.shown));
            }
            (numbered(&lines, 1), 1, lines.len(), lines.len())
        }
        Some((start, end)) => {
            need_file(target)?;
            // Only the lines asked for are kept; the count comes from reading to the end.
            let wanted = |n: i64| usize::try_from(n).unwrap_or(0);
            let last = if end == -1 { usize::MAX } else { wanted(end) };
            let found = files
                .lines(target, (wanted(start), last), TOO_LARGE_TO_VIEW)
                .await?;
            let (first, last) = line_range((start, end), found.total)?;
            let lines = found
                .lines
                .iter()
                .map(|line| std::str::from_utf8(line).map_err(|_| not_text(target)))
                .collect::<Result<Vec<&str>, _>>()?;
            (numbered(&lines, first), first, last, found.total)
        }
    };
    let header = if (first, last) == (1, total) {
        format!("`{}` ({total} lines):\n", target.shown)
    } else {
        format!("`{}`, lines {first}-{last} of {total}:\n", target.shown)
    };
    let hint = if header.len() + body.len() > MAX_VIEW {
        "\n(Shortened: use `view_range` to see the middle.)"
    } else {
        ""
    };
    Ok(format!(
        "{}{hint}",
        clip(&format!("{header}{body}"), MAX_VIEW)
    ))
}

/// Check a `view_range` against a file of `total` lines; returns 1-based inclusive bounds.
fn line_range((start, end): (i64, i64), total: usize) -> Result<(usize, usize), ToolError> {
    let in_file = |n: i64| n >= 1 && n <= total as i64;
    if !in_file(start) {
        return Err(fail(format!(
            "`view_range` starts at line {start}, but the file has {total} lines (numbered from 1)"
        )));
    }
    let end = if end == -1 { total as i64 } else { end };
    if end < start {
        return Err(fail(format!(
            "`view_range` ends at line {end}, before its start {start}; use -1 for the end of the \
             file"
        )));
    }
    if !in_file(end) {
        return Err(fail(format!(
            "`view_range` ends at line {end}, but the file has only {total} lines; use -1 for the \
             end of the file"
        )));
    }
    Ok((start as usize, end as usize))
}

/// List a directory two levels deep, hidden entries left out.
async fn list_dir(files: &Files<'_>, target: &Target) -> Result<String, ToolError> {
    let mut out = format!(
        "`{}`, two levels deep (hidden entries left out):\n",
        target.shown
    );
    let mut count = 0;
    for (name, is_dir) in files.entries(target, "").await? {
        out.push_str(&name);
        count += 1;
        if is_dir {
            out.push_str("/\n");
            for (inner, inner_dir) in files.entries(target, &name).await? {
                out.push_str(&format!(
                    "{name}/{inner}{}\n",
                    if inner_dir { "/" } else { "" }
                ));
                count += 1;
            }
        } else {
            out.push('\n');
        }
    }
    if count == 0 {
        out.push_str("(empty)\n");
    }
    Ok(clip(&out, MAX_VIEW))
}

async fn create(files: &Files<'_>, target: &Target, text: &str) -> Result<String, ToolError> {
    if !files.create(target, text.as_bytes()).await? {
        let what = match target.kind {
            Kind::Dir => "a directory",
            _ => "a file",
        };
        return Err(fail(format!(
            "`{}` already exists as {what}; `create` only makes new files. Use `view` to see \
             it and `str_replace` or `insert` to change it.",
            target.shown
        )));
    }
    Ok(format!(
        "Created `{}` ({} lines).",
        target.shown,
        text.lines().count()
    ))
}

/// Byte offsets of every occurrence of `needle`, overlapping ones included.
fn occurrences(text: &str, needle: &str) -> Vec<usize> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(i) = text[from..].find(needle) {
        let at = from + i;
        found.push(at);
        from = at + text[at..].chars().next().map_or(1, char::len_utf8);
    }
    found
}

/// The 1-based line number of a byte offset.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].matches('\n').count() + 1
}

/// Lines `first..=last` of `text` with a few lines of context, numbered.
fn snippet(text: &str, first: usize, last: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    if lines.is_empty() {
        return "The file is now empty.\n".into();
    }
    let from = first.saturating_sub(CONTEXT_LINES).max(1);
    let to = (last + CONTEXT_LINES).min(lines.len()).max(from);
    let shown = clip(&numbered(&lines[from - 1..to], from), MAX_VIEW);
    format!("Lines {from}-{to} now read:\n{shown}")
}

/// Lines numbered like `cat -n`, starting at `first`.
fn numbered(lines: &[&str], first: usize) -> String {
    lines
        .iter()
        .zip(first..)
        .map(|(line, n)| format!("{n:6}\t{line}\n"))
        .collect()
}

/// A short rendering of a wrong-typed argument.
fn shown_value(v: &Value) -> String {
    let text = v.to_string();
    if text.len() > 60 {
        json_kind(v).to_string()
    } else {
        format!("{} {text}", json_kind(v))
    }
}

fn fail(msg: impl std::fmt::Display) -> ToolError {
    ToolError::new(format!("{NAME}: {msg}"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::tools::tests::{TempDir, host_ctx as ctx};

    async fn ok(ed: &mut StrReplaceEditor, ctx: &ToolCtx, args: Value) -> String {
        match ed.call(args.clone(), ctx).await {
            Ok(out) => out.text,
            Err(e) => panic!("{args} failed: {e}"),
        }
    }

    async fn refused(ed: &mut StrReplaceEditor, ctx: &ToolCtx, args: Value) -> String {
        match ed.call(args.clone(), ctx).await {
            Ok(out) => panic!("{args} should fail, got: {}", out.text),
            Err(e) => e.0,
        }
    }

    #[tokio::test]
    async fn relative_create_then_view() {
        let ws = TempDir::new("create");
        let ctx = ctx(&ws.0);
        let mut ed = StrReplaceEditor::default();
        let out = ok(
            &mut ed,
            &ctx,
            json!({"command": "create", "path": "src/a.txt", "file_text": "one\ntwo\n"}),
        )
        .await;
        assert_eq!(out, "Created `src/a.txt` (2 lines).");
        assert_eq!(
            std::fs::read_to_string(ws.0.join("src/a.txt")).unwrap(),
            "one\ntwo\n"
        );
        let out = ok(
            &mut ed,
            &ctx,
            json!({"command": "view", "path": "src/a.txt"}),
        )
        .await;
        assert_eq!(out, "`src/a.txt` (2 lines):\n     1\tone\n     2\ttwo\n");
        let err = refused(
            &mut ed,
            &ctx,
            json!({"command": "create", "path": "src/a.txt", "file_text": "x"}),
        )
        .await;
        assert!(
            err.contains("already exists as a file") && err.contains("str_replace"),
            "{err}"
        );
        assert_eq!(
            std::fs::read_to_string(ws.0.join("src/a.txt")).unwrap(),
            "one\ntwo\n"
        );
    }

    #[tokio::test]
    async fn absolute_path_inside_is_accepted() {
        let ws = TempDir::new("abs");
        let ctx = ctx(&ws.0);
        let mut ed = StrReplaceEditor::default();
        let path = ws.0.join("notes.md");
        let out = ok(
            &mut ed,
            &ctx,
            json!({"command": "create", "path": path, "file_text": "hi"}),
        )
        .await;
        assert!(out.contains("`notes.md`"), "{out}");
        let out = ok(&mut ed, &ctx, json!({"command": "view", "path": path})).await;
        assert!(out.ends_with("     1\thi\n"), "{out}");
        // `..` that stays inside the workspace is fine too.
        std::fs::create_dir(ws.0.join("sub")).unwrap();
        let out = ok(
            &mut ed,
            &ctx,
            json!({"command": "view", "path": "sub/../notes.md"}),
        )
        .await;
        assert!(out.starts_with("`notes.md`"), "{out}");
    }

    #[tokio::test]
    async fn parent_escape_is_refused() {
        // The workspace inside a directory of the test's own, so `..` lands where nothing
        // else writes.
        let root = TempDir::new("dotdot");
        let ws = TempDir(root.0.join("ws"));
        std::fs::create_dir(&ws.0).unwrap();
        let ctx = ctx(&ws.0);
        let mut ed = StrReplaceEditor::default();
        let err = refused(
            &mut ed,
            &ctx,
            json!({"command": "create", "path": "../x", "file_text": "no"}),
        )
        .await;
        assert!(
            err.contains("outside the workspace") && err.contains(&ws.0.display().to_string()),
            "{err}"
        );
        assert!(!root.0.join("x").exists());
        let err = refused(
            &mut ed,
            &ctx,
            json!({"command": "view", "path": "a/../../x"}),
        )
        .await;
        assert!(
            err.contains("`..` after a directory that does not exist"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn absolute_path_outside_is_refused() {
        let ws = TempDir::new("etc");
        let ctx = ctx(&ws.0);
        let mut ed = StrReplaceEditor::default();
        let err = refused(
            &mut ed,
            &ctx,
            json!({"command": "view", "path": "/etc/passwd"}),
        )
        .await;
        assert!(
            err.contains("outside the workspace") && err.contains(&ws.0.display().to_string()),
            "{err}"
        );
        let err = refused(&mut ed, &ctx, json!({"command": "undo_edit", "path": "/"})).await;
        assert!(err.contains("outside the workspace"), "{err}");
    }

    #[tokio::test]
    async fn symlink_out_of_the_workspace_is_refused() {
        let ws = TempDir::new("link");
        let outside = TempDir::new("link-target");
        std::fs::write(outside.0.join("secret.txt"), "secret").unwrap();
        std::os::unix::fs::symlink(&outside.0, ws.0.join("escape")).unwrap();
        std::os::unix::fs::symlink(outside.0.join("gone"), ws.0.join("dangling")).unwrap();
        let ctx = ctx(&ws.0);
        let mut ed = StrReplaceEditor::default();
        let err = refused(
            &mut ed,
            &ctx,
            json!({"command": "view", "path": "escape/secret.txt"}),
        )
        .await;
        assert!(err.contains("outside the workspace"), "{err}");
        let err = refused(
            &mut ed,
            &ctx,
            json!({"command": "create", "path": "escape/new.txt", "file_text": "x"}),
        )
        .await;
        assert!(err.contains("outside the workspace"), "{err}");
        assert!(!outside.0.join("new.txt").exists());
        let err = refused(
            &mut ed,
            &ctx,
            json!({"command": "create", "path": "dangling", "file_text": "x"}),
        )
        .await;
        assert!(err.contains("symbolic link"), "{err}");
        assert!(!outside.0.join("gone").exists());
    }

    #[tokio::test]
    async fn multiple_matches_are_listed_by_line() {
        let ws = TempDir::new("multi");
        let ctx = ctx(&ws.0);
        std::fs::write(ws.0.join("m.py"), "x = 1\ny = 2\nx = 1\n\nx = 1\n").unwrap();
        let mut ed = StrReplaceEditor::default();
        let args = json!({"command": "str_replace", "path": "m.py", "old_str": "x = 1"});
        let err = refused(&mut ed, &ctx, args).await;
        assert!(
            err.contains("occurs 3 times") && err.contains("lines 1, 3, 5"),
            "{err}"
        );
        let args = json!({"command": "str_replace", "path": "m.py", "old_str": "z = 1"});
        let err = refused(&mut ed, &ctx, args).await;
        assert!(err.contains("does not occur"), "{err}");
        assert_eq!(
            std::fs::read_to_string(ws.0.join("m.py")).unwrap(),
            "x = 1\ny = 2\nx = 1\n\nx = 1\n"
        );
        let old = "y = 2\nx = 1";
        let new = "y = 3\nx = 1";
        let args =
            json!({"command": "str_replace", "path": "m.py", "old_str": old, "new_str": new});
        let out = ok(&mut ed, &ctx, args).await;
        assert!(out.contains("     2\ty = 3\n"), "{out}");
        assert_eq!(
            std::fs::read_to_string(ws.0.join("m.py")).unwrap(),
            "x = 1\ny = 3\nx = 1\n\nx = 1\n"
        );
    }

    #[tokio::test]
    async fn undo_restores_each_earlier_version() {
        let ws = TempDir::new("undo");
        let ctx = ctx(&ws.0);
        let file = ws.0.join("u.txt");
        std::fs::write(&file, "alpha\nbeta\n").unwrap();
        let mut ed = StrReplaceEditor::default();
        let err = refused(
            &mut ed,
            &ctx,
            json!({"command": "undo_edit", "path": "u.txt"}),
        )
        .await;
        assert!(err.contains("no edit of `u.txt` to undo"), "{err}");
        let args = json!({"command": "str_replace", "path": "u.txt", "old_str": "alpha",
                          "new_str": "gamma"});
        ok(&mut ed, &ctx, args).await;
        ok(
            &mut ed,
            &ctx,
            json!({"command": "str_replace", "path": "u.txt", "old_str": "beta\n"}),
        )
        .await;
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "gamma\n");
        // The same file named by its absolute path shares the history.
        let out = ok(&mut ed, &ctx, json!({"command": "undo_edit", "path": file})).await;
        assert!(out.contains("1 earlier edit"), "{out}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "gamma\nbeta\n");
        ok(
            &mut ed,
            &ctx,
            json!({"command": "undo_edit", "path": "u.txt"}),
        )
        .await;
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "alpha\nbeta\n");
        refused(
            &mut ed,
            &ctx,
            json!({"command": "undo_edit", "path": "u.txt"}),
        )
        .await;
    }

    #[tokio::test]
    async fn insert_after_a_line() {
        let ws = TempDir::new("insert");
        let ctx = ctx(&ws.0);
        let file = ws.0.join("i.txt");
        std::fs::write(&file, "a\nb").unwrap();
        let mut ed = StrReplaceEditor::default();
        let out = ok(
            &mut ed,
            &ctx,
            json!({"command": "insert", "path": "i.txt", "insert_line": 1, "new_str": "x\ny"}),
        )
        .await;
        assert!(
            out.contains("Inserted 2 line(s) after line 1")
                && out.contains("     2\tx\n     3\ty\n"),
            "{out}"
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "a\nx\ny\nb");
        ok(
            &mut ed,
            &ctx,
            json!({"command": "insert", "path": "i.txt", "insert_line": 0, "new_str": "top\n"}),
        )
        .await;
        ok(
            &mut ed,
            &ctx,
            json!({"command": "insert", "path": "i.txt", "insert_line": 5, "new_str": "end"}),
        )
        .await;
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "top\na\nx\ny\nb\nend\n"
        );
        let err = refused(
            &mut ed,
            &ctx,
            json!({"command": "insert", "path": "i.txt", "insert_line": 7, "new_str": "z"}),
        )
        .await;
        assert!(
            err.contains("past the end") && err.contains("has 6 lines"),
            "{err}"
        );
        let err = refused(
            &mut ed,
            &ctx,
            json!({"command": "insert", "path": "i.txt", "insert_line": -1, "new_str": "z"}),
        )
        .await;
        assert!(
            err.contains("`insert_line` must be a whole number"),
            "{err}"
        );
        let err = refused(
            &mut ed,
            &ctx,
            json!({"command": "insert", "path": "i.txt", "new_str": "z"}),
        )
        .await;
        assert!(
            err.contains("missing required argument `insert_line`"),
            "{err}"
        );
        let err = refused(
            &mut ed,
            &ctx,
            json!({"command": "insert", "path": "i.txt", "insert_line": 1}),
        )
        .await;
        assert!(err.contains("missing required argument `new_str`"), "{err}");
    }

    #[tokio::test]
    async fn view_range_and_its_errors() {
        let ws = TempDir::new("range");
        let ctx = ctx(&ws.0);
        let text: String = (1..=10).map(|n| format!("line {n}\n")).collect();
        std::fs::write(ws.0.join("r.txt"), text).unwrap();
        let mut ed = StrReplaceEditor::default();
        let view = |range: Value| json!({"command": "view", "path": "r.txt", "view_range": range});
        let out = ok(&mut ed, &ctx, view(json!([3, 4]))).await;
        assert_eq!(
            out,
            "`r.txt`, lines 3-4 of 10:\n     3\tline 3\n     4\tline 4\n"
        );
        let out = ok(&mut ed, &ctx, view(json!([9, -1]))).await;
        assert_eq!(
            out,
            "`r.txt`, lines 9-10 of 10:\n     9\tline 9\n    10\tline 10\n"
        );
        let err = refused(&mut ed, &ctx, view(json!([0, 3]))).await;
        assert!(err.contains("starts at line 0"), "{err}");
        let err = refused(&mut ed, &ctx, view(json!([5, 11]))).await;
        assert!(err.contains("has only 10 lines"), "{err}");
        let err = refused(&mut ed, &ctx, view(json!([5, 2]))).await;
        assert!(err.contains("before its start"), "{err}");
        let err = refused(&mut ed, &ctx, view(json!("1-3"))).await;
        assert!(
            err.contains("`view_range` must be two whole numbers") && err.contains("\"1-3\""),
            "{err}"
        );
    }

    #[tokio::test]
    async fn view_lists_a_directory_two_levels_deep() {
        let ws = TempDir::new("dir");
        let ctx = ctx(&ws.0);
        for path in ["b.txt", "src/main.rs", "src/deep/more.rs", ".git/config"] {
            let path = ws.0.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "").unwrap();
        }
        let mut ed = StrReplaceEditor::default();
        let out = ok(&mut ed, &ctx, json!({"command": "view", "path": "."})).await;
        assert_eq!(
            out,
            "`.`, two levels deep (hidden entries left out):\nb.txt\nsrc/\nsrc/deep/\nsrc/main.rs\n"
        );
        let out = ok(&mut ed, &ctx, json!({"command": "view", "path": "b.txt"})).await;
        assert_eq!(out, "`b.txt` is empty.");
    }

    #[tokio::test]
    async fn bad_arguments_name_the_argument() {
        let ws = TempDir::new("args");
        let ctx = ctx(&ws.0);
        let mut ed = StrReplaceEditor::default();
        let err = refused(&mut ed, &ctx, json!({"path": "a"})).await;
        assert!(err.contains("missing required argument `command`"), "{err}");
        let err = refused(&mut ed, &ctx, json!({"command": "delete", "path": "a"})).await;
        assert!(err.contains("unknown command `delete`"), "{err}");
        let err = refused(&mut ed, &ctx, json!({"command": "view", "path": 3})).await;
        assert!(err.contains("argument `path` must be a string"), "{err}");
        let err = refused(&mut ed, &ctx, json!({"command": "create", "path": "a"})).await;
        assert!(
            err.contains("missing required argument `file_text`"),
            "{err}"
        );
        let err = refused(
            &mut ed,
            &ctx,
            json!({"command": "str_replace", "path": "a", "old_str": "x"}),
        )
        .await;
        assert!(err.contains("`a` does not exist"), "{err}");
    }
}
