//! What an MCP server asks of its client while our calls run, answered for the flow that
//! made the call: elicitation (a question to the person, `elicit.rs`), sampling (the
//! flow's model, under `[mcp] sampling`), roots (the flow's workspace) and progress (a flow
//! event). One session serves every flow, so each call in flight is kept here under the
//! progress token the request carried; a server's request goes to the flow of the latest
//! call in flight, and is declined when calls of several flows are in flight (MCP does not
//! say which call a request belongs to on every transport). A call's own run (`call`) keeps
//! its caller here while it lasts and cancels it at the server if its caller goes away.
//! A server speaking 2026-07-28 may instead answer a call with an input-required result
//! (a multi-round-trip request): its requests are answered here the same way, and the call
//! is sent again with the answers and the server's request state, up to `ROUNDS` times.

// Sampling and roots are deprecated by the 2026-07-28 revision (SEP-2577), but servers that
// speak 2025-11-25 still send them.
#![expect(deprecated)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::ErrorData as McpError;
use rmcp::RoleClient;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientRequest,
    CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult,
    InputRequest, InputRequests, InputResponses, ListRootsResult, ProgressNotificationParam,
    ProgressToken, RequestMetaObject, Root, ServerResult,
};
use serde_json::{Value, json};

use super::elicit::{self, Reply};
use rmcp::service::{PeerRequestOptions, ServiceError};

use crate::protocol::{McpCaller, McpOutput, Unanswered};

/// `[mcp] sampling`: what a server's request to use the flow's model gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sampling {
    /// Run it on the calling agent's model.
    Allow,
    /// Ask a person first, as an approval request.
    Approve,
    /// Refuse it (the default).
    #[default]
    Deny,
}

/// How many answers a form may get that do not meet its schema before it is cancelled.
const TRIES: usize = 3;
/// How many times one call may come back asking for input before it is given up.
const ROUNDS: usize = 10;

/// The calls in flight on one server, by progress token, and the root last offered.
#[derive(Default)]
pub struct Calls {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    next: u64,
    /// Each call's number (the latest is the greatest), caller, and whether it has ended.
    calls: HashMap<String, (u64, McpCaller, bool)>,
    offered: Option<PathBuf>,
}

/// How long an ended call's caller is kept for progress reports that were sent before its
/// result but are handled after it (the session handles notifications in tasks of their own).
const LATE: Duration = Duration::from_secs(2);

fn key(token: &ProgressToken) -> String {
    serde_json::to_string(&token.0).unwrap_or_default()
}

impl Calls {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A call starts: keep its caller until `done`. True when its workspace is not the
    /// root last offered (the server should be told the roots changed).
    pub fn begin(&self, token: &ProgressToken, caller: McpCaller) -> bool {
        let mut inner = self.lock();
        inner.next += 1;
        let changed = inner.offered.as_ref() != Some(&caller.workspace);
        let n = inner.next;
        inner.calls.insert(key(token), (n, caller, false));
        changed
    }

    /// A call ended: it asks nothing more, and is forgotten once its late reports are in.
    pub fn done(self: &Arc<Self>, token: &ProgressToken) {
        let key = key(token);
        if let Some(call) = self.lock().calls.get_mut(&key) {
            call.2 = true;
            // The call's span ends with the call, not with this grace.
            call.1.span = tracing::Span::none();
        }
        let calls = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(LATE).await;
            calls.lock().calls.remove(&key);
        });
    }

    fn of(&self, token: &ProgressToken) -> Option<McpCaller> {
        self.lock()
            .calls
            .get(&key(token))
            .map(|(_, c, _)| c.clone())
    }

    /// The calls still running.
    fn running(inner: &Inner) -> impl Iterator<Item = &(u64, McpCaller, bool)> {
        inner.calls.values().filter(|(_, _, ended)| !ended)
    }

    /// The caller a server's request is for: the latest call in flight, if every call in
    /// flight is one flow's.
    fn asker(&self) -> Result<McpCaller, String> {
        let inner = self.lock();
        let latest = Self::running(&inner)
            .max_by_key(|(n, ..)| *n)
            .map(|(_, c, _)| c);
        let Some(latest) = latest else {
            return Err("no call of ours is in flight on this server".into());
        };
        if Self::running(&inner).any(|(_, c, _)| !c.link.same_flow(&latest.link)) {
            return Err("calls of several flows are in flight on this server, so it cannot be told which one asks".into());
        }
        Ok(latest.clone())
    }

    /// The roots to offer: the workspace of the latest call in flight, else the last one
    /// offered.
    pub fn roots(&self) -> ListRootsResult {
        let mut inner = self.lock();
        let latest = Self::running(&inner).max_by_key(|(n, ..)| *n);
        if let Some(dir) = latest.map(|(_, c, _)| c.workspace.clone()) {
            inner.offered = Some(dir);
        }
        let roots = inner
            .offered
            .iter()
            .filter_map(|dir| {
                let url = reqwest::Url::from_directory_path(dir).ok()?;
                Some(Root::new(url.to_string()).with_name("workspace"))
            })
            .collect();
        ListRootsResult::new(roots)
    }

    /// A progress notification: an event of the calling flow.
    pub fn progress(&self, p: ProgressNotificationParam) {
        if let Some(caller) = self.of(&p.progress_token) {
            caller.link.progress(p.progress, p.total, p.message);
        }
    }
}

/// An elicitation as a question to the person behind the flow that asks.
pub async fn elicit(calls: &Calls, server: &str, request: ElicitRequestParams) -> ElicitResult {
    let caller = match calls.asker() {
        Ok(c) => c,
        Err(why) => return answer(Reply::Decline(Some(why))),
    };
    let (question, schema) = match &request {
        ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } => (
            elicit::form_question(server, message),
            Some(serde_json::to_value(requested_schema).unwrap_or_default()),
        ),
        ElicitRequestParams::UrlElicitationParams { message, url, .. } => {
            (elicit::url_question(server, message, url), None)
        }
        _ => {
            return answer(Reply::Decline(Some(
                "this kind of elicitation is not supported".into(),
            )));
        }
    };
    let mut asked = question.clone();
    for _ in 0..TRIES {
        let said = caller
            .link
            .ask_form(asked, schema.clone(), caller.ask_timeout)
            .await;
        let text = match said {
            Ok(text) => text,
            Err(Unanswered::TimedOut) => {
                let secs = caller.ask_timeout.as_secs();
                return answer(Reply::Decline(Some(format!("no answer within {secs}s"))));
            }
            Err(Unanswered::Refused(why) | Unanswered::Undelivered(why)) => {
                return answer(Reply::Decline(Some(why)));
            }
        };
        let read = match &schema {
            Some(schema) => elicit::read_form(&text, schema),
            None => Ok(elicit::read_url(&text)),
        };
        match read {
            Ok(reply) => return answer(reply),
            Err(why) => asked = format!("That answer was not taken: {why}.\n{question}"),
        }
    }
    answer(Reply::Cancel)
}

/// The reply as the server takes it; a decline's reason travels in `_meta.reason`.
fn answer(reply: Reply) -> ElicitResult {
    let wire = match reply {
        Reply::Accept(content) => json!({"action": "accept", "content": content}),
        Reply::Decline(None) => json!({"action": "decline"}),
        Reply::Decline(Some(why)) => {
            tracing::info!("an MCP elicitation was declined: {why}");
            json!({"action": "decline", "_meta": {"reason": why}})
        }
        Reply::Cancel => json!({"action": "cancel"}),
    };
    serde_json::from_value(wire).expect("an elicitation result's wire form")
}

/// A sampling request, run on the asking flow's model if `rule` allows it.
pub async fn sample(
    calls: &Calls,
    server: &str,
    rule: Sampling,
    request: CreateMessageRequestParams,
) -> Result<CreateMessageResult, McpError> {
    let refuse = |why: String| McpError::invalid_request(why, None);
    if rule == Sampling::Deny {
        return Err(refuse(format!(
            "sampling is refused by this client's [mcp] sampling = \"deny\" (the MCP server `{server}` asked)"
        )));
    }
    let caller = calls.asker().map_err(refuse)?;
    let llm = caller
        .llm
        .clone()
        .ok_or_else(|| refuse("the calling agent has no model".into()))?;
    let wire = serde_json::to_value(&request).unwrap_or_default();
    if rule == Sampling::Approve {
        let why = format!(
            "the MCP server `{server}` asks to use the flow's model ([mcp] sampling = \"approve\")"
        );
        let decision = caller
            .link
            .approve("mcp_sampling", wire.to_string(), why, caller.ask_timeout)
            .await
            .map_err(|e| refuse(format!("sampling was not approved: {e}")))?;
        if !decision.approve {
            let reason = decision.reason.unwrap_or_else(|| "no reason given".into());
            return Err(refuse(format!(
                "sampling was rejected by {}: {reason}",
                decision.by
            )));
        }
    }
    let span = tracing::info_span!(parent: &caller.span, "mcp_sampling", mcp.server = %server);
    let messages = sampling_messages(&wire);
    let request = crate::llm::ChatRequest {
        messages: messages.iter().collect(),
        tools: crate::llm::ToolSet::new(vec![]),
        tool_choice: crate::llm::ToolChoice::Auto,
    };
    let resp = tracing::Instrument::instrument(llm.chat(&request), span)
        .await
        .map_err(|e| McpError::internal_error(format!("the model call failed: {e}"), None))?;
    caller.link.spent(resp.usage);
    let text = resp.message.text().to_string();
    let stop = match resp.finish_reason.as_deref() {
        Some("length") => "maxTokens",
        _ => "endTurn",
    };
    let wire = json!({
        "model": resp.model,
        "stopReason": stop,
        "role": "assistant",
        "content": {"type": "text", "text": text},
    });
    serde_json::from_value(wire).map_err(|e| McpError::internal_error(e.to_string(), None))
}

/// The request's system prompt and messages as chat messages (text parts only; other
/// content is named, not sent).
fn sampling_messages(wire: &Value) -> Vec<crate::llm::Message> {
    use crate::llm::Message;
    let mut out = vec![];
    if let Some(system) = wire.get("systemPrompt").and_then(Value::as_str) {
        out.push(Message::system(system));
    }
    for m in wire["messages"].as_array().into_iter().flatten() {
        let parts = match &m["content"] {
            Value::Array(list) => list.clone(),
            one => vec![one.clone()],
        };
        let text = parts
            .iter()
            .map(|p| match p["type"].as_str() {
                Some("text") => p["text"].as_str().unwrap_or("").to_string(),
                Some(other) => format!("[{other} content]"),
                None => String::new(),
            })
            .collect::<Vec<_>>()
            .join("\n");
        out.push(match m["role"].as_str() {
            Some("assistant") => Message::assistant(text),
            _ => Message::user(text),
        });
    }
    out
}

/// What became of a call: its result, a failure (`Err(Err)`: past `limit`), or `None` when
/// its caller went away first (the call is then cancelled at the server).
pub type Called = Option<Result<rmcp::model::CallToolResult, Result<ServiceError, ()>>>;

/// Whose server a call goes to, and what it may ask of the flow.
#[derive(Clone, Copy)]
pub struct Asked<'a> {
    pub server: &'a str,
    pub sampling: Sampling,
}

/// Send a tool call with `meta`, keep its caller in `calls` (under the request's progress
/// token) while it runs, and wait for its result, its limit or its caller's leaving. An
/// input-required answer is answered (as `asked` allows) and the call sent again.
#[allow(clippy::too_many_arguments)]
pub async fn call(
    peer: &rmcp::Peer<RoleClient>,
    calls: &Arc<Calls>,
    mut params: CallToolRequestParams,
    meta: RequestMetaObject,
    caller: Option<Box<crate::protocol::McpCaller>>,
    limit: Duration,
    reply: &ractor::RpcReplyPort<Result<McpOutput, String>>,
    asked: Asked<'_>,
) -> Called {
    for _ in 0..ROUNDS {
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params.clone()));
        let options = PeerRequestOptions::no_options().with_meta(meta.clone());
        let handle = match peer.send_request_with_option(request, options).await {
            Ok(handle) => handle,
            Err(e) => return Some(Err(Ok(e))),
        };
        let (token, id) = (handle.progress_token.clone(), handle.id.clone());
        let roots_moved = caller.clone().is_some_and(|c| calls.begin(&token, *c));
        if roots_moved {
            let _ = peer.notify_roots_list_changed().await;
        }
        // The caller (a tool worker) is gone when its step was cancelled or timed out.
        let gone = async {
            while !reply.is_closed() {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        };
        let answered = tokio::select! {
            r = tokio::time::timeout(limit, handle.await_response()) => Some(r),
            _ = gone => None,
        };
        let needs = match answered {
            Some(Ok(Ok(ServerResult::InputRequiredResult(needs)))) => needs,
            answered => {
                calls.done(&token);
                return ended(peer, answered, id).await;
            }
        };
        // Answered while the call is still the caller's, so the questions reach its flow.
        let answers = fulfil(calls, asked, needs.input_requests.unwrap_or_default()).await;
        calls.done(&token);
        match answers {
            Ok(answers) => {
                params.input_responses = (!answers.is_empty()).then_some(answers);
                params.request_state = needs.request_state;
            }
            Err(e) => return Some(Err(Ok(ServiceError::McpError(e)))),
        }
    }
    Some(Err(Ok(ServiceError::InputRequiredRoundsExceeded {
        max_rounds: ROUNDS,
    })))
}

/// What became of a call whose answer is not a request for input.
async fn ended(
    peer: &rmcp::Peer<RoleClient>,
    answered: Option<Result<Result<ServerResult, ServiceError>, tokio::time::error::Elapsed>>,
    id: rmcp::model::RequestId,
) -> Called {
    match answered {
        Some(Ok(Ok(ServerResult::CallToolResult(result)))) => Some(Ok(result)),
        Some(Ok(Ok(_))) => Some(Err(Ok(ServiceError::UnexpectedResponse))),
        Some(Ok(Err(e))) => Some(Err(Ok(e))),
        Some(Err(_)) => Some(Err(Err(()))),
        None => {
            let why = "the step that made the call was cancelled".to_string();
            let _ = peer
                .notify_cancelled(CancelledNotificationParam::new(Some(id), Some(why)))
                .await;
            None
        }
    }
}

/// The answers to a multi-round-trip call's requests, each given as the same request sent
/// on its own would get (one at a time, so a person sees one question after another).
async fn fulfil(
    calls: &Calls,
    asked: Asked<'_>,
    requests: InputRequests,
) -> Result<InputResponses, McpError> {
    let mut answers = InputResponses::new();
    for (key, request) in requests {
        let answer = match request {
            InputRequest::Elicitation(r) => json!(elicit(calls, asked.server, r.params).await),
            InputRequest::CreateMessage(r) => {
                json!(sample(calls, asked.server, asked.sampling, r.params).await?)
            }
            InputRequest::ListRoots(_) => json!(calls.roots()),
            _ => {
                return Err(McpError::invalid_request(
                    format!("input request `{key}` is of a kind this client does not answer"),
                    None,
                ));
            }
        };
        answers.insert(key, answer);
    }
    Ok(answers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{FlowLink, FlowMsg};
    use ractor::{Actor, ActorProcessingErr, ActorRef};

    struct Quiet;

    impl Actor for Quiet {
        type Msg = FlowMsg;
        type State = ();
        type Arguments = ();
        async fn pre_start(&self, _: ActorRef<FlowMsg>, _: ()) -> Result<(), ActorProcessingErr> {
            Ok(())
        }
    }

    fn caller(flow: &ActorRef<FlowMsg>, dir: &str) -> McpCaller {
        McpCaller {
            link: FlowLink::new(flow.clone(), "manus", flow.get_id()),
            llm: None,
            workspace: PathBuf::from(dir),
            ask_timeout: Duration::from_secs(1),
            span: tracing::Span::none(),
        }
    }

    fn token(n: i64) -> ProgressToken {
        ProgressToken(rmcp::model::NumberOrString::Number(n))
    }

    /// A request goes to the latest call's flow; with calls of two flows in flight it
    /// cannot be told whose it is and is refused; an ended call asks nothing.
    #[tokio::test]
    async fn a_request_goes_to_the_one_flow_with_calls_in_flight() {
        let (a, _) = Actor::spawn(None, Quiet, ()).await.unwrap();
        let (b, _) = Actor::spawn(None, Quiet, ()).await.unwrap();
        let calls = Arc::new(Calls::default());
        assert!(calls.asker().unwrap_err().contains("no call"));
        assert!(calls.begin(&token(1), caller(&a, "/w/one")));
        calls.begin(&token(2), caller(&a, "/w/one"));
        assert!(calls.asker().unwrap().link.same_flow(&caller(&a, "/").link));
        calls.begin(&token(3), caller(&b, "/w/two"));
        let e = calls.asker().unwrap_err();
        assert!(e.contains("several flows"), "{e}");
        assert_eq!(calls.roots().roots[0].uri, "file:///w/two/");
        calls.done(&token(3));
        assert!(calls.asker().unwrap().link.same_flow(&caller(&a, "/").link));
        calls.done(&token(1));
        calls.done(&token(2));
        assert!(calls.asker().is_err());
        a.stop(None);
        b.stop(None);
    }
}
