//! Text helpers the whole engine shares: keeping the head and tail of a long text, and
//! naming a JSON value's kind in a message.

use serde_json::Value;

/// Keep the head and tail of a long text, saying how much was cut.
pub fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let head = floor_char(text, max * 2 / 3);
    let tail_start = ceil_char(text, text.len() - (max - head));
    format!(
        "{}\n[... {} characters cut ...]\n{}",
        &text[..head],
        tail_start - head,
        &text[tail_start..]
    )
}

fn floor_char(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_char(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// The JSON type name of a value, for error messages.
pub fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_keeps_head_and_tail() {
        let text = "a".repeat(50) + &"b".repeat(50);
        let c = clip(&text, 30);
        assert!(
            c.starts_with("aaaa") && c.ends_with("bbbb") && c.contains("characters cut"),
            "{c}"
        );
        assert_eq!(clip("short", 30), "short");
    }
}
