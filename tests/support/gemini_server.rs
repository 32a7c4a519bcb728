//! Scripted Gemini server (`generateContent`, `streamGenerateContent?alt=sse`, under
//! `/v1beta` and `/v1`, the official SDK's default): no Gemini
//! runs here, so this keeps the rules of the real API a client can get wrong and answers as
//! it does (`{"error": {"code", "message", "status"}}`) when one is broken. Owns
//! `ScriptedGemini`.
//! - `x-goog-api-key` must be the server's key (400 `API key not valid`, as Gemini says);
//! - a function declaration's schema may hold only the keywords Gemini takes (400 `Invalid
//!   JSON payload received. Unknown name …`);
//! - every `functionCall` part sent back in a model turn must carry the `thoughtSignature`
//!   this server issued with it (400, as Gemini 3 refuses a call without its signature); a
//!   signature is base64 of opaque bytes, as the real ones are, and is taken back in either
//!   base64 alphabet;
//! - answers come with `usageMetadata`; a scripted block comes back as Gemini blocks (a
//!   `promptFeedback.blockReason`, no candidates; or, for an answer, a candidate with no
//!   content, the reason as its `finishReason` and a blocking `safetyRatings` entry).
//!
//! Streamed answers are the answer cut into chunks, one event each, the finish reason and
//! usage in the last; the stream ends by closing.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use base64::Engine as _;
use serde_json::{Value, json};

/// The key the server takes.
pub const KEY: &str = "AIza-test";

/// One scripted answer: the model's parts (a `functionCall` part gets a signature), a block
/// of the prompt for a reason, or an answer withheld for a reason (`SAFETY`: a candidate
/// with that finish reason, no content, and its blocking safety rating).
pub enum Answer {
    Parts(Vec<Value>),
    Blocked(&'static str),
    Withheld(&'static str),
}

pub struct ScriptedGemini {
    addr: std::net::SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct Shared {
    script: Mutex<VecDeque<Answer>>,
    /// The signatures issued, with the call each came with.
    issued: Mutex<Vec<(Value, String)>>,
    requests: Mutex<Vec<(String, Value)>>,
}

impl Drop for ScriptedGemini {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ScriptedGemini {
    pub async fn start() -> ScriptedGemini {
        let shared = Arc::new(Shared::default());
        let app = Router::new()
            .route("/v1/models/{call}", post(generate))
            .route("/v1beta/models/{call}", post(generate))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        ScriptedGemini { addr, shared, task }
    }

    /// The base URL, as Google's SDKs take it.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn push(&self, answer: Answer) {
        self.shared.script.lock().unwrap().push_back(answer);
    }

    /// The requests received: each one's `model:method` and body.
    pub fn requests(&self) -> Vec<(String, Value)> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// The signatures issued, in order.
    pub fn signatures(&self) -> Vec<String> {
        let issued = self.shared.issued.lock().unwrap();
        issued.iter().map(|(_, s)| s.clone()).collect()
    }
}

fn error(status: StatusCode, message: String) -> Response {
    let body = json!({"error": {"code": status.as_u16(), "message": message,
        "status": if status == StatusCode::BAD_REQUEST { "INVALID_ARGUMENT" } else { "INTERNAL" }}});
    (status, axum::Json(body)).into_response()
}

/// The schema keywords Gemini's function declarations take.
const TAKEN: &[&str] = &[
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

fn check_schema(schema: &Value, at: &str) -> Result<(), String> {
    for (key, value) in schema.as_object().into_iter().flatten() {
        if !TAKEN.contains(&key.as_str()) {
            return Err(format!(
                "Invalid JSON payload received. Unknown name \"{key}\" at '{at}': Cannot find field."
            ));
        }
        match key.as_str() {
            "properties" => {
                for (name, s) in value.as_object().into_iter().flatten() {
                    check_schema(s, &format!("{at}.properties[{name}]"))?;
                }
            }
            "items" => check_schema(value, &format!("{at}.items"))?,
            "anyOf" => {
                for (i, s) in value.as_array().into_iter().flatten().enumerate() {
                    check_schema(s, &format!("{at}.any_of[{i}]"))?;
                }
            }
            "type" if !value.is_string() => {
                return Err(format!(
                    "Invalid value at '{at}.type': {value} is not a type"
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// A signature's bytes: Gemini takes base64 standard or URL-safe, padded or not, as the
/// protobuf JSON mapping does (Google's Python SDK sends it URL-safe).
pub fn signature_bytes(text: &str) -> Option<Vec<u8>> {
    let standard: String = text
        .trim_end_matches('=')
        .chars()
        .map(|c| match c {
            '-' => '+',
            '_' => '/',
            c => c,
        })
        .collect();
    base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(standard)
        .ok()
}

fn check(shared: &Shared, req: &Value) -> Result<(), String> {
    let contents = req["contents"]
        .as_array()
        .ok_or("* GenerateContentRequest.contents: contents is not specified")?;
    for tools in req["tools"].as_array().into_iter().flatten() {
        for (i, d) in tools["functionDeclarations"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            check_schema(
                &d["parameters"],
                &format!("tools[0].function_declarations[{i}].parameters"),
            )?;
        }
    }
    let issued = shared.issued.lock().unwrap();
    for (i, content) in contents.iter().enumerate() {
        if content["role"] != "model" {
            continue;
        }
        for (j, part) in content["parts"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let Some(call) = part.get("functionCall") else {
                continue;
            };
            let ours = issued.iter().find(|(c, _)| c == call).map(|(_, s)| s);
            let sent = part["thoughtSignature"].as_str().and_then(signature_bytes);
            if sent.is_none() || sent != ours.and_then(|s| signature_bytes(s)) {
                return Err(format!(
                    "Function call is missing a thought_signature in functionCall parts. This is \
                     required for tools to work correctly. Additional data, function call \
                     `default_api:{}` , position {} (contents[{i}].parts[{j}]).",
                    call["name"].as_str().unwrap_or_default(),
                    i + 1
                ));
            }
        }
    }
    Ok(())
}

async fn generate(
    State(shared): State<Arc<Shared>>,
    Path(call): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return error(
            StatusCode::BAD_REQUEST,
            "Invalid JSON payload received.".into(),
        );
    };
    shared
        .requests
        .lock()
        .unwrap()
        .push((call.clone(), req.clone()));
    if headers.get("x-goog-api-key").and_then(|v| v.to_str().ok()) != Some(KEY) {
        return error(
            StatusCode::BAD_REQUEST,
            "API key not valid. Please pass a valid API key.".into(),
        );
    }
    if let Err(why) = check(&shared, &req) {
        return error(StatusCode::BAD_REQUEST, why);
    }
    let Some(answer) = shared.script.lock().unwrap().pop_front() else {
        return error(StatusCode::INTERNAL_SERVER_ERROR, "script exhausted".into());
    };
    let prompt = req.to_string().len().div_ceil(4) as u64;
    let whole = match answer {
        Answer::Blocked(reason) => json!({"promptFeedback": {"blockReason": reason},
            "usageMetadata": {"promptTokenCount": prompt, "totalTokenCount": prompt},
            "modelVersion": "gemini-test", "responseId": "blocked-1"}),
        Answer::Withheld(reason) => json!({"candidates": [{"finishReason": reason, "index": 0,
                "safetyRatings": [{"category": "HARM_CATEGORY_DANGEROUS_CONTENT",
                    "probability": "HIGH", "blocked": true}]}],
            "usageMetadata": {"promptTokenCount": prompt, "totalTokenCount": prompt},
            "modelVersion": "gemini-test", "responseId": "withheld-1"}),
        Answer::Parts(parts) => {
            let parts: Vec<Value> = parts
                .into_iter()
                .map(|mut p| {
                    if let Some(call) = p.get("functionCall").cloned() {
                        let mut issued = shared.issued.lock().unwrap();
                        // Opaque bytes, base64 on the wire as Gemini sends them (its
                        // SDKs decode them); `+` and `/` in it, as in real ones.
                        let mut bytes = vec![0x0a, 0x24, 0xfb, 0xff, 0xbe];
                        bytes.extend(format!("thought {}", issued.len()).bytes());
                        let sig = base64::engine::general_purpose::STANDARD.encode(bytes);
                        issued.push((call, sig.clone()));
                        p["thoughtSignature"] = sig.into();
                    }
                    p
                })
                .collect();
            let output: u64 = parts
                .iter()
                .map(|p| p.to_string().len().div_ceil(4) as u64)
                .sum();
            json!({"candidates": [{"content": {"role": "model", "parts": parts},
                "finishReason": "STOP", "index": 0}],
                "usageMetadata": {"promptTokenCount": prompt, "candidatesTokenCount": output,
                    "thoughtsTokenCount": 7, "totalTokenCount": prompt + output + 7},
                "modelVersion": "gemini-test", "responseId": "resp-1"})
        }
    };
    if !call.ends_with(":streamGenerateContent") {
        return axum::Json(whole).into_response();
    }
    // The parts one chunk each, text cut in two; finish and usage in the last.
    let mut events = String::new();
    let parts = whole["candidates"][0]["content"]["parts"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut pieces: Vec<Value> = vec![];
    for p in parts {
        match p["text"].as_str() {
            Some(t) if t.chars().count() > 1 && p.get("thoughtSignature").is_none() => {
                let half: String = t.chars().take(t.chars().count() / 2).collect();
                let mut a = p.clone();
                a["text"] = half.clone().into();
                let mut b = p.clone();
                b["text"] = t[half.len()..].to_string().into();
                pieces.extend([a, b]);
            }
            _ => pieces.push(p),
        }
    }
    if pieces.is_empty() {
        events.push_str(&format!("data: {whole}\n\n"));
    }
    let n = pieces.len();
    for (i, p) in pieces.into_iter().enumerate() {
        let mut chunk = json!({"candidates": [{"content": {"role": "model", "parts": [p]},
            "index": 0}], "modelVersion": "gemini-test", "responseId": "resp-1"});
        if i + 1 == n {
            chunk["candidates"][0]["finishReason"] = "STOP".into();
            chunk["usageMetadata"] = whole["usageMetadata"].clone();
        }
        events.push_str(&format!("data: {chunk}\r\n\r\n"));
    }
    ([(header::CONTENT_TYPE, "text/event-stream")], events).into_response()
}
