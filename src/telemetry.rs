//! Logs and traces for the host: a human-readable or JSON log on stderr (filtered by
//! `RUST_LOG`), and, when an OTLP endpoint is configured, every span exported to it
//! (Jaeger, an OpenTelemetry collector) in batches, flushed at exit. An unreachable
//! collector costs a warning, never the run.

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// `[telemetry]`, after environment overrides.
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetrySettings {
    /// Where spans go; none means no export.
    pub otlp_endpoint: Option<String>,
    pub protocol: OtlpProtocol,
    pub service_name: String,
    /// The fraction of flows traced, 0.0 to 1.0.
    pub sample_ratio: f64,
    /// Put prompts, completions, tool arguments and results on spans, cut to this many
    /// characters; `None` keeps contents off the spans.
    pub capture_content: Option<usize>,
}

impl Default for TelemetrySettings {
    fn default() -> Self {
        TelemetrySettings {
            otlp_endpoint: None,
            protocol: OtlpProtocol::Http,
            service_name: "manus-rt".into(),
            sample_ratio: 1.0,
            capture_content: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OtlpProtocol {
    /// OTLP/HTTP with protobuf bodies (port 4318).
    Http,
    /// OTLP/gRPC (port 4317).
    Grpc,
}

impl TelemetrySettings {
    /// Apply the standard `OTEL_*` variables, as `env` looks them up; they win over the file.
    pub fn with_env(mut self, env: &dyn Fn(&str) -> Option<String>) -> Self {
        if let Some(url) = env("OTEL_EXPORTER_OTLP_ENDPOINT")
            && !url.trim().is_empty()
        {
            let url = url.trim().trim_end_matches('/');
            // The variable names the collector's base URL; OTLP/HTTP adds the signal path.
            self.otlp_endpoint = Some(if self.protocol == OtlpProtocol::Http {
                format!("{url}/v1/traces")
            } else {
                url.to_string()
            });
        }
        if let Some(name) = env("OTEL_SERVICE_NAME")
            && !name.trim().is_empty()
        {
            self.service_name = name.trim().to_string();
        }
        if let Some(ratio) =
            env("OTEL_TRACES_SAMPLER_ARG").and_then(|r| r.trim().parse::<f64>().ok())
        {
            self.sample_ratio = ratio.clamp(0.0, 1.0);
        }
        self
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// Keeps the exporter alive; `shutdown` flushes the last spans.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Send every span still buffered, waiting at most a few seconds.
    pub async fn shutdown(self) {
        if let Some(provider) = self.provider {
            let _ = tokio::task::spawn_blocking(move || {
                if let Err(e) = provider.shutdown_with_timeout(Duration::from_secs(5)) {
                    tracing::warn!("could not flush traces: {e}");
                }
            })
            .await;
        }
    }
}

/// Install the global subscriber: logs on stderr, plus the OTLP layer when configured.
pub fn init(settings: &TelemetrySettings, format: LogFormat) -> Telemetry {
    let filter = || EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let logs = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_target(false)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .json()
            .boxed(),
    };
    let (provider, problem) = match &settings.otlp_endpoint {
        Some(endpoint) => match provider(settings, endpoint) {
            Ok(p) => (Some(p), None),
            Err(e) => (
                None,
                Some(format!("traces will not be exported to {endpoint}: {e}")),
            ),
        },
        None => (None, None),
    };
    let otel = provider.as_ref().map(|p| {
        // Our spans are exported whatever RUST_LOG says about logs; other crates' (ractor
        // wraps every actor in one) only as warnings on the spans they happen in.
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer("manus-rt"))
            .with_filter(EnvFilter::new("warn,manus_actors=info,manus_rt=info"))
    });
    tracing_subscriber::registry()
        .with(logs.with_filter(filter()))
        .with(otel)
        .init();
    if let Some(problem) = problem {
        tracing::warn!("{problem}");
    }
    Telemetry { provider }
}

fn provider(settings: &TelemetrySettings, endpoint: &str) -> Result<SdkTracerProvider, String> {
    let timeout = Duration::from_secs(5);
    let exporter = match settings.protocol {
        OtlpProtocol::Http => opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(blocking_client(timeout)?)
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(endpoint)
            .with_timeout(timeout)
            .build(),
        OtlpProtocol::Grpc => opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .with_timeout(timeout)
            .build(),
    }
    .map_err(|e| e.to_string())?;
    let sampler = Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(settings.sample_ratio)));
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(sampler)
        .with_resource(
            Resource::builder()
                .with_service_name(settings.service_name.clone())
                .build(),
        )
        .build())
}

/// The OTLP/HTTP exporter's client as opentelemetry-otlp makes its own (reqwest's blocking
/// client, with the exporter's timeout, built on a thread of its own, away from the async
/// runtime), but with the engine's TLS, which reads the system's root certificates only if
/// the collector is reached over HTTPS.
fn blocking_client(timeout: Duration) -> Result<reqwest::blocking::Client, String> {
    std::thread::spawn(move || {
        let builder = reqwest::blocking::Client::builder().timeout(timeout);
        match manus_actors::tls::config() {
            Some(tls) => builder.tls_backend_preconfigured(tls),
            None => builder,
        }
        .build()
    })
    .join()
    .map_err(|_| "the thread building the HTTP client panicked".to_string())?
    .map_err(|e| format!("cannot build the HTTP client: {e}"))
}
