//! A summary that degenerates into one sentence said over and over (a small model that has
//! lost its way does this until `max_tokens`) is cut after the sentence's first saying, and
//! the cut says so. Knows nothing of the model or the plan: text in, text out.

/// Sayings in a row that make a sentence a degenerate repetition.
const IN_A_ROW: usize = 3;
/// Shorter sentences ("Yes.", a list's "-") may well repeat and are left alone.
const SHORTEST: usize = 8;

/// `text` cut after the first sentence that is then said again at least `IN_A_ROW - 1`
/// times in a row, with a note saying how many sayings were cut; `None` when there is no
/// such sentence.
pub(super) fn cut(text: &str) -> Option<String> {
    let units = sentences(text);
    let same =
        |a: &(usize, usize), b: &(usize, usize)| normal(&text[a.0..a.1]) == normal(&text[b.0..b.1]);
    let first = units.windows(IN_A_ROW).position(|w| {
        normal(&text[w[0].0..w[0].1]).len() >= SHORTEST && w[1..].iter().all(|u| same(&w[0], u))
    })?;
    let again = units[first + 1..]
        .iter()
        .take_while(|u| same(&units[first], u))
        .count();
    Some(format!(
        "{}\n\n[the summary then said this sentence {again} more time(s); it was cut here]",
        text[..units[first].1].trim_end()
    ))
}

/// The byte ranges of `text`'s sentences: each ends after `.`, `!` or `?` followed by
/// whitespace, or at a line's end.
fn sentences(text: &str) -> Vec<(usize, usize)> {
    let mut units = vec![];
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let next_is_space = chars.peek().is_none_or(|(_, n)| n.is_whitespace());
        let end = match c {
            '\n' => Some(i),
            '.' | '!' | '?' if next_is_space => Some(i + 1),
            _ => None,
        };
        if let Some(end) = end {
            if !text[start..end].trim().is_empty() {
                units.push((start, end));
            }
            start = end;
        }
    }
    if !text[start..].trim().is_empty() {
        units.push((start, text.len()));
    }
    units
}

/// A sentence with its spacing made plain, for comparing.
fn normal(sentence: &str) -> String {
    sentence.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sentence_said_over_and_over_is_cut_after_its_first_saying() {
        let text = "Revenue rose 12% in March. The report is in report.md. The report is in \
                    report.md.  The report is in report.md.\nThe report is in report.md. The rep";
        let cut = cut(text).expect("a repetition");
        assert!(
            cut.starts_with("Revenue rose 12% in March. The report is in report.md.\n\n["),
            "{cut}"
        );
        assert!(cut.contains("3 more time(s)"), "{cut}");
    }

    #[test]
    fn ordinary_text_and_short_repeats_are_left_alone() {
        assert_eq!(cut("One thing. Another thing. A third thing."), None);
        assert_eq!(cut("Done.\nDone.\nDone.\nAll good."), None);
        // Twice is emphasis, not degeneration.
        assert_eq!(cut("It works well. It works well. And it is fast."), None);
        assert_eq!(cut(""), None);
        assert_eq!(cut("v1.2.3 is out. Numbers like 3.14 stay whole."), None);
    }
}
