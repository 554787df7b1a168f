//! The status document: what the running process knows ([`Status`]) joined with what the
//! database, the log and the consumer groups say. Shape (every part optional but `name`):
//!
//! ```text
//! { name, running, state, uptime_seconds, restarts, errors{kind: {message, at, count}},
//!   source: { type, position, position_text, durable_at, lag_seconds, lag_bytes,
//!             slot{…} | margin{…}, snapshot{…}, error },
//!   log: { type, dir | brokers, bytes, disk_budget_bytes, topics: [{name, partitions:
//!          [{partition, start, end, bytes}]}], error },
//!   sinks: { name: { group, lag_records, state, applied, dead_letters, … } } }
//! ```

use std::sync::Arc;
use std::time::Duration;

use cdc_log::Log;
use cdc_schemas::Checkpoint;
use serde_json::{json, Map, Value};

use super::{position_json, Status};
use crate::config::{Config, LogKind};

/// How long the log (a Kafka cluster) may take to answer.
const LOG_TIMEOUT: Duration = Duration::from_secs(10);

/// The whole document for `config`; `live` is the running process's part (`None`: built
/// by `cdc status` with no connector answering).
pub async fn document(config: &Arc<Config>, live: Option<&Status>) -> Value {
    let mut doc = match live {
        Some(s) => s.to_json(),
        None => json!({ "running": false, "state": "not running" }),
    };
    doc["name"] = json!(config.name);
    let parts = match live.and_then(Status::cached_parts) {
        Some(p) => p,
        None => {
            let p = read_parts(config, live).await;
            if let Some(s) = live {
                s.cache_parts(&p);
            }
            p
        }
    };
    let Parts { log, db } = parts;
    let position = live
        .and_then(Status::durable)
        .or_else(|| log.checkpoint.clone());
    let spec = config.source_spec();
    let kind = match spec.source.db {
        cdc_sources::config::DbSettings::Postgres(_) => "postgres",
        cdc_sources::config::DbSettings::Mysql(_) => "mysql",
    };
    let mut source = json!({ "type": kind });
    match &position {
        Some(cp) => {
            source["position"] = position_json(cp);
            source["position_text"] = json!(cp.to_string());
        }
        None => source["position"] = Value::Null,
    }
    if let Value::Object(m) = db {
        for (k, v) in m {
            source[k] = v;
        }
    }
    finish(config, live, doc, source, log)
}

/// What the database and the log say (the slow parts of the document).
#[derive(Clone)]
pub struct Parts {
    log: LogView,
    db: Value,
}

async fn read_parts(config: &Arc<Config>, live: Option<&Status>) -> Parts {
    let log_part = {
        let config = config.clone();
        tokio::time::timeout(
            LOG_TIMEOUT,
            tokio::task::spawn_blocking(move || log_view(&config)),
        )
        .await
    };
    let log = match log_part {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => LogView::failed(format!("the log status task failed: {e}")),
        Err(_) => LogView::failed(format!(
            "the log did not answer within {} s",
            LOG_TIMEOUT.as_secs()
        )),
    };
    // The position: the one this process made durable, else the log's.
    let position = live
        .and_then(Status::durable)
        .or_else(|| log.checkpoint.clone());
    let at = match &position {
        Some(Checkpoint::At(p)) => Some(p),
        _ => None,
    };
    let db = cdc_sources::status::database_view(&config.source_spec(), at).await;
    Parts { log, db }
}

fn finish(
    config: &Config,
    live: Option<&Status>,
    mut doc: Value,
    mut source: Value,
    log: LogView,
) -> Value {
    if let Some(s) = live {
        if let Some(p) = doc.get("pipeline").cloned() {
            for k in ["durable_at", "lag_seconds", "last_durable_commit_at"] {
                if let Some(v) = p.get(k) {
                    source[k] = v.clone();
                }
            }
        }
        if let Some(v) = s.snapshot_json() {
            source["snapshot"] = v;
        }
    }
    if let Some(o) = doc.as_object_mut() {
        o.remove("pipeline");
    }
    doc["source"] = source;
    // Sinks: the live figures, with each group's lag from the log.
    let mut sinks = doc
        .get("sinks")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for spec in &config.sinks {
        let e = sinks.entry(spec.name().to_string()).or_insert(json!({}));
        let group = spec.group();
        e["group"] = json!(group);
        if let Some(lag) = log.group_lag.get(&group) {
            e["group_lag_records"] = json!(lag);
        }
        if e.get("state").is_none() {
            e["state"] = json!(if live.is_some() {
                "separate process"
            } else {
                "not running"
            });
        }
    }
    if !sinks.is_empty() {
        doc["sinks"] = Value::Object(sinks);
    }
    doc["log"] = log.json;
    doc
}

#[derive(Clone)]
struct LogView {
    json: Value,
    checkpoint: Option<Checkpoint>,
    /// Group → records behind, summed over its partitions.
    group_lag: std::collections::HashMap<String, u64>,
}

impl LogView {
    fn failed(e: String) -> LogView {
        LogView {
            json: json!({ "error": e }),
            checkpoint: None,
            group_lag: Default::default(),
        }
    }
}

fn log_view(config: &Config) -> LogView {
    match config.log.kind {
        LogKind::Embedded => embedded(config),
        LogKind::Kafka => kafka(config),
    }
}

fn embedded(config: &Config) -> LogView {
    let dir = &config.log.dir;
    let mut out = json!({ "type": "embedded", "dir": dir.display().to_string() });
    if let Some(b) = config.log.log_options().disk_budget_bytes {
        out["disk_budget_bytes"] = json!(b);
    }
    if !dir.join("topics").exists() && !dir.exists() {
        out["error"] = json!(format!("no log at {} yet", dir.display()));
        return LogView {
            json: out,
            checkpoint: None,
            group_lag: Default::default(),
        };
    }
    let log = match Log::open_read_only(dir) {
        Ok(l) => l,
        Err(e) => return LogView::failed(format!("cannot open the log at {}: {e}", dir.display())),
    };
    let checkpoint = log
        .checkpoint()
        .and_then(|b| Checkpoint::from_bytes(&b).ok());
    let mut bytes = 0u64;
    let mut topics = Vec::new();
    for t in log.topics() {
        let Ok(d) = log.describe(&t) else { continue };
        let parts: Vec<Value> = d
            .partitions
            .iter()
            .map(|p| {
                bytes += p.size_bytes;
                json!({
                    "partition": p.partition,
                    "start": p.log_start_offset,
                    "end": p.high_watermark,
                    "bytes": p.size_bytes,
                })
            })
            .collect();
        topics.push(json!({ "name": t, "partitions": parts }));
    }
    let mut group_lag = std::collections::HashMap::new();
    for g in log.groups() {
        *group_lag.entry(g.group.clone()).or_insert(0) += g.lag;
    }
    out["bytes"] = json!(bytes);
    out["topics"] = Value::Array(topics);
    LogView {
        json: out,
        checkpoint,
        group_lag,
    }
}

fn kafka(config: &Config) -> LogView {
    let settings = config.log.kafka_settings(&config.name);
    let mut out = json!({ "type": "kafka", "brokers": settings.brokers });
    let checkpoint = match cdc_kafka::committed_checkpoint(&settings, &config.name) {
        Ok(b) => b.and_then(|b| Checkpoint::from_bytes(&b).ok()),
        Err(e) => {
            out["error"] = json!(e.to_string());
            return LogView {
                json: out,
                checkpoint: None,
                group_lag: Default::default(),
            };
        }
    };
    let reader = match cdc_kafka::KafkaReader::connect(&settings) {
        Ok(r) => r,
        Err(e) => {
            out["error"] = json!(e.to_string());
            return LogView {
                json: out,
                checkpoint,
                group_lag: Default::default(),
            };
        }
    };
    let mut topics = Vec::new();
    let mut all = Vec::new();
    let internal = [
        format!("{}.offsets", config.name),
        format!("{}.schema-history", config.name),
    ];
    match reader.topics() {
        Ok(ts) => {
            for (t, n) in ts {
                if t.starts_with("__") {
                    continue;
                }
                let prefix = format!("{}.", config.name);
                if !t.starts_with(&prefix) && !t.starts_with("dlq.") || internal.contains(&t) {
                    continue;
                }
                let parts: Vec<Value> = match reader.describe(&t) {
                    Ok(Some(ps)) => ps
                        .iter()
                        .map(|p| json!({ "partition": p.partition, "start": p.low, "end": p.high }))
                        .collect(),
                    _ => Vec::new(),
                };
                topics.push(json!({ "name": t, "partitions": parts }));
                all.push((t, n));
            }
        }
        Err(e) => out["error"] = json!(e.to_string()),
    }
    let mut group_lag = std::collections::HashMap::new();
    for spec in &config.sinks {
        let group = spec.group();
        let Ok(offsets) = cdc_kafka::GroupOffsets::connect(&settings, &group) else {
            continue;
        };
        let mut lag = 0u64;
        for (t, n) in all.iter().filter(|(t, _)| spec.reads_topic(t)) {
            if let Ok(ps) = offsets.describe(t, *n) {
                lag += ps.iter().map(|p| p.lag().max(0) as u64).sum::<u64>();
            }
        }
        group_lag.insert(group, lag);
    }
    out["topics"] = Value::Array(topics);
    LogView {
        json: out,
        checkpoint,
        group_lag,
    }
}

/// A sorted map of `doc[key]` (for the text view).
pub fn object<'a>(doc: &'a Value, key: &str) -> Option<&'a Map<String, Value>> {
    doc.get(key).and_then(Value::as_object)
}
