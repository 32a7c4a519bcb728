//! An agent's working memory for one plan step: the pinned opening (system prompt and the
//! step) and the rounds after it, capped by message count and by tokens. The oldest rounds
//! go first, and a tool observation never outlives the assistant message that asked for it.
//! Exact token counts are made only once the byte bound (`tokens::bound_message`) exceeds
//! the cap, so short steps never load a BPE table.

use crate::llm::tokens::{bound_message, count_message, encoding_for};
use crate::llm::{Message, Role};

/// A message with its token bound and, once needed, its exact token count.
struct Entry {
    message: Message,
    bound: usize,
    exact: Option<usize>,
}

pub struct Memory {
    entries: Vec<Entry>,
    /// How many opening messages are never dropped.
    pinned: usize,
    max_messages: usize,
    max_tokens: usize,
    /// The sum of the entries' bounds.
    bound: usize,
    /// Messages dropped so far.
    pub dropped: usize,
    /// The model whose tokenizer counts, loaded on first need.
    model: String,
}

impl Memory {
    pub fn new(model: &str, max_messages: usize, max_tokens: usize) -> Self {
        Memory {
            entries: vec![],
            pinned: 0,
            max_messages,
            max_tokens,
            bound: 0,
            dropped: 0,
            model: model.to_string(),
        }
    }

    /// Add a message that is never dropped (call before any `push`).
    pub fn pin(&mut self, m: Message) {
        debug_assert_eq!(self.pinned, self.entries.len());
        self.pinned += 1;
        self.add(m);
    }

    pub fn push(&mut self, m: Message) {
        self.add(m);
        self.trim();
    }

    fn add(&mut self, mut message: Message) {
        // Kept unchanged from here on, and sent every round: serialised once.
        message.freeze();
        let bound = bound_message(&message);
        self.bound += bound;
        self.entries.push(Entry {
            message,
            bound,
            exact: None,
        });
    }

    fn trim(&mut self) {
        while self.entries.len() > self.pinned + 1
            && (self.entries.len() > self.max_messages || self.over_tokens())
        {
            self.drop_oldest();
            // A tool observation whose request is gone would be rejected by the API.
            while self.entries.len() > self.pinned + 1
                && self.entries[self.pinned].message.role == Role::Tool
            {
                self.drop_oldest();
            }
        }
    }

    fn over_tokens(&mut self) -> bool {
        self.bound > self.max_tokens && self.tokens() > self.max_tokens
    }

    fn drop_oldest(&mut self) {
        let e = self.entries.remove(self.pinned);
        self.bound -= e.bound;
        self.dropped += 1;
    }

    /// The exact tokens held (counted on first need, then cached per message).
    pub fn tokens(&mut self) -> usize {
        let bpe = encoding_for(&self.model);
        self.entries
            .iter_mut()
            .map(|e| {
                *e.exact
                    .get_or_insert_with(|| count_message(bpe, &e.message))
            })
            .sum()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The messages to send, followed by `closing` (the next-step prompt), which is not kept.
    pub fn request<'a>(&'a self, closing: Option<&'a Message>) -> Vec<&'a Message> {
        let mut out = Vec::with_capacity(self.entries.len() + 1);
        out.extend(self.entries.iter().map(|e| &e.message));
        out.extend(closing);
        out
    }

    /// The last assistant messages, newest first.
    pub fn assistant_history(&self) -> impl Iterator<Item = &Message> {
        self.entries
            .iter()
            .rev()
            .map(|e| &e.message)
            .filter(|m| m.role == Role::Assistant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{FunctionCall, ToolCall};

    #[test]
    fn caps_messages_and_keeps_pinned() {
        let mut m = Memory::new("gpt-4", 5, 1_000_000);
        m.pin(Message::system("sys"));
        m.pin(Message::user("step"));
        for i in 0..10 {
            m.push(Message::assistant(format!("a{i}")));
        }
        let msgs = m.request(None);
        assert_eq!(msgs.len(), 5);
        assert_eq!(msgs[0].text(), "sys");
        assert_eq!(msgs[1].text(), "step");
        assert_eq!(msgs[4].text(), "a9");
        assert_eq!(m.dropped, 7);
    }

    #[test]
    fn caps_tokens_without_orphaning_tool_results() {
        let mut m = Memory::new("gpt-4", 1000, 60);
        m.pin(Message::system("sys"));
        let call = ToolCall {
            id: "c1".into(),
            kind: "function".into(),
            function: FunctionCall {
                name: "bash".into(),
                arguments: "{}".into(),
            },
        };
        let mut asst = Message::assistant("");
        asst.tool_calls = vec![call.clone()];
        m.push(asst);
        m.push(Message::tool(&call, "word ".repeat(20)));
        m.push(Message::assistant("word ".repeat(30)));
        let tokens = m.tokens();
        let msgs = m.request(None);
        assert!(tokens <= 60 || msgs.len() == 2, "tokens {tokens}");
        assert!(
            msgs.iter()
                .skip(1)
                .all(|x| x.role != Role::Tool || msgs[1].role != Role::Tool)
        );
        assert_eq!(msgs[1].role, Role::Assistant);
    }
}
