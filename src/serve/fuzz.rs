//! Generated request bodies for the service (test builds only): arbitrary bytes and
//! mutations of valid submit and answer bodies, decoded as the handlers decode them (axum's
//! `Json`, then `body`). The properties: decoding never panics, and a refusal is a 4xx with
//! a message.

use axum::Json;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{AnswerBody, SubmitBody, body};
use crate::fuzz::{Gen, run};

/// `valid` mutated (as JSON or as bytes), or arbitrary bytes.
fn request(g: &mut Gen, valid: &Value) -> Vec<u8> {
    match g.below(4) {
        0 => g.bytes(128),
        1 => g.mutate_bytes(&serde_json::to_vec(valid).unwrap()),
        _ => serde_json::to_vec(&g.mutate_json(valid)).unwrap(),
    }
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) {
    if let Err(e) = body(Json::<T>::from_bytes(bytes)) {
        assert!(e.0.is_client_error(), "{}: {}", e.0, e.1);
        assert!(!e.1.is_empty(), "a refusal without a message ({})", e.0);
    }
}

#[test]
fn fuzz_service_bodies() {
    let submit = json!({"task": "Write a haiku about ractor to haiku.txt", "mode": "plan"});
    let answer = json!({"question_id": 3, "text": "yes, go on"});
    run("service_bodies", |g| {
        if g.one_in(2) {
            decode::<SubmitBody>(&request(g, &submit));
        } else {
            decode::<AnswerBody>(&request(g, &answer));
        }
    });
}
