//! A small, forgiving HTML reader: tags with their attributes, and text with character
//! references decoded (by `html-escape`). Enough to turn pages into markdown and to read search results; it never fails,
//! whatever the input (malformed markup becomes text).

/// One piece of a document.
#[derive(Debug, Clone, PartialEq)]
pub enum Token {
    /// `<name a="b">`; the name is lower-case. `<br/>` is an open tag with `closed` set.
    Open {
        name: String,
        attrs: Vec<(String, String)>,
        closed: bool,
    },
    Close(String),
    Text(String),
}

impl Token {
    /// An attribute's value, if this is an open tag that has it.
    pub fn attr(&self, key: &str) -> Option<&str> {
        match self {
            Token::Open { attrs, .. } => attrs
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str()),
            _ => None,
        }
    }
}

/// Elements whose content is text up to their end tag, never markup.
const RAW: &[&str] = &["script", "style", "textarea", "title", "xmp"];

/// The tokens of `html`, in order.
pub fn tokens(html: &str) -> Vec<Token> {
    let mut out = vec![];
    let mut rest = html;
    while !rest.is_empty() {
        let Some(lt) = rest.find('<') else {
            out.push(Token::Text(decode(rest)));
            break;
        };
        if lt > 0 {
            out.push(Token::Text(decode(&rest[..lt])));
            rest = &rest[lt..];
        }
        let after = &rest[1..];
        if let Some(body) = after.strip_prefix("!--") {
            rest = body.find("-->").map(|i| &body[i + 3..]).unwrap_or("");
            continue;
        }
        let starts_tag = after
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || matches!(c, '/' | '!' | '?'));
        if !starts_tag {
            out.push(Token::Text("<".into()));
            rest = after;
            continue;
        }
        let end = tag_end(after);
        let inner = &after[..end];
        rest = after.get(end + 1..).unwrap_or("");
        if inner.starts_with('!') || inner.starts_with('?') {
            continue;
        }
        if let Some(name) = inner.strip_prefix('/') {
            out.push(Token::Close(tag_name(name)));
            continue;
        }
        let name = tag_name(inner);
        let closed = inner.ends_with('/');
        let attrs = attributes(&inner[name.len().min(inner.len())..]);
        out.push(Token::Open {
            name: name.clone(),
            attrs,
            closed,
        });
        if RAW.contains(&name.as_str()) && !closed {
            let (text, after_raw) = raw_text(rest, &name);
            out.push(Token::Text(if name == "script" || name == "style" {
                text.to_string()
            } else {
                decode(text)
            }));
            out.push(Token::Close(name));
            rest = after_raw;
        }
    }
    out
}

/// Where a tag's `>` is, skipping quoted attribute values.
fn tag_end(s: &str) -> usize {
    let mut quote = None;
    for (i, c) in s.char_indices() {
        match (quote, c) {
            (None, '>') => return i,
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            _ => {}
        }
    }
    s.len()
}

fn tag_name(s: &str) -> String {
    s.chars()
        .take_while(|c| !c.is_whitespace() && *c != '/' && *c != '>')
        .collect::<String>()
        .to_ascii_lowercase()
}

fn attributes(mut s: &str) -> Vec<(String, String)> {
    let mut out = vec![];
    loop {
        s = s.trim_start_matches(|c: char| c.is_whitespace() || c == '/');
        if s.is_empty() {
            return out;
        }
        let name_end = s
            .find(|c: char| c.is_whitespace() || c == '=' || c == '/')
            .unwrap_or(s.len());
        let name = s[..name_end].to_ascii_lowercase();
        s = s[name_end..].trim_start();
        let value = if let Some(v) = s.strip_prefix('=') {
            let v = v.trim_start();
            let (value, rest) = match v.chars().next() {
                Some(q @ ('"' | '\'')) => {
                    let body = &v[1..];
                    let end = body.find(q).unwrap_or(body.len());
                    (&body[..end], body.get(end + 1..).unwrap_or(""))
                }
                _ => {
                    let end = v.find(char::is_whitespace).unwrap_or(v.len());
                    (&v[..end], &v[end..])
                }
            };
            s = rest;
            decode(value)
        } else {
            String::new()
        };
        if !name.is_empty() {
            out.push((name, value));
        }
    }
}

/// The text up to `</name`, and what follows its end tag.
fn raw_text<'a>(s: &'a str, name: &str) -> (&'a str, &'a str) {
    let lower = s.to_ascii_lowercase();
    match lower.find(&format!("</{name}")) {
        Some(i) => {
            let after = &s[i..];
            let close = after.find('>').map(|j| j + 1).unwrap_or(after.len());
            (&s[..i], &after[close..])
        }
        None => (s, ""),
    }
}

/// Replace character references (`&amp;`, `&#39;`, `&#x2014;`, and every name HTML
/// defines, by `html-escape`'s table) with text. A reference must end in `;`; one that does
/// not, or that names nothing, stays as written. A no-break space reads as a space.
fn decode(s: &str) -> String {
    let decoded = html_escape::decode_html_entities(s);
    if decoded.contains('\u{a0}') {
        decoded.replace('\u{a0}', " ")
    } else {
        decoded.into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_tags_attributes_text_and_entities() {
        let t = tokens(
            "<!doctype html><p class=\"a b\" id=x>Fish &amp; chips&#33; &#x2014; <br/><a href='/q?a=1&amp;b=2'>go</a></p>\
             <script>if (a < b) {}</script><!-- gone -->1 < 2",
        );
        assert_eq!(t[0].attr("class"), Some("a b"));
        assert_eq!(t[0].attr("id"), Some("x"));
        assert_eq!(t[1], Token::Text("Fish & chips! — ".into()));
        assert!(matches!(&t[2], Token::Open { name, closed: true, .. } if name == "br"));
        assert_eq!(t[3].attr("href"), Some("/q?a=1&b=2"));
        assert_eq!(t[8], Token::Text("if (a < b) {}".into()));
        assert_eq!(
            t[10..],
            [
                Token::Text("1 ".into()),
                Token::Text("<".into()),
                Token::Text(" 2".into())
            ]
        );
    }

    #[test]
    fn every_named_reference_is_decoded_and_unknown_ones_stay() {
        let t = tokens(
            "Caf&eacute;&nbsp;au lait&hellip; &Omega;&ne;&frac12; &NotEqualTilde; &rarr;&#8364;",
        );
        assert_eq!(
            t,
            [Token::Text("Café au lait… Ω≠½ \u{2242}\u{338} →€".into())]
        );
        let t = tokens("<a title=\"&ldquo;x&rdquo; &amp;c\">AT&T &bogus; &amp &#0; &#xZZ;</a>");
        assert_eq!(t[0].attr("title"), Some("“x” &c"));
        assert_eq!(t[1], Token::Text("AT&T &bogus; &amp &#0; &#xZZ;".into()));
    }
}
