//! A server's resources as one tool the model may call, `mcp_{server}_resources`: without
//! arguments it lists the resources and templates, with `uri` it reads one. Offered only
//! when the server says it has resources. What it returns goes the way of every tool
//! result (the agent's `max_observe` cuts it), and images come back as a tool's do.

use rmcp::RoleClient;
use rmcp::model::{ReadResourceRequestParams, ResourceContents};
use rmcp::service::Peer;

use crate::protocol::{ImageData, McpOutput, McpToolInfo};

/// The server's own name for the tool (`mcp_{server}_resources` to the model).
pub const NAME: &str = "resources";

/// The tool as the model sees it.
pub fn tool(server: &str) -> McpToolInfo {
    McpToolInfo {
        name: NAME.into(),
        description: format!(
            "The resources of the MCP server `{server}` (files, records, documents it offers): \
             call with no arguments to list them and their URI templates, or with `uri` to \
             read one."
        ),
        schema: serde_json::json!({
            "type": "object",
            "properties": {
                "uri": {"type": "string", "description": "The resource to read, as listed (or a template filled in). Leave out to list."}
            }
        }),
        resources: true,
    }
}

/// List (no `uri`) or read one resource; an `Err` is an observation for the model.
pub async fn run(peer: &Peer<RoleClient>, uri: Option<String>) -> Result<McpOutput, String> {
    let failed = |e: rmcp::service::ServiceError| match e {
        rmcp::service::ServiceError::McpError(e) => e.message.to_string(),
        e => e.to_string(),
    };
    let Some(uri) = uri else {
        let listed = peer.list_all_resources().await.map_err(failed)?;
        let mut lines: Vec<String> = listed
            .iter()
            .map(|r| {
                let mime = r.mime_type.as_deref().unwrap_or("unknown type");
                let about = r.description.as_deref().unwrap_or("");
                format!("- {} ({}, {mime}) {about}", r.uri, r.name)
            })
            .collect();
        // A server may have resources and no templates.
        let templates = peer.list_all_resource_templates().await.unwrap_or_default();
        if !templates.is_empty() {
            lines.push("templates (fill in the {…} parts):".into());
            lines.extend(templates.iter().map(|t| {
                let about = t.description.as_deref().unwrap_or("");
                format!("- {} ({}) {about}", t.uri_template, t.name)
            }));
        }
        if lines.is_empty() {
            lines.push("the server lists no resources".into());
        }
        return Ok(McpOutput {
            text: lines.join("\n"),
            ..Default::default()
        });
    };
    let read = peer
        .read_resource(ReadResourceRequestParams::new(uri.clone()))
        .await
        .map_err(|e| format!("reading `{uri}` failed: {}", failed(e)))?;
    let mut out = McpOutput::default();
    let mut parts = vec![];
    for content in read.contents {
        match content {
            ResourceContents::TextResourceContents { uri, text, .. } => {
                parts.push(format!("[resource {uri}]\n{text}"))
            }
            ResourceContents::BlobResourceContents {
                uri,
                mime_type,
                blob,
                ..
            } => {
                let mime = mime_type.unwrap_or_default();
                parts.push(blob_part(&uri, &mime, &blob, &mut out.images));
            }
            _ => parts.push("[resource content of a kind not shown]".into()),
        }
    }
    out.text = parts.join("\n");
    Ok(out)
}

/// A blob as text when its type is text, as an image when it is one, else named.
fn blob_part(uri: &str, mime: &str, blob: &str, images: &mut Vec<ImageData>) -> String {
    use base64::Engine;
    if mime.starts_with("image/") {
        images.push(ImageData {
            mime_type: mime.into(),
            base64: blob.into(),
        });
        return format!(
            "[resource {uri}: image {mime}, {} bytes]",
            blob.len() / 4 * 3
        );
    }
    let decoded = base64::engine::general_purpose::STANDARD.decode(blob);
    match decoded.ok().and_then(|b| String::from_utf8(b).ok()) {
        Some(text) if mime.starts_with("text/") || mime.ends_with("json") => {
            format!("[resource {uri}]\n{text}")
        }
        _ => format!(
            "[resource {uri}: {mime}, {} bytes, binary, not shown]",
            blob.len() / 4 * 3
        ),
    }
}
