//! Avro schemas derived from Connect schemas the way Confluent's `AvroConverter`
//! (`AvroData.fromConnectSchema`, `connect.meta.data = true`) derives them for Debezium.
//!
//! Rules implemented:
//! - a Connect struct is an Avro `record` named after the Connect name (namespace = the
//!   part before the last dot), with `connect.version` / `connect.doc` / `connect.name`;
//!   a record already defined earlier in the same schema is referenced by full name;
//! - Connect `int8`/`int16` are Avro `int` with `connect.type`;
//! - a named Connect schema carries `connect.version`, `connect.parameters`,
//!   `connect.default` and `connect.name` properties; Connect `Decimal` is `bytes` with
//!   `logicalType: decimal`, `precision` (from `connect.decimal.precision`, else 64) and
//!   `scale`; Connect `Date`/`Time`/`Timestamp` get `date`/`time-millis`/
//!   `timestamp-millis`;
//! - an optional field is the union `["null", T]` with default `null`, or `[T, "null"]`
//!   with the Connect default when there is one;
//! - names are sanitised as Debezium's Avro name adjuster does: an invalid first character
//!   becomes `_` (a leading digit is kept after the `_`), every other invalid character
//!   becomes `_` (one per UTF-16 unit, as Java counts characters). Each dotted component
//!   of a full name is sanitised (Debezium checks only the first character of the whole
//!   name, which can still produce invalid Avro names; see FORMATS.md).
//!
//! Invariant: the JSON produced parses with `apache-avro` and describes exactly the datum
//! `avro::write_value` writes for the same plans.

use std::collections::HashSet;

use serde_json::{json, Map, Value as J};

use crate::encode::connect::{
    ConnectSchema, ConnectType, CONNECT_DATE, CONNECT_DECIMAL, CONNECT_TIME, CONNECT_TIMESTAMP,
};
use crate::encode::EncodeError;

fn valid_first(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn valid_rest(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Sanitises one Avro name (a record name, a namespace component or a field name).
pub fn sanitize_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 1);
    for (i, c) in name.chars().enumerate() {
        let ok = if i == 0 {
            valid_first(c)
        } else {
            valid_rest(c)
        };
        if ok {
            out.push(c);
        } else {
            for _ in 0..c.len_utf16() {
                out.push('_');
            }
            if i == 0 && c.is_ascii_digit() {
                out.push(c);
            }
        }
    }
    if out.is_empty() {
        out.push('_');
    }
    out
}

/// Sanitises a dotted full name component by component.
pub fn sanitize_fullname(name: &str) -> String {
    name.split('.')
        .map(sanitize_name)
        .collect::<Vec<_>>()
        .join(".")
}

/// Derives the Avro schema JSON of a (top-level) Connect schema.
pub fn avro_schema_json(schema: &ConnectSchema) -> Result<String, EncodeError> {
    let mut defined = HashSet::new();
    let v = type_json(schema, &mut defined)?;
    Ok(v.to_string())
}

fn primitive_name(ty: &ConnectType) -> &'static str {
    match ty {
        ConnectType::Boolean => "boolean",
        ConnectType::Int8 | ConnectType::Int16 | ConnectType::Int32 => "int",
        ConnectType::Int64 => "long",
        ConnectType::Float32 => "float",
        ConnectType::Float64 => "double",
        ConnectType::String => "string",
        ConnectType::Bytes => "bytes",
        ConnectType::Array(_) => "array",
        ConnectType::Struct(_) => "record",
    }
}

fn type_json(s: &ConnectSchema, defined: &mut HashSet<String>) -> Result<J, EncodeError> {
    match &s.ty {
        ConnectType::Struct(fields) => {
            let connect_name = s
                .name
                .clone()
                .unwrap_or_else(|| "ConnectDefault".to_string());
            let full = sanitize_fullname(&connect_name);
            if !defined.insert(full.clone()) {
                return Ok(J::String(full));
            }
            let (ns, name) = match full.rsplit_once('.') {
                Some((ns, n)) => (Some(ns.to_string()), n.to_string()),
                None => (None, full.clone()),
            };
            let mut m = Map::new();
            m.insert("type".into(), json!("record"));
            m.insert("name".into(), json!(name));
            if let Some(ns) = ns {
                m.insert("namespace".into(), json!(ns));
            }
            if let Some(d) = &s.doc {
                m.insert("doc".into(), json!(d));
            }
            let mut seen = HashSet::new();
            let mut out_fields = Vec::with_capacity(fields.len());
            for f in fields {
                let fname = sanitize_name(&f.name);
                if !seen.insert(fname.clone()) {
                    return Err(EncodeError::NameConflict {
                        schema: connect_name.clone(),
                        name: fname,
                    });
                }
                let mut fm = Map::new();
                fm.insert("name".into(), json!(fname));
                let t = type_json(&f.schema, defined)?;
                if f.schema.optional {
                    match &f.schema.default {
                        Some(d) => {
                            fm.insert("type".into(), json!([t, "null"]));
                            fm.insert("default".into(), json!(d));
                        }
                        None => {
                            fm.insert("type".into(), json!(["null", t]));
                            fm.insert("default".into(), J::Null);
                        }
                    }
                } else {
                    fm.insert("type".into(), t);
                    if let Some(d) = &f.schema.default {
                        fm.insert("default".into(), json!(d));
                    }
                }
                out_fields.push(J::Object(fm));
            }
            m.insert("fields".into(), J::Array(out_fields));
            if let Some(d) = &s.doc {
                m.insert("connect.doc".into(), json!(d));
            }
            if let Some(v) = s.version {
                m.insert("connect.version".into(), json!(v));
            }
            m.insert("connect.name".into(), json!(connect_name));
            Ok(J::Object(m))
        }
        ConnectType::Array(items) => {
            let t = type_json(items, defined)?;
            let items = if items.optional {
                json!(["null", t])
            } else {
                t
            };
            Ok(json!({"type": "array", "items": items}))
        }
        prim => {
            let base = primitive_name(prim);
            let connect_type = match prim {
                ConnectType::Int8 => Some("int8"),
                ConnectType::Int16 => Some("int16"),
                _ => None,
            };
            if s.name.is_none()
                && s.version.is_none()
                && s.parameters.is_empty()
                && s.default.is_none()
                && s.doc.is_none()
                && connect_type.is_none()
            {
                return Ok(json!(base));
            }
            let mut m = Map::new();
            m.insert("type".into(), json!(base));
            let name = s.name.as_deref();
            if name == Some(CONNECT_DECIMAL) {
                let param = |k: &str| {
                    s.parameters
                        .iter()
                        .find(|(pk, _)| pk == k)
                        .and_then(|(_, v)| v.parse::<u64>().ok())
                };
                m.insert("scale".into(), json!(param("scale").unwrap_or(0)));
                m.insert(
                    "precision".into(),
                    json!(param("connect.decimal.precision").unwrap_or(64)),
                );
            }
            if let Some(d) = &s.doc {
                m.insert("connect.doc".into(), json!(d));
            }
            if let Some(v) = s.version {
                m.insert("connect.version".into(), json!(v));
            }
            if let Some(d) = &s.default {
                m.insert("connect.default".into(), json!(d));
            }
            if !s.parameters.is_empty() {
                let mut p = Map::new();
                for (k, v) in &s.parameters {
                    p.insert(k.clone(), json!(v));
                }
                m.insert("connect.parameters".into(), J::Object(p));
            }
            if let Some(n) = name {
                m.insert("connect.name".into(), json!(n));
            }
            if let Some(t) = connect_type {
                m.insert("connect.type".into(), json!(t));
            }
            let logical = match name {
                Some(CONNECT_DECIMAL) => Some("decimal"),
                Some(CONNECT_DATE) => Some("date"),
                Some(CONNECT_TIME) => Some("time-millis"),
                Some(CONNECT_TIMESTAMP) => Some("timestamp-millis"),
                _ => None,
            };
            if let Some(l) = logical {
                m.insert("logicalType".into(), json!(l));
            }
            Ok(J::Object(m))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitising_follows_debezium() {
        assert_eq!(sanitize_name("price"), "price");
        assert_eq!(sanitize_name("1abc"), "_1abc");
        assert_eq!(sanitize_name("a-b c"), "a_b_c");
        assert_eq!(sanitize_name("é"), "_");
        assert_eq!(sanitize_name("a😀"), "a__");
        assert_eq!(sanitize_name(""), "_");
        assert_eq!(
            sanitize_fullname("my-server.public.2fa.Value"),
            "my_server.public._2fa.Value"
        );
    }
}
