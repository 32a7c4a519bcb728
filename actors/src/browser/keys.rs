//! `send_keys` arguments as key presses: `Enter`, `Control+a`, `Shift+Tab`, `ArrowDown`
//! (Playwright's key names, as OpenManus passes them), or plain text typed as it is.

use fantoccini::key::Key;

/// The key presses for `keys`: chords of modifiers and one key joined by `+`, separated by
/// spaces; anything that does not parse as keys is typed as text. Each inner vector is one
/// chord, pressed together and released in reverse order.
pub fn parse(keys: &str) -> Vec<Vec<char>> {
    let chords: Option<Vec<Vec<char>>> = keys.split_whitespace().map(chord).collect();
    match chords {
        Some(c) if !c.is_empty() => c,
        _ => keys.chars().map(|c| vec![c]).collect(),
    }
}

fn chord(text: &str) -> Option<Vec<char>> {
    let parts: Vec<&str> = text.split('+').collect();
    // `+` alone, or `Control++`, names the plus key.
    let mut out = vec![];
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        match (named(part), part.chars().count()) {
            (Some(k), _) => out.push(k),
            (None, 1) if last => out.push(part.chars().next()?),
            (None, 0) if last && text.ends_with('+') => out.push('+'),
            _ => return None,
        }
    }
    // A single printable character is text, not a key name.
    (out.len() > 1 || named(text).is_some()).then_some(out)
}

fn named(name: &str) -> Option<char> {
    let key = match name.to_ascii_lowercase().as_str() {
        "enter" | "return" => Key::Enter,
        "tab" => Key::Tab,
        "escape" | "esc" => Key::Escape,
        "backspace" => Key::Backspace,
        "delete" | "del" => Key::Delete,
        "insert" => Key::Insert,
        "space" => Key::Space,
        "arrowup" | "up" => Key::Up,
        "arrowdown" | "down" => Key::Down,
        "arrowleft" | "left" => Key::Left,
        "arrowright" | "right" => Key::Right,
        "home" => Key::Home,
        "end" => Key::End,
        "pageup" => Key::PageUp,
        "pagedown" => Key::PageDown,
        "control" | "ctrl" | "controlormeta" => Key::Control,
        "shift" => Key::Shift,
        "alt" | "option" => Key::Alt,
        "meta" | "command" | "cmd" => Key::Meta,
        "f1" => Key::F1,
        "f2" => Key::F2,
        "f3" => Key::F3,
        "f4" => Key::F4,
        "f5" => Key::F5,
        "f6" => Key::F6,
        "f7" => Key::F7,
        "f8" => Key::F8,
        "f9" => Key::F9,
        "f10" => Key::F10,
        "f11" => Key::F11,
        "f12" => Key::F12,
        _ => return None,
    };
    Some(key.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_chords_and_text() {
        assert_eq!(parse("Enter"), vec![vec![char::from(Key::Enter)]]);
        assert_eq!(
            parse("Control+a"),
            vec![vec![char::from(Key::Control), 'a']]
        );
        assert_eq!(
            parse("Shift+Tab Enter"),
            vec![
                vec![char::from(Key::Shift), char::from(Key::Tab)],
                vec![char::from(Key::Enter)]
            ]
        );
        assert_eq!(parse("hi"), vec![vec!['h'], vec!['i']]);
        assert_eq!(parse("a"), vec![vec!['a']]);
        assert_eq!(
            parse("hello world"),
            "hello world".chars().map(|c| vec![c]).collect::<Vec<_>>()
        );
    }
}
