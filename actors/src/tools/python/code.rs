//! Code as the action, on the tools' side: the one `python` tool a code-mode agent's model
//! sees, whose description lists the agent's other tools as Python functions; those
//! functions as the cell runner makes them (`CellFunction`, one rule for their signatures,
//! shown to the model and built in the interpreter from the same value); and a cell written
//! as a fenced ```python block by a model that answers in text. Knows nothing of how the
//! agent runs a cell.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::super::{ToolError, args};
use crate::llm::ToolSpec;

/// The code tool's name: its one argument is the cell.
pub const NAME: &str = "python";

/// The code tool's arguments.
#[derive(Deserialize, JsonSchema)]
struct Args {
    /// The Python cell to run: statements that call your tools as functions, with loops and
    /// conditions as needed; print what you want to read.
    code: String,
}

/// A cell's source from a `python` call's arguments.
pub fn read_call(arguments: &Value) -> Result<String, ToolError> {
    let Args { code } = args::parse(NAME, arguments)?;
    if code.trim().is_empty() {
        return Err(ToolError::new(
            "python: `code` is empty; send the Python cell to run.",
        ));
    }
    Ok(code)
}

/// One of the agent's tools as a function of the cells.
#[derive(Debug, Clone, Serialize)]
pub struct CellFunction {
    /// Its Python name: the tool's, made an identifier.
    pub name: String,
    /// The tool it calls.
    pub tool: String,
    /// Required parameters first, then optional ones (default `None`).
    pub params: Vec<Param>,
    pub doc: String,
}

/// A parameter of a `CellFunction`.
#[derive(Debug, Clone, Serialize)]
pub struct Param {
    pub name: String,
    /// A Python type name (`str`, `int`, …), if the schema says.
    pub annotation: Option<&'static str>,
    pub required: bool,
    pub about: String,
}

impl CellFunction {
    /// The function for tool `spec`. Arguments whose names are not Python identifiers are
    /// left out of the signature (a tool that needs one is better called in tool mode).
    pub fn of(spec: &ToolSpec) -> CellFunction {
        let props = spec.parameters["properties"].as_object();
        let required: Vec<&str> = spec.parameters["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut params: Vec<Param> = props
            .into_iter()
            .flatten()
            .filter(|(name, _)| is_identifier(name))
            .map(|(name, schema)| Param {
                name: name.clone(),
                annotation: match schema["type"].as_str() {
                    Some("string") => Some("str"),
                    Some("integer") => Some("int"),
                    Some("number") => Some("float"),
                    Some("boolean") => Some("bool"),
                    Some("array") => Some("list"),
                    Some("object") => Some("dict"),
                    _ => None,
                },
                required: required.contains(&name.as_str()),
                about: schema["description"]
                    .as_str()
                    .unwrap_or_default()
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" "),
            })
            .collect();
        params.sort_by_key(|p| !p.required);
        CellFunction {
            name: python_name(&spec.name),
            tool: spec.name.clone(),
            params,
            doc: spec.description.clone(),
        }
    }

    /// `name(a: str, b: int = None) -> str`, as Python's `help` shows it.
    pub fn signature(&self) -> String {
        let params: Vec<String> = self
            .params
            .iter()
            .map(|p| {
                let typed = match p.annotation {
                    Some(t) => format!("{}: {t}", p.name),
                    None => p.name.clone(),
                };
                match p.required {
                    true => typed,
                    false => format!("{typed} = None"),
                }
            })
            .collect();
        format!("{}({}) -> str", self.name, params.join(", "))
    }
}

/// Python's keywords, which no parameter or function may be named.
const KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !KEYWORDS.contains(&name)
}

/// A tool's name as a Python identifier: other characters become `_`.
fn python_name(tool: &str) -> String {
    let name: String = tool
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    match is_identifier(&name) {
        true => name,
        false => format!("tool_{name}"),
    }
}

/// How long a cell may run by its own clock: as long as a `python_execute` call.
pub fn cell_limit(settings: &crate::tools::ToolSettings) -> std::time::Duration {
    settings.python_timeout
}

/// The functions a code-mode agent's cells get: every tool it holds but `python_execute`,
/// whose work the cell itself does.
pub fn functions<'a>(tools: impl IntoIterator<Item = &'a ToolSpec>) -> Vec<CellFunction> {
    tools
        .into_iter()
        .filter(|t| t.name != super::NAME)
        .map(CellFunction::of)
        .collect()
}

/// The `python` tool as the model sees it: what a cell is, and the functions it can call.
pub fn spec(functions: &[CellFunction], limit_secs: f64) -> ToolSpec {
    let mut listed = String::new();
    for f in functions {
        listed += &format!(
            "\n\n{}\n    {}",
            f.signature(),
            f.doc.replace('\n', "\n    ")
        );
        for p in &f.params {
            let optional = if p.required { "" } else { " (optional)" };
            listed += &format!("\n    - {}{optional}: {}", p.name, p.about);
        }
    }
    ToolSpec {
        name: NAME.into(),
        description: format!(
            "Act by running a Python cell in your interpreter, which keeps its variables, \
             imports and data between cells. Your tools are Python functions in it: each takes \
             the tool's arguments (positionally or by name), runs the tool, and returns its \
             output as a string; a tool that fails raises `ToolError`, which you may catch. \
             Call as many as the work needs, in loops and conditions, and print what you want \
             to read: you see what the cell prints, and the value of a last bare expression. \
             A cell's own running time is limited to {limit_secs} s (time spent in tool calls \
             does not count). Call `terminate(...)` from a cell when the step is done.\n\n\
             The functions:{listed}"
        ),
        parameters: args::schema::<Args>(),
        variants: None,
    }
}

/// What a code-mode agent is told beside its profile's prompt.
pub const PROMPT: &str = "\n\nYou act by writing Python. Each of your actions is one call of \
the `python` tool whose `code` is a cell: the cell runs in your own interpreter, where your \
tools are Python functions, and what it prints comes back to you. Do several things in one cell \
when you can. For example:\n\n\
```python\n\
import json\n\
names = [line for line in bash('ls data').splitlines() if line.endswith('.json')]\n\
totals = {}\n\
for name in names:\n\
    totals[name] = sum(row['amount'] for row in json.load(open('data/' + name)))\n\
print(totals)\n\
```\n\n\
Variables stay between cells, so build on what earlier cells made. If you cannot call tools, \
write the cell as a ```python fenced block in your answer instead.";

/// The cell of a text answer: its first ```python fenced block, if it has one.
pub fn fenced_cell(text: &str) -> Option<String> {
    let start = text.find("```python")? + "```python".len();
    let body = text[start..].strip_prefix('\n').or_else(|| {
        // `python` was followed by more on its line (`python3`, spaces): skip the line.
        text[start..].split_once('\n').map(|(_, rest)| rest)
    })?;
    let end = match body.starts_with("```") {
        true => 0,
        false => body.find("\n```").map_or(body.len(), |at| at + 1),
    };
    let code = &body[..end];
    (!code.trim().is_empty()).then(|| code.to_string())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_tools_schema_becomes_a_signature() {
        let spec = ToolSpec {
            name: "str_replace-editor".into(),
            description: "Edit files.".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Where.\n  Relative."},
                    "command": {"type": "string", "description": "What."},
                    "view_range": {"type": "array"},
                    "bad-name": {"type": "string"},
                    "class": {"type": "string"},
                    "anything": {}
                },
                "required": ["command", "path"]
            }),
            variants: None,
        };
        let f = CellFunction::of(&spec);
        assert_eq!(f.name, "str_replace_editor");
        assert_eq!(f.tool, "str_replace-editor");
        assert_eq!(
            f.signature(),
            "str_replace_editor(command: str, path: str, anything = None, view_range: list = None) -> str"
        );
        assert_eq!(f.params[1].about, "Where. Relative.");
        assert_eq!(python_name("9lives"), "tool_9lives");
        assert_eq!(python_name("import"), "tool_import");
    }

    #[test]
    fn the_code_tool_lists_every_tool_but_python_execute() {
        let tool = |name: &str| ToolSpec {
            name: name.into(),
            description: format!("{name} does things."),
            parameters: json!({"type": "object", "properties": {}}),
            variants: None,
        };
        let held = [tool(super::super::NAME), tool("bash"), tool("terminate")];
        let functions = functions(&held);
        let names: Vec<&str> = functions.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["bash", "terminate"]);
        let spec = spec(&functions, 30.0);
        assert_eq!(spec.name, NAME);
        assert!(
            spec.description
                .contains("\n\nbash() -> str\n    bash does things.")
        );
        assert!(spec.description.contains("limited to 30 s"));
        assert_eq!(read_call(&json!({"code": "print(1)"})).unwrap(), "print(1)");
        assert!(read_call(&json!({"code": " "})).is_err());
        assert!(read_call(&json!({})).unwrap_err().0.contains("`code`"));
    }

    #[test]
    fn a_fenced_block_is_read_as_a_cell() {
        let text = "I will count.\n```python\nx = 1\nprint(x)\n```\nThen report.";
        assert_eq!(fenced_cell(text).as_deref(), Some("x = 1\nprint(x)\n"));
        assert_eq!(
            fenced_cell("```python\nprint(2)").as_deref(),
            Some("print(2)")
        );
        assert_eq!(
            fenced_cell("```python3 \nprint(3)\n```").as_deref(),
            Some("print(3)\n")
        );
        assert_eq!(fenced_cell("no code here"), None);
        assert_eq!(fenced_cell("```python\n```"), None);
        assert_eq!(fenced_cell("```sh\nls\n```"), None);
    }
}
