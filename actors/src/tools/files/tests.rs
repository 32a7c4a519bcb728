//! The confinement rule against a hostile workspace, with real links, pipes and a thread that
//! swaps a folder for a link to the outside while tools work.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};

use super::*;
use crate::tools::Tool;
use crate::tools::data_report::DataReport;
use crate::tools::data_visualization::DataVisualization;
use crate::tools::editor::StrReplaceEditor;
use crate::tools::tests::{TempDir, host_ctx};

/// Every file under `dir`, with its contents.
fn contents(dir: &Path) -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            (e.file_name().to_string_lossy().into_owned(), text)
        })
        .collect();
    found.sort();
    found
}

async fn call(tool: &mut dyn Tool, ctx: &ToolCtx, args: Value) -> Result<String, String> {
    tool.call(args, ctx).await.map(|o| o.text).map_err(|e| e.0)
}

#[tokio::test]
async fn a_link_planted_at_the_reports_markdown_name_is_refused() {
    let ws = TempDir::new("report-link");
    let outside = TempDir::new("report-link-out");
    let keys = outside.0.join("authorized_keys");
    std::os::unix::fs::symlink(&keys, ws.0.join("r.md")).unwrap();
    let ctx = host_ctx(&ws.0);
    let args = json!({
        "title": "T",
        "sections": [{"heading": "H", "markdown": "ssh-ed25519 AAAA attacker"}],
        "output_path": "r.html",
    });
    let err = call(&mut DataReport, &ctx, args).await.unwrap_err();
    assert!(err.contains("r.md"), "{err}");
    assert!(!keys.exists(), "the report wrote through the link");
    assert!(
        !ws.0.join("r.html").exists(),
        "nothing is written when a part is refused"
    );
}

#[tokio::test]
async fn named_pipes_and_hard_links_are_refused_without_waiting() {
    let ws = TempDir::new("special");
    let outside = TempDir::new("special-out");
    let pipe = std::ffi::CString::new(ws.0.join("p").as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(pipe.as_ptr(), 0o644) }, 0);
    std::fs::write(outside.0.join("f.txt"), "outside\n").unwrap();
    std::fs::hard_link(outside.0.join("f.txt"), ws.0.join("h.txt")).unwrap();
    let ctx = host_ctx(&ws.0);
    let mut ed = StrReplaceEditor::default();
    let files = Files::new("test", &ctx);

    // Nobody ever opens the pipe's other end: a blocking open would hang the test.
    let err = call(&mut ed, &ctx, json!({"command": "view", "path": "p"}))
        .await
        .unwrap_err();
    assert!(err.contains("named pipe"), "{err}");
    let target = files.resolve("p").await.unwrap();
    let err = files.write(&target, b"x").await.unwrap_err().0;
    assert!(err.contains("named pipe"), "{err}");

    for args in [
        json!({"command": "view", "path": "h.txt"}),
        json!({"command": "str_replace", "path": "h.txt", "old_str": "outside", "new_str": "pwned"}),
        json!({"command": "insert", "path": "h.txt", "insert_line": 0, "new_str": "pwned"}),
    ] {
        let err = call(&mut ed, &ctx, args).await.unwrap_err();
        assert!(err.contains("hard links"), "{err}");
    }
    let target = files.resolve("h.txt").await.unwrap();
    assert!(files.write(&target, b"pwned").await.is_err());
    assert_eq!(
        std::fs::read_to_string(outside.0.join("f.txt")).unwrap(),
        "outside\n"
    );
}

#[tokio::test]
async fn a_folder_swapped_for_a_link_while_tools_work_never_lets_a_write_out() {
    let ws = TempDir::new("race");
    let outside = TempDir::new("race-out");
    std::fs::write(outside.0.join("a.txt"), "alpha\n").unwrap();
    std::fs::create_dir(ws.0.join("sub")).unwrap();
    std::fs::write(ws.0.join("sub/a.txt"), "alpha\n").unwrap();
    let before = contents(&outside.0);

    // The racer: `sub` is the real folder, then (for a moment) a link to the outside.
    let stop = Arc::new(AtomicBool::new(false));
    let racer = {
        let (stop, ws, outside) = (stop.clone(), ws.0.clone(), outside.0.clone());
        std::thread::spawn(move || {
            let sub = ws.join("sub");
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // A fresh name each time: a tool may make `sub` anew while it is a link's
                // name no longer, and then the old folder stays aside.
                let real = ws.join(format!("sub.{swaps}"));
                if std::fs::rename(&sub, &real).is_ok() {
                    let _ = std::os::unix::fs::symlink(&outside, &sub);
                    std::thread::yield_now();
                    let _ = std::fs::remove_file(&sub);
                    let _ = std::fs::rename(&real, &sub);
                    swaps += 1;
                } else if std::fs::symlink_metadata(&sub).is_err() {
                    let _ = std::fs::create_dir(&sub);
                }
                std::thread::yield_now();
            }
            swaps
        })
    };

    let ctx = host_ctx(&ws.0);
    let mut ed = StrReplaceEditor::default();
    let files = Files::new("test", &ctx);
    let (mut done, mut refused) = (0, 0);
    for i in 0..300 {
        let attempts = [
            call(
                &mut ed,
                &ctx,
                json!({"command": "create", "path": format!("sub/new{i}.txt"), "file_text": "x"}),
            )
            .await,
            call(
                &mut ed,
                &ctx,
                json!({"command": "str_replace", "path": "sub/a.txt", "old_str": "alpha", "new_str": "alpha"}),
            )
            .await,
            call(
                &mut ed,
                &ctx,
                json!({"command": "insert", "path": "sub/a.txt", "insert_line": 0, "new_str": ""}),
            )
            .await,
            // A chart's output goes through the same write.
            match files.resolve(&format!("sub/chart{i}.png")).await {
                Ok(t) => files.write(&t, b"png").await.map(|_| String::new()).map_err(|e| e.0),
                Err(e) => Err(e.0),
            },
        ];
        for a in attempts {
            match a {
                Ok(_) => done += 1,
                Err(_) => refused += 1,
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = racer.join().unwrap();
    assert!(swaps > 0, "the racer never swapped the folder");
    assert_eq!(
        contents(&outside.0),
        before,
        "a write landed outside the workspace ({done} calls done, {refused} refused, {swaps} swaps)"
    );
    assert!(done > 0, "every call was refused: {refused}");
    println!("race: {done} calls done inside, {refused} refused, {swaps} swaps, 0 outside");
}

/// `open_workspace_file`, the rule as the service uses it: a file inside is read; links
/// (at the end or on the way), `..`, absolute paths, pipes and hard links are refused with
/// why, and what they point to is never read; folders, missing names and files over the
/// limit say so.
#[test]
fn the_workspace_reader_keeps_the_tools_rule() {
    let ws = TempDir::new("reader");
    let outside = TempDir::new("reader-out");
    std::fs::write(outside.0.join("secret.txt"), "outside secret\n").unwrap();
    std::fs::create_dir(ws.0.join("out")).unwrap();
    std::fs::write(ws.0.join("out/notes.md"), "# notes\n").unwrap();
    std::fs::write(ws.0.join("ten.bin"), [7u8; 10]).unwrap();
    std::os::unix::fs::symlink(outside.0.join("secret.txt"), ws.0.join("leak.txt")).unwrap();
    std::os::unix::fs::symlink(&outside.0, ws.0.join("linked")).unwrap();
    std::fs::hard_link(outside.0.join("secret.txt"), ws.0.join("hard.txt")).unwrap();
    let pipe = std::ffi::CString::new(ws.0.join("p").as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(pipe.as_ptr(), 0o644) }, 0);
    let read = |rel: &str, max: u64| {
        let (file, size) = open_workspace_file(&ws.0, Path::new(rel), max)?;
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::Read::take(file, size), &mut bytes).unwrap();
        Ok::<_, WorkspaceFileError>(bytes)
    };

    assert_eq!(read("out/notes.md", 100).unwrap(), b"# notes\n");
    assert_eq!(read("./out/notes.md", 100).unwrap(), b"# notes\n");
    assert_eq!(read("ten.bin", 10).unwrap(), [7u8; 10]);
    let refused = |rel: &str, needle: &str| match read(rel, 1 << 20) {
        Err(WorkspaceFileError::Refused(why)) => assert!(why.contains(needle), "{rel}: {why}"),
        other => panic!("{rel}: {other:?}"),
    };
    refused("leak.txt", "symbolic link");
    refused("linked/secret.txt", "symbolic link");
    refused("out/../leak.txt", "`..`");
    refused("../reader-out/secret.txt", "`..`");
    refused(&outside.0.join("secret.txt").to_string_lossy(), "relative");
    refused("hard.txt", "hard links");
    // Nobody opens the pipe's other end: a blocking open would hang here.
    refused("p", "named pipe");
    assert!(matches!(read("out", 100), Err(WorkspaceFileError::Folder)));
    assert!(matches!(read(".", 100), Err(WorkspaceFileError::Folder)));
    assert!(matches!(
        read("nope.txt", 100),
        Err(WorkspaceFileError::Missing)
    ));
    assert!(matches!(
        read("no/such.txt", 100),
        Err(WorkspaceFileError::Missing)
    ));
    assert!(matches!(
        read("ten.bin", 9),
        Err(WorkspaceFileError::TooLarge { size: 10, max: 9 })
    ));
}

/// The peak resident memory of this process, in MiB (`VmHWM`).
fn peak_rss_mib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib / 1024
}

/// A 200 MB file (five lines, a sparse hole of NULs, a last line) is viewed by line range
/// in pieces; viewing or editing it whole, charting it, or a range holding its 200 MB line
/// are refused with what to do instead, and nothing reads it whole.
#[tokio::test]
async fn a_huge_file_is_read_in_pieces_or_refused() {
    let ws = TempDir::new("huge");
    let ctx = host_ctx(&ws.0);
    let path = ws.0.join("big.log");
    let head: String = (1..=5).map(|n| format!("line {n}\n")).collect();
    let tail = "\nthe end\n";
    let size = 200 * 1024 * 1024;
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut file = std::fs::File::create(&path).unwrap();
        file.write_all(head.as_bytes()).unwrap();
        file.seek(SeekFrom::Start(size - tail.len() as u64))
            .unwrap();
        file.write_all(tail.as_bytes()).unwrap();
    }
    let mut ed = StrReplaceEditor::default();
    let view = |range: Value| json!({"command": "view", "path": "big.log", "view_range": range});
    let out = call(&mut ed, &ctx, view(json!([2, 5]))).await.unwrap();
    println!(
        "peak RSS after viewing 4 lines of a 200 MB file: {} MiB",
        peak_rss_mib()
    );
    assert_eq!(
        out,
        "`big.log`, lines 2-5 of 7:\n     2\tline 2\n     3\tline 3\n     4\tline 4\n     5\tline 5\n"
    );
    let out = call(&mut ed, &ctx, view(json!([7, -1]))).await.unwrap();
    assert_eq!(out, "`big.log`, lines 7-7 of 7:\n     7\tthe end\n");
    let err = call(&mut ed, &ctx, view(json!([8, 9]))).await.unwrap_err();
    assert!(err.contains("the file has 7 lines"), "{err}");

    let err = call(&mut ed, &ctx, json!({"command": "view", "path": "big.log"}))
        .await
        .unwrap_err();
    assert!(
        err.contains("`big.log` is 200.0 MB (209715200 bytes), more than the 20 MB")
            && err.contains("`view_range` (for example [1, 200])"),
        "{err}"
    );
    let err = call(&mut ed, &ctx, view(json!([6, 6]))).await.unwrap_err();
    assert!(
        err.contains("lines asked for in `big.log` hold more than 1 MB; view a part"),
        "{err}"
    );
    let edit =
        json!({"command": "str_replace", "path": "big.log", "old_str": "line 1", "new_str": "x"});
    let err = call(&mut ed, &ctx, edit).await.unwrap_err();
    assert!(
        err.contains("more than the 20 MB") && err.contains("sed"),
        "{err}"
    );
    let chart = json!({"data_path": "big.log", "chart_type": "bar", "x": "a", "y": "b"});
    let err = call(&mut DataVisualization, &ctx, chart).await.unwrap_err();
    assert!(
        err.contains("more than the 20 MB") && err.contains("python_execute"),
        "{err}"
    );
    // Only a file this tool left alone: nothing above wrote to it.
    assert_eq!(std::fs::metadata(&path).unwrap().len(), size);
}

/// `scan_lines` numbers and splits lines as `str::lines` does, even when every read gives
/// one byte (lines cut across pieces), and keeps only the range asked for.
#[test]
fn lines_read_in_pieces_match_str_lines() {
    /// A reader that gives one byte per read.
    struct Trickle<'a>(&'a [u8]);
    impl std::io::Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let Some((&first, rest)) = self.0.split_first() else {
                return Ok(0);
            };
            buf[0] = first;
            self.0 = rest;
            Ok(1)
        }
    }
    for text in [
        "",
        "\n",
        "one",
        "one\n",
        "one\r\ntwo\r\n",
        "a\n\nb\r\nc\r",
        "x\n\n\n",
    ] {
        let expected: Vec<&str> = text.lines().collect();
        for (first, last) in [(1, usize::MAX), (2, 3), (3, 3), (5, 9)] {
            let found = scan_lines(Trickle(text.as_bytes()), first, last)
                .unwrap()
                .unwrap();
            assert_eq!(found.total, expected.len(), "{text:?}");
            let wanted: Vec<&[u8]> = expected
                .iter()
                .enumerate()
                .filter(|(i, _)| (first..=last).contains(&(i + 1)))
                .map(|(_, l)| l.as_bytes())
                .collect();
            assert_eq!(found.lines, wanted, "{text:?} lines {first}-{last}");
        }
    }
}
