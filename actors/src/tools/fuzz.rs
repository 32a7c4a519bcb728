//! Generated tool arguments (test builds only): every built-in tool's `call` is given
//! arguments drawn from its own schema, some values replaced by any JSON. The properties:
//! reading them never panics, a refusal starts with the tool's name, and one for arguments
//! that cannot be read names one of the tool's arguments (or the arguments as a whole).
//!
//! So that no generated call runs a command, writes a file or opens a page, every call but
//! those of the tools that only keep state (`terminate`, `planning`) carries one argument
//! that cannot be read: a required one of the wrong type. Such a call must fail at once,
//! before its first await.

use futures_util::FutureExt;
use serde_json::{Map, Value, json};

use super::tests::{TempDir, host_ctx};
use super::{BUILTINS, Tool, ToolSettings, planning};
use crate::fuzz::{Gen, run};

/// Tools whose calls only change their own state, so any arguments may reach them.
const STATEFUL_ONLY: &[&str] = &["terminate", "planning"];

/// A value the schema `s` describes, or now and then any value at all.
fn sample(g: &mut Gen, s: &Value, depth: usize) -> Value {
    if g.one_in(8) || depth == 0 {
        return g.json(2);
    }
    if let Some(alts) = s
        .get("anyOf")
        .or_else(|| s.get("oneOf"))
        .and_then(Value::as_array)
        && !alts.is_empty()
    {
        let alt = g.pick(alts).clone();
        return sample(g, &alt, depth - 1);
    }
    if let Some(words) = s.get("enum").and_then(Value::as_array)
        && !words.is_empty()
        && !g.one_in(6)
    {
        return g.pick(words).clone();
    }
    let kind = match s.get("type") {
        Some(Value::Array(kinds)) if !kinds.is_empty() => g.pick(kinds).clone(),
        Some(kind) => kind.clone(),
        None => return g.json(2),
    };
    match kind.as_str().unwrap_or("") {
        "string" => Value::String(g.text(24)),
        "integer" | "number" => g.number(),
        "boolean" => Value::Bool(g.one_in(2)),
        "array" => {
            let items = s.get("items").cloned().unwrap_or(Value::Null);
            (0..g.below(4))
                .map(|_| sample(g, &items, depth - 1))
                .collect()
        }
        "object" => object(g, s, depth - 1),
        _ => g.json(2),
    }
}

/// An object with some of the properties of `s` (each required one more often than not),
/// and now and then one it does not know.
fn object(g: &mut Gen, s: &Value, depth: usize) -> Value {
    let required: Vec<&str> = s
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut obj = Map::new();
    if let Some(props) = s.get("properties").and_then(Value::as_object) {
        for (key, schema) in props {
            let keep = if required.contains(&key.as_str()) {
                6
            } else {
                2
            };
            if g.below(8) < keep {
                obj.insert(key.clone(), sample(g, schema, depth));
            }
        }
    }
    if g.one_in(6) {
        obj.insert(g.text(8), g.json(1));
    }
    Value::Object(obj)
}

/// A non-null value no property of `kind` accepts.
fn wrong_for(g: &mut Gen, kind: &str) -> Value {
    let values = [
        ("integer", json!(7)),
        ("string", json!("yes")),
        ("number", json!(1.5)),
        ("array", json!([1])),
        ("object", json!({"a": 1})),
        ("boolean", json!(false)),
    ];
    // An integer is also a number, and a lone string may stand for a list of one (`crawl`
    // reads `urls` so).
    let fits = |k: &str| {
        k == kind || (kind == "number" && k == "integer") || (kind == "array" && k == "string")
    };
    let wrong: Vec<&Value> = values
        .iter()
        .filter(|(k, _)| !fits(k))
        .map(|(_, v)| v)
        .collect();
    (*g.pick(&wrong)).clone()
}

/// The required properties of `schema` that have a single type, with that type.
fn typed_required(schema: &Value) -> Vec<(String, String)> {
    let required = schema.get("required").and_then(Value::as_array);
    required
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter_map(|key| {
            let kind = schema.get("properties")?.get(key)?.get("type")?.as_str()?;
            Some((key.to_string(), kind.to_string()))
        })
        .collect()
}

#[test]
fn fuzz_tool_arguments() {
    let settings = ToolSettings::default();
    let mut tools: Vec<(&str, Box<dyn Tool>, Value)> = BUILTINS
        .iter()
        .map(|b| {
            let tool = (b.make)(&settings);
            let schema = tool.spec().parameters;
            (b.name, tool, schema)
        })
        .collect();
    for (name, _, schema) in &tools {
        assert!(
            STATEFUL_ONLY.contains(name) || !typed_required(schema).is_empty(),
            "{name} has no required argument of one type to spoil; the fuzz test cannot keep its calls from running"
        );
    }
    let ws = TempDir::new("fuzz-args");
    let ctx = host_ctx(&ws.0);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _inside = rt.enter();
    run("tool_arguments", |g| {
        let (name, tool, schema) = &mut tools[g.below(BUILTINS.len())];
        let mut args = object(g, schema, 4);
        let spoilt = !STATEFUL_ONLY.contains(name) || g.one_in(2);
        if spoilt {
            let (key, kind) = g.pick(&typed_required(schema)).clone();
            let wrong = wrong_for(g, &kind);
            args[key] = wrong;
        }
        let Some(result) = tool.call(args.clone(), &ctx).now_or_never() else {
            panic!("{name} waited on a call it should have refused: {args}");
        };
        let refusal = match result {
            Ok(_) => return assert!(!spoilt, "{name} accepted {args}"),
            Err(e) => e.0,
        };
        assert_refusal(name, &refusal, &args, spoilt.then_some(&*schema));
        if *name == "planning" {
            // The planner reads its own planning calls the same way.
            if let Err(e) = planning::read_call(&args) {
                assert_refusal(name, &e.0, &args, spoilt.then_some(&*schema));
            }
        }
    });
}

/// `msg` starts with `tool: `; for arguments that cannot be read (`read_against` their
/// schema), it also names one of the tool's arguments or the arguments as a whole.
fn assert_refusal(tool: &str, msg: &str, args: &Value, read_against: Option<&Value>) {
    let Some(rest) = msg.strip_prefix(&format!("{tool}: ")) else {
        panic!("{tool}'s refusal of {args} does not name the tool: {msg}");
    };
    let Some(schema) = read_against else {
        return;
    };
    let props = schema.get("properties").and_then(Value::as_object);
    let mut names = props.into_iter().flat_map(|m| m.keys());
    assert!(
        rest.contains("arguments") || names.any(|n| rest.contains(n.as_str())),
        "{tool}'s refusal of {args} names no argument: {msg}"
    );
}
