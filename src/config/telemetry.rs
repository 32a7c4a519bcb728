//! `[telemetry]`: where spans go and what they carry, checked. The `OTEL_*` environment is
//! applied later, by `resolve`.

use crate::telemetry::{OtlpProtocol, TelemetrySettings};

use super::error::{Lines, Problem};
use super::file::TelemetryToml;
use super::values::{Bounds, Table, web_url};

/// The fraction of flows traced.
const RATIO: Bounds<f64> = Bounds::new(0.0, 1.0, "");
/// Characters of content a span carries.
const CHARS: Bounds<i64> = Bounds::new(1, 1_000_000, " characters");

pub(super) fn build(t: &TelemetryToml, lines: Lines) -> Result<TelemetrySettings, Problem> {
    let table = Table::new("[telemetry]", lines);
    let otlp_endpoint = t
        .otlp_endpoint
        .as_ref()
        // Checked, and kept as written (a trailing slash is part of the path).
        .map(|u| web_url(u, "[telemetry] otlp_endpoint", lines).map(|_| u.get_ref().clone()))
        .transpose()?;
    let content_max_chars = table.number(&t.content_max_chars, "content_max_chars", CHARS)?;
    Ok(TelemetrySettings {
        otlp_endpoint,
        protocol: t.protocol.unwrap_or(OtlpProtocol::Http),
        service_name: table
            .text(&t.service_name, "service_name", "a name")?
            .unwrap_or_else(|| "manus-rt".into()),
        sample_ratio: table
            .number(&t.sample_ratio, "sample_ratio", RATIO)?
            .unwrap_or(1.0),
        capture_content: t
            .capture_content
            .unwrap_or(false)
            .then(|| content_max_chars.map_or(2000, |n| n as usize)),
    })
}
