//! An agent's working memory for one plan step: the pinned opening (system prompt and the
//! step) and the rounds after it, capped by message count and by tokens. A round is an
//! assistant message with the results of its calls (and what follows them before the next
//! assistant message). The memory keeps one invariant: what it sends is well-formed, every
//! tool result after the assistant message holding its call, and the latest round always
//! there. So the oldest rounds go first, whole; when the opening and the latest round alone
//! pass the token cap, that round's results are cut down (fairly: each to its share of what
//! the rest leaves, never below `SHRUNK_AT_LEAST` bytes) and its assistant message stays;
//! the latest round is kept whole even past the message cap.
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
use crate::text::clip;

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

/// A result of the latest round cut down to fit the token cap keeps at least this many
/// bytes, however little room the rest leaves.
const SHRUNK_AT_LEAST: usize = 200;

/// Tokens a cut-down result keeps free for its message's framing and the cut's note.
const CUT_NOTE: usize = 48;

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

    /// Drop the oldest rounds, whole, while the memory is over a cap and holds more than
    /// the latest round; then, still over the token cap, cut down that round's results.
    fn trim(&mut self) {
        let mut latest = self.latest_round();
        while latest > self.pinned && (self.entries.len() > self.max_messages || self.over_tokens())
        {
            // The oldest round: a message and the tool results after it (results with no
            // message before them, which no well-formed memory holds, go alone).
            let mut end = self.pinned + 1;
            while end < latest && self.entries[end].message.role == Role::Tool {
                end += 1;
            }
            for e in self.entries.drain(self.pinned..end) {
                self.bound -= e.bound;
            }
            self.dropped += end - self.pinned;
            latest -= end - self.pinned;
        }
        // Cut by each result's bytes per token first, which keeps the most; if the text's
        // start and end hold more tokens per byte than the middle cut away, by bytes, which
        // are never fewer than tokens.
        for by_tokens in [true, false] {
            if self.over_tokens() {
                self.shrink(latest, by_tokens);
            }
        }
    }

    /// Where the latest round begins: its assistant message (or, with none after the
    /// opening, the last message that is no tool result).
    fn latest_round(&self) -> usize {
        let after = &self.entries[self.pinned..];
        after
            .iter()
            .rposition(|e| e.message.role == Role::Assistant)
            .or_else(|| after.iter().rposition(|e| e.message.role != Role::Tool))
            .map_or(self.pinned, |i| self.pinned + i)
    }

    /// Cut down the tool results from `from` on so that the memory fits its token cap: the
    /// room the other messages leave is shared out, smallest result first, each taking
    /// what it needs up to an equal share of what is left (calls still waiting for their
    /// results hold a share each). A result is cut to its share in bytes, or, `by_tokens`,
    /// to as many bytes as its share's tokens take in it on average.
    fn shrink(&mut self, from: usize, by_tokens: bool) {
        self.tokens();
        let size = |e: &Entry| match by_tokens {
            true => e.exact.unwrap_or(e.bound),
            false => e.bound,
        };
        let results: Vec<usize> = (from..self.entries.len())
            .filter(|&i| self.entries[i].message.role == Role::Tool)
            .collect();
        let others: usize = (0..self.entries.len())
            .filter(|i| !results.contains(i))
            .map(|i| self.entries[i].exact.unwrap_or(self.entries[i].bound))
            .sum();
        let mut room = self.max_tokens.saturating_sub(others);
        let calls = self.entries[from].message.tool_calls.len();
        let mut slots = calls.max(results.len());
        let mut by_size = results;
        by_size.sort_by_key(|&i| size(&self.entries[i]));
        for i in by_size {
            let share = room / slots;
            slots -= 1;
            let needs = size(&self.entries[i]);
            if needs <= share {
                room -= needs;
                continue;
            }
            room -= share;
            let text = self.entries[i].message.text();
            let keep = share.saturating_sub(CUT_NOTE) * text.len() / needs.max(1);
            let keep = keep.max(SHRUNK_AT_LEAST);
            if text.len() > keep {
                let cut = self.entries[i].message.with_text(clip(text, keep));
                self.replace(i, cut);
            }
        }
    }

    fn over_tokens(&mut self) -> bool {
        self.bound > self.max_tokens && self.tokens() > self.max_tokens
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

    /// Whether the memory keeps its invariant: after the opening, every tool result comes
    /// after the assistant message holding its call, with only results between them, once;
    /// every call of a round before the latest has its result. The first breach when not.
    #[cfg(test)]
    pub(super) fn well_formed(&self) -> Result<(), String> {
        let latest = self.latest_round();
        // The calls of the round being read, and which of them have results.
        let mut round: Option<(usize, Vec<(&str, bool)>)> = None;
        let unanswered = |round: &Option<(usize, Vec<(&str, bool)>)>| match round {
            Some((at, calls)) if *at < latest => calls
                .iter()
                .find(|(_, answered)| !answered)
                .map(|(id, _)| format!("call {id} of message {at} has no result")),
            _ => None,
        };
        let mut results_may_follow = false;
        for (i, e) in self.entries.iter().enumerate().skip(self.pinned) {
            let m = &e.message;
            match m.role {
                Role::Tool => {
                    let id = m.tool_call_id.as_deref().unwrap_or("");
                    let call = round
                        .as_mut()
                        .filter(|_| results_may_follow)
                        .and_then(|(_, calls)| calls.iter_mut().find(|(c, _)| *c == id));
                    match call {
                        Some((_, answered)) if !*answered => *answered = true,
                        Some(_) => return Err(format!("result {i} answers {id} again")),
                        None => return Err(format!("result {i} ({id}) follows no call of its")),
                    }
                }
                role => {
                    if let Some(why) = unanswered(&round) {
                        return Err(why);
                    }
                    results_may_follow = role == Role::Assistant;
                    round = results_may_follow.then(|| {
                        (
                            i,
                            m.tool_calls
                                .iter()
                                .map(|c| (c.id.as_str(), false))
                                .collect(),
                        )
                    });
                }
            }
        }
        unanswered(&round).map_or(Ok(()), Err)
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

    /// An assistant message calling bash `n` times (ids `{tag}-0`…), and its calls.
    fn round(tag: &str, n: usize) -> (Message, Vec<ToolCall>) {
        let calls: Vec<ToolCall> = (0..n).map(|i| bash_call(&format!("{tag}-{i}"))).collect();
        let mut asked = Message::assistant(format!("round {tag}"));
        asked.tool_calls = calls.clone();
        (asked, calls)
    }

    /// 25 parallel calls whose outputs together pass the token cap: the older rounds go,
    /// whole, and the results are cut down, each kept after its call; at every push the
    /// memory is well-formed and holds the latest round. (Dropping message by message left
    /// results with no call before them, which the server refuses with a 400.)
    #[test]
    fn parallel_calls_with_large_outputs_stay_with_their_call() {
        let cap = 4_000;
        let mut m = Memory::new("gpt-4", 1000, cap);
        m.pin(Message::system("sys"));
        m.pin(Message::user("step"));
        for r in 0..3 {
            let (asked, calls) = round(&format!("old{r}"), 1);
            m.push(asked);
            m.push(Message::tool(&calls[0], "word ".repeat(100)));
        }
        let (asked, calls) = round("wide", 25);
        m.push(asked.clone());
        for call in &calls {
            m.push(Message::tool(
                call,
                format!("{} ", call.id) + &"word ".repeat(400),
            ));
            m.well_formed().unwrap();
            assert_eq!(m.assistant_history().next(), Some(&asked));
        }
        let sent = m.request(None);
        assert_eq!(sent.len(), 2 + 1 + 25, "the older rounds went, whole");
        for (call, result) in calls.iter().zip(&sent[3..]) {
            assert_eq!(result.tool_call_id.as_deref(), Some(call.id.as_str()));
            assert!(result.text().starts_with(&call.id), "{}", result.text());
            assert!(result.text().contains("cut"), "{}", result.text());
        }
        assert!(m.tokens() <= cap, "{} tokens", m.tokens());
    }

    /// An opening that alone passes the token cap: every round stays, as the latest, with
    /// its assistant message and its results cut down to the least; never a result alone.
    #[test]
    fn an_opening_past_the_cap_keeps_the_latest_round_whole_but_cut_down() {
        let mut m = Memory::new("gpt-4", 1000, 500);
        m.pin(Message::system("word ".repeat(1_000)));
        m.pin(Message::user("step"));
        for r in 0..5 {
            let (asked, calls) = round(&r.to_string(), 2);
            m.push(asked.clone());
            for call in &calls {
                m.push(Message::tool(call, "word ".repeat(600)));
                m.well_formed().unwrap();
            }
            let sent = m.request(None);
            assert_eq!(sent.len(), 5, "the opening and the latest round");
            assert_eq!(sent[2], &asked);
            for result in &sent[3..] {
                assert!(result.text().len() < 300, "{}", result.text().len());
            }
        }
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
