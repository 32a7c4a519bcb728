//! A minimal OTLP/HTTP trace receiver on 127.0.0.1 for tests: it decodes each
//! `ExportTraceServiceRequest` protobuf with `opentelemetry-proto` and keeps the spans, so
//! tests assert on exactly what an exporter sent to a collector such as Jaeger.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use prost::Message;

/// One received span, flattened for assertions.
#[derive(Debug, Clone)]
pub struct SpanRecord {
    pub trace_id: Vec<u8>,
    pub span_id: Vec<u8>,
    pub parent_span_id: Vec<u8>,
    pub name: String,
    /// 1 internal, 2 server, 3 client, …
    pub kind: i32,
    pub attributes: BTreeMap<String, String>,
    pub service_name: Option<String>,
    /// When the span started and ended, in nanoseconds since the Unix epoch.
    pub start_ns: u64,
    pub end_ns: u64,
}

impl SpanRecord {
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
    pub fn int(&self, key: &str) -> Option<i64> {
        self.attr(key).and_then(|v| v.parse().ok())
    }
    /// Whether this span and `other` were open at some same moment.
    pub fn overlaps(&self, other: &SpanRecord) -> bool {
        self.start_ns < other.end_ns && other.start_ns < self.end_ns
    }
}

pub struct OtlpReceiver {
    spans: Arc<Mutex<Vec<SpanRecord>>>,
    port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn text(v: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(Any::StringValue(s)) => s.clone(),
        Some(Any::IntValue(i)) => i.to_string(),
        Some(Any::DoubleValue(d)) => d.to_string(),
        Some(Any::BoolValue(b)) => b.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

async fn receive(
    State(spans): State<Arc<Mutex<Vec<SpanRecord>>>>,
    body: Bytes,
) -> impl IntoResponse {
    let Ok(req) = ExportTraceServiceRequest::decode(body) else {
        return (StatusCode::BAD_REQUEST, Vec::new());
    };
    let mut out = spans.lock().unwrap();
    for rs in req.resource_spans {
        let service_name = rs.resource.as_ref().and_then(|r| {
            r.attributes
                .iter()
                .find(|kv| kv.key == "service.name")
                .map(|kv| text(&kv.value))
        });
        for ss in rs.scope_spans {
            for s in ss.spans {
                out.push(SpanRecord {
                    trace_id: s.trace_id,
                    span_id: s.span_id,
                    parent_span_id: s.parent_span_id,
                    name: s.name,
                    kind: s.kind,
                    start_ns: s.start_time_unix_nano,
                    end_ns: s.end_time_unix_nano,
                    attributes: s
                        .attributes
                        .iter()
                        .map(|kv| (kv.key.clone(), text(&kv.value)))
                        .collect(),
                    service_name: service_name.clone(),
                });
            }
        }
    }
    // An empty ExportTraceServiceResponse encodes to no bytes.
    (StatusCode::OK, Vec::new())
}

impl OtlpReceiver {
    pub async fn start() -> OtlpReceiver {
        let spans = Arc::new(Mutex::new(vec![]));
        let app = axum::Router::new()
            .route(
                "/v1/traces",
                post(|state, body| async move {
                    let r = receive(state, body).await.into_response();
                    ([(header::CONTENT_TYPE, "application/x-protobuf")], r)
                }),
            )
            .with_state(spans.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        OtlpReceiver { spans, port, task }
    }

    /// The endpoint to configure as `[telemetry] otlp_endpoint`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}/v1/traces", self.port)
    }

    pub fn spans(&self) -> Vec<SpanRecord> {
        self.spans.lock().unwrap().clone()
    }
}
