//! The legacy HTTP+SSE client transport, which rmcp does not ship: a GET opens an event
//! stream whose first `endpoint` event names where to POST; the server's messages arrive as
//! `message` events. rmcp's typed messages travel as they are (serde), so no JSON-RPC is
//! written here; this is only the carriage.

use std::collections::BTreeMap;
use std::pin::Pin;

use futures_util::{Stream, StreamExt};
use reqwest::header::{ACCEPT, HeaderMap, HeaderName, HeaderValue};
use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use sse_stream::{Sse, SseStream};
use tokio::sync::mpsc;

pub(super) struct SseTransport {
    client: reqwest::Client,
    endpoint: reqwest::Url,
    headers: HeaderMap,
    incoming: mpsc::Receiver<RxJsonRpcMessage<RoleClient>>,
    reader: tokio::task::JoinHandle<()>,
}

/// Open the event stream and wait for the server to name its POST endpoint.
pub(super) async fn connect(
    url: &str,
    headers: &BTreeMap<String, String>,
) -> Result<SseTransport, String> {
    let base = reqwest::Url::parse(url).map_err(|e| format!("`{url}` is not a URL ({e})"))?;
    let mut map = HeaderMap::new();
    for (k, v) in headers {
        let name = HeaderName::try_from(k.as_str())
            .map_err(|e| format!("header `{k}` is not valid ({e})"))?;
        let value = HeaderValue::try_from(v.as_str())
            .map_err(|e| format!("the value of header `{k}` is not valid ({e})"))?;
        map.insert(name, value);
    }
    let client = reqwest::Client::new();
    let response = client
        .get(base.clone())
        .headers(map.clone())
        .header(ACCEPT, "text/event-stream")
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .map_err(|e| format!("could not open the SSE stream ({e})"))?;
    let mut events = Events::new(response.bytes_stream());
    let endpoint = loop {
        match events.next().await {
            Some((kind, data)) if kind == "endpoint" => {
                break base.join(data.trim()).map_err(|e| {
                    format!("the server named an endpoint that is not a URL: {data} ({e})")
                })?;
            }
            Some(_) => continue,
            None => return Err("the SSE stream ended before the server named its endpoint".into()),
        }
    };
    let (tx, incoming) = mpsc::channel(64);
    let reader = tokio::spawn(async move {
        while let Some((kind, data)) = events.next().await {
            if kind != "message" && !kind.is_empty() {
                continue;
            }
            match serde_json::from_str(&data) {
                Ok(msg) => {
                    if tx.send(msg).await.is_err() {
                        break;
                    }
                }
                Err(e) => tracing::warn!("an SSE message is not MCP ({e}): {data}"),
            }
        }
    });
    Ok(SseTransport {
        client,
        endpoint,
        headers: map,
        incoming,
        reader,
    })
}

impl Transport<RoleClient> for SseTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let request = self
            .client
            .post(self.endpoint.clone())
            .headers(self.headers.clone())
            .json(&item);
        async move {
            request
                .send()
                .await
                .and_then(|r| r.error_for_status())
                .map(|_| ())
                .map_err(std::io::Error::other)
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.incoming.recv()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.reader.abort();
        Ok(())
    }
}

impl Drop for SseTransport {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Server-sent events from a byte stream, as (event type, data) pairs; the type is empty
/// when the event names none. Parsing is `sse-stream`'s; events without data are not
/// dispatched (as the standard says), a malformed line is logged and skipped, and a failed
/// body ends the stream.
struct Events(Pin<Box<dyn Stream<Item = Result<Sse, sse_stream::Error>> + Send>>);

impl Events {
    fn new<S, E>(bytes: S) -> Self
    where
        S: Stream<Item = Result<bytes::Bytes, E>> + Send + 'static,
        E: std::error::Error + Send + Sync + 'static,
    {
        // `sse-stream` drops the rest of a chunk after a line it cannot read (an unknown
        // field, say), events and all; fed a line at a time, a bad line costs only itself.
        let lines = bytes.flat_map(|chunk| {
            let pieces: Vec<Result<bytes::Bytes, E>> = match chunk {
                Ok(chunk) => lines(chunk).map(Ok).collect(),
                Err(e) => vec![Err(e)],
            };
            futures_util::stream::iter(pieces)
        });
        Events(Box::pin(SseStream::from_bytes_stream(lines)))
    }

    async fn next(&mut self) -> Option<(String, String)> {
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

/// `chunk` cut after each line end (CR, LF or CRLF); the last piece may be a line's start.
fn lines(mut rest: bytes::Bytes) -> impl Iterator<Item = bytes::Bytes> {
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let end = match rest.iter().position(|b| matches!(b, b'\n' | b'\r')) {
            Some(i) if rest[i] == b'\r' && rest.get(i + 1) == Some(&b'\n') => i + 2,
            Some(i) => i + 1,
            None => rest.len(),
        };
        Some(rest.split_to(end))
    })
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

#[cfg(test)]
mod fuzz;
