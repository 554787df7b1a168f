//! The one place that knows every target: checks a `[[sink]]`'s target keys and runs a
//! sink of the configured type. A new target is a folder (`sinks/src/<target>/`) plus one
//! arm in each function here.
//!
//! Each target module provides: `config::Settings` (its keys; `deny_unknown_fields`),
//! `check(&SinkSpec) -> Result<(), KeyError>`, `wants_tx_ends(&SinkSpec) -> bool`, and a
//! sink type with `connect(&SinkSpec, &Metrics) -> Result<Self, SinkError>` that
//! implements [`Sink`](crate::Sink).

use std::sync::Arc;

use cdc_schemas::config_keys::{fields_of, KeyError};
use cdc_schemas::metrics::Metrics;
use cdc_schemas::registry::SchemaRegistry;
use tokio::sync::watch;

use crate::config::{SinkKind, SinkSpec};
use crate::driver::{DriverOptions, DriverStats, Prepare};
use crate::metrics::SinkMetrics;
use crate::view::ColumnMap;
use crate::{DeadLetters, LogConsumer, SinkError};

/// What a running sink is given by the connector.
pub struct SinkContext<C, D> {
    pub consumer: C,
    pub dead_letters: D,
    /// For Avro records: the registry the connector used.
    pub registry: Option<Arc<dyn SchemaRegistry>>,
    pub metrics: Metrics,
    pub shutdown: watch::Receiver<bool>,
}

/// Checks the target's keys of `spec`.
pub fn check_target(spec: &SinkSpec) -> Result<(), KeyError> {
    match spec.common.kind {
        SinkKind::Redis => crate::redis::check(spec),
        SinkKind::Typesense => crate::typesense::check(spec),
        SinkKind::Elasticsearch => crate::elasticsearch::check(spec),
    }
}

/// Every target's own keys.
pub fn target_keys() -> Vec<&'static str> {
    let mut k = Vec::new();
    k.extend(fields_of::<crate::redis::config::Settings>());
    k.extend(fields_of::<crate::typesense::config::Settings>());
    k.extend(fields_of::<crate::elasticsearch::config::Settings>());
    k
}

/// Runs the sink `spec` describes until shutdown (`Ok`) or a definite failure.
pub async fn run<C: LogConsumer, D: DeadLetters>(
    spec: &SinkSpec,
    ctx: SinkContext<C, D>,
) -> Result<DriverStats, SinkError> {
    let SinkContext {
        mut consumer,
        mut dead_letters,
        registry,
        metrics,
        shutdown,
    } = ctx;
    let c = &spec.common;
    let columns = ColumnMap::new(&c.include_columns, &c.exclude_columns, &c.rename_columns)
        .map_err(|(k, m)| {
            SinkError::definite(
                "sink configuration",
                format!("{}.{k}: {m}", spec.path),
                "fix the key",
            )
        })?;
    let sink_metrics = SinkMetrics::new(&metrics, spec.name());
    let opts = DriverOptions {
        max_poll_bytes: c.batch_bytes,
        max_pending_bytes: c.batch_bytes.saturating_mul(8),
        ..DriverOptions::default()
    };
    let tx_ends = match c.kind {
        SinkKind::Redis => crate::redis::wants_tx_ends(spec),
        SinkKind::Typesense => crate::typesense::wants_tx_ends(spec),
        SinkKind::Elasticsearch => crate::elasticsearch::wants_tx_ends(spec),
    };
    let mut prepare = Prepare::new(registry, spec.table_filter(), columns, tx_ends);
    if c.kind == SinkKind::Redis {
        prepare
            .decoder
            .keep_after_json(crate::redis::wants_after_json(spec));
    }
    // One driver loop, whatever the target: only the connect differs.
    macro_rules! drive {
        ($sink:expr) => {{
            let mut sink = $sink;
            crate::driver::run(
                &mut consumer,
                &mut sink,
                &mut dead_letters,
                prepare,
                &sink_metrics,
                shutdown,
                &opts,
            )
            .await
        }};
    }
    match c.kind {
        SinkKind::Redis => drive!(crate::redis::RedisSink::connect(spec, &metrics).await?),
        SinkKind::Typesense => drive!(crate::typesense::TypesenseSink::connect(spec, &metrics)?),
        SinkKind::Elasticsearch => {
            drive!(crate::elasticsearch::ElasticsearchSink::connect(
                spec, &metrics
            )?)
        }
    }
}
