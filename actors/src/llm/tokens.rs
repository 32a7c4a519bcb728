//! Token counting with the model's own BPE (tiktoken), loaded once per process.

use tiktoken_rs::{CoreBPE, cl100k_base_singleton, o200k_base_singleton};

use super::Message;

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

/// Tokens in a text.
pub fn count_text(bpe: &CoreBPE, text: &str) -> usize {
    bpe.encode_ordinary(text).len()
}

/// Tokens one message costs in a request, tool calls included.
pub fn count_message(bpe: &CoreBPE, m: &Message) -> usize {
    let mut n = PER_MESSAGE + count_text(bpe, m.text());
    for call in &m.tool_calls {
        n += count_text(bpe, &call.function.name) + count_text(bpe, &call.function.arguments) + 3;
    }
    n
}

/// Tokens a whole request's messages cost, plus the reply priming.
pub fn count_messages(bpe: &CoreBPE, messages: &[Message]) -> usize {
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
        let short = count_messages(bpe, &[Message::user("hi")]);
        let long = count_messages(bpe, &[Message::user("hi there, how are you doing today?")]);
        assert!(long > short);
    }
}
