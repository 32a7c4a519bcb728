//! Token counting with the model's own BPE (tiktoken), loaded once per process and only
//! when needed: a BPE token always covers at least one byte, so a request whose byte count
//! is within a budget is within it in tokens too, and small requests never load a table
//! (loading one costs a few hundred milliseconds and tens of megabytes). A text past
//! `EXACT_UP_TO` bytes is counted by an estimate: its start counted exactly, scaled.

use tiktoken_rs::{CoreBPE, cl100k_base_singleton, o200k_base_singleton};

use base64::Engine;

use super::{ImageUrl, Message};

/// Per-message framing tokens the chat format adds around each message.
const PER_MESSAGE: usize = 4;

/// The encoding for a model name: o200k for the GPT-4o/4.1/5 and o-series families,
/// cl100k for everything else (a fair estimate for most open models too).
pub fn encoding_for(model: &str) -> &'static CoreBPE {
    let m = model.to_ascii_lowercase();
    let uses_o200k = m.starts_with("gpt-4o")
        || m.starts_with("gpt-4.1")
        || m.starts_with("gpt-5")
        || m.starts_with("o1")
        || m.starts_with("o3")
        || m.starts_with("o4");
    if uses_o200k {
        o200k_base_singleton()
    } else {
        cl100k_base_singleton()
    }
}

/// Texts longer than this are counted by an estimate. Exact counting holds 20 to 90 times
/// the text's bytes while it runs (a long run of letters is one piece, merged in a heap of
/// its bytes): a 32 MB answer took 1.8 GB.
const EXACT_UP_TO: usize = 128 * 1024;

/// How much of a long text's start the estimate counts exactly.
const SAMPLE: usize = 32 * 1024;

/// Tokens in a text: exact up to `EXACT_UP_TO` bytes; past that, the tokens of its first
/// `SAMPLE` bytes scaled to its length (never more than its bytes, as an exact count).
pub fn count_text(bpe: &CoreBPE, text: &str) -> usize {
    if text.len() <= EXACT_UP_TO {
        return bpe.encode_ordinary(text).len();
    }
    let mut cut = SAMPLE;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let sampled = bpe.encode_ordinary(&text[..cut]).len();
    (sampled * text.len()).div_ceil(cut)
}

/// Tokens one message costs in a request, tool calls and images included.
pub fn count_message(bpe: &CoreBPE, m: &Message) -> usize {
    let mut n = PER_MESSAGE
        + count_text(bpe, m.text())
        + count_text(bpe, m.reasoning_content.as_deref().unwrap_or(""))
        + m.images().map(image_tokens).sum::<usize>();
    for call in &m.tool_calls {
        n += count_text(bpe, &call.function.name) + count_text(bpe, &call.function.arguments) + 3;
    }
    n
}

/// An upper bound on `count_message`, computed without a BPE.
pub fn bound_message(m: &Message) -> usize {
    PER_MESSAGE
        + m.text().len()
        + m.reasoning_content.as_ref().map_or(0, String::len)
        + m.images().map(image_tokens).sum::<usize>()
        + m.tool_calls
            .iter()
            .map(|c| c.function.name.len() + c.function.arguments.len() + 3)
            .sum::<usize>()
}

/// Tokens an image costs, by the rule OpenAI publishes for full detail: scaled to fit
/// 2048×2048, then its short side to 768; 170 per 512-pixel tile plus 85. The size is read
/// from a PNG data URL's header; any other image counts as a 1280×800 screenshot.
pub fn image_tokens(image: &ImageUrl) -> usize {
    let (mut w, mut h) = png_size(&image.url).unwrap_or((1280.0, 800.0));
    let fit = (2048.0 / w.max(h)).min(1.0);
    (w, h) = (w * fit, h * fit);
    let short = (768.0 / w.min(h)).min(1.0);
    (w, h) = (w * short, h * short);
    let tiles = (w / 512.0).ceil() * (h / 512.0).ceil();
    170 * tiles as usize + 85
}

/// Width and height from a `data:image/png;base64,` URL (the IHDR chunk's first 8 bytes).
fn png_size(url: &str) -> Option<(f64, f64)> {
    let b64 = url.strip_prefix("data:image/png;base64,")?;
    let head = base64::engine::general_purpose::STANDARD
        .decode(b64.get(..32)?)
        .ok()?;
    let be = |i: usize| u32::from_be_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
    Some((be(16) as f64, be(20) as f64)).filter(|(w, h)| *w > 0.0 && *h > 0.0)
}

/// Whether the messages fit in `limit` tokens; the exact count is made only when the
/// byte bound does not settle it. Returns the exact count when it was made.
pub fn fits(model: &str, messages: &[&Message], limit: usize) -> Result<(), usize> {
    if messages.iter().map(|m| bound_message(m)).sum::<usize>() + 3 <= limit {
        return Ok(());
    }
    let exact = count_messages(encoding_for(model), messages);
    if exact <= limit { Ok(()) } else { Err(exact) }
}

/// Tokens a whole request's messages cost, plus the reply priming.
pub fn count_messages(bpe: &CoreBPE, messages: &[&Message]) -> usize {
    messages
        .iter()
        .map(|m| count_message(bpe, m))
        .sum::<usize>()
        + 3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_grow_with_text_and_calls() {
        let bpe = encoding_for("gpt-4o-mini");
        assert_eq!(count_text(bpe, "hello world"), 2);
        let short = count_messages(bpe, &[&Message::user("hi")]);
        let long = count_messages(bpe, &[&Message::user("hi there, how are you doing today?")]);
        assert!(long > short);
        let msgs = [&Message::user("hello world, this is a test")];
        assert!(count_messages(bpe, &msgs) <= bound_message(msgs[0]) + 3);
        assert!(fits("gpt-4o", &msgs, 1000).is_ok());
        assert_eq!(fits("gpt-4o", &msgs, 5), Err(count_messages(bpe, &msgs)));
    }

    /// A long text is estimated from its start: close to the exact count for text alike
    /// throughout, and never above its bytes for any text (a run of one letter, which is
    /// one piece to the BPE, and text of multi-byte characters, cut inside one).
    #[test]
    fn long_texts_are_estimated_from_their_start() {
        let bpe = encoding_for("gpt-4o");
        let prose = "The quick brown fox jumps over the lazy dog, again and again. ".repeat(8_000);
        assert!(prose.len() > EXACT_UP_TO);
        let exact = bpe.encode_ordinary(&prose).len();
        let estimate = count_text(bpe, &prose);
        assert!(
            estimate.abs_diff(exact) * 100 <= exact,
            "{estimate} for {exact}"
        );
        for odd in ["a".repeat(4 << 20), "é€𝄞 ".repeat(100_000)] {
            let n = count_text(bpe, &odd);
            assert!(n > 0 && n <= odd.len(), "{n} for {} bytes", odd.len());
        }
    }

    #[test]
    fn images_cost_tiles_by_their_size() {
        // A PNG header for 1280×800: signature, IHDR length and type, width, height.
        let mut head = vec![0x89, b'P', b'N', b'G', 13, 10, 26, 10, 0, 0, 0, 13];
        head.extend(b"IHDR");
        head.extend(1280u32.to_be_bytes());
        head.extend(800u32.to_be_bytes());
        let url = format!(
            "data:image/png;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(&head)
        );
        let m = Message::user_with_images("look", [url]);
        // 1280×800 → 1229×768 → 3×2 tiles.
        assert_eq!(m.images().map(image_tokens).sum::<usize>(), 6 * 170 + 85);
        let bpe = encoding_for("gpt-4o");
        assert_eq!(count_message(bpe, &m), PER_MESSAGE + 1 + 6 * 170 + 85);
        assert!(bound_message(&m) >= count_message(bpe, &m));
    }
}
