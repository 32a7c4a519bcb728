//! An agent's working memory for one plan step: the pinned opening (system prompt and the
//! step) and the rounds after it, capped by message count and by tokens. The oldest rounds
//! go first, and a tool observation never outlives the assistant message that asked for it.
//! Exact token counts are made only once the byte bound (`tokens::bound_message`) exceeds
//! the cap, so short steps never load a BPE table.
//!
//! With compaction on, the memory makes room before it drops anything: past its threshold,
//! the oldest tool outputs outside the last rounds become stubs that name a reference
//! (`recall` reads the text back), and the agent may fold the middle rounds into one
//! summary (`middle`, `fold`). A call and its results are never split: a fold ends before
//! an assistant message, never between it and its results.

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
    /// Compact past this many tokens (`None`: never).
    compact_at: Option<usize>,
    /// Pruned tool outputs by reference, for `recall`.
    pruned: Vec<(String, String)>,
    /// Tool outputs pruned since the agent last asked (`take_pruned`).
    pub pruned_lately: usize,
}

/// Messages at the end that compaction leaves as they are: the last rounds.
pub const KEEP_TAIL: usize = 6;

/// The fewest messages worth a summary.
const FOLD_AT_LEAST: usize = 8;

/// Tool outputs shorter than this are not worth a stub.
const PRUNE_ABOVE: usize = 400;

/// How a stub begins.
const STUB_START: &str = "[output pruned to save context:";

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
            compact_at: None,
            pruned: vec![],
            pruned_lately: 0,
        }
    }

    /// Compact once the memory holds more than `at` tokens.
    pub fn compact_at(&mut self, at: usize) {
        self.compact_at = Some(at);
    }

    /// Whether compaction is on and the memory is past its threshold.
    pub fn over_compaction(&mut self) -> bool {
        match self.compact_at {
            Some(at) => self.bound > at && self.tokens() > at,
            None => false,
        }
    }

    /// The full text of a pruned tool output.
    pub fn recall(&self, reference: &str) -> Option<&str> {
        self.pruned
            .iter()
            .find(|(r, _)| r == reference)
            .map(|(_, text)| text.as_str())
    }

    /// Replace the oldest tool outputs outside the last `KEEP_TAIL` messages by stubs
    /// until the memory is under its threshold or none is left worth pruning.
    fn prune(&mut self) {
        let tail = self.entries.len().saturating_sub(KEEP_TAIL);
        let mut i = self.pinned;
        while i < tail && self.over_compaction() {
            let e = &self.entries[i];
            let text = e.message.text();
            if e.message.role == Role::Tool
                && text.len() > PRUNE_ABOVE
                && !text.starts_with(STUB_START)
            {
                let reference = format!("r{}", self.pruned.len() + 1);
                let tool = e.message.name.clone().unwrap_or_default();
                let stub = format!(
                    "{STUB_START} {} characters of {tool}'s output; call recall with \
                     reference \"{reference}\" to read it again]",
                    text.chars().count()
                );
                self.pruned.push((reference, text.to_string()));
                let message = e.message.with_text(stub);
                self.replace(i, message);
                self.pruned_lately += 1;
            }
            i += 1;
        }
    }

    /// Put `message` in entry `i`'s place.
    fn replace(&mut self, i: usize, mut message: Message) {
        message.freeze();
        let bound = bound_message(&message);
        let e = &mut self.entries[i];
        self.bound = self.bound - e.bound + bound;
        *e = Entry {
            message,
            bound,
            exact: None,
        };
    }

    /// The middle rounds a summary may replace: after the pinned opening, before the last
    /// `KEEP_TAIL` messages, ending before an assistant message so that no call is parted
    /// from its results. Empty when there is nothing worth folding.
    pub fn middle(&self) -> std::ops::Range<usize> {
        let len = self.entries.len();
        let mut end = len.saturating_sub(KEEP_TAIL).max(self.pinned);
        // The first message kept must not be a result whose call would be folded.
        while end > self.pinned && end < len && self.entries[end].message.role == Role::Tool {
            end -= 1;
        }
        // Folding a round or two would cost a model call every round: wait for more.
        if end < self.pinned + FOLD_AT_LEAST {
            return self.pinned..self.pinned;
        }
        self.pinned..end
    }

    /// The messages of `range`.
    pub fn messages(&self, range: std::ops::Range<usize>) -> impl Iterator<Item = &Message> {
        self.entries[range].iter().map(|e| &e.message)
    }

    /// Replace the messages of `range` (from `middle`) by `summary`.
    pub fn fold(&mut self, range: std::ops::Range<usize>, summary: Message) {
        let n = range.len();
        for e in self.entries.drain(range.clone()) {
            self.bound -= e.bound;
        }
        let mut summary = summary;
        summary.freeze();
        let bound = bound_message(&summary);
        self.bound += bound;
        self.entries.insert(
            range.start,
            Entry {
                message: summary,
                bound,
                exact: None,
            },
        );
        self.dropped += n;
    }

    /// Add a message that is never dropped (call before any `push`).
    pub fn pin(&mut self, m: Message) {
        debug_assert_eq!(self.pinned, self.entries.len());
        self.pinned += 1;
        self.add(m);
    }

    pub fn push(&mut self, m: Message) {
        self.add(m);
        if self.compact_at.is_some() {
            self.prune();
        }
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

    fn bash_call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            kind: "function".into(),
            function: FunctionCall {
                name: "bash".into(),
                arguments: "{}".into(),
            },
        }
    }

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
        let call = bash_call("c1");
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

    #[test]
    fn compaction_prunes_old_outputs_and_folds_without_parting_calls_from_results() {
        let mut m = Memory::new("gpt-4", 1000, 1_000_000);
        m.compact_at(200);
        m.pin(Message::system("sys"));
        m.pin(Message::user("step"));
        for i in 0..8 {
            let call = bash_call(&format!("c{i}"));
            let mut asst = Message::assistant("");
            asst.tool_calls = vec![call.clone()];
            m.push(asst);
            m.push(Message::tool(
                &call,
                format!("out{i} ") + &"word ".repeat(200),
            ));
        }
        // The oldest outputs became stubs; the text is still there to recall.
        let first = m.request(None)[3].text().to_string();
        assert!(first.starts_with(STUB_START), "{first}");
        assert!(m.recall("r1").unwrap().starts_with("out0 "));
        assert!(m.pruned_lately > 0);
        // The last rounds are left whole.
        assert!(m.request(None).last().unwrap().text().starts_with("out7 "));
        let middle = m.middle();
        assert_eq!(middle.start, 2);
        let kept = m.request(None)[middle.end].clone();
        assert_eq!(
            kept.role,
            Role::Assistant,
            "a fold ends before a call, never inside it"
        );
        let before = m.len();
        m.fold(middle.clone(), Message::user("summary"));
        assert_eq!(m.len(), before - middle.len() + 1);
        assert_eq!(m.request(None)[2].text(), "summary");
        assert_eq!(m.request(None)[3].role, Role::Assistant);
    }
}
