//! Web pages as markdown for the model: headings, paragraphs, lists, links (made absolute),
//! emphasis, code and tables; scripts, styles, forms' option lists and other non-content
//! left out. Also counts the words and links, for `crawl`'s per-page figures.

use super::html::{Token, tokens};

/// A page read for the model.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Page {
    pub title: String,
    pub markdown: String,
    pub words: usize,
    pub links: usize,
}

/// Content of these is left out entirely.
const SKIP: &[&str] = &[
    "script", "style", "noscript", "template", "svg", "iframe", "canvas", "select", "head",
    "textarea", "object",
];
const BLOCK: &[&str] = &[
    "p",
    "div",
    "section",
    "article",
    "main",
    "header",
    "footer",
    "aside",
    "nav",
    "form",
    "table",
    "ul",
    "ol",
    "dl",
    "dt",
    "dd",
    "figure",
    "figcaption",
    "address",
    "fieldset",
    "details",
    "summary",
    "body",
    "html",
    "center",
];

struct Writer {
    out: String,
    /// Newlines owed before the next text (the largest asked for wins).
    owed: usize,
    /// Open inline wrappers: the tag, where its text starts in `out`, and a link's target.
    inline: Vec<(String, usize, Option<String>)>,
    /// Open lists: `None` for bullets, the next number for ordered ones.
    lists: Vec<Option<usize>>,
    pre: usize,
    words: usize,
    links: usize,
}

impl Writer {
    fn brk(&mut self, n: usize) {
        self.owed = self.owed.max(n);
    }

    fn write(&mut self, s: &str) {
        if self.owed > 0 && !self.out.is_empty() {
            let have = self.out.len() - self.out.trim_end_matches('\n').len();
            self.out
                .truncate(self.out.trim_end_matches([' ', '\n']).len());
            self.out.push_str(&"\n".repeat(self.owed.max(have.min(2))));
        }
        self.owed = 0;
        self.out.push_str(s);
    }

    fn text(&mut self, t: &str) {
        if self.pre > 0 {
            self.write(t);
            return;
        }
        let squashed = t.split_whitespace().collect::<Vec<_>>().join(" ");
        if squashed.is_empty() {
            if !t.is_empty() && !self.out.ends_with([' ', '\n']) && self.owed == 0 {
                self.out.push(' ');
            }
            return;
        }
        self.words += squashed.split(' ').count();
        let lead = t.starts_with(char::is_whitespace) && !self.out.ends_with([' ', '\n', '(', '[']);
        let tail = t.ends_with(char::is_whitespace);
        let mut s = String::new();
        if lead && self.owed == 0 {
            s.push(' ');
        }
        s.push_str(&squashed);
        if tail {
            s.push(' ');
        }
        self.write(&s);
    }

    /// Close the innermost inline wrapper named `name`, wrapping its text.
    fn close_inline(&mut self, name: &str) {
        let Some(i) = self.inline.iter().rposition(|(n, _, _)| n == name) else {
            return;
        };
        let (_, start, href) = self.inline.remove(i);
        let start = start.min(self.out.len());
        let inner = self.out[start..].trim().to_string();
        if inner.is_empty() {
            return;
        }
        let wrapped = match (name, href) {
            ("a", Some(h)) => {
                self.links += 1;
                format!("[{inner}]({h})")
            }
            ("a", None) => inner,
            ("code", _) => format!("`{inner}`"),
            ("em" | "i", _) => format!("*{inner}*"),
            _ => format!("**{inner}**"),
        };
        let trailing = if self.out.ends_with(' ') { " " } else { "" };
        self.out.truncate(start);
        if !self.out.is_empty() && !self.out.ends_with([' ', '\n', '(']) {
            self.out.push(' ');
        }
        self.out.push_str(&wrapped);
        self.out.push_str(trailing);
    }
}

/// Resolve `href` against `base`; only web links are kept.
fn absolute(base: Option<&url::Url>, href: &str) -> Option<String> {
    let u = match base {
        Some(b) => b.join(href).ok()?,
        None => url::Url::parse(href).ok()?,
    };
    matches!(u.scheme(), "http" | "https").then(|| u.to_string())
}

/// Read `html` (fetched from `base_url`) as markdown.
pub fn page(html: &str, base_url: &str) -> Page {
    let base = url::Url::parse(base_url).ok();
    let mut w = Writer {
        out: String::new(),
        owed: 0,
        inline: vec![],
        lists: vec![],
        pre: 0,
        words: 0,
        links: 0,
    };
    let mut title = String::new();
    let mut skipping: Vec<String> = vec![];
    let mut in_title = false;
    let mut row_cells = 0;
    for t in tokens(html) {
        match &t {
            Token::Open { name, .. } if name == "title" => {
                in_title = true;
                title.clear();
                continue;
            }
            Token::Close(n) if n == "title" => {
                in_title = false;
                continue;
            }
            Token::Text(s) if in_title => {
                title.push_str(s);
                continue;
            }
            _ => {}
        }
        if let Some(top) = skipping.last() {
            match &t {
                Token::Close(n) if n == top => {
                    skipping.pop();
                }
                Token::Open {
                    name,
                    closed: false,
                    ..
                } if name == top => skipping.push(name.clone()),
                _ => {}
            }
            continue;
        }
        match t {
            Token::Text(s) => w.text(&s),
            Token::Open {
                name,
                attrs,
                closed,
            } => {
                let attr = |k: &str| attrs.iter().find(|(a, _)| a == k).map(|(_, v)| v.as_str());
                let hidden = attr("hidden").is_some() || attr("aria-hidden") == Some("true");
                if (SKIP.contains(&name.as_str()) || hidden) && !closed {
                    skipping.push(name);
                    continue;
                }
                match name.as_str() {
                    "br" => {
                        w.out.truncate(w.out.trim_end_matches(' ').len());
                        w.out.push('\n');
                    }
                    "hr" => {
                        w.brk(2);
                        w.write("---");
                        w.brk(2);
                    }
                    h if h.len() == 2 && h.starts_with('h') && h.as_bytes()[1].is_ascii_digit() => {
                        let level = (h.as_bytes()[1] - b'0').clamp(1, 6) as usize;
                        w.brk(2);
                        w.write(&format!("{} ", "#".repeat(level)));
                    }
                    "li" => {
                        let depth = w.lists.len().saturating_sub(1);
                        let marker = match w.lists.last_mut() {
                            Some(Some(n)) => {
                                *n += 1;
                                format!("{}. ", *n - 1)
                            }
                            _ => "- ".into(),
                        };
                        w.brk(1);
                        w.write(&format!("{}{marker}", "  ".repeat(depth)));
                    }
                    "ul" | "ol" => {
                        let start = attr("start").and_then(|s| s.parse().ok()).unwrap_or(1);
                        w.lists.push((name == "ol").then_some(start));
                        w.brk(if w.lists.len() == 1 { 2 } else { 1 });
                    }
                    "pre" => {
                        w.brk(2);
                        w.write("```\n");
                        w.pre += 1;
                    }
                    "blockquote" => {
                        w.brk(2);
                        w.write("> ");
                    }
                    "tr" => {
                        w.brk(1);
                        row_cells = 0;
                    }
                    "td" | "th" => {
                        w.write(if row_cells == 0 { "| " } else { " | " });
                        row_cells += 1;
                    }
                    "a" | "strong" | "b" | "em" | "i" | "code" => {
                        let href = match name.as_str() {
                            "a" => attr("href").and_then(|h| absolute(base.as_ref(), h)),
                            _ => None,
                        };
                        w.write("");
                        let at = w.out.len();
                        w.inline.push((name, at, href));
                    }
                    "img" => {
                        if let Some(alt) = attr("alt").filter(|a| !a.trim().is_empty()) {
                            w.text(&format!(" {} ", alt.trim()));
                        }
                    }
                    n if BLOCK.contains(&n) => w.brk(2),
                    _ => {}
                }
            }
            Token::Close(name) => match name.as_str() {
                "pre" => {
                    w.pre = w.pre.saturating_sub(1);
                    w.out.truncate(w.out.trim_end().len());
                    w.out.push_str("\n```");
                    w.brk(2);
                }
                "ul" | "ol" => {
                    w.lists.pop();
                    w.brk(if w.lists.is_empty() { 2 } else { 1 });
                }
                "tr" => {
                    if row_cells > 0 {
                        w.write(" |");
                    }
                    w.brk(1);
                }
                "a" | "strong" | "b" | "em" | "i" | "code" => w.close_inline(&name),
                h if h.len() == 2 && h.starts_with('h') && h.as_bytes()[1].is_ascii_digit() => {
                    w.brk(2)
                }
                "li" => w.brk(1),
                n if BLOCK.contains(&n) || n == "blockquote" => w.brk(2),
                _ => {}
            },
        }
    }
    let markdown = w
        .out
        .lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_string();
    Page {
        title: title.split_whitespace().collect::<Vec<_>>().join(" "),
        markdown,
        words: w.words,
        links: w.links,
    }
}

/// `text` cut to at most `max` characters, saying so when it was cut.
pub fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((i, _)) => format!(
            "{}\n[... cut at {max} of {} characters]",
            &text[..i],
            text.chars().count()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_become_markdown() {
        let html = r#"<html><head><title> The  Shop </title><style>p{}</style></head><body>
            <nav><a href="/">Home</a> <a href="javascript:void(0)">menu</a></nav>
            <h1>Kites &amp; more</h1>
            <p>We sell <b>red</b> and <em>blue</em> kites. See <a href="/kites?page=2">all kites</a>.</p>
            <ul><li>Delta</li><li>Box <ol><li>small</li><li>large</li></ol></li></ul>
            <pre>let x = 1;
  y</pre>
            <table><tr><th>Kite</th><th>Price</th></tr><tr><td>Delta</td><td>12</td></tr></table>
            <script>document.write("no")</script><div hidden>secret</div>
            <form><select><option>one</option></select></form>
            <p>Line one<br>line two</p></body></html>"#;
        let p = page(html, "https://shop.test/a/b");
        assert_eq!(p.title, "The Shop");
        let expected = "[Home](https://shop.test/) menu\n\n\
                        # Kites & more\n\n\
                        We sell **red** and *blue* kites. See [all kites](https://shop.test/kites?page=2).\n\n\
                        - Delta\n- Box\n  1. small\n  2. large\n\n\
                        ```\nlet x = 1;\n  y\n```\n\n\
                        | Kite | Price |\n| Delta | 12 |\n\n\
                        Line one\nline two";
        assert_eq!(p.markdown, expected, "\n{}", p.markdown);
        assert_eq!(p.links, 2);
        assert!(p.words >= 20, "{}", p.words);
        assert_eq!(cut("abcdef", 3), "abc\n[... cut at 3 of 6 characters]");
        assert_eq!(cut("abc", 3), "abc");
    }
}
