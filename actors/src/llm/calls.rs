//! How a profile's tool calls travel (`[llm] tool_calls`): natively (`tools` in the request,
//! `tool_calls` in the answer); as text (the tools described in the system prompt, calls
//! read from the reply in the forms models write them); or constrained (the reply must match
//! a JSON schema admitting exactly one call of an offered tool, which llama.cpp, vLLM, Ollama
//! and OpenAI enforce while the model writes). Text and constrained requests carry no tool
//! roles: earlier calls and their results are written into the conversation as text, so a
//! server that does not know tools takes them. Whatever the mode, callers see the same
//! `ToolCall`s. Knows nothing of HTTP, agents or the planner.

use serde_json::{Value, json};

use super::{ChatRequest, Content, FunctionCall, Message, Role, ToolCall, ToolChoice, ToolSpec};

/// How tool calls are asked for and read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallMode {
    Native,
    Text,
    Constrained,
    /// Native until the server refuses tools or the model answers a tool turn in plain
    /// text; then constrained (text where the server refuses a JSON schema too).
    Auto,
}

impl CallMode {
    pub fn name(self) -> &'static str {
        match self {
            CallMode::Native => "native",
            CallMode::Text => "text",
            CallMode::Constrained => "constrained",
            CallMode::Auto => "auto",
        }
    }
}

/// A request reshaped for the text or constrained mode.
pub(super) struct Shaped {
    pub messages: Vec<Message>,
    /// The `response_format` the constrained mode sends.
    pub response_format: Option<Value>,
}

/// The tools `req` offers that the model may call now (one, when `tool_choice` names it).
fn offered<'a>(req: &'a ChatRequest<'_>) -> Vec<&'a ToolSpec> {
    match &req.tool_choice {
        ToolChoice::Function(name) => req.tools.iter().filter(|t| &t.name == name).collect(),
        ToolChoice::None => vec![],
        _ => req.tools.iter().collect(),
    }
}

/// `req`'s messages for a server that sees no tools: the tools described after the system
/// prompt, earlier calls written as the text form, results as user turns.
pub(super) fn shape(mode: CallMode, req: &ChatRequest<'_>) -> Shaped {
    let tools = offered(req);
    let mut guide = String::from("\n\n# Tools\n\nYou act by calling tools. The tools:\n");
    for t in &tools {
        guide.push_str(&format!(
            "\n## {}\n{}\nArguments (JSON schema): {}\n",
            t.name, t.description, t.parameters
        ));
    }
    match mode {
        CallMode::Constrained => guide.push_str(
            "\nAnswer with exactly one JSON object and nothing else: {\"name\": TOOL, \
             \"arguments\": {…}}. Your answer is read as that tool call.\n",
        ),
        _ => guide.push_str(
            "\nTo call a tool, write the call on its own as\n<tool_call>\n{\"name\": \"TOOL\", \
             \"arguments\": {…}}\n</tool_call>\nOne call per block; several blocks for several \
             calls. The results come back in the next message. Text without a call is not an \
             answer: finish only by calling the tool for finishing.\n",
        ),
    }
    let mut messages = Vec::with_capacity(req.messages.len() + 1);
    let mut guided = false;
    for m in &req.messages {
        let mut m = Message {
            provider_data: None,
            frozen: Default::default(),
            ..(*m).clone()
        };
        match m.role {
            Role::System if !guided => {
                m.content = Some(Content::Text(format!("{}{guide}", m.text())));
                guided = true;
            }
            Role::Assistant if !m.tool_calls.is_empty() => {
                let mut text = m.text().trim().to_string();
                for c in std::mem::take(&mut m.tool_calls) {
                    let args: Value =
                        serde_json::from_str(&c.function.arguments).unwrap_or(Value::Null);
                    let call = json!({"name": c.function.name, "arguments": args});
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    text.push_str(&match mode {
                        CallMode::Constrained => call.to_string(),
                        _ => format!("<tool_call>\n{call}\n</tool_call>"),
                    });
                }
                m.content = Some(Content::Text(text));
            }
            Role::Tool => {
                let tool = m.name.take().unwrap_or_default();
                m.role = Role::User;
                m.tool_call_id = None;
                m.content = Some(Content::Text(format!(
                    "Result of the `{tool}` call:\n{}",
                    m.text()
                )));
            }
            _ => {}
        }
        messages.push(m);
    }
    if !guided {
        messages.insert(0, Message::system(guide.trim_start()));
    }
    let response_format = (mode == CallMode::Constrained).then(|| {
        json!({"type": "json_schema", "json_schema": {
            "name": "tool_call", "strict": true, "schema": one_call_schema(&tools)}})
    });
    Shaped {
        messages,
        response_format,
    }
}

/// A schema admitting one call of one of `tools`: `{"name": <its name>, "arguments": <its
/// arguments' schema>}`, by variant where the tool has them (so each variant comes with the
/// arguments it needs).
pub(super) fn one_call_schema(tools: &[&ToolSpec]) -> Value {
    let one = |t: &&ToolSpec| {
        let arguments = t.variants.as_ref().unwrap_or(&t.parameters);
        json!({
            "type": "object",
            "properties": {"name": {"const": t.name}, "arguments": arguments},
            "required": ["name", "arguments"],
            "additionalProperties": false,
        })
    };
    match tools {
        [only] => one(only),
        _ => json!({"anyOf": tools.iter().map(one).collect::<Vec<_>>()}),
    }
}

/// The calls in a text reply, and the text left around them. Read, in this order: `<tool_call>`
/// blocks (as Qwen and Hermes templates write them), fenced JSON blocks, or the reply as one
/// bare JSON object; each with `name` and `arguments` (or `parameters`; an object, or a
/// string holding one). A block that cannot be read becomes a call whose name says why, so
/// the reason goes back to the model as the failed call's result. The calls' ids are
/// `call_{answer}_{n}`: `answer` tells this answer's calls from other answers' (a step's
/// tool results are told apart by their calls' ids).
pub(super) fn read_calls(text: &str, answer: &str) -> (String, Vec<ToolCall>) {
    let mut rest = String::new();
    let mut blocks = vec![];
    let mut left = text;
    while let Some(start) = left.find("<tool_call>") {
        rest.push_str(&left[..start]);
        let after = &left[start + "<tool_call>".len()..];
        let (inside, next) = match after.find("</tool_call>") {
            Some(end) => (&after[..end], &after[end + "</tool_call>".len()..]),
            None => (after, ""),
        };
        blocks.push(inside.trim());
        left = next;
    }
    rest.push_str(left);
    if blocks.is_empty() {
        rest.clear();
        let mut left = text;
        while let Some(start) = left.find("```") {
            rest.push_str(&left[..start]);
            let after = &left[start + 3..];
            let Some(end) = after.find("```") else {
                rest.push_str(&left[start..]);
                left = "";
                break;
            };
            let inside = after[..end].trim_start_matches(|c: char| c.is_ascii_alphabetic());
            if looks_like_call(inside) {
                blocks.push(inside.trim());
            } else {
                rest.push_str(&left[start..start + 3 + end + 3]);
            }
            left = &after[end + 3..];
        }
        rest.push_str(left);
    }
    if blocks.is_empty() && looks_like_call(text) {
        rest.clear();
        blocks.push(text.trim());
    }
    let calls = blocks
        .iter()
        .enumerate()
        .map(|(i, b)| read_one(b, &format!("call_{answer}_{i}")))
        .collect();
    (rest.trim().to_string(), calls)
}

/// Whether `text` is, on its own, a JSON object naming a call.
fn looks_like_call(text: &str) -> bool {
    serde_json::from_str::<Value>(text.trim())
        .is_ok_and(|v| v.get("name").is_some_and(Value::is_string))
}

/// One call, `id`, from its JSON text.
fn read_one(block: &str, id: &str) -> ToolCall {
    let call = |name: String, arguments: String| ToolCall {
        id: id.to_string(),
        kind: "function".into(),
        function: FunctionCall { name, arguments },
    };
    let v: Value = match serde_json::from_str(block) {
        Ok(v) => v,
        Err(e) => {
            return call(
                format!("<unreadable tool call: {e}; write {{\"name\": …, \"arguments\": {{…}}}}>"),
                block.into(),
            );
        }
    };
    let Some(name) = v.get("name").and_then(Value::as_str) else {
        return call("<unreadable tool call: no \"name\">".into(), block.into());
    };
    let args = match v.get("arguments").or_else(|| v.get("parameters")) {
        None | Some(Value::Null) => "{}".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    };
    call(name.to_string(), args)
}

/// Whether a server's refusal says it does not take `tools` (Ollama: "… does not support
/// tools"; llama.cpp without `--jinja`: "tools param requires --jinja flag"; others say
/// tools or function calling are not supported).
pub(super) fn refuses_tools(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    (m.contains("tool") || m.contains("function call"))
        && [
            "not support",
            "unsupported",
            "requires --jinja",
            "not enabled",
            "not allowed",
        ]
        .iter()
        .any(|s| m.contains(s))
}

/// Whether a server's refusal says it does not take `response_format` / a JSON schema.
pub(super) fn refuses_schema(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("response_format") || m.contains("json_schema") || m.contains("schema")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ToolSet;

    fn spec(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: format!("does {name}"),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}},
                "required": ["path"]}),
            variants: None,
        }
    }

    fn names(calls: &[ToolCall]) -> Vec<(&str, Value)> {
        calls
            .iter()
            .map(|c| {
                (
                    c.function.name.as_str(),
                    serde_json::from_str(&c.function.arguments).unwrap_or(Value::Null),
                )
            })
            .collect()
    }

    #[test]
    fn calls_are_read_in_the_forms_models_write_them() {
        let (rest, calls) = read_calls(
            "I will look.\n<tool_call>\n{\"name\": \"view\", \"arguments\": {\"path\": \"a\"}}\n</tool_call>\n\
             <tool_call>{\"name\": \"view\", \"arguments\": \"{\\\"path\\\": \\\"b\\\"}\"}</tool_call>",
            "t",
        );
        assert_eq!(rest, "I will look.");
        assert_eq!(
            names(&calls),
            [
                ("view", json!({"path": "a"})),
                ("view", json!({"path": "b"}))
            ]
        );
        assert_eq!(
            (&calls[0].id[..], &calls[1].id[..]),
            ("call_t_0", "call_t_1")
        );

        let (rest, calls) = read_calls(
            "Here:\n```json\n{\"name\": \"bash\", \"parameters\": {\"command\": \"ls\"}}\n```\nDone.",
            "t",
        );
        assert_eq!(names(&calls), [("bash", json!({"command": "ls"}))]);
        assert_eq!(rest, "Here:\n\nDone.");

        let (rest, calls) = read_calls(
            " {\"name\": \"terminate\", \"arguments\": {\"status\": \"success\"}} ",
            "t",
        );
        assert_eq!(names(&calls), [("terminate", json!({"status": "success"}))]);
        assert_eq!(rest, "");

        // A fenced block of code that is no call stays text.
        let (rest, calls) = read_calls("```python\nprint(1)\n```", "t");
        assert!(calls.is_empty());
        assert_eq!(rest, "```python\nprint(1)\n```");
        let (rest, calls) = read_calls("The file is written.", "t");
        assert!(calls.is_empty());
        assert_eq!(rest, "The file is written.");
    }

    #[test]
    fn an_unreadable_call_says_why_in_its_name() {
        let (_, calls) = read_calls(
            "<tool_call>{\"name\": \"view\", \"arguments\": {</tool_call>",
            "t",
        );
        assert!(
            calls[0]
                .function
                .name
                .starts_with("<unreadable tool call: EOF"),
            "{:?}",
            calls[0]
        );
        let (_, calls) = read_calls("<tool_call>{\"arguments\": {}}</tool_call>", "t");
        assert_eq!(
            calls[0].function.name,
            "<unreadable tool call: no \"name\">"
        );
        // An unclosed block is read to the end.
        let (_, calls) = read_calls(
            "<tool_call>{\"name\": \"view\", \"arguments\": {\"path\": \"x\"}}",
            "t",
        );
        assert_eq!(names(&calls), [("view", json!({"path": "x"}))]);
    }

    #[test]
    fn text_and_constrained_requests_carry_no_tool_roles() {
        let tools = ToolSet::new(vec![spec("view"), spec("terminate")]);
        let system = Message::system("Be useful.");
        let ask = Message::user("Look at a.");
        let call = ToolCall {
            id: "c1".into(),
            kind: "function".into(),
            function: FunctionCall {
                name: "view".into(),
                arguments: "{\"path\":\"a\"}".into(),
            },
        };
        let mut made = Message::assistant("");
        made.tool_calls = vec![call.clone()];
        let result = Message::tool(&call, "contents of a");
        let req = ChatRequest {
            messages: vec![&system, &ask, &made, &result],
            tools,
            tool_choice: ToolChoice::Auto,
        };
        for mode in [CallMode::Text, CallMode::Constrained] {
            let shaped = shape(mode, &req);
            let wire = serde_json::to_value(&shaped.messages).unwrap();
            for m in wire.as_array().unwrap() {
                assert!(m["role"] != "tool" && m.get("tool_calls").is_none(), "{m}");
            }
            let sys = shaped.messages[0].text();
            assert!(
                sys.starts_with("Be useful.")
                    && sys.contains("## view")
                    && sys.contains("## terminate")
            );
            assert!(shaped.messages[2].text().contains("\"name\":\"view\""));
            assert!(shaped.messages[3].text().contains("contents of a"));
            assert_eq!(shaped.messages[3].role, Role::User);
            assert_eq!(
                shaped.response_format.is_some(),
                mode == CallMode::Constrained
            );
        }
        // What the text mode writes, it reads back.
        let (_, again) = read_calls(shape(CallMode::Text, &req).messages[2].text(), "t");
        assert_eq!(names(&again), [("view", json!({"path": "a"}))]);
    }

    #[test]
    fn the_constrained_schema_admits_one_call_of_an_offered_tool() {
        let (a, b) = (spec("view"), spec("terminate"));
        let schema = one_call_schema(&[&a, &b]);
        let arms = schema["anyOf"].as_array().unwrap();
        assert_eq!(arms.len(), 2);
        assert_eq!(arms[0]["properties"]["name"]["const"], "view");
        assert_eq!(arms[1]["properties"]["arguments"], b.parameters);
        assert_eq!(arms[0]["additionalProperties"], false);
        // A tool with variants is held to them, not to its flat schema.
        let by_variant = json!({"anyOf": [{"type": "object"}]});
        let c = ToolSpec {
            variants: Some(by_variant.clone()),
            ..spec("browse")
        };
        assert_eq!(
            one_call_schema(&[&c])["properties"]["arguments"],
            by_variant
        );
        assert_eq!(
            one_call_schema(&[&a])["properties"]["name"]["const"],
            "view"
        );
        // A named tool_choice narrows it to that tool.
        let tools = ToolSet::new(vec![a.clone(), b.clone()]);
        let hi = Message::user("hi");
        let req = ChatRequest {
            messages: vec![&hi],
            tools,
            tool_choice: ToolChoice::Function("terminate".into()),
        };
        let shaped = shape(CallMode::Constrained, &req);
        let format = shaped.response_format.unwrap();
        assert_eq!(
            format["json_schema"]["schema"]["properties"]["name"]["const"],
            "terminate"
        );
        assert_eq!(shaped.messages[0].role, Role::System);
    }

    #[test]
    fn refusals_of_tools_and_schemas_are_told_apart() {
        assert!(refuses_tools(
            "registry.ollama.ai/library/gemma:2b does not support tools"
        ));
        assert!(refuses_tools("tools param requires --jinja flag"));
        assert!(!refuses_tools(
            "the request exceeds the available context size"
        ));
        assert!(refuses_schema(
            "response_format type json_schema is not supported"
        ));
    }
}
