//! The `_bulk` request and response, as pure functions: the NDJSON body (one action line,
//! then the document for `index`; every line ends in `\n`, the last one too, as
//! Elasticsearch's `_bulk` API requires) and the reading of each item's outcome.
//!
//! Every action is externally versioned (`"version": <Change::version()>,
//! "version_type": "external"`): Elasticsearch applies it only when the version is above
//! the document's, so a replayed or duplicate change never overwrites a newer one; its
//! 409 (`version_conflict_engine_exception`) then means "already applied or superseded"
//! and counts as done, as does the 404 of deleting a document that is not there.

use serde_json::{json, Map, Value};

/// Appends an `index` action of document `id` at `version`, and the document.
pub fn push_index(out: &mut String, index: &str, id: &str, version: u64, doc: &Map<String, Value>) {
    let action = json!({"index": {"_index": index, "_id": id, "version": version, "version_type": "external"}});
    out.push_str(&action.to_string());
    out.push('\n');
    // A JSON object has no raw newline in it (serde_json escapes them in strings).
    out.push_str(&Value::Object(doc.clone()).to_string());
    out.push('\n');
}

/// Appends a `delete` action of document `id` at `version`.
pub fn push_delete(out: &mut String, index: &str, id: &str, version: u64) {
    let action = json!({"delete": {"_index": index, "_id": id, "version": version, "version_type": "external"}});
    out.push_str(&action.to_string());
    out.push('\n');
}

/// What became of one item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Took effect, or a newer version already had (409), or there was nothing to delete.
    Done,
    /// Refused for good (a mapping error, a value the field cannot take): the message.
    Rejected(String),
    /// Pushed back (429, a 5xx of a shard): to be sent again.
    Retry(String),
}

/// The outcome of each item of a `_bulk` response, in request order; `None` when the
/// body is not a bulk response.
pub fn outcomes(response: &Value) -> Option<Vec<Outcome>> {
    let items = response.get("items")?.as_array()?;
    items
        .iter()
        .map(|item| {
            let (action, r) = item.as_object()?.iter().next()?;
            let status = r.get("status")?.as_u64()?;
            Some(match status {
                200..=299 => Outcome::Done,
                409 => Outcome::Done,
                404 if action == "delete" => Outcome::Done,
                429 | 500..=599 => Outcome::Retry(message(status, r)),
                _ => Outcome::Rejected(message(status, r)),
            })
        })
        .collect()
}

/// `HTTP <status> <type>: <reason>` of an item's error, without the value preview
/// Elasticsearch appends to parse errors (row values never go to logs).
fn message(status: u64, r: &Value) -> String {
    let e = r.get("error");
    let kind = e
        .and_then(|e| e.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("error");
    let reason = e
        .and_then(|e| e.get("reason"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let reason = reason
        .split(" Preview of field's value")
        .next()
        .unwrap_or(reason);
    format!(
        "HTTP {status} {kind}: {}",
        crate::search::http::short(reason)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The body must be what Elasticsearch's `_bulk` reference shows: action metadata on
    /// one line (`_index`, `_id`, `version`, `version_type`), the source on the next,
    /// delete without a source line, a newline after every line including the last.
    #[test]
    fn the_body_is_documented_ndjson() {
        let mut out = String::new();
        let doc = json!({"id": 1, "note": "a\nb"});
        push_index(&mut out, "orders", "1", 42, doc.as_object().unwrap());
        push_delete(&mut out, "orders", "2", 43);
        assert_eq!(
            out,
            concat!(
                r#"{"index":{"_index":"orders","_id":"1","version":42,"version_type":"external"}}"#,
                "\n",
                r#"{"id":1,"note":"a\nb"}"#,
                "\n",
                r#"{"delete":{"_index":"orders","_id":"2","version":43,"version_type":"external"}}"#,
                "\n",
            )
        );
        assert_eq!(out.lines().count(), 3);
        for line in out.lines() {
            serde_json::from_str::<Value>(line).expect("each line is one JSON object");
        }
    }

    #[test]
    fn item_outcomes() {
        let r = json!({"errors": true, "items": [
            {"index": {"_index": "t", "_id": "1", "status": 201, "result": "created"}},
            {"index": {"_index": "t", "_id": "1", "status": 409, "error": {"type": "version_conflict_engine_exception", "reason": "[1]: version conflict"}}},
            {"delete": {"_index": "t", "_id": "9", "status": 404, "result": "not_found"}},
            {"index": {"_index": "t", "_id": "2", "status": 400, "error": {"type": "document_parsing_exception", "reason": "failed to parse field [n] of type [long] in document with id '2'. Preview of field's value: 'secret'"}}},
            {"index": {"_index": "t", "_id": "3", "status": 429, "error": {"type": "es_rejected_execution_exception", "reason": "rejected execution"}}},
        ]});
        let o = outcomes(&r).unwrap();
        assert_eq!(&o[..3], &[Outcome::Done, Outcome::Done, Outcome::Done]);
        match &o[3] {
            Outcome::Rejected(m) => {
                assert!(
                    m.starts_with("HTTP 400 document_parsing_exception: failed to parse field [n]"),
                    "{m}"
                );
                assert!(!m.contains("secret"), "{m}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(o[4], Outcome::Retry(_)));
        assert_eq!(outcomes(&json!({"error": "x"})), None);
    }
}
