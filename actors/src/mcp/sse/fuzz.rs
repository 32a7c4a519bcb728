//! Generated SSE streams (test builds only): mutations of a legacy MCP server's event
//! stream and arbitrary bytes, cut into chunks at random. The properties: reading events
//! never panics nor waits on a stream that has ended, the cut does not change the events,
//! and what the transport does with an event (join an `endpoint` to the base URL, read a
//! `message` as JSON-RPC) never panics.

use futures_util::FutureExt;
use rmcp::RoleClient;
use rmcp::service::RxJsonRpcMessage;

use super::Events;
use crate::fuzz::{Gen, run};

/// What a legacy server sends: its endpoint, a comment, a response and a notification.
const STREAM: &str = "event: endpoint\r\ndata: /messages?session=1\r\n\r\n: keep-alive\n\n\
event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"tools\":[]}}\n\n\
event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\ndata: \"params\":{\"progress\":1}}\n\n\
id: 7\nretry: 100\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"x\",\"error\":{\"code\":-32601,\"message\":\"no\"}}\r\r";

/// Every event of `bytes` fed in the pieces `cuts` makes.
fn events(bytes: &[u8], cuts: &[usize]) -> Vec<(String, String)> {
    let mut chunks: Vec<Result<bytes::Bytes, std::io::Error>> = vec![];
    let mut from = 0;
    for &at in cuts.iter().chain([&bytes.len()]) {
        chunks.push(Ok(bytes::Bytes::copy_from_slice(&bytes[from..at])));
        from = at;
    }
    let mut events = Events::new(futures_util::stream::iter(chunks));
    let mut out = vec![];
    loop {
        match events.next().now_or_never() {
            Some(Some(event)) => out.push(event),
            Some(None) => return out,
            None => panic!("the events of {bytes:?} wait on a stream that has ended"),
        }
    }
}

#[test]
fn fuzz_sse_frames() {
    let base = reqwest::Url::parse("http://127.0.0.1:8931/sse").unwrap();
    run("sse_frames", |g: &mut Gen| {
        let bytes = if g.one_in(4) {
            g.bytes(200)
        } else {
            g.mutate_bytes(STREAM.as_bytes())
        };
        let mut cuts: Vec<usize> = (0..g.below(6)).map(|_| g.below(bytes.len() + 1)).collect();
        cuts.sort_unstable();
        let whole = events(&bytes, &[]);
        assert_eq!(events(&bytes, &cuts), whole, "cut at {cuts:?}: {bytes:?}");
        for (kind, data) in whole {
            if kind == "endpoint" {
                let _ = base.join(data.trim());
            } else {
                let _ = serde_json::from_str::<RxJsonRpcMessage<RoleClient>>(&data);
            }
        }
    });
}
