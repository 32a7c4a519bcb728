//! Generated-input testing (test builds only) for the parsers that read outside input: a
//! seeded generator of bytes, text and JSON and of mutations of valid samples, and [`run`],
//! which runs one target for `MANUS_FUZZ_CASES` cases (256 by default), names the case that
//! panicked with the seed that replays it (`MANUS_FUZZ_SEED`), and prints the count.
//!
//! The long run: `scripts/fuzz.sh` (see there). The host crate compiles this same file for
//! its own targets, so it uses nothing from `crate::`.

use std::panic::{AssertUnwindSafe, catch_unwind};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::{Map, Value};

/// The seed the cases start from when `MANUS_FUZZ_SEED` does not say.
const BASE_SEED: u64 = 0x6d61_6e75_732d_7274;

/// Run `case` once per generated input. A case that panics does not stop the run: the
/// test fails at its end, naming how many cases panicked and the seeds of the first ones
/// (each panic's message and place are on stderr, from the panic hook).
pub fn run(target: &str, mut case: impl FnMut(&mut Gen)) {
    let n = env_u64("MANUS_FUZZ_CASES").unwrap_or(256);
    let base = env_u64("MANUS_FUZZ_SEED").unwrap_or(BASE_SEED);
    let start = std::time::Instant::now();
    let mut panicked = vec![];
    for i in 0..n {
        let seed = base.wrapping_add(i);
        let mut g = Gen(StdRng::seed_from_u64(seed));
        if catch_unwind(AssertUnwindSafe(|| case(&mut g))).is_err() {
            panicked.push(seed);
        }
    }
    println!(
        "fuzz {target}: {n} cases, {} panicked ({:.1} s)",
        panicked.len(),
        start.elapsed().as_secs_f64()
    );
    if let Some(first) = panicked.first() {
        let shown: Vec<String> = panicked.iter().take(5).map(u64::to_string).collect();
        panic!(
            "fuzz {target}: {} of {n} cases panicked, seeds {}; replay one with \
             MANUS_FUZZ_SEED={first} MANUS_FUZZ_CASES=1",
            panicked.len(),
            shown.join(", ")
        );
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.trim().parse().ok()
}

/// Characters that parsers trip on: quotes, escapes, brackets, line ends, controls, and
/// multi-byte ones (a slice at a byte offset inside them panics).
const ODD: &[char] = &[
    '"', '\'', '\\', '`', '{', '}', '[', ']', ':', ',', '=', '#', '.', '\n', '\r', '\t', '\0', ' ',
    '-', '+', 'e', '0', '1', '9', 'é', '€', '𝄞', '\u{feff}', '\u{7f}', '\u{202e}',
];

/// Values that sit on edges: zero, signs, the ends of integer types, and huge floats.
const EDGE_NUMBERS: &[&str] = &[
    "0",
    "-0",
    "1",
    "-1",
    "255",
    "65536",
    "2147483648",
    "-9223372036854775808",
    "9223372036854775807",
    "18446744073709551615",
    "18446744073709551616",
    "1e20",
    "-1e308",
    "1e999",
    "0.5",
    "3.0",
    "nan",
    "inf",
    "-inf",
];

/// A seeded source of generated input.
pub struct Gen(StdRng);

impl Gen {
    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 { 0 } else { self.0.random_range(0..n) }
    }

    /// True one time in `n`.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    /// One of `items`.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// Arbitrary bytes, up to `max` of them.
    pub fn bytes(&mut self, max: usize) -> Vec<u8> {
        let len = self.below(max + 1);
        (0..len).map(|_| self.0.random()).collect()
    }

    /// Text of up to `max` characters: letters, digits and [`ODD`] ones.
    pub fn text(&mut self, max: usize) -> String {
        let len = self.below(max + 1);
        (0..len)
            .map(|_| match self.below(3) {
                0 => *self.pick(ODD),
                1 => char::from(b'a' + self.below(26) as u8),
                _ => self.0.random::<char>(),
            })
            .collect()
    }

    /// A number as JSON: an edge one or a random one.
    pub fn number(&mut self) -> Value {
        match self.below(4) {
            0 => Value::from(self.0.random::<i64>()),
            1 => Value::from(self.0.random::<u64>()),
            2 => serde_json::Number::from_f64(self.0.random::<f64>() * 1e6)
                .map_or(Value::Null, Value::Number),
            _ => {
                // TOML's `nan` and `inf` are no JSON numbers: they come as strings.
                let edge = *self.pick(EDGE_NUMBERS);
                serde_json::from_str(edge).unwrap_or_else(|_| Value::String(edge.into()))
            }
        }
    }

    /// Any JSON value, nested up to `depth` levels.
    pub fn json(&mut self, depth: usize) -> Value {
        match self.below(if depth == 0 { 4 } else { 6 }) {
            0 => Value::Null,
            1 => Value::Bool(self.one_in(2)),
            2 => self.number(),
            3 => Value::String(self.text(12)),
            4 => (0..self.below(4)).map(|_| self.json(depth - 1)).collect(),
            _ => {
                let mut obj = Map::new();
                for _ in 0..self.below(4) {
                    obj.insert(self.text(6), self.json(depth - 1));
                }
                Value::Object(obj)
            }
        }
    }

    /// `input` with one to four byte-level changes: flips, insertions, deletions, copies of
    /// a stretch elsewhere, truncation, and odd characters spliced in.
    pub fn mutate_bytes(&mut self, input: &[u8]) -> Vec<u8> {
        let mut out = input.to_vec();
        for _ in 0..1 + self.below(4) {
            let at = self.below(out.len() + 1);
            match self.below(6) {
                0 if at < out.len() => out[at] ^= 1 << self.below(8),
                1 => out.insert(at, self.0.random()),
                2 => {
                    let end = (at + 1 + self.below(16)).min(out.len());
                    out.drain(at.min(end)..end);
                }
                3 if !out.is_empty() => {
                    let from = self.below(out.len());
                    let end = (from + 1 + self.below(32)).min(out.len());
                    let piece = out[from..end].to_vec();
                    out.splice(at..at, piece);
                }
                4 => out.truncate(at),
                _ => {
                    let mut buf = [0; 4];
                    let odd = self.pick(ODD).encode_utf8(&mut buf).as_bytes().to_vec();
                    out.splice(at..at, odd);
                }
            }
        }
        out
    }

    /// `input` with one change that keeps it valid UTF-8 (the byte-level mutations that
    /// break the encoding are undone by lossy decoding).
    pub fn mutate_text(&mut self, input: &str) -> String {
        String::from_utf8_lossy(&self.mutate_bytes(input.as_bytes())).into_owned()
    }

    /// `v` with one node changed: replaced by any value, its type changed, a key dropped or
    /// added, an array emptied or grown.
    pub fn mutate_json(&mut self, v: &Value) -> Value {
        let mut out = v.clone();
        let node = self.node(&mut out);
        match (self.below(4), node) {
            (0, Value::Object(obj)) if !obj.is_empty() => {
                let key = obj
                    .keys()
                    .nth(self.below(obj.len()))
                    .cloned()
                    .unwrap_or_default();
                obj.remove(&key);
            }
            (1, Value::Object(obj)) => {
                obj.insert(self.text(8), self.json(2));
            }
            (1, Value::Array(items)) => {
                let more = self.json(2);
                items.push(more);
            }
            (2, Value::Array(items)) => items.clear(),
            (_, node) => *node = self.json(2),
        }
        out
    }

    /// A node of `v` chosen by walking down from the root, stopping at random.
    fn node<'a>(&mut self, v: &'a mut Value) -> &'a mut Value {
        let len = match v {
            Value::Object(obj) => obj.len(),
            Value::Array(items) => items.len(),
            _ => 0,
        };
        if len == 0 || self.one_in(3) {
            return v;
        }
        let i = self.below(len);
        let child = match v {
            Value::Object(obj) => obj.values_mut().nth(i),
            Value::Array(items) => items.get_mut(i),
            _ => None,
        };
        match child {
            Some(child) => self.node(child),
            None => unreachable!("the index is below the length"),
        }
    }
}
