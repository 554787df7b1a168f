//! A `[[sink]]` section of the connector's configuration.
//!
//! As with `[source]`, one flat TOML table has two owners: the keys every sink has
//! ([`CommonSinkConfig`]: name, type, what it reads, its group, dead letters, columns) and
//! the keys of its target, read by the target's own module (`redis::config`, …) from
//! [`SinkSpec::target`]. [`SinkSpec::from_table`] reads the common part, resolves the
//! defaults that derive from the connector's name, and has the target check its part, so a
//! key neither knows is an error naming it.
//!
//! Invariants after [`SinkSpec::from_table`]: every key was known, `name` is usable in a
//! group and topic name, and the target's keys passed its own validation.

use std::collections::BTreeMap;

use cdc_schemas::config_keys::{deserialize_keyed, fields_of, KeyError};
use cdc_schemas::filter::TableFilter;
use serde::Deserialize;

/// Which target a sink writes to, from `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SinkKind {
    /// Redis and Valkey.
    #[serde(alias = "valkey")]
    Redis,
    Typesense,
    /// Elasticsearch and OpenSearch (`_bulk`).
    #[serde(alias = "opensearch")]
    Elasticsearch,
}

impl SinkKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SinkKind::Redis => "redis",
            SinkKind::Typesense => "typesense",
            SinkKind::Elasticsearch => "elasticsearch",
        }
    }
}

/// The keys every sink has.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommonSinkConfig {
    /// Unique among the sinks; names its group, its dead-letter topic, its metrics.
    pub name: String,
    #[serde(rename = "type")]
    pub kind: SinkKind,
    /// Topics read (`*` and `?` globs). Default: every change topic of this connector
    /// (`<name>.*`).
    #[serde(default)]
    pub topics: Vec<String>,
    /// Tables applied, `schema.table` (MySQL `db.table`) globs over the records' source
    /// block; empty = all.
    #[serde(default)]
    pub tables: Vec<String>,
    #[serde(default)]
    pub exclude_tables: Vec<String>,
    /// The consumer group; default `cdc-sink-<sink name>`.
    #[serde(default)]
    pub group: Option<String>,
    /// Where a group new to a partition starts: "earliest" (default: the whole log, so
    /// the view starts complete) or "latest".
    #[serde(default = "default_start")]
    pub start: String,
    /// Where refused records go; default `dlq.<connector name>.<sink name>`.
    #[serde(default)]
    pub dead_letter_topic: Option<String>,
    /// Columns kept in the view, per table: `"public.orders:id,total"`. A table not
    /// named keeps every column.
    #[serde(default)]
    pub include_columns: Vec<String>,
    /// Columns left out of the view, per table: `"public.orders:secret,notes"`.
    #[serde(default)]
    pub exclude_columns: Vec<String>,
    /// Column renames: `"public.orders.total" = "amount"`.
    #[serde(default)]
    pub rename_columns: BTreeMap<String, String>,
    /// Bytes of records read per batch; default 1 MiB.
    #[serde(default = "default_batch_bytes")]
    pub batch_bytes: usize,
    /// How the log's retention treats this sink: "protect" (default: retention keeps what
    /// it has not applied, within the disk budget) or "ignore" (retention deletes as if
    /// the sink did not exist; a sink that falls behind it misses changes and says so).
    #[serde(default)]
    pub retention: Option<String>,
}

fn default_start() -> String {
    "earliest".into()
}
fn default_batch_bytes() -> usize {
    1 << 20
}

/// A sink, fully configured.
#[derive(Debug, Clone)]
pub struct SinkSpec {
    /// The connector's name (topic prefix).
    pub connector: String,
    pub common: CommonSinkConfig,
    /// The target's own keys (everything not in [`CommonSinkConfig`]), checked by the
    /// target's module.
    pub target: toml::Table,
    /// The key path of this section, `sink[i]`, for errors found later.
    pub path: String,
}

impl SinkSpec {
    /// Reads the `index`-th `[[sink]]` of connector `connector`.
    pub fn from_table(
        table: &toml::Table,
        connector: &str,
        index: usize,
    ) -> Result<SinkSpec, KeyError> {
        let path = format!("sink[{index}]");
        let common_fields = fields_of::<CommonSinkConfig>();
        let (common_part, target): (toml::Table, toml::Table) = table
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .partition(|(k, _)| common_fields.contains(&k.as_str()));
        let common: CommonSinkConfig = deserialize_keyed(toml::Value::Table(common_part), &path)?;
        let spec = SinkSpec {
            connector: connector.to_string(),
            common,
            target,
            path,
        };
        spec.validate()?;
        crate::factory::check_target(&spec)?;
        Ok(spec)
    }

    fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.path)
    }

    fn validate(&self) -> Result<(), KeyError> {
        let c = &self.common;
        if c.name.is_empty()
            || c.name.len() > 100
            || !c
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err((
                self.key("name"),
                format!(
                    "{:?}: use 1 to 100 characters of a-z, A-Z, 0-9, '_' and '-' (it names the sink's group and dead-letter topic)",
                    c.name
                ),
            ));
        }
        if !matches!(c.start.as_str(), "earliest" | "latest") {
            return Err((
                self.key("start"),
                format!("{:?}: use \"earliest\" or \"latest\"", c.start),
            ));
        }
        if let Some(r) = c
            .retention
            .as_deref()
            .filter(|r| !matches!(*r, "protect" | "ignore"))
        {
            return Err((
                self.key("retention"),
                format!("{r:?}: use \"protect\" or \"ignore\""),
            ));
        }
        if !(1024..=(256 << 20)).contains(&c.batch_bytes) {
            return Err((
                self.key("batch_bytes"),
                format!("{} is out of range: use 1024 to 268435456", c.batch_bytes),
            ));
        }
        crate::view::ColumnMap::new(&c.include_columns, &c.exclude_columns, &c.rename_columns)
            .map_err(|(k, m)| (self.key(k), m))?;
        Ok(())
    }

    pub fn name(&self) -> &str {
        &self.common.name
    }

    /// The consumer group.
    pub fn group(&self) -> String {
        self.common
            .group
            .clone()
            .unwrap_or_else(|| format!("cdc-sink-{}", self.common.name))
    }

    /// The dead-letter topic.
    pub fn dead_letter_topic(&self) -> String {
        self.common
            .dead_letter_topic
            .clone()
            .unwrap_or_else(|| format!("dlq.{}.{}", self.connector, self.common.name))
    }

    /// The topic patterns read.
    pub fn topic_patterns(&self) -> Vec<String> {
        if self.common.topics.is_empty() {
            vec![format!("{}.*", self.connector)]
        } else {
            self.common.topics.clone()
        }
    }

    /// Whether the sink reads `topic`: it matches a pattern and is none of the log's own
    /// topics (`_schemas`, dead-letter topics).
    pub fn reads_topic(&self, topic: &str) -> bool {
        !topic.starts_with('_')
            && !topic.starts_with("dlq.")
            && topic != self.dead_letter_topic()
            // The connector's own topics in a Kafka log: its source position and the
            // MySQL schema history are not changes.
            && topic.strip_prefix(self.connector.as_str()).is_none_or(|rest| {
                !matches!(rest, ".offsets" | ".schema-history")
            })
            && self
                .topic_patterns()
                .iter()
                .any(|p| cdc_schemas::filter::glob(p, topic))
    }

    pub fn table_filter(&self) -> TableFilter {
        TableFilter::new(&self.common.tables, &self.common.exclude_tables)
    }

    pub fn protects_unread(&self) -> bool {
        self.common.retention.as_deref().unwrap_or("protect") == "protect"
    }

    /// Whether `retention` is in the section (it only means something for the embedded
    /// log).
    pub fn retention_is_set(&self) -> bool {
        self.common.retention.is_some()
    }

    pub fn starts_at_earliest(&self) -> bool {
        self.common.start == "earliest"
    }

    /// Reads the target's part as `T` (which denies unknown fields), naming a bad key by
    /// its full path.
    pub fn target_settings<T: serde::de::DeserializeOwned>(&self) -> Result<T, KeyError> {
        deserialize_keyed(toml::Value::Table(self.target.clone()), &self.path).map_err(|(k, m)| {
            if m.starts_with("unknown key") {
                let mut known: Vec<&str> = fields_of::<CommonSinkConfig>()
                    .iter()
                    .chain(fields_of::<T>())
                    .copied()
                    .collect();
                known.sort_unstable();
                (
                    k,
                    format!(
                        "unknown key for a {} sink (known keys: {})",
                        self.common.kind.as_str(),
                        known.join(", ")
                    ),
                )
            } else {
                (k, m)
            }
        })
    }
}

/// Every `[[sink]]` key, common and per target, for checking documentation.
pub fn known_keys() -> Vec<&'static str> {
    let mut k: Vec<&str> = fields_of::<CommonSinkConfig>().to_vec();
    k.extend(crate::factory::target_keys());
    k.sort_unstable();
    k.dedup();
    k
}
