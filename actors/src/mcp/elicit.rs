//! An MCP server's elicitation as a question to the person: the question's text, and the
//! person's answer read back (`decline`, `cancel`, or the content) and checked against the
//! server's requested schema. Elicitation schemas are flat objects of primitive fields
//! (strings with a format, length or choices; numbers and integers in a range; booleans;
//! lists of choices), so the check here covers exactly that subset. Knows nothing of actors.

use serde_json::{Map, Value};

/// What the person chose.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// The content, checked against the schema (empty for a URL the person visited).
    Accept(Map<String, Value>),
    /// No, with the person's reason if they gave one.
    Decline(Option<String>),
    Cancel,
}

/// The answer that declines, with a reason: what a flow with no person answers.
pub fn declined(why: &str) -> String {
    format!("decline: {why}")
}

/// The question put to the person for a form elicitation.
pub fn form_question(server: &str, message: &str) -> String {
    format!(
        "The MCP server `{server}` asks: {message}\n(Answer with a JSON object that meets the \
         schema shown, or a plain value when it asks for one field; `decline` to refuse, \
         `cancel` to dismiss.)"
    )
}

/// The question put to the person for a URL elicitation.
pub fn url_question(server: &str, message: &str, url: &str) -> String {
    format!(
        "The MCP server `{server}` asks you to open {url}\n{message}\n(Answer `done` once you \
         have finished there, `decline` to refuse, `cancel` to dismiss.)"
    )
}

/// Read the person's answer to a URL elicitation: `done` (or `ok`, `yes`) accepts; any
/// other answer declines, saying what it was.
pub fn read_url(answer: &str) -> Reply {
    let done = ["done", "ok", "yes", "accept"];
    if done.iter().any(|d| answer.trim().eq_ignore_ascii_case(d)) {
        return Reply::Accept(Map::new());
    }
    refusal(answer)
        .unwrap_or_else(|| Reply::Decline(Some(format!("the answer was: {}", answer.trim()))))
}

/// `decline[: reason]` or `cancel`, in any case.
fn refusal(answer: &str) -> Option<Reply> {
    let a = answer.trim();
    let lower = a.to_ascii_lowercase();
    if lower == "cancel" {
        return Some(Reply::Cancel);
    }
    if lower == "decline" {
        return Some(Reply::Decline(None));
    }
    if lower.starts_with("decline:") {
        let why = a["decline:".len()..].trim();
        return Some(Reply::Decline((!why.is_empty()).then(|| why.to_string())));
    }
    None
}

/// Read the person's answer to a form elicitation: a refusal, a JSON object, or (for a
/// schema of one field) that field's value; `Err` says what is wrong with it.
pub fn read_form(answer: &str, schema: &Value) -> Result<Reply, String> {
    if let Some(r) = refusal(answer) {
        return Ok(r);
    }
    let props = schema
        .get("properties")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let content = match serde_json::from_str::<Value>(answer.trim()) {
        Ok(Value::Object(o)) => o,
        parsed if props.len() == 1 => {
            let (name, field) = props.iter().next().expect("one field");
            let value = match parsed {
                Ok(v) if !matches!(field.get("type").and_then(Value::as_str), Some("string")) => v,
                _ => Value::String(answer.trim().to_string()),
            };
            Map::from_iter([(name.clone(), value)])
        }
        _ => {
            return Err(
                "the answer is not a JSON object (write {\"field\": value, …}), `decline` or `cancel`"
                    .into(),
            );
        }
    };
    check(&content, schema, &props)?;
    Ok(Reply::Accept(content))
}

/// `content` meets the schema: every required field is there, no field is unknown, each
/// has its type and stays within its bounds.
fn check(
    content: &Map<String, Value>,
    schema: &Value,
    props: &Map<String, Value>,
) -> Result<(), String> {
    let required = schema.get("required").and_then(Value::as_array);
    for name in required.into_iter().flatten().filter_map(Value::as_str) {
        if !content.contains_key(name) {
            return Err(format!("`{name}` is required"));
        }
    }
    for (name, value) in content {
        let field = props.get(name).ok_or_else(|| {
            format!(
                "`{name}` is not a field of the form (fields: {})",
                names(props)
            )
        })?;
        value_meets(value, field).map_err(|why| format!("`{name}`: {why}"))?;
    }
    Ok(())
}

fn names(props: &Map<String, Value>) -> String {
    props.keys().cloned().collect::<Vec<_>>().join(", ")
}

/// The values a field (or a list's items) may take, if it names them.
fn choices(field: &Value) -> Option<Vec<Value>> {
    if let Some(list) = field.get("enum").and_then(Value::as_array) {
        return Some(list.clone());
    }
    let options = field
        .get("oneOf")
        .or_else(|| field.get("anyOf"))?
        .as_array()?;
    Some(
        options
            .iter()
            .filter_map(|o| o.get("const").cloned())
            .collect(),
    )
}

fn value_meets(value: &Value, field: &Value) -> Result<(), String> {
    let num = |k: &str| field.get(k).and_then(Value::as_f64);
    match field
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("string")
    {
        "string" => {
            let s = value.as_str().ok_or("must be text")?;
            let len = s.chars().count() as f64;
            if num("minLength").is_some_and(|m| len < m)
                || num("maxLength").is_some_and(|m| len > m)
            {
                return Err(format!(
                    "must be {} to {} characters long",
                    num("minLength").unwrap_or(0.0),
                    num("maxLength").map_or("any number of".into(), |m| m.to_string())
                ));
            }
            if let Some(format) = field.get("format").and_then(Value::as_str) {
                format_meets(s, format)?;
            }
        }
        "number" | "integer" => {
            let n = value.as_f64().ok_or("must be a number")?;
            if field["type"] == "integer" && n.fract() != 0.0 {
                return Err("must be a whole number".into());
            }
            if num("minimum").is_some_and(|m| n < m) || num("maximum").is_some_and(|m| n > m) {
                return Err(format!(
                    "must be from {} to {}",
                    num("minimum").map_or("any".into(), |m| m.to_string()),
                    num("maximum").map_or("any".into(), |m| m.to_string())
                ));
            }
        }
        "boolean" => {
            value.as_bool().ok_or("must be true or false")?;
        }
        "array" => {
            let list = value.as_array().ok_or("must be a list")?;
            let len = list.len() as f64;
            if num("minItems").is_some_and(|m| len < m) || num("maxItems").is_some_and(|m| len > m)
            {
                return Err(format!(
                    "must hold {} to {} items",
                    num("minItems").unwrap_or(0.0),
                    num("maxItems").map_or("any number of".into(), |m| m.to_string())
                ));
            }
            let items = field.get("items").cloned().unwrap_or_default();
            for item in list {
                value_meets(item, &items)?;
            }
            return Ok(());
        }
        other => return Err(format!("has type `{other}`, which a form cannot ask for")),
    }
    match choices(field) {
        Some(allowed) if !allowed.contains(value) => Err(format!(
            "must be one of {}",
            allowed
                .iter()
                .map(Value::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )),
        _ => Ok(()),
    }
}

/// The formats elicitation names, checked by their shape.
fn format_meets(s: &str, format: &str) -> Result<(), String> {
    let ok = match format {
        "email" => s.split_once('@').is_some_and(|(user, host)| {
            !user.is_empty() && host.contains('.') && !host.starts_with('.') && !s.contains(' ')
        }),
        "uri" => reqwest::Url::parse(s).is_ok(),
        "date" => chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok(),
        "date-time" => chrono::DateTime::parse_from_rfc3339(s).is_ok(),
        _ => true,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("\"{s}\" is not a valid {format}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "name": {"type": "string", "minLength": 1},
            "age": {"type": "integer", "minimum": 1, "maximum": 120},
            "email": {"type": "string", "format": "email"},
            "pet": {"type": "string", "enum": ["cat", "dog"]},
            "hero": {"type": "string", "oneOf": [{"const": "h1", "title": "Superman"}]},
            "fish": {"type": "array", "maxItems": 2, "items": {"anyOf": [{"const": "f1"}, {"const": "f2"}]}},
            "ok": {"type": "boolean"},
            "born": {"type": "string", "format": "date"}
        }, "required": ["name"]})
    }

    #[test]
    fn answers_are_read_and_checked_against_the_schema() {
        let s = schema();
        let good = r#"{"name": "Ada", "age": 36, "email": "ada@example.org", "pet": "cat",
            "hero": "h1", "fish": ["f1", "f2"], "ok": true, "born": "1815-12-10"}"#;
        assert!(matches!(read_form(good, &s), Ok(Reply::Accept(c)) if c.len() == 8));
        assert_eq!(read_form(" Decline ", &s), Ok(Reply::Decline(None)));
        assert_eq!(
            read_form("decline: not today", &s),
            Ok(Reply::Decline(Some("not today".into())))
        );
        assert_eq!(read_form("cancel", &s), Ok(Reply::Cancel));
        for (bad, says) in [
            (r#"{"age": 3}"#, "`name` is required"),
            (
                r#"{"name": "A", "age": 300}"#,
                "`age`: must be from 1 to 120",
            ),
            (r#"{"name": "A", "age": 2.5}"#, "whole number"),
            (r#"{"name": "A", "email": "nope"}"#, "not a valid email"),
            (
                r#"{"name": "A", "pet": "fox"}"#,
                "must be one of \"cat\", \"dog\"",
            ),
            (r#"{"name": "A", "hero": "h9"}"#, "must be one of \"h1\""),
            (
                r#"{"name": "A", "fish": ["f1", "f2", "f1"]}"#,
                "0 to 2 items",
            ),
            (r#"{"name": "A", "fish": ["f9"]}"#, "must be one of"),
            (r#"{"name": "A", "ok": "yes"}"#, "true or false"),
            (r#"{"name": "A", "born": "10/12/1815"}"#, "not a valid date"),
            (
                r#"{"name": "A", "colour": "red"}"#,
                "not a field of the form",
            ),
            ("Ada", "not a JSON object"),
        ] {
            let e = read_form(bad, &s).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn a_one_field_form_takes_a_plain_value() {
        let s = json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
        assert_eq!(
            read_form("Lisbon", &s),
            Ok(Reply::Accept(Map::from_iter([(
                "city".into(),
                json!("Lisbon")
            )])))
        );
        let n = json!({"type": "object", "properties": {"n": {"type": "integer", "maximum": 9}}});
        assert_eq!(
            read_form("7", &n),
            Ok(Reply::Accept(Map::from_iter([("n".into(), json!(7))])))
        );
        assert!(read_form("70", &n).unwrap_err().contains("from any to 9"));
        assert_eq!(read_url("done"), Reply::Accept(Map::new()));
        assert_eq!(read_url("cancel"), Reply::Cancel);
        assert_eq!(
            read_url("(no answer: standard input is closed)"),
            Reply::Decline(Some(
                "the answer was: (no answer: standard input is closed)".into()
            ))
        );
    }
}
