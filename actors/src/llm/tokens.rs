//! Token counting with the model's own BPE (tiktoken), loaded once per process and only
//! when needed: a BPE token always covers at least one byte, so a request whose byte count
//! is within a budget is within it in tokens too, and small requests never load a table
//! (loading one costs a few hundred milliseconds and tens of megabytes).

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

/// An upper bound on `count_message`, computed without a BPE.
pub fn bound_message(m: &Message) -> usize {
    PER_MESSAGE
        + m.text().len()
        + m.tool_calls
            .iter()
            .map(|c| c.function.name.len() + c.function.arguments.len() + 3)
            .sum::<usize>()
}

/// Whether the messages fit in `limit` tokens; the exact count is made only when the
/// byte bound does not settle it. Returns the exact count when it was made.
pub fn fits(model: &str, messages: &[Message], limit: usize) -> Result<(), usize> {
    if messages.iter().map(bound_message).sum::<usize>() + 3 <= limit {
        return Ok(());
    }
    let exact = count_messages(encoding_for(model), messages);
    if exact <= limit { Ok(()) } else { Err(exact) }
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
        let msgs = [Message::user("hello world, this is a test")];
        assert!(count_messages(bpe, &msgs) <= bound_message(&msgs[0]) + 3);
        assert!(fits("gpt-4o", &msgs, 1000).is_ok());
        assert_eq!(fits("gpt-4o", &msgs, 5), Err(count_messages(bpe, &msgs)));
    }
}
