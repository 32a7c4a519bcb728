//! The Gemini provider (`api_type = "gemini"`): `POST {base_url}/v1beta/models/{model}:
//! generateContent` (`:streamGenerateContent?alt=sse` when streaming) with `x-goog-api-key`.
//! System messages become `systemInstruction`, tool calls `functionCall` parts and their
//! results `functionResponse` parts; tool schemas are cut to the subset Gemini's function
//! declarations take (what is dropped is logged). A model turn's parts come back kept on the
//! message (`provider_data.gemini.parts`) and go back verbatim, so every `thoughtSignature`
//! is echoed as Gemini demands. A blocked prompt or answer (safety, recitation…) is a clear
//! failure. Knows nothing of HTTP, retries or cassettes.

use serde_json::{Map, Value, json};

use super::provider::{Assemble, Provider, Untaken};
use super::settings::{LlmError, LlmErrorKind, LlmSettings};
use super::{
    ChatRequest, ChatResponse, Content, ContentPart, FunctionCall, Message, Role, ToolCall,
    ToolChoice, Usage,
};

pub(super) struct Gemini;

pub(super) static GEMINI: Gemini = Gemini;

/// The key under `Message::provider_data` this provider keeps its state in.
const KEY: &str = "gemini";

impl Provider for Gemini {
    fn name(&self) -> &'static str {
        "gemini"
    }
    fn label(&self) -> &'static str {
        "Gemini"
    }
    fn provider_name(&self) -> &'static str {
        "gcp.gemini"
    }
    fn default_base_url(&self) -> Option<&'static str> {
        Some("https://generativelanguage.googleapis.com")
    }
    fn key_env(&self) -> Option<&'static str> {
        Some("GEMINI_API_KEY")
    }
    fn url(&self, s: &LlmSettings) -> String {
        let base = s.base_url.trim_end_matches('/');
        if s.stream {
            format!(
                "{base}/v1beta/models/{}:streamGenerateContent?alt=sse",
                s.model
            )
        } else {
            format!("{base}/v1beta/models/{}:generateContent", s.model)
        }
    }
    fn headers(&self, api_key: Option<&str>) -> Vec<(&'static str, String)> {
        api_key
            .map(|key| ("x-goog-api-key", key.to_string()))
            .into_iter()
            .collect()
    }
    fn body(
        &self,
        s: &LlmSettings,
        req: &ChatRequest<'_>,
        response_format: Option<&Value>,
    ) -> Vec<u8> {
        serde_json::to_vec(&request(s, req, response_format)).expect("a request always serialises")
    }
    fn read_tree(&self, answer: &Value) -> Result<ChatResponse, LlmError> {
        read(answer)
    }
    fn assembly(&self) -> Box<dyn Assemble> {
        Box::<Assembly>::default()
    }
}

/// The generateContent request for `req`.
fn request(s: &LlmSettings, req: &ChatRequest<'_>, response_format: Option<&Value>) -> Value {
    let mut system: Vec<Value> = vec![];
    let mut contents: Vec<(&str, Vec<Value>)> = vec![];
    // The names of the calls made so far, by id: a function response names its function.
    let mut names: Vec<(&str, &str)> = vec![];
    for m in &req.messages {
        let (role, parts) = match m.role {
            Role::System => {
                system.push(json!({"text": m.text()}));
                continue;
            }
            Role::User => ("user", user_parts(m)),
            Role::Tool => {
                let id = m.tool_call_id.as_deref().unwrap_or_default();
                let name = names
                    .iter()
                    .find(|(i, _)| *i == id)
                    .map(|(_, n)| *n)
                    .or(m.name.as_deref())
                    .unwrap_or_default();
                (
                    "user",
                    vec![json!({"functionResponse": {"name": name,
                        "response": {"content": m.text()}}})],
                )
            }
            Role::Assistant => {
                names.extend(
                    m.tool_calls
                        .iter()
                        .map(|c| (c.id.as_str(), c.function.name.as_str())),
                );
                ("model", model_parts(m))
            }
        };
        if parts.is_empty() {
            continue;
        }
        match contents.last_mut() {
            Some((last, kept)) if *last == role => kept.extend(parts),
            _ => contents.push((role, parts)),
        }
    }
    let contents: Vec<Value> = contents
        .into_iter()
        .map(|(role, parts)| json!({"role": role, "parts": parts}))
        .collect();
    let mut body = Map::new();
    body.insert("contents".into(), Value::Array(contents));
    if !system.is_empty() {
        body.insert("systemInstruction".into(), json!({"parts": system}));
    }
    if !req.tools.is_empty() {
        let declarations: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                let mut dropped = vec![];
                let parameters = subset(&t.parameters, &mut dropped);
                if !dropped.is_empty() {
                    tracing::debug!(
                        tool = %t.name,
                        "Gemini takes no {} in a function declaration: left out",
                        dropped.join(", ")
                    );
                }
                json!({"name": t.name, "description": t.description, "parameters": parameters})
            })
            .collect();
        body.insert(
            "tools".into(),
            json!([{"functionDeclarations": declarations}]),
        );
        let config = match &req.tool_choice {
            ToolChoice::Auto => json!({"mode": "AUTO"}),
            ToolChoice::Required => json!({"mode": "ANY"}),
            ToolChoice::None => json!({"mode": "NONE"}),
            ToolChoice::Function(name) => json!({"mode": "ANY", "allowedFunctionNames": [name]}),
        };
        body.insert(
            "toolConfig".into(),
            json!({"functionCallingConfig": config}),
        );
    }
    let mut generation = json!({"maxOutputTokens": s.max_tokens, "temperature": s.temperature});
    if let Some(schema) = response_format.and_then(|f| f.pointer("/json_schema/schema")) {
        generation["responseMimeType"] = "application/json".into();
        generation["responseJsonSchema"] = consts_as_enums(schema);
    }
    body.insert("generationConfig".into(), generation);
    Value::Object(body)
}

/// The schema keywords Gemini's function declarations take (an OpenAPI 3.0 subset).
const KEPT: &[&str] = &[
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "properties",
    "required",
    "items",
    "anyOf",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "default",
    "propertyOrdering",
];

/// `schema` cut to what Gemini takes: `const` becomes a one-value `enum`, a type list with
/// `"null"` a nullable type; any other keyword is dropped and named in `dropped`.
fn subset(schema: &Value, dropped: &mut Vec<String>) -> Value {
    let Some(object) = schema.as_object() else {
        return schema.clone();
    };
    let mut out = Map::new();
    for (key, value) in object {
        match key.as_str() {
            "properties" => {
                let props = value.as_object().into_iter().flatten();
                let props: Map<String, Value> = props
                    .map(|(name, s)| (name.clone(), subset(s, dropped)))
                    .collect();
                out.insert(key.clone(), Value::Object(props));
            }
            "items" => {
                out.insert(key.clone(), subset(value, dropped));
            }
            "anyOf" => {
                let each = value.as_array().into_iter().flatten();
                out.insert(
                    key.clone(),
                    each.map(|s| subset(s, dropped)).collect::<Vec<_>>().into(),
                );
            }
            "const" => {
                out.insert("enum".into(), json!([value]));
            }
            "type" if value.is_array() => {
                let types: Vec<&Value> = value.as_array().unwrap().iter().collect();
                if let Some(t) = types.iter().find(|t| **t != "null") {
                    out.insert("type".into(), (*t).clone());
                }
                if types.iter().any(|t| *t == "null") {
                    out.insert("nullable".into(), true.into());
                }
            }
            k if KEPT.contains(&k) => {
                out.insert(key.clone(), value.clone());
            }
            _ => dropped.push(key.clone()),
        }
    }
    Value::Object(out)
}

/// A JSON schema for `responseJsonSchema`, each `const` written as a one-value `enum` (the
/// structured-output schema Gemini documents lists `enum`, not `const`); the rest as it is.
fn consts_as_enums(schema: &Value) -> Value {
    let Some(object) = schema.as_object() else {
        return schema.clone();
    };
    let each = |v: &Value| match v {
        Value::Array(all) => all.iter().map(consts_as_enums).collect::<Vec<_>>().into(),
        one => consts_as_enums(one),
    };
    object
        .iter()
        .map(|(key, value)| match key.as_str() {
            "const" => ("enum".to_string(), json!([value])),
            "properties" | "$defs" => {
                let named = value.as_object().into_iter().flatten();
                let named: Map<String, Value> = named
                    .map(|(k, s)| (k.clone(), consts_as_enums(s)))
                    .collect();
                (key.clone(), Value::Object(named))
            }
            "items" | "anyOf" | "oneOf" | "allOf" | "additionalProperties" | "prefixItems" => {
                (key.clone(), each(value))
            }
            _ => (key.clone(), value.clone()),
        })
        .collect::<Map<String, Value>>()
        .into()
}

/// A user message's parts: its text, and its images (a `data:` URL as inline data, any
/// other as a file URI).
fn user_parts(m: &Message) -> Vec<Value> {
    let text = |t: &str| (!t.is_empty()).then(|| json!({"text": t}));
    match &m.content {
        None => vec![],
        Some(Content::Text(t)) => text(t).into_iter().collect(),
        Some(Content::Parts(parts)) => parts
            .iter()
            .filter_map(|p| match p {
                ContentPart::Text { text: t } => text(t),
                ContentPart::ImageUrl { image_url } => {
                    let url = &image_url.url;
                    Some(
                        match url
                            .strip_prefix("data:")
                            .and_then(|r| r.split_once(";base64,"))
                        {
                            Some((mime, data)) => {
                                json!({"inlineData": {"mimeType": mime, "data": data}})
                            }
                            None => json!({"fileData": {"fileUri": url}}),
                        },
                    )
                }
            })
            .collect(),
    }
}

/// A model turn's parts: as they came (thought signatures and all), or made from the
/// message when it did not come from Gemini.
fn model_parts(m: &Message) -> Vec<Value> {
    if let Some(parts) = m
        .provider_data
        .as_ref()
        .and_then(|d| d.pointer("/gemini/parts"))
        .and_then(Value::as_array)
    {
        return parts.clone();
    }
    let mut parts = vec![];
    if !m.text().is_empty() {
        parts.push(json!({"text": m.text()}));
    }
    for call in &m.tool_calls {
        let args = match serde_json::from_str::<Value>(&call.function.arguments) {
            Ok(object @ Value::Object(_)) => object,
            _ => json!({"arguments": call.function.arguments}),
        };
        parts.push(json!({"functionCall": {"name": call.function.name, "args": args}}));
    }
    parts
}

/// Why Gemini gave no answer, when it blocked the prompt or the answer.
fn blocked(answer: &Value) -> Option<String> {
    if let Some(reason) = answer["promptFeedback"]["blockReason"].as_str() {
        return Some(format!("Gemini blocked the prompt ({reason})"));
    }
    let candidate = &answer["candidates"][0];
    let reason = candidate["finishReason"].as_str()?;
    let blocking = [
        "SAFETY",
        "RECITATION",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "IMAGE_SAFETY",
    ];
    let empty = candidate["content"]["parts"]
        .as_array()
        .is_none_or(|p| p.is_empty());
    (blocking.contains(&reason) && empty).then(|| {
        let rated: Vec<String> = candidate["safetyRatings"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| r["blocked"] == true)
            .filter_map(|r| r["category"].as_str().map(str::to_string))
            .collect();
        format!(
            "Gemini blocked the answer ({reason}{})",
            if rated.is_empty() {
                String::new()
            } else {
                format!(": {}", rated.join(", "))
            }
        )
    })
}

/// A generateContent answer as our response.
fn read(answer: &Value) -> Result<ChatResponse, LlmError> {
    if let Some(why) = blocked(answer) {
        return Err(LlmError::new(
            LlmErrorKind::BadRequest,
            format!("{why}; nothing came back to act on"),
        ));
    }
    let candidate = answer["candidates"].get(0).ok_or_else(|| {
        LlmError::new(
            LlmErrorKind::Decode,
            format!(
                "the model's answer has no candidates: {}",
                crate::text::clip(&answer.to_string(), 200)
            ),
        )
    })?;
    let parts = candidate["content"]["parts"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let (mut text, mut reasoning, mut calls) = (String::new(), String::new(), vec![]);
    for part in &parts {
        if let Some(call) = part.get("functionCall") {
            let i = calls.len();
            calls.push(ToolCall {
                id: call["id"]
                    .as_str()
                    .map_or_else(|| format!("call_{i}"), str::to_string),
                kind: "function".into(),
                function: FunctionCall {
                    name: call["name"].as_str().unwrap_or_default().to_string(),
                    arguments: call.get("args").unwrap_or(&json!({})).to_string(),
                },
            });
        } else if let Some(t) = part["text"].as_str() {
            if part["thought"] == true {
                reasoning.push_str(t);
            } else {
                text.push_str(t);
            }
        }
    }
    let finish = candidate["finishReason"].as_str().map(|r| {
        match r {
            "STOP" if !calls.is_empty() => "tool_calls",
            "STOP" => "stop",
            "MAX_TOKENS" => "length",
            other => other,
        }
        .to_string()
    });
    let usage = &answer["usageMetadata"];
    let count = |key: &str| usage[key].as_u64().unwrap_or(0);
    let mut message = Message::assistant(text);
    if message.text().is_empty() {
        message.content = None;
    }
    message.tool_calls = calls;
    message.reasoning_content = (!reasoning.trim().is_empty()).then_some(reasoning);
    message.provider_data = (!parts.is_empty()).then(|| json!({KEY: {"parts": parts}}));
    Ok(ChatResponse {
        calls_in_text: false,
        id: answer["responseId"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        model: answer["modelVersion"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        message,
        finish_reason: finish,
        usage: Usage {
            prompt_tokens: count("promptTokenCount"),
            // Thinking is billed as output.
            completion_tokens: count("candidatesTokenCount") + count("thoughtsTokenCount"),
            calls: 1,
            cache_read_tokens: count("cachedContentTokenCount"),
            ..Default::default()
        },
    })
}

/// A streamed answer: each event a partial answer; their parts joined (neighbouring text
/// of the same kind, thought or not, and without a signature between, into one part), the
/// last finish reason and usage kept. It ends when the connection closes, after a finish
/// reason.
#[derive(Default)]
struct Assembly {
    parts: Vec<Value>,
    last: Value,
    finished: bool,
    events: usize,
    fault: Option<String>,
}

impl Assemble for Assembly {
    fn add(&mut self, data: &str) -> Option<String> {
        if self.fault.is_some() {
            return None;
        }
        let chunk = match super::provider::event_json(data, self.events) {
            Ok(Some(chunk)) => chunk,
            Ok(None) => return None,
            Err(fault) => {
                self.fault = Some(fault);
                return None;
            }
        };
        if let Some(error) = chunk.get("error") {
            let said = error["message"]
                .as_str()
                .map_or_else(|| error.to_string(), str::to_string);
            self.fault = Some(format!(
                "an error in the stream after {} pieces: {}",
                self.events,
                crate::text::clip(&said, 500)
            ));
            return None;
        }
        self.events += 1;
        let mut heard = String::new();
        let candidate = &chunk["candidates"][0];
        for part in candidate["content"]["parts"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let text = part["text"].as_str();
            if let (Some(t), false) = (text, part["thought"] == true) {
                heard.push_str(t);
            }
            let joins = |last: &Value| {
                text.is_some()
                    && part.get("thoughtSignature").is_none()
                    && last["text"].is_string()
                    && last["thought"] == part["thought"]
                    && last.get("thoughtSignature").is_none()
            };
            match self.parts.last_mut() {
                Some(last) if joins(last) => {
                    let joined = format!("{}{}", last["text"].as_str().unwrap(), text.unwrap());
                    last["text"] = joined.into();
                }
                _ => self.parts.push(part.clone()),
            }
        }
        if candidate["finishReason"].is_string()
            || chunk["promptFeedback"]["blockReason"].is_string()
        {
            self.finished = true;
        }
        self.last = chunk;
        (!heard.is_empty()).then_some(heard)
    }

    fn complete(mut self: Box<Self>, _done: bool) -> Result<Value, Untaken> {
        if let Some(fault) = self.fault.take() {
            return Err(Untaken::Fault(fault));
        }
        if !self.finished {
            return Err(Untaken::BrokeOff(self.events));
        }
        let mut whole = self.last;
        if whole["candidates"][0].is_object() {
            whole["candidates"][0]["content"] = json!({"role": "model", "parts": self.parts});
        }
        Ok(whole)
    }
}
