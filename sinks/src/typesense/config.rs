//! The Typesense keys of a `[[sink]]` section (`type = "typesense"`), and their checks.
//!
//! Invariants after [`Settings::resolve`]: the URL is http(s) without credentials, the API
//! key is known (inline or read from its file) and never printed, the collection template
//! parses, the schema file (if any) is a JSON object of collection name → schema, and the
//! batch size is in range.

use std::path::PathBuf;

use cdc_schemas::config_keys::KeyError;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::config::SinkSpec;
use crate::search::http::{self, Secret};
use crate::search::names::{self, NameTemplate};

/// The keys.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// `http://host:8108` (a path prefix is kept).
    pub url: String,
    /// Secret; or `api_key_file`.
    #[serde(default)]
    pub api_key: Option<Secret>,
    #[serde(default)]
    pub api_key_file: Option<PathBuf>,
    /// Collection name template: `{schema}`, `{table}`, `{prefix}` (the connector's name).
    #[serde(default = "default_collection")]
    pub collection: String,
    /// JSON: `{"<collection>": {"fields": [...], <other collection settings>}}`.
    #[serde(default)]
    pub schema_file: Option<PathBuf>,
    /// Documents per import request.
    #[serde(default = "default_batch")]
    pub batch_documents: usize,
}

fn default_collection() -> String {
    "{table}".into()
}
fn default_batch() -> usize {
    500
}

/// The settings, checked and with their files read.
#[derive(Debug)]
pub struct Resolved {
    pub url: reqwest::Url,
    pub api_key: Secret,
    pub names: NameTemplate,
    /// Per collection: its schema overrides.
    pub schemas: Map<String, Value>,
    pub batch_documents: usize,
}

impl Settings {
    pub fn resolve(spec: &SinkSpec) -> Result<Resolved, KeyError> {
        let s: Settings = spec.target_settings()?;
        let path = &spec.path;
        let url = http::base_url(path, &s.url)?;
        let api_key = http::secret(
            path,
            "api_key",
            s.api_key.as_ref(),
            "api_key_file",
            s.api_key_file.as_ref(),
        )?
        .ok_or_else(|| {
            (
                format!("{path}.api_key"),
                "Typesense needs an API key: set api_key or api_key_file".into(),
            )
        })?;
        let names = NameTemplate::parse(&s.collection, &spec.connector, names::unchanged)
            .map_err(|m| (format!("{path}.collection"), m))?;
        let schemas = match &s.schema_file {
            None => Map::new(),
            Some(f) => crate::search::read_json_object(f)
                .map_err(|m| (format!("{path}.schema_file"), m))?,
        };
        for (name, schema) in &schemas {
            let fields_ok = schema.get("fields").is_none_or(|f| {
                f.as_array().is_some_and(|a| {
                    a.iter().all(|f| {
                        f.get("name").and_then(Value::as_str).is_some()
                            && f.get("type").and_then(Value::as_str).is_some()
                    })
                })
            });
            if !schema.is_object() || !fields_ok {
                return Err((
                    format!("{path}.schema_file"),
                    format!("collection {name:?}: write {{\"fields\": [{{\"name\": \"col\", \"type\": \"string\"}}, …], …}}"),
                ));
            }
        }
        if !(1..=10_000).contains(&s.batch_documents) {
            return Err((
                format!("{path}.batch_documents"),
                format!("{} is out of range: use 1 to 10000", s.batch_documents),
            ));
        }
        Ok(Resolved {
            url,
            api_key: Secret::from(api_key),
            names,
            schemas,
            batch_documents: s.batch_documents,
        })
    }
}
