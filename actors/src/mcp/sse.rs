//! The legacy HTTP+SSE client transport, which rmcp does not ship: a GET opens an event
//! stream whose first `endpoint` event names where to POST; the server's messages arrive as
//! `message` events. rmcp's typed messages travel as they are (serde), so no JSON-RPC is
//! written here; this is only the carriage.

use std::collections::BTreeMap;

use reqwest::header::{ACCEPT, HeaderMap, HeaderName, HeaderValue};
use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::sync::mpsc;

use crate::sse::Events;

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
    let client = crate::tls::client();
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

#[cfg(test)]
mod fuzz;
