//! Parsing and normalising registered schemas: what makes two registrations "the same
//! schema" (Avro: the Parsing Canonical Form; JSON: the JSON value with object keys sorted,
//! serialised without whitespace), and the parsed Avro schema the compatibility checker needs.

use cdc_schemas::registry::{RegistryError, Schema, SchemaReference, SchemaType};
use serde_json::Value as Json;

/// The identity of a schema: equal keys are the same schema (same global id).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CanonKey {
    pub schema_type: SchemaType,
    pub canonical: String,
    pub references: Vec<SchemaReference>,
}

/// A schema checked and normalised.
pub struct Parsed {
    pub key: CanonKey,
    /// Avro only: the parsed schema, for compatibility checks.
    pub avro: Option<apache_avro::Schema>,
}

fn invalid(reason: impl Into<String>) -> RegistryError {
    RegistryError::InvalidSchema {
        reason: reason.into(),
    }
}

/// Parses `schema`; `referenced` holds the texts of the schemas its references name
/// (already resolved by the caller, in reference order).
pub fn parse(schema: &Schema, referenced: &[String]) -> Result<Parsed, RegistryError> {
    match schema.schema_type {
        SchemaType::Avro => {
            let (parsed, canonical) = if referenced.is_empty() {
                let s = apache_avro::Schema::parse_str(&schema.text)
                    .map_err(|e| invalid(format!("not a valid Avro schema: {e}")))?;
                let c = canonical_form(&s)?;
                (s, c)
            } else {
                let (s, others) =
                    apache_avro::Schema::parse_str_with_list(&schema.text, referenced)
                        .map_err(|e| invalid(format!("not a valid Avro schema: {e}")))?;
                let c = s
                    .independent_canonical_form(&others)
                    .map_err(|e| invalid(format!("cannot resolve references: {e}")))?;
                (s, c)
            };
            Ok(Parsed {
                key: CanonKey {
                    schema_type: SchemaType::Avro,
                    canonical,
                    references: schema.references.clone(),
                },
                avro: Some(parsed),
            })
        }
        SchemaType::Json => {
            let v: Json = serde_json::from_str(&schema.text)
                .map_err(|e| invalid(format!("not valid JSON: {e}")))?;
            if !(v.is_object() || v.is_boolean()) {
                return Err(invalid("a JSON Schema must be an object or a boolean"));
            }
            Ok(Parsed {
                key: CanonKey {
                    schema_type: SchemaType::Json,
                    canonical: sorted_json(&v),
                    references: schema.references.clone(),
                },
                avro: None,
            })
        }
        SchemaType::Protobuf => Err(invalid(
            "PROTOBUF schemas are not supported by this registry (AVRO and JSON are)",
        )),
    }
}

fn canonical_form(s: &apache_avro::Schema) -> Result<String, RegistryError> {
    // apache-avro's canonical_form panics only if its own Schema cannot be serialised;
    // never let that take the registry down.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.canonical_form()))
        .map_err(|_| invalid("cannot compute the Avro canonical form of this schema"))
}

/// JSON with object keys sorted recursively, no whitespace.
pub fn sorted_json(v: &Json) -> String {
    fn sort(v: &Json) -> Json {
        match v {
            Json::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                let mut out = serde_json::Map::new();
                for k in keys {
                    out.insert(k.clone(), sort(&m[k]));
                }
                Json::Object(out)
            }
            Json::Array(a) => Json::Array(a.iter().map(sort).collect()),
            other => other.clone(),
        }
    }
    sort(v).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn avro_canonical_form_ignores_docs_and_whitespace() {
        let a = Schema::avro(
            r#"{"type":"record","name":"r","namespace":"n","doc":"x","fields":[{"name":"a","type":"int","default":1}]}"#,
        );
        let b = Schema::avro(
            r#"{ "name": "n.r", "type": "record", "fields": [ {"type": "int", "name": "a"} ] }"#,
        );
        assert_eq!(parse(&a, &[]).unwrap().key, parse(&b, &[]).unwrap().key);
    }

    #[test]
    fn json_normalised_by_sorted_keys() {
        let a = Schema {
            schema_type: SchemaType::Json,
            text: r#"{"type":"object","properties":{"b":{},"a":{}}}"#.into(),
            references: vec![],
        };
        let b = Schema {
            schema_type: SchemaType::Json,
            text: r#"{ "properties": {"a":{}, "b":{}}, "type": "object" }"#.into(),
            references: vec![],
        };
        assert_eq!(parse(&a, &[]).unwrap().key, parse(&b, &[]).unwrap().key);
    }

    #[test]
    fn invalid_schemas_rejected() {
        assert!(matches!(
            parse(&Schema::avro("{\"type\":\"nope\"}"), &[]),
            Err(RegistryError::InvalidSchema { .. })
        ));
        assert!(parse(&Schema::avro("not json"), &[]).is_err());
    }
}
