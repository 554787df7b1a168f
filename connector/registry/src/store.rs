//! The `_schemas` topic: how the embedded registry stores subjects, versions, ids and
//! configuration in the embedded log.
//!
//! One compacted topic, `_schemas`, one partition, no time retention. Every record has a
//! JSON key and a JSON value (UTF-8, no trailing newline), shaped like the records
//! Confluent's Schema Registry keeps in its `_schemas` Kafka topic, so the newest record
//! per key is the state and compaction keeps exactly what a restart needs:
//!
//! | key | value | meaning |
//! |---|---|---|
//! | `{"keytype":"SCHEMA","subject":S,"version":V,"magic":1}` | `{"subject":S,"version":V,"id":N,"schema":TEXT,"schemaType":"AVRO"\|"JSON","references":[{"name","subject","version"}],"deleted":BOOL}` | version V of subject S is schema N; `deleted: true` is a soft delete |
//! | same key | null (tombstone) | permanent delete of that version |
//! | `{"keytype":"CONFIG","subject":S,"magic":0}` (`"subject":null` = global) | `{"compatibilityLevel":"BACKWARD"}` | compatibility level |
//! | same key | null | the subject's level was deleted (falls back to global) |
//! | `{"keytype":"DELETE_SUBJECT","subject":S,"magic":0}` | `{"subject":S,"version":V}` | soft delete of every version <= V (written together with the per-version `deleted: true` records; informational on replay) |
//! | `{"keytype":"ID_WATERMARK","magic":0}` | `{"next_id":N}` | ids below N were handed out; written before a permanent delete so a compacted-away id is never reused |
//!
//! Unknown key types are skipped on replay (forward compatibility). Key JSON is written
//! with fields in the order shown, so equal keys are equal bytes (compaction compares bytes).
//! A record is durable once the registry's `Log::flush(None)` returns (the pipeline's
//! checkpoint is left as it was); an id is handed out only after that.

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

pub const TOPIC: &str = "_schemas";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    Schema { subject: String, version: u32 },
    Config { subject: Option<String> },
    DeleteSubject { subject: String },
    IdWatermark,
    Unknown,
}

impl Key {
    pub fn encode(&self) -> Vec<u8> {
        let v = match self {
            Key::Schema { subject, version } => serde_json::json!({
                "keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1
            }),
            Key::Config { subject } => serde_json::json!({
                "keytype": "CONFIG", "subject": subject, "magic": 0
            }),
            Key::DeleteSubject { subject } => serde_json::json!({
                "keytype": "DELETE_SUBJECT", "subject": subject, "magic": 0
            }),
            Key::IdWatermark => serde_json::json!({"keytype": "ID_WATERMARK", "magic": 0}),
            Key::Unknown => serde_json::json!({"keytype": "NOOP", "magic": 0}),
        };
        serde_json::to_vec(&v).expect("json")
    }

    pub fn decode(bytes: &[u8]) -> Result<Key, String> {
        let v: Json = serde_json::from_slice(bytes).map_err(|e| format!("key is not JSON: {e}"))?;
        let keytype = v.get("keytype").and_then(Json::as_str).unwrap_or("");
        let subject = v.get("subject").and_then(Json::as_str).map(str::to_string);
        Ok(match keytype {
            "SCHEMA" => Key::Schema {
                subject: subject.ok_or("SCHEMA key without subject")?,
                version: v
                    .get("version")
                    .and_then(Json::as_u64)
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or("SCHEMA key without version")?,
            },
            "CONFIG" => Key::Config { subject },
            "DELETE_SUBJECT" => Key::DeleteSubject {
                subject: subject.ok_or("DELETE_SUBJECT key without subject")?,
            },
            "ID_WATERMARK" => Key::IdWatermark,
            _ => Key::Unknown,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefValue {
    pub name: String,
    pub subject: String,
    pub version: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemaValue {
    pub subject: String,
    pub version: u32,
    pub id: u32,
    pub schema: String,
    #[serde(rename = "schemaType", default = "avro")]
    pub schema_type: String,
    #[serde(default)]
    pub references: Vec<RefValue>,
    #[serde(default)]
    pub deleted: bool,
}

fn avro() -> String {
    "AVRO".to_string()
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigValue {
    #[serde(rename = "compatibilityLevel")]
    pub compatibility_level: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteSubjectValue {
    pub subject: String,
    pub version: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatermarkValue {
    pub next_id: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_are_stable_bytes() {
        let k = Key::Schema {
            subject: "t-value".into(),
            version: 3,
        };
        assert_eq!(
            String::from_utf8(k.encode()).unwrap(),
            r#"{"keytype":"SCHEMA","subject":"t-value","version":3,"magic":1}"#
        );
        assert_eq!(Key::decode(&k.encode()).unwrap(), k);
        let g = Key::Config { subject: None };
        assert_eq!(
            String::from_utf8(g.encode()).unwrap(),
            r#"{"keytype":"CONFIG","subject":null,"magic":0}"#
        );
        assert_eq!(Key::decode(&g.encode()).unwrap(), g);
        assert_eq!(
            Key::decode(br#"{"keytype":"NOOP","magic":0}"#).unwrap(),
            Key::Unknown
        );
    }
}
