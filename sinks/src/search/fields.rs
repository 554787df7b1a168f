//! The field type a column gets in a search engine, inferred from its values in the
//! after-images (the JSON Kafka Connect's `JsonConverter` writes: Debezium's types, so a
//! timestamp is an integer, a decimal a base64 string unless the connector's
//! `decimal_handling_mode` is `double` or `string`, a `json` column a string).
//!
//! Invariants: a null says nothing (the column is declared when a value shows up); a
//! value with no scalar type (an object, an empty or mixed array) is [`FieldKind`]-less
//! and left to the engine (stored, not declared); inference never fails.

use serde_json::{Map, Value};

/// A column's type, before each engine names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    Int,
    Float,
    Bool,
    String,
    IntArray,
    FloatArray,
    BoolArray,
    StringArray,
    /// A JSON object (a struct column).
    Object,
}

/// The kind of one value; `None` for a null or a value without one kind.
pub fn kind_of(v: &Value) -> Option<FieldKind> {
    Some(match v {
        Value::Null => return None,
        Value::Bool(_) => FieldKind::Bool,
        Value::Number(n) if n.is_i64() || n.is_u64() => FieldKind::Int,
        Value::Number(_) => FieldKind::Float,
        Value::String(_) => FieldKind::String,
        Value::Object(_) => FieldKind::Object,
        Value::Array(a) => {
            let mut kind = None;
            for e in a {
                let k = match kind_of(e)? {
                    FieldKind::Int => FieldKind::IntArray,
                    FieldKind::Float => FieldKind::FloatArray,
                    FieldKind::Bool => FieldKind::BoolArray,
                    FieldKind::String => FieldKind::StringArray,
                    _ => return None,
                };
                kind = match (kind, k) {
                    (None, k) => Some(k),
                    (Some(a), b) if a == b => Some(a),
                    // Integers among floats: a float array.
                    (Some(FieldKind::IntArray | FieldKind::FloatArray), _)
                        if matches!(k, FieldKind::IntArray | FieldKind::FloatArray) =>
                    {
                        Some(FieldKind::FloatArray)
                    }
                    _ => return None,
                };
            }
            return kind;
        }
    })
}

/// The columns of `after` that `known` does not name yet and that have a kind, in column
/// order.
pub fn new_fields(
    after: &Map<String, Value>,
    known: impl Fn(&str) -> bool,
) -> Vec<(&str, FieldKind)> {
    after
        .iter()
        .filter(|(k, _)| !known(k))
        .filter_map(|(k, v)| kind_of(v).map(|kind| (k.as_str(), kind)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kinds_from_debezium_json() {
        assert_eq!(kind_of(&json!(1_700_000_000_000i64)), Some(FieldKind::Int));
        assert_eq!(kind_of(&json!(1.5)), Some(FieldKind::Float));
        assert_eq!(kind_of(&json!(true)), Some(FieldKind::Bool));
        assert_eq!(kind_of(&json!("AeI=")), Some(FieldKind::String));
        assert_eq!(kind_of(&json!(null)), None);
        assert_eq!(kind_of(&json!({"a": 1})), Some(FieldKind::Object));
        assert_eq!(kind_of(&json!(["a", "b"])), Some(FieldKind::StringArray));
        assert_eq!(kind_of(&json!([1, 2.5])), Some(FieldKind::FloatArray));
        assert_eq!(kind_of(&json!([1, "a"])), None);
        assert_eq!(kind_of(&json!([])), None);
        assert_eq!(kind_of(&json!([null])), None);
    }

    #[test]
    fn only_unknown_columns_with_a_kind_are_new() {
        let after = json!({"id": 1, "name": "x", "note": null, "tags": []});
        let after = after.as_object().unwrap();
        let got = new_fields(after, |k| k == "id");
        assert_eq!(got, vec![("name", FieldKind::String)]);
    }
}
