//! What the two search-engine sinks (Typesense, Elasticsearch/OpenSearch) share: the
//! name a table's documents go to ([`names`]), the field types a table's columns get
//! ([`fields`]), the batching of changes into bulk requests and the truncate bookkeeping
//! ([`plan`]), and the HTTP client with the failure classification both use ([`http`]).
//!
//! Invariants kept here for both sinks:
//! - a document's id is the row's key text ([`crate::view::key_text`]), so a key is one
//!   document whatever the record format was;
//! - a truncate is applied once per place in the log: its version is recorded in the
//!   target (per collection/index, topic and partition) *after* the collection is
//!   cleared, and changes of that partition older than a recorded truncate are passed
//!   over, so a replay does not bring back rows the truncate removed;
//! - valid data is never a definite failure: a value the engine refuses is a rejected
//!   change (dead-lettered), a column whose field cannot be declared stays undeclared.

pub mod fields;
pub mod http;
pub mod names;
pub mod plan;

use serde_json::{Map, Value};

/// A JSON file holding an object (`schema_file`, `mapping_file`).
pub fn read_json_object(f: &std::path::Path) -> Result<Map<String, Value>, String> {
    let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
    match serde_json::from_str(&text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(format!("{}: not a JSON object", f.display())),
        Err(e) => Err(format!("{}: not JSON: {e}", f.display())),
    }
}
