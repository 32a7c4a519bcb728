//! Record and replay of model exchanges.
//!
//! A cassette is a JSON-lines file: one `{"request": …, "response": …}` object per model
//! call, in the order the run made them, with the request and response bodies exactly as
//! they crossed the wire (a whole answer's line breaks, which JSON allows only between
//! tokens, written as spaces). A streamed answer is kept twice: `response` is the
//! completion its pieces made, which replay serves, and `stream` the event stream as it
//! came. A line whose answer is in another wire API than Chat Completions names it
//! (`"api": "anthropic"`), and replay reads it with that provider. Lines starting with `#`
//! are comments. `--record FILE` writes one;
//! an `api_type = "replay"` profile serves one back, in order, so a run can be reproduced
//! offline. Each flow replays from the start with its own cursor.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::{LlmError, LlmErrorKind};

/// One model call as it crossed the wire.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Exchange {
    pub request: Value,
    pub response: Value,
    /// A streamed answer's event stream, as received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<String>,
    /// How tool calls travelled (`text`, `constrained`; absent: natively), so a replay
    /// reads them from the answer as the run did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<String>,
    /// The wire API the answer is in (a `Provider`'s name; absent: Chat Completions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api: Option<String>,
}

/// A recorded answer, as a replay serves it.
#[derive(Debug, Clone)]
pub struct Replayed {
    pub response: Value,
    /// The exchange's `tool_calls` mode.
    pub tool_calls: Option<String>,
    /// The exchange's `api`.
    pub api: Option<String>,
}

/// A loaded cassette, or a per-case template that `manus-rt eval` fills.
#[derive(Debug)]
pub struct Cassette {
    name: String,
    exchanges: Vec<Exchange>,
    /// A path holding `{case}`, with the directory a relative one is taken from: each eval
    /// case replays its own cassette there. Such a cassette holds no exchanges.
    per_case: Option<(String, std::path::PathBuf)>,
}

/// What a cassette path holds to mean "each eval case's own cassette".
pub const CASE_PLACEHOLDER: &str = "{case}";

impl Cassette {
    pub fn load(path: &Path) -> Result<Cassette, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read cassette {}: {e}", path.display()))?;
        Cassette::parse(&path.display().to_string(), &text)
    }

    /// Parse cassette text; `name` is used in messages.
    pub fn parse(name: &str, text: &str) -> Result<Cassette, String> {
        let mut exchanges = vec![];
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let ex: Exchange = serde_json::from_str(line)
                .map_err(|e| format!("cassette {name}, line {}: not an exchange: {e}", i + 1))?;
            exchanges.push(ex);
        }
        if exchanges.is_empty() {
            return Err(format!("cassette {name} holds no exchanges"));
        }
        Ok(Cassette {
            name: name.to_string(),
            exchanges,
            per_case: None,
        })
    }

    /// A cassette path holding `{case}`, relative to `base` unless absolute: loaded per
    /// case by `for_case`; replaying it as it is fails with an error that says so.
    pub fn per_case(template: &str, base: &Path) -> Cassette {
        Cassette {
            name: template.to_string(),
            exchanges: vec![],
            per_case: Some((template.to_string(), base.to_path_buf())),
        }
    }

    /// For a per-case cassette, the one of the case whose directory is `case`.
    pub fn for_case(&self, case: &Path) -> Option<Result<Cassette, String>> {
        let (template, base) = self.per_case.as_ref()?;
        let path = base.join(template.replace(CASE_PLACEHOLDER, &case.display().to_string()));
        Some(Cassette::load(&path))
    }

    pub fn len(&self) -> usize {
        self.exchanges.len()
    }

    pub fn is_empty(&self) -> bool {
        self.exchanges.is_empty()
    }

    /// The file it was read from (or, per case, the path holding `{case}`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The model the cassette was recorded with.
    pub fn model(&self) -> Option<&str> {
        self.exchanges.first()?.request.get("model")?.as_str()
    }

    /// The task of the recorded run: the first user message of the first request.
    pub fn task(&self) -> Option<&str> {
        first_user_text(&self.exchanges.first()?.request)
    }

    /// A fresh cursor, at the first exchange or at the first one `from` asks for. Clients
    /// that share it take turns in order.
    pub fn cursor(self: &Arc<Self>, from: ReplayFrom) -> ReplayCursor {
        let (tx, mut rx) = mpsc::unbounded_channel::<ReplayRequest>();
        let cassette = Arc::clone(self);
        tokio::spawn(async move {
            // Answers go out in recorded order, except that a request takes the first
            // answer not yet served that was recorded for its conversation (the same first
            // user message): steps that ran at once may ask in another order than they did.
            let mut served = vec![false; cassette.exchanges.len()];
            let mut start = 0usize;
            let mut seeking = from == ReplayFrom::FirstMatch;
            while let Some((request, reply)) = rx.recv().await {
                let wanted = request.as_deref();
                let matches = |ex: &Exchange| first_user_text(&ex.request) == wanted;
                if std::mem::take(&mut seeking) {
                    start = cassette.exchanges.iter().position(matches).unwrap_or(0);
                }
                let unserved = (start..served.len()).filter(|&i| !served[i]);
                let next = unserved
                    .clone()
                    .find(|&i| matches(&cassette.exchanges[i]))
                    .or_else(|| unserved.clone().next())
                    .unwrap_or(served.len());
                let answer = cassette.serve(next, wanted);
                if answer.is_ok() {
                    served[next] = true;
                }
                let _ = reply.send(answer);
            }
        });
        ReplayCursor { tx }
    }

    fn serve(&self, index: usize, first_user: Option<&str>) -> Result<Replayed, LlmError> {
        if self.per_case.is_some() {
            return Err(LlmError::new(
                LlmErrorKind::Replay,
                format!(
                    "cassette {} names {CASE_PLACEHOLDER}, which `manus-rt eval` fills with each case's directory; \
                     it replays nothing outside an eval",
                    self.name
                ),
            ));
        }
        let Some(ex) = self.exchanges.get(index) else {
            return Err(LlmError::new(
                LlmErrorKind::Replay,
                format!(
                    "cassette {} is used up: it holds {} answers and the run asked for more",
                    self.name,
                    self.exchanges.len()
                ),
            ));
        };
        let (recorded, now) = (first_user_text(&ex.request), first_user);
        if recorded != now {
            return Err(LlmError::new(
                LlmErrorKind::Replay,
                format!(
                    "this run left the recording of cassette {} at answer {}: it was recorded for {:?}, \
                     this request is about {:?}. Replay only reproduces the recorded run; point [llm] at a real \
                     model for other tasks",
                    self.name,
                    index + 1,
                    shorten(recorded.unwrap_or("")),
                    shorten(now.unwrap_or(""))
                ),
            ));
        }
        Ok(Replayed {
            response: ex.response.clone(),
            tool_calls: ex.tool_calls.clone(),
            api: ex.api.clone(),
        })
    }
}

/// The text of a request's first user message (in `messages`, the Responses API's `input`
/// or Gemini's `contents`), as `Message::text` reads it: its content, or its first text part
/// (an image's message; an Anthropic user turn that holds several of our messages, the
/// first one first).
fn first_user_text(request: &Value) -> Option<&str> {
    let first = ["messages", "input", "contents"]
        .iter()
        .find_map(|key| request.get(*key))?
        .as_array()?
        .iter()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))?;
    match first.get("content").or_else(|| first.get("parts"))? {
        Value::Array(parts) => parts
            .iter()
            .find(|p| {
                let kind = p.get("type").and_then(Value::as_str);
                matches!(kind, None | Some("text" | "input_text"))
            })?
            .get("text")?
            .as_str(),
        text => text.as_str(),
    }
}

fn shorten(s: &str) -> String {
    let one_line = s.replace('\n', " ");
    if one_line.chars().count() > 120 {
        format!("{}…", one_line.chars().take(120).collect::<String>())
    } else {
        one_line
    }
}

/// Where a new cursor starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayFrom {
    /// At the first answer: a run from its beginning.
    Start,
    /// At the first answer recorded for the run's first request: a resumed run, which does
    /// not ask again what was done before its interruption. Strict from there on.
    FirstMatch,
}

/// A request's first user message, and where its recorded answer goes.
type ReplayRequest = (Option<String>, oneshot::Sender<Result<Replayed, LlmError>>);

/// A flow's position in a cassette.
#[derive(Clone)]
pub struct ReplayCursor {
    tx: mpsc::UnboundedSender<ReplayRequest>,
}

impl ReplayCursor {
    /// The next recorded answer, if `request` is the one the recording expects.
    pub async fn next(&self, first_user: Option<String>) -> Result<Replayed, LlmError> {
        let gone = || LlmError::new(LlmErrorKind::Replay, "the replay cursor has stopped");
        let (tx, rx) = oneshot::channel();
        self.tx.send((first_user, tx)).map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }
}

/// Writes every exchange of a run to a cassette file, one line each, as it happens.
#[derive(Clone)]
pub struct Recorder {
    tx: mpsc::UnboundedSender<(String, oneshot::Sender<()>)>,
}

/// An answer as it came, for the record.
pub enum Answered<'a> {
    /// A whole JSON answer's bytes.
    Whole(&'a [u8]),
    /// A streamed answer: the completion its pieces made, and the stream's bytes.
    Streamed {
        completion: &'a Value,
        raw: &'a [u8],
    },
}

impl Recorder {
    /// Create (or truncate) the file; a writer task owns it from here on.
    pub fn create(path: &Path) -> std::io::Result<Recorder> {
        let mut file = std::fs::File::create(path)?;
        let (tx, mut rx) = mpsc::unbounded_channel::<(String, oneshot::Sender<()>)>();
        let path = path.to_path_buf();
        tokio::spawn(async move {
            while let Some((line, done)) = rx.recv().await {
                if let Err(e) = writeln!(file, "{line}").and_then(|_| file.flush()) {
                    tracing::error!("cannot write cassette {}: {e}", path.display());
                }
                let _ = done.send(());
            }
        });
        Ok(Recorder { tx })
    }

    /// Append one exchange; returns once it is on disk. `request` is the body as sent
    /// (JSON text); `answer` the answer as received; `tool_calls` the mode, if not native;
    /// `api` the wire API, if not Chat Completions.
    pub async fn record(
        &self,
        request: &[u8],
        answer: Answered<'_>,
        tool_calls: Option<&str>,
        api: Option<&str>,
    ) {
        let one_line = |bytes: &[u8]| String::from_utf8_lossy(bytes).replace(['\n', '\r'], " ");
        let line = match answer {
            Answered::Whole(bytes) => format!(
                "{{\"request\":{},\"response\":{}}}",
                one_line(request),
                one_line(bytes)
            ),
            Answered::Streamed { completion, raw } => format!(
                "{{\"request\":{},\"response\":{completion},\"stream\":{}}}",
                one_line(request),
                Value::String(String::from_utf8_lossy(raw).into_owned())
            ),
        };
        let mut line = line;
        for (key, value) in [("tool_calls", tool_calls), ("api", api)] {
            if let Some(value) = value {
                // Closed by the object's own brace.
                line = format!(
                    "{},\"{key}\":{}}}",
                    &line[..line.len() - 1],
                    Value::from(value)
                );
            }
        }
        let (tx, rx) = oneshot::channel();
        if self.tx.send((line, tx)).is_ok() {
            let _ = rx.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn req(task: &str) -> Value {
        json!({"model": "m", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": task}]})
    }

    #[tokio::test]
    async fn replays_in_order_and_refuses_divergence() {
        let text = format!(
            "# a comment\n{}\n{}\n",
            json!({"request": req("a"), "response": {"n": 1}}),
            json!({"request": req("b"), "response": {"n": 2}})
        );
        let c = Arc::new(Cassette::parse("t", &text).unwrap());
        assert_eq!(c.task(), Some("a"));
        let cur = c.cursor(ReplayFrom::Start);
        assert_eq!(cur.next(Some("a".into())).await.unwrap().response["n"], 1);
        let err = cur.next(Some("zzz".into())).await.unwrap_err();
        assert_eq!(err.kind, LlmErrorKind::Replay);
        assert_eq!(cur.next(Some("b".into())).await.unwrap().response["n"], 2);
        assert!(
            cur.next(Some("c".into()))
                .await
                .unwrap_err()
                .message
                .contains("used up")
        );
        // A second cursor starts over.
        assert_eq!(
            c.cursor(ReplayFrom::Start)
                .next(Some("a".into()))
                .await
                .unwrap()
                .response["n"],
            1
        );
        // A resumed run's cursor starts where its first request was recorded.
        let cur = c.cursor(ReplayFrom::FirstMatch);
        assert_eq!(cur.next(Some("b".into())).await.unwrap().response["n"], 2);
        assert!(cur.next(Some("b".into())).await.is_err(), "strict after");
    }

    #[test]
    fn bad_lines_are_named() {
        let err = Cassette::parse("t", "\n{not json}\n").unwrap_err();
        assert!(err.contains("line 2"), "{err}");
    }

    #[tokio::test]
    async fn the_record_holds_the_bytes_that_came() {
        let dir = std::env::temp_dir().join(format!("manus-cassette-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.jsonl");
        let rec = Recorder::create(&path).unwrap();
        // Numbers a parse and print would change, and line breaks between tokens.
        let whole = b"{\"choices\": [{\"message\": {\"content\": \"a\\nb\"}}],\n \"score\": 0.10, \"big\": 1e2}";
        rec.record(br#"{"model":"m"}"#, Answered::Whole(whole), None, None)
            .await;
        let raw = b"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\r\n\r\ndata: [DONE]\n\n";
        let completion = json!({"choices": [{"message": {"content": "hi"}}]});
        rec.record(
            br#"{"model":"m"}"#,
            Answered::Streamed {
                completion: &completion,
                raw,
            },
            Some("text"),
            None,
        )
        .await;
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            r#"{"request":{"model":"m"},"response":{"choices": [{"message": {"content": "a\nb"}}],  "score": 0.10, "big": 1e2}}"#
        );
        let c = Cassette::parse("t", &text).unwrap();
        assert_eq!(
            c.exchanges[0].response["choices"][0]["message"]["content"],
            "a\nb"
        );
        assert_eq!(
            c.exchanges[1].stream.as_deref().map(str::as_bytes),
            Some(&raw[..])
        );
        assert_eq!(c.exchanges[1].response, completion);
        assert_eq!(c.exchanges[1].tool_calls.as_deref(), Some("text"));
        assert_eq!(c.exchanges[0].tool_calls, None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
