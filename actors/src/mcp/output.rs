//! A tool call's result as the model reads it: every content block as text (images kept
//! beside it), structured content added unless it only repeats a text part.

use crate::protocol::{ImageData, McpOutput};

/// Whether structured content only repeats a text part (servers are asked to send both, and
/// SDKs wrap a plain return value as `{"result": value}`).
fn repeats(structured: &serde_json::Value, parts: &[String]) -> bool {
    let same = |v: &serde_json::Value| {
        let text = v
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| v.to_string());
        parts.iter().any(|p| p.trim() == text.trim())
    };
    same(structured)
        || structured
            .as_object()
            .is_some_and(|o| o.len() == 1 && o.values().all(same))
}

/// Everything a result holds, as text for the model plus its images.
pub fn text(result: &rmcp::model::CallToolResult) -> McpOutput {
    let mut out = McpOutput {
        is_error: result.is_error == Some(true),
        ..Default::default()
    };
    let mut parts: Vec<String> = Vec::new();
    // Content blocks are read through their wire form, which is stable across versions.
    for block in &result.content {
        let Ok(v) = serde_json::to_value(block) else {
            continue;
        };
        let field = |k: &str| v.get(k).and_then(|x| x.as_str()).unwrap_or("").to_string();
        match field("type").as_str() {
            "text" => parts.push(field("text")),
            "image" => {
                let image = ImageData {
                    mime_type: field("mimeType"),
                    base64: field("data"),
                };
                parts.push(format!(
                    "[image {}, {} bytes]",
                    image.mime_type,
                    image.base64.len() / 4 * 3
                ));
                out.images.push(image);
            }
            "audio" => parts.push(format!("[audio {}: not shown]", field("mimeType"))),
            "resource" => {
                let r = v.get("resource").cloned().unwrap_or_default();
                let uri = r.get("uri").and_then(|u| u.as_str()).unwrap_or("");
                match r.get("text").and_then(|t| t.as_str()) {
                    Some(text) => parts.push(format!("[resource {uri}]\n{text}")),
                    None => parts.push(format!("[resource {uri}: binary, not shown]")),
                }
            }
            "resource_link" => parts.push(format!(
                "[resource link {} ({})]",
                field("uri"),
                field("name")
            )),
            other => parts.push(format!("[{other} content]")),
        }
    }
    if let Some(structured) = &result.structured_content
        && !repeats(structured, &parts)
    {
        parts.push(format!("structured content: {structured}"));
    }
    out.text = parts.join("\n");
    out
}
