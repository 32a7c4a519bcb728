//! Server-sent events read from a byte stream, for every client that reads them (the
//! legacy MCP transport, streamed model answers). Parsing is `sse-stream`'s; this only feeds
//! it whole lines. Knows nothing of what the events carry.

use std::pin::Pin;

use futures_util::{Stream, StreamExt};
use sse_stream::{Sse, SseStream};

/// Server-sent events from a byte stream, as (event type, data) pairs; the type is empty
/// when the event names none. Parsing is `sse-stream`'s; events without data are not
/// dispatched (as the standard says), a malformed line is logged and skipped, and a failed
/// body ends the stream.
pub(crate) struct Events(Pin<Box<dyn Stream<Item = Result<Sse, sse_stream::Error>> + Send>>);

impl Events {
    pub(crate) fn new<S, E>(bytes: S) -> Self
    where
        S: Stream<Item = Result<bytes::Bytes, E>> + Send + 'static,
        E: std::error::Error + Send + Sync + 'static,
    {
        // `sse-stream` drops the rest of a chunk after a line it cannot read (an unknown
        // field, say), events and all, and with it the note that the chunk ended in a CR
        // whose LF starts the next one. Fed one line at a time, every line ending in LF, a
        // bad line costs only itself.
        let mut cr_before = false;
        let by_line = bytes.flat_map(move |chunk| {
            let pieces: Vec<Result<bytes::Bytes, E>> = match chunk {
                Ok(chunk) => lf_lines(&chunk, &mut cr_before)
                    .into_iter()
                    .map(Ok)
                    .collect(),
                Err(e) => vec![Err(e)],
            };
            futures_util::stream::iter(pieces)
        });
        Events(Box::pin(SseStream::from_bytes_stream(by_line)))
    }

    pub(crate) async fn next(&mut self) -> Option<(String, String)> {
        loop {
            match self.0.next().await? {
                Ok(Sse {
                    event,
                    data: Some(data),
                    ..
                }) => return Some((event.unwrap_or_default(), data)),
                Ok(_) => {}
                Err(sse_stream::Error::Body(_)) => return None,
                Err(e) => tracing::warn!("skipped a malformed line of the SSE stream ({e})"),
            }
        }
    }
}

/// `chunk` cut into lines that each end in LF, where the stream ends them in LF, CRLF or
/// a lone CR; the last piece may be the start of a line. `cr_before` says that the chunk
/// before ended in a CR, so an LF that starts this one completes a CRLF.
fn lf_lines(chunk: &[u8], cr_before: &mut bool) -> Vec<bytes::Bytes> {
    if chunk.is_empty() {
        return vec![];
    }
    let mut rest = chunk;
    if std::mem::take(cr_before) && rest.first() == Some(&b'\n') {
        rest = &rest[1..];
    }
    let mut out = vec![];
    while !rest.is_empty() {
        let Some(end) = rest.iter().position(|b| matches!(b, b'\n' | b'\r')) else {
            out.push(bytes::Bytes::copy_from_slice(rest));
            break;
        };
        let mut line = Vec::with_capacity(end + 1);
        line.extend_from_slice(&rest[..end]);
        line.push(b'\n');
        out.push(line.into());
        let crlf = rest[end] == b'\r' && rest.get(end + 1) == Some(&b'\n');
        *cr_before = rest[end] == b'\r' && end + 1 == rest.len();
        rest = &rest[end + 1 + usize::from(crlf)..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn events_are_split_across_chunks() {
        let chunks: Vec<Result<bytes::Bytes, std::io::Error>> = vec![
            Ok("event: endpoint\r\ndata: /messages?s".into()),
            Ok("=1\r\n\r\n: a comment\n\nevent: message\ndata: {\"a\":\ndata: 1}\n\n".into()),
        ];
        let mut events = Events::new(futures_util::stream::iter(chunks));
        assert_eq!(
            events.next().await,
            Some(("endpoint".into(), "/messages?s=1".into()))
        );
        assert_eq!(
            events.next().await,
            Some(("message".into(), "{\"a\":\n1}".into()))
        );
        assert_eq!(events.next().await, None);
    }

    /// Lines may end in a lone CR (the standard allows CR, LF or CRLF), and a CR that ends
    /// one chunk may be followed by the LF that starts the next.
    #[tokio::test]
    async fn lone_carriage_returns_end_lines() {
        let chunks: Vec<Result<bytes::Bytes, std::io::Error>> = vec![
            Ok("event: endpoint\rdata: /messages?s=2\r\r".into()),
            Ok("data: {\"a\":\rdata: 2}\r".into()),
            Ok("\n\revent: ping\r\rdata: [3]\r\r".into()),
        ];
        let mut events = Events::new(futures_util::stream::iter(chunks));
        assert_eq!(
            events.next().await,
            Some(("endpoint".into(), "/messages?s=2".into()))
        );
        assert_eq!(
            events.next().await,
            Some((String::new(), "{\"a\":\n2}".into()))
        );
        // `ping` carries no data, so it is not dispatched, and its type does not carry over.
        assert_eq!(events.next().await, Some((String::new(), "[3]".into())));
        assert_eq!(events.next().await, None);
    }

    /// Many events in one chunk, and one large event cut into many small chunks, all arrive
    /// whole and in order.
    #[tokio::test]
    async fn a_large_stream_of_many_frames_arrives_whole() {
        const COUNT: usize = 20_000;
        let mut all = String::new();
        for i in 0..COUNT {
            all.push_str(&format!("event: message\ndata: {{\"n\":{i}}}\n\n"));
        }
        let big = "x".repeat(1 << 20);
        let framed = format!("data: {big}\n\n");
        let mut chunks: Vec<Result<bytes::Bytes, std::io::Error>> = vec![Ok(all.into())];
        chunks.extend(
            framed
                .as_bytes()
                .chunks(1000)
                .map(|c| Ok(bytes::Bytes::copy_from_slice(c))),
        );
        let mut events = Events::new(futures_util::stream::iter(chunks));
        for i in 0..COUNT {
            let (kind, data) = events.next().await.expect("every event arrives");
            assert_eq!((kind.as_str(), data), ("message", format!("{{\"n\":{i}}}")));
        }
        assert_eq!(
            events.next().await.map(|(_, data)| data.len()),
            Some(big.len())
        );
        assert_eq!(events.next().await, None);
    }

    /// Found by the fuzz test: a line `sse-stream` cannot read (here a field the standard
    /// says to ignore) made it drop the rest of its chunk, so the events after it in the same
    /// chunk were lost.
    #[tokio::test]
    async fn a_bad_line_loses_nothing_after_it() {
        let chunks: Vec<Result<bytes::Bytes, std::io::Error>> = vec![Ok(
            "data: 1\n\nx-custom: 2\ndata: 2\n\nretry: soon\r\ndata: 3\r\n\r\n".into(),
        )];
        let mut events = Events::new(futures_util::stream::iter(chunks));
        for n in ["1", "2", "3"] {
            assert_eq!(events.next().await, Some((String::new(), n.into())));
        }
        assert_eq!(events.next().await, None);
    }

    /// Found by the fuzz test: after a bad line that ended its chunk with a CR, the LF
    /// starting the next chunk read as an empty line, which ended the event early and lost
    /// its type.
    #[tokio::test]
    async fn a_bad_line_before_a_split_crlf_keeps_the_event_whole() {
        let chunks: Vec<Result<bytes::Bytes, std::io::Error>> = vec![
            Ok("event: endpoint\roops\r".into()),
            Ok("\ndata: /messages\r\n\r\n".into()),
        ];
        let mut events = Events::new(futures_util::stream::iter(chunks));
        assert_eq!(
            events.next().await,
            Some(("endpoint".into(), "/messages".into()))
        );
        assert_eq!(events.next().await, None);
    }

    #[tokio::test]
    async fn a_failed_body_ends_the_stream() {
        let chunks: Vec<Result<bytes::Bytes, std::io::Error>> = vec![
            Ok("data: 1\n\n".into()),
            Err(std::io::Error::other("reset")),
            Ok("data: 2\n\n".into()),
        ];
        let mut events = Events::new(futures_util::stream::iter(chunks));
        assert_eq!(events.next().await, Some((String::new(), "1".into())));
        assert_eq!(events.next().await, None);
    }
}
