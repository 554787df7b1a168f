//! What `cdc verify` compares and how it says what differs: rows as JSON maps (the
//! record's encoding), hashed canonically (object keys in sorted order, so a view that
//! stores columns in another order hashes the same), and the differences found, kept up
//! to a bound and printed with both sides.
//!
//! Invariants: equal JSON values hash equal whatever their object key order; a
//! [`Differences`] keeps at most its cap of rows in memory and counts the rest.

use std::hash::{Hash, Hasher};

use serde_json::{Map, Value};

/// A row (or a key) as the record carries it: column → JSON value.
pub type JsonRow = Map<String, Value>;

fn hash_value(v: &Value, h: &mut impl Hasher) {
    match v {
        Value::Null => 0u8.hash(h),
        Value::Bool(b) => {
            1u8.hash(h);
            b.hash(h);
        }
        Value::Number(n) => {
            2u8.hash(h);
            // The text JSON writes: 1 and 1.0 differ, as they do in the record.
            n.to_string().hash(h);
        }
        Value::String(s) => {
            3u8.hash(h);
            s.hash(h);
        }
        Value::Array(a) => {
            4u8.hash(h);
            a.len().hash(h);
            for x in a {
                hash_value(x, h);
            }
        }
        Value::Object(m) => {
            5u8.hash(h);
            hash_map_into(m, h);
        }
    }
}

fn hash_map_into(m: &JsonRow, h: &mut impl Hasher) {
    m.len().hash(h);
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort_unstable();
    for k in keys {
        k.hash(h);
        hash_value(&m[k], h);
    }
}

/// The canonical hash of a row or key. (SipHash with fixed keys: the same in every run,
/// so no two hashes of one process disagree.) A column holding NULL hashes as if it were
/// absent: a view's row last written before `ALTER TABLE … ADD COLUMN` lacks the column
/// (the change that wrote it had none), and reads as NULL there.
pub fn hash_row(m: &JsonRow) -> u64 {
    #[allow(deprecated)]
    let mut h = std::hash::SipHasher::new();
    m.values().filter(|v| !v.is_null()).count().hash(&mut h);
    let mut keys: Vec<&String> = m
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, _)| k)
        .collect();
    keys.sort_unstable();
    for k in keys {
        k.hash(&mut h);
        hash_value(&m[k], &mut h);
    }
    h.finish()
}

/// About the heap a row's map takes (its entries, their names and values, with the
/// allocator's rounding and a map's spare room), to size the source's chunks to the
/// memory budget. An estimate: it need only be within a small factor.
pub fn heap_bytes(m: &JsonRow) -> usize {
    // An entry of the (insertion-ordered) map: its hash, name and value, and its index
    // slot; maps grow by doubling, so about a third is spare on average.
    const ENTRY: usize = 8 + std::mem::size_of::<String>() + std::mem::size_of::<Value>() + 8;
    alloc_bytes(m.len() * ENTRY * 4 / 3)
        + m.iter()
            .map(|(k, v)| alloc_bytes(k.len()) + value_heap(v))
            .sum::<usize>()
}

fn value_heap(v: &Value) -> usize {
    match v {
        Value::String(s) => alloc_bytes(s.len()),
        Value::Array(a) => {
            alloc_bytes(a.len() * std::mem::size_of::<Value>())
                + a.iter().map(value_heap).sum::<usize>()
        }
        Value::Object(m) => heap_bytes(m),
        _ => 0,
    }
}

/// An allocation of `n` bytes as the allocator takes it: a header, 16-byte rounding, a
/// minimum chunk.
fn alloc_bytes(n: usize) -> usize {
    if n == 0 {
        0
    } else {
        (n + 8).next_multiple_of(16).max(32)
    }
}

/// The hash of a row that may be absent.
pub fn hash_opt(m: Option<&JsonRow>) -> u64 {
    match m {
        Some(m) => hash_row(m),
        None => 0,
    }
}

/// One key whose rows differ.
#[derive(Debug, Clone, PartialEq)]
pub struct Difference {
    /// The record key; `None` when only the view's id of the row is known (a row of a
    /// sink's view whose key columns it does not keep).
    pub key: Option<JsonRow>,
    /// The key as text (the key's JSON, or the view's id).
    pub id: String,
    pub source: Option<JsonRow>,
    pub view: Option<JsonRow>,
    /// Why it was not re-checked, if it was not.
    pub note: Option<String>,
}

impl Difference {
    pub fn new(key: JsonRow, source: Option<JsonRow>, view: Option<JsonRow>) -> Self {
        Difference {
            id: Value::Object(key.clone()).to_string(),
            key: Some(key),
            source,
            view,
            note: None,
        }
    }

    /// What kind of difference it is.
    pub fn kind(&self) -> &'static str {
        match (&self.source, &self.view) {
            (Some(_), None) => "missing in the view",
            (None, Some(_)) => "missing in the source",
            (Some(_), Some(_)) => "differs",
            (None, None) => "missing on both sides",
        }
    }

    /// The report of this key: a line naming it, then both sides as JSON.
    pub fn render(&self) -> String {
        let side = |r: &Option<JsonRow>| match r {
            Some(r) => Value::Object(r.clone()).to_string(),
            None => "(missing)".to_string(),
        };
        let mut s = format!(
            "{}: key {}\n  source: {}\n  view:   {}\n",
            self.kind(),
            self.id,
            side(&self.source),
            side(&self.view)
        );
        if let Some(n) = &self.note {
            s.push_str(&format!("  note:   {n}\n"));
        }
        s
    }
}

/// The differences found, at most `cap` kept (the rest counted).
#[derive(Debug, Clone)]
pub struct Differences {
    pub kept: Vec<Difference>,
    /// Differences found beyond the cap: counted, neither re-checked nor printed.
    pub more: u64,
    cap: usize,
}

impl Differences {
    pub fn new(cap: usize) -> Self {
        Differences {
            kept: Vec::new(),
            more: 0,
            cap,
        }
    }

    pub fn push(&mut self, d: Difference) {
        if self.kept.len() < self.cap {
            self.kept.push(d);
        } else {
            self.more += 1;
        }
    }

    /// How many are kept in full at most.
    pub fn cap(&self) -> usize {
        self.cap
    }

    pub fn is_empty(&self) -> bool {
        self.kept.is_empty() && self.more == 0
    }

    pub fn total(&self) -> u64 {
        self.kept.len() as u64 + self.more
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(v: Value) -> JsonRow {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn hashes_ignore_key_order_but_not_values() {
        let a = row(json!({"id": 1, "v": "x", "n": {"a": 1, "b": [1, 2]}}));
        let b = row(json!({"n": {"b": [1, 2], "a": 1}, "v": "x", "id": 1}));
        assert_eq!(hash_row(&a), hash_row(&b));
        for other in [
            json!({"id": 1, "v": "y", "n": {"a": 1, "b": [1, 2]}}),
            json!({"id": 1, "v": "x", "n": {"a": 1, "b": [2, 1]}}),
            json!({"id": 1, "v": "x"}),
            json!({"id": 1.0, "v": "x", "n": {"a": 1, "b": [1, 2]}}),
            json!({"id": "1", "v": "x", "n": {"a": 1, "b": [1, 2]}}),
        ] {
            assert_ne!(hash_row(&a), hash_row(&row(other.clone())), "{other}");
        }
        assert_ne!(hash_opt(None), hash_row(&row(json!({}))));
        // A NULL column is the same as no column (a row written before ADD COLUMN).
        assert_eq!(
            hash_row(&row(json!({"id": 1, "note": null}))),
            hash_row(&row(json!({"id": 1})))
        );
        assert_ne!(
            hash_row(&row(json!({"id": 1, "note": null}))),
            hash_row(&row(json!({"id": 1, "note": "x"})))
        );
    }

    #[test]
    fn heap_estimates_grow_with_the_row() {
        let small = heap_bytes(&row(json!({"id": 1})));
        let wide = heap_bytes(&row(json!({"id": 1, "v": "x".repeat(10_000)})));
        let nested = heap_bytes(&row(json!({"id": 1, "a": [{"b": "x".repeat(10_000)}]})));
        assert!((100..1000).contains(&small), "{small}");
        assert!((10_000..11_000).contains(&wide), "{wide}");
        assert!(nested > wide, "{nested} {wide}");
        assert_eq!(heap_bytes(&JsonRow::new()), 0);
    }

    #[test]
    fn rendering_and_the_cap() {
        let d = Difference::new(
            row(json!({"id": 3})),
            Some(row(json!({"id": 3, "v": 1}))),
            None,
        );
        assert_eq!(
            d.render(),
            "missing in the view: key {\"id\":3}\n  source: {\"id\":3,\"v\":1}\n  view:   (missing)\n"
        );
        let mut ds = Differences::new(1);
        ds.push(d.clone());
        ds.push(d);
        assert_eq!((ds.kept.len(), ds.more, ds.total()), (1, 1, 2));
    }
}
