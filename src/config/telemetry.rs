//! `[telemetry]`: where spans go and what they carry, checked. The `OTEL_*` environment is
//! applied later, by `resolve`.

use crate::telemetry::{OtlpProtocol, TelemetrySettings};

use super::error::Problem;
use super::file::TelemetryToml;

pub(super) fn build(t: &TelemetryToml) -> Result<TelemetrySettings, Problem> {
    if let Some(r) = t.sample_ratio
        && !(0.0..=1.0).contains(&r)
    {
        return Err(Problem::at(
            None,
            "[telemetry] sample_ratio",
            format!("[telemetry] sample_ratio = {r} must be between 0.0 and 1.0"),
        ));
    }
    if let Some(url) = &t.otlp_endpoint
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        return Err(Problem::at(
            None,
            "[telemetry] otlp_endpoint",
            format!("[telemetry] otlp_endpoint = \"{url}\" must start with http:// or https://"),
        ));
    }
    Ok(TelemetrySettings {
        otlp_endpoint: t.otlp_endpoint.clone(),
        protocol: t.protocol.unwrap_or(OtlpProtocol::Http),
        service_name: t.service_name.clone().unwrap_or_else(|| "manus-rt".into()),
        sample_ratio: t.sample_ratio.unwrap_or(1.0),
        capture_content: t
            .capture_content
            .unwrap_or(false)
            .then(|| t.content_max_chars.unwrap_or(2000)),
    })
}
