//! The Elasticsearch / OpenSearch keys of a `[[sink]]` section (`type = "elasticsearch"`
//! or `"opensearch"`), and their checks.
//!
//! Invariants after [`Settings::resolve`]: the URL is http(s) without credentials, a
//! password (inline or from its file, never printed) goes with a username, the index
//! template parses (names are made valid index names: lowercase, no `\/*?"<>| ,#:`), the
//! mapping file (if any) is a JSON object of index name → create-index body, and the
//! batch size is in range.

use std::path::PathBuf;

use cdc_schemas::config_keys::KeyError;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::config::SinkSpec;
use crate::search::http::{self, Secret};
use crate::search::names::NameTemplate;

/// The keys.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// `http://host:9200` (a path prefix is kept).
    pub url: String,
    /// Basic authentication, with `password` / `password_file`.
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub password: Option<Secret>,
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// Index name template: `{schema}`, `{table}`, `{prefix}` (the connector's name).
    #[serde(default = "default_index")]
    pub index: String,
    /// JSON: `{"<index>": {"settings": {...}, "mappings": {"properties": {...}}}}`.
    #[serde(default)]
    pub mapping_file: Option<PathBuf>,
    /// Documents per `_bulk` request.
    #[serde(default = "default_batch")]
    pub batch_documents: usize,
}

fn default_index() -> String {
    "{table}".into()
}
fn default_batch() -> usize {
    1000
}

/// The settings, checked and with their files read.
#[derive(Debug)]
pub struct Resolved {
    pub url: reqwest::Url,
    pub auth: Option<(String, Secret)>,
    pub names: NameTemplate,
    /// Per index: its create-index body.
    pub mappings: Map<String, Value>,
    pub batch_documents: usize,
}

/// A rendered name as a valid index name: lowercase, the characters Elasticsearch
/// forbids replaced by `_`, no leading `-`, `_` or `+`.
pub fn index_name(s: String) -> String {
    let s: String = s
        .chars()
        .map(|c| match c {
            '\\' | '/' | '*' | '?' | '"' | '<' | '>' | '|' | ' ' | ',' | '#' | ':' => '_',
            c => c.to_ascii_lowercase(),
        })
        .collect();
    let trimmed = s.trim_start_matches(['-', '_', '+']);
    if trimmed.is_empty() || trimmed == "." || trimmed == ".." {
        format!("cdc{trimmed}")
    } else {
        trimmed.to_string()
    }
}

impl Settings {
    pub fn resolve(spec: &SinkSpec) -> Result<Resolved, KeyError> {
        let s: Settings = spec.target_settings()?;
        let path = &spec.path;
        let url = http::base_url(path, &s.url)?;
        let password = http::secret(
            path,
            "password",
            s.password.as_ref(),
            "password_file",
            s.password_file.as_ref(),
        )?;
        let auth = match (s.username, password) {
            (Some(u), p) => Some((u, Secret::from(p.unwrap_or_default()))),
            (None, Some(_)) => {
                return Err((
                    format!("{path}.username"),
                    "a password needs its username".into(),
                ))
            }
            (None, None) => None,
        };
        let names = NameTemplate::parse(&s.index, &spec.connector, index_name)
            .map_err(|m| (format!("{path}.index"), m))?;
        let mappings = match &s.mapping_file {
            None => Map::new(),
            Some(f) => crate::search::read_json_object(f)
                .map_err(|m| (format!("{path}.mapping_file"), m))?,
        };
        for (name, body) in &mappings {
            let ok = body.as_object().is_some_and(|b| {
                b.keys()
                    .all(|k| matches!(k.as_str(), "settings" | "mappings" | "aliases"))
                    && b.get("mappings").is_none_or(Value::is_object)
            });
            if !ok {
                return Err((
                    format!("{path}.mapping_file"),
                    format!("index {name:?}: write {{\"settings\": {{…}}, \"mappings\": {{\"properties\": {{…}}}}}} (a create-index body)"),
                ));
            }
        }
        if !(1..=100_000).contains(&s.batch_documents) {
            return Err((
                format!("{path}.batch_documents"),
                format!("{} is out of range: use 1 to 100000", s.batch_documents),
            ));
        }
        Ok(Resolved {
            url,
            auth,
            names,
            mappings,
            batch_documents: s.batch_documents,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_names_are_made_valid() {
        assert_eq!(index_name("Public.Orders".into()), "public.orders");
        assert_eq!(index_name("_a b#c".into()), "a_b_c");
        assert_eq!(index_name("..".into()), "cdc..");
    }
}
