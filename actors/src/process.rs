//! Running processes with bounded memory: the end-of-command marker protocol a persistent
//! bash speaks wherever it runs (`ShellIo`), output capture that keeps both ends
//! (`Capture`), and killing a process group. The bash tool, `python_execute`, the sandbox's
//! shells and the chromedriver launcher share these.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Most bytes of command output kept for the model.
pub(crate) const MAX_OUTPUT: usize = 16_000;
/// Longest piece of one output line read at a time, so a huge line never sits in memory.
const LINE_PIECE: u64 = 8 * 1024;

/// Makes every end-of-command marker distinct, across shells and calls.
static MARKER_SEQ: AtomicU64 = AtomicU64::new(0);

/// Why a command's end was not read.
pub(crate) enum ShellIoError {
    /// The shell's output ended (it exited or was killed).
    Closed,
    /// The marker line carried something that is not a status.
    Garbled(String),
}

/// The end-of-command marker protocol over a bash's stdin and merged stdout, wherever that
/// bash runs.
pub(crate) struct ShellIo {
    input: Pin<Box<dyn AsyncWrite + Send>>,
    output: Pin<Box<dyn AsyncBufRead + Send>>,
    /// A command was sent and its end marker not yet read.
    pub(crate) busy: bool,
}

impl ShellIo {
    pub(crate) fn new(
        input: Pin<Box<dyn AsyncWrite + Send>>,
        output: Pin<Box<dyn AsyncBufRead + Send>>,
    ) -> Self {
        ShellIo {
            input,
            output,
            busy: false,
        }
    }

    /// Run one command, adding its output to `output`, and return its exit status.
    pub(crate) async fn exec(
        &mut self,
        command: &str,
        output: &mut Capture,
    ) -> Result<i32, ShellIoError> {
        let token = format!(
            "__MANUS_{}_{}__",
            std::process::id(),
            MARKER_SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let marker = format!("{token}DONE:");
        // The command travels as a quoted here-document and runs through `eval`, so even a
        // syntax error cannot swallow the marker line. Its stdin is /dev/null so it cannot
        // read the script that follows it.
        let script = format!(
            "exec 2>&1\nIFS= read -r -d '' __manus_cmd <<'{token}'\n{command}\n{token}\n\
             eval \"$__manus_cmd\" < /dev/null\nprintf '\\n%s%d\\n' '{marker}' \"$?\"\n"
        );
        self.busy = true;
        if self.input.write_all(script.as_bytes()).await.is_err()
            || self.input.flush().await.is_err()
        {
            return Err(ShellIoError::Closed);
        }
        let mut piece = Vec::new();
        let mut at_line_start = true;
        loop {
            piece.clear();
            let read = self
                .output
                .as_mut()
                .take(LINE_PIECE)
                .read_until(b'\n', &mut piece)
                .await;
            if matches!(read, Ok(0) | Err(_)) {
                return Err(ShellIoError::Closed);
            }
            if at_line_start && let Some(status) = piece.strip_prefix(marker.as_bytes()) {
                self.busy = false;
                let status = String::from_utf8_lossy(status);
                return status
                    .trim()
                    .parse()
                    .map_err(|_| ShellIoError::Garbled(status.into_owned()));
            }
            at_line_start = piece.ends_with(b"\n");
            output.push(&piece);
        }
    }
}

/// Send SIGKILL to the process group led by `pid` (the child was spawned with
/// `process_group(0)`). Best effort: a group that is already gone is fine.
/// One system call, so it never blocks and is safe from async code and `Drop`.
pub(crate) fn kill_group(pid: u32) {
    // Group 0 would be our own.
    let Ok(group @ 1..) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: killpg takes two integers and touches no memory of ours.
    let _ = unsafe { libc::killpg(group, libc::SIGKILL) };
}

/// Process output with bounded memory: the start and the end are kept, the middle is only
/// counted, and the text says how much was left out.
pub(crate) struct Capture {
    head: Vec<u8>,
    tail: Vec<u8>,
    head_max: usize,
    tail_max: usize,
    cut: usize,
}

impl Capture {
    /// Keep at most `limit` bytes: two thirds from the start, one third from the end.
    pub(crate) fn new(limit: usize) -> Self {
        let head_max = limit * 2 / 3;
        Capture {
            head: Vec::new(),
            tail: Vec::new(),
            head_max,
            tail_max: limit - head_max,
            cut: 0,
        }
    }

    pub(crate) fn push(&mut self, mut bytes: &[u8]) {
        let room = self.head_max - self.head.len();
        if room > 0 {
            let take = room.min(bytes.len());
            self.head.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
        }
        self.tail.extend_from_slice(bytes);
        if self.tail.len() > 2 * self.tail_max {
            let excess = self.tail.len() - self.tail_max;
            self.tail.drain(..excess);
            self.cut += excess;
        }
    }

    /// The kept output as text (invalid UTF-8 replaced), with a note where bytes were cut.
    pub(crate) fn text(&self) -> String {
        let start = self.tail.len().saturating_sub(self.tail_max);
        let head = String::from_utf8_lossy(&self.head);
        let tail = String::from_utf8_lossy(&self.tail[start..]);
        match self.cut + start {
            0 => format!("{head}{tail}"),
            cut => format!("{head}\n[... {cut} bytes of output cut ...]\n{tail}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_keeps_both_ends() {
        let mut cap = Capture::new(30);
        cap.push(b"0123456789");
        assert_eq!(cap.text(), "0123456789");
        for _ in 0..100 {
            cap.push(b"..........");
        }
        cap.push(b"abcdefghij");
        assert_eq!(
            cap.text(),
            "0123456789..........\n[... 990 bytes of output cut ...]\nabcdefghij"
        );
    }
}
