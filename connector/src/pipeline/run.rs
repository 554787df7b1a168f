//! `cdc run`: the whole chain — embedded log, registry, admin server, source, pipeline —
//! and its supervisor.
//!
//! Each attempt opens the data log at `[log] dir` (flush policy Manual: only the pipeline's
//! flushes, each with its checkpoint), resumes the source from `log.checkpoint()`, and runs
//! source and pipeline connected by a bounded channel. A transient failure (connection
//! reset, server restart) ends the attempt: the pipeline makes every complete transaction
//! durable, the log is dropped — which discards a partly appended transaction exactly as a
//! crash would — and the next attempt, after a backoff, resumes from the checkpoint. A
//! definite error exits 1; shutdown (SIGTERM / Ctrl-C) drains and exits 0.
//!
//! Lack of disk is not a failure: the pipeline waits for room (`diskwait.rs`) with the log
//! open, and the source's spill shares the log's disk budget (`[log] disk_budget_bytes`):
//! one counter of the spill's bytes is handed to both, for each attempt.
//!
//! The schema registry is the embedded one in its own log at `<log.dir>/registry`, or the
//! remote one at `[registry] url` (see [`super::registry`]).
//!
//! The schema history (MySQL / MariaDB sources, which need each table's schema as it was at
//! the resume position) is in its own log at `<log.dir>/history` (see
//! [`crate::history`]), opened once for the process like the registry's and handed to
//! every attempt's source; a Postgres source gets none (pgoutput sends the schema).

use std::process::ExitCode;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cdc_kafka::KafkaLog;
use cdc_log::{FlushPolicy, Log};

use super::out::Out;
use crate::config::LogKind;
use cdc_schemas::encode::{
    BigIntUnsignedHandlingMode, BinaryHandlingMode, ConnectorKind, DecimalHandlingMode,
    EncoderConfig, IntervalHandlingMode, RecordFormat, SourceInfo, TimePrecisionMode,
    UnrepresentableMode,
};
use cdc_schemas::registry::SchemaRegistry;
use cdc_schemas::Checkpoint;
use cdc_sources::history::SchemaHistoryStore;
use cdc_sources::{DiskBudget, DurablePublisher, SnapshotProgress, Source, SourceContext};
use tokio::sync::watch;

use super::{DiskWait, Pipeline, PipelineConfig};
use crate::config::Config;

/// The encoder options from `[format]` (valid after `Config::validate`), for records of
/// `database` captured by a `kind` source.
pub fn encoder_config(config: &Config, kind: ConnectorKind, database: &str) -> EncoderConfig {
    let f = &config.format;
    let format = match f.value.as_str() {
        "avro" => RecordFormat::Avro,
        "json-schemas" => RecordFormat::Json {
            schemas_enable: true,
        },
        _ => RecordFormat::Json {
            schemas_enable: false,
        },
    };
    let mut c = EncoderConfig::new(SourceInfo::new(kind, &config.name, database), format);
    c.decimal_handling_mode = match f.decimal_handling_mode.as_str() {
        "double" => DecimalHandlingMode::Double,
        "string" => DecimalHandlingMode::String,
        _ => DecimalHandlingMode::Precise,
    };
    c.time_precision_mode = match f.time_precision_mode.as_deref() {
        Some("adaptive") => TimePrecisionMode::Adaptive,
        Some("adaptive_time_microseconds") => TimePrecisionMode::AdaptiveTimeMicroseconds,
        Some("connect") => TimePrecisionMode::Connect,
        // Unset: Debezium's default for this connector (EncoderConfig::new chose it).
        _ => c.time_precision_mode,
    };
    c.binary_handling_mode = match f.binary_handling_mode.as_str() {
        "base64" => BinaryHandlingMode::Base64,
        "base64-url-safe" => BinaryHandlingMode::Base64UrlSafe,
        "hex" => BinaryHandlingMode::Hex,
        _ => BinaryHandlingMode::Bytes,
    };
    c.interval_handling_mode = match f.interval_handling_mode.as_str() {
        "string" => IntervalHandlingMode::String,
        _ => IntervalHandlingMode::Numeric,
    };
    c.bigint_unsigned_handling_mode = match f.bigint_unsigned_handling_mode.as_str() {
        "precise" => BigIntUnsignedHandlingMode::Precise,
        _ => BigIntUnsignedHandlingMode::Long,
    };
    c.tombstones_on_delete = f.tombstones_on_delete;
    c.unrepresentable_handling_mode = match f.unrepresentable_handling_mode.as_str() {
        "fail" => UnrepresentableMode::Fail,
        _ => UnrepresentableMode::Header,
    };
    c
}

/// Why the log could not be opened.
enum OpenError {
    /// Retry after a backoff (a broker not reachable yet).
    Transient(String),
    /// Tell the operator and stop.
    Definite(String),
}

/// Opens the attempt's log (the embedded one, or the Kafka producer) and reads back the
/// source position stored in it.
async fn open_out(
    config: &Config,
    options: cdc_log::LogOptions,
) -> Result<(Out, Option<Vec<u8>>), OpenError> {
    match config.log.kind {
        LogKind::Embedded => {
            let log = Log::open(&config.log.dir, options).map_err(|e| {
                let damaged = matches!(
                    e,
                    cdc_log::LogError::CorruptSegment { .. }
                        | cdc_log::LogError::DurableDataLost { .. }
                        | cdc_log::LogError::CorruptFile { .. }
                );
                OpenError::Definite(format!(
                    "cannot open the log at {}: {e}{}",
                    config.log.dir.display(),
                    if damaged {
                        ". With cdc: `cdc log repair --config <this file>` cuts the damaged records (`cdc log verify` lists them) and the next run snapshots the tables again, bringing the log back equal to the database"
                    } else {
                        ""
                    }
                ))
            })?;
            let cp = log.checkpoint();
            Ok((Out::Log(log), cp))
        }
        LogKind::Kafka => {
            let settings = config.log.kafka_settings(&config.name);
            let name = config.name.clone();
            let r = tokio::task::spawn_blocking(move || {
                let k = KafkaLog::connect(settings, &name)?;
                let cp = k.checkpoint()?;
                Ok::<_, cdc_kafka::KafkaLogError>((k, cp))
            })
            .await
            .map_err(|e| OpenError::Definite(format!("the Kafka connect task failed: {e}")))?;
            match r {
                Ok((k, cp)) => Ok((Out::Kafka(k), cp)),
                Err(e) if e.is_transient() => Err(OpenError::Transient(e.to_string())),
                Err(e) => Err(OpenError::Definite(e.to_string())),
            }
        }
    }
}

/// Turns true on the first SIGTERM / Ctrl-C. After it, a second signal, or `deadline`
/// passing, exits the process at once: safe, because nothing is acknowledged to the
/// database before it is durable (the next start reads the rest again).
pub(crate) fn shutdown_signal(deadline: Duration) -> watch::Receiver<bool> {
    use crate::registry_cmd::shutdown_signal as stop_signal;
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        stop_signal().await;
        tracing::info!(deadline_ms = deadline.as_millis() as u64, "shutdown requested: stopping the source, flushing the pipeline (a second signal exits at once)");
        let _ = tx.send(true);
        tokio::select! {
            _ = stop_signal() => {
                eprintln!("cdc: second signal: exiting now; what was not durable is read again on the next start");
                std::process::exit(130);
            }
            _ = tokio::time::sleep(deadline) => {
                eprintln!("cdc: did not stop within shutdown_timeout_ms ({} ms): exiting now; what was not durable is read again on the next start", deadline.as_millis());
                std::process::exit(1);
            }
        }
    });
    rx
}

/// Runs the connector until shutdown or a definite error.
pub async fn run(config: Config) -> ExitCode {
    let spec = config.source_spec();
    // Builds the source once to learn what it is; each attempt builds a fresh one (a
    // source is consumed by its run).
    let (connector_kind, database) = match cdc_sources::build(&spec) {
        Ok(s) => (s.connector_kind(), s.database().to_string()),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let opened = match super::registry::open_registry(&config).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(e.exit_code());
        }
    };
    let shutdown = shutdown_signal(config.shutdown_timeout);
    // One set of log counters for every open of the log in this process: what an open
    // reported (a recovery cut, a ledger slot fallback) stays on /metrics after a reopen.
    let log_metrics = Arc::new(cdc_log::Metrics::default());
    let admin_opts = opened
        .admin_options(config.admin.listen)
        .log_metrics(log_metrics.clone())
        .token(config.admin.token());
    let metrics = admin_opts.metrics.clone();
    let status = admin_opts.status.clone();
    // The admin server stops on shutdown, or when the connector is done by itself
    // (`initial_only`, a definite error): then it must not hold the exit up.
    let (admin_stop, admin_stop_rx) = watch::channel(false);
    let admin = {
        let mut s = shutdown.clone();
        let mut done = admin_stop_rx;
        crate::admin::serve(admin_opts, async move {
            tokio::select! {
                _ = s.wait_for(|v| *v) => {}
                _ = done.wait_for(|v| *v) => {}
            }
        })
        .await
    };
    match &admin {
        Ok(a) => {
            tracing::info!(listen = %a.local_addr, registry_api = opened.remote_url.is_none(), "admin server listening (health, readiness, metrics; the registry API when the registry is embedded)")
        }
        Err(e) => {
            tracing::warn!(error = %e, "admin server not started; the connector runs without it")
        }
    }
    let registry: Arc<dyn SchemaRegistry> = opened.registry;
    // The sinks of [[sink]]: they read the log this process writes (read-only opens) and
    // stop after the source, when the run ends for any reason.
    let config = Arc::new(config);
    let (sinks_stop, sinks_stop_rx) = watch::channel(false);
    let sinks = {
        let mut s = shutdown.clone();
        let stop = sinks_stop.clone();
        tokio::spawn(async move {
            if s.wait_for(|v| *v).await.is_ok() {
                let _ = stop.send(true);
            }
        });
        crate::sink_run::spawn_all(&config, &registry, &metrics, &status, &sinks_stop_rx)
    };
    // Snapshot progress: bar on a terminal, log lines otherwise, gauges on /metrics.
    let snapshot_progress = SnapshotProgress::new();
    status.set_snapshot(snapshot_progress.clone());
    status.set_config(config.clone());
    let telemetry = super::telemetry::Telemetry::new(&metrics, &status);
    let restarts = metrics.counter(
        "cdc_restarts_total",
        "Times the supervisor restarted the source and pipeline after a transient error",
    );
    let failed = |component: &str, definite: bool, message: &str| {
        let kind = if definite { "definite" } else { "transient" };
        metrics
            .counter(
                &format!("cdc_errors_total{{component=\"{component}\",kind=\"{kind}\"}}"),
                "Errors by component (source, pipeline, log) and kind (transient: retried; definite: the connector stops)",
            )
            .inc();
        status.record_error(&format!("{component}.{kind}"), message);
    };
    // At 0 from the start, so that rate() and alerts see every series.
    for component in ["source", "pipeline", "log"] {
        for kind in ["transient", "definite"] {
            metrics.counter(
                &format!("cdc_errors_total{{component=\"{component}\",kind=\"{kind}\"}}"),
                "Errors by component (source, pipeline, log) and kind (transient: retried; definite: the connector stops)",
            );
        }
    }
    let progress_reporter = super::progress::spawn(snapshot_progress.clone(), &metrics);

    let topic_config = match config.log.topic_config() {
        Ok(t) => t,
        Err((k, m)) => {
            eprintln!("error: {k}: {m}");
            return ExitCode::from(2);
        }
    };
    let mut log_options = config.log.log_options();
    log_options.metrics = Some(log_metrics.clone());
    log_options.flush_policy = FlushPolicy::Manual;

    // Its log, closed when the connector stops (every append was flushed already).
    let mut history_log: Option<Log> = None;
    let history: Option<Arc<dyn SchemaHistoryStore>> = match connector_kind {
        ConnectorKind::Postgres => None,
        _ if config.log.kind == LogKind::Kafka => {
            Some(Arc::new(crate::history::KafkaHistoryStore::new(
                config.log.kafka_settings(&config.name),
                &config.name,
            )))
        }
        _ => {
            let dir = crate::history::history_dir(&config.log.dir);
            match crate::history::LogHistoryStore::open_dir(&dir, &config.name) {
                Ok(s) => {
                    history_log = Some(s.log().clone());
                    Some(Arc::new(s))
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(1);
                }
            }
        }
    };

    let hidden = super::hidden::HiddenValues::new(&metrics);
    let mut backoff = Duration::from_millis(500);
    let mut said_waiting = false;
    // The furthest checkpoint any attempt made durable: a source checks the next
    // attempt's stored position against it (a log that lost acknowledged commits).
    let mut acknowledged: Option<Checkpoint> = None;
    let code = loop {
        let started = Instant::now();
        // The source's spill files, counted against the log's disk budget.
        let spilled = Arc::new(AtomicU64::new(0));
        let mut attempt_options = log_options.clone();
        attempt_options.budget_shared_bytes = Some(spilled.clone());
        let (out, stored) = match open_out(&config, attempt_options).await {
            Ok(o) => o,
            Err(OpenError::Definite(m)) => {
                failed("log", true, &m);
                eprintln!("error: {m}");
                break ExitCode::from(1);
            }
            Err(OpenError::Transient(m)) => {
                failed("log", false, &m);
                tracing::warn!(error = %m, backoff_ms = backoff.as_millis() as u64, "the log is not reachable; retrying (the source is not read meanwhile, and the database keeps its log for us)");
                let mut s = shutdown.clone();
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = s.wait_for(|v| *v) => { break ExitCode::SUCCESS; }
                }
                backoff = (backoff * 2).min(Duration::from_secs(30));
                continue;
            }
        };
        let resume_from = match stored {
            None => None,
            Some(b) => match Checkpoint::from_bytes(&b) {
                Ok(p) => Some(p),
                Err(e) => {
                    eprintln!("error: the log's checkpoint is not a source position ({e}); was this log written by another tool?");
                    break ExitCode::from(1);
                }
            },
        };
        match &out {
            Out::Log(_) => {
                tracing::info!(dir = %config.log.dir.display(), checkpoint = ?resume_from.as_ref().map(|p| p.to_string()), "log opened")
            }
            Out::Kafka(k) => {
                tracing::info!(brokers = %config.log.brokers.as_deref().unwrap_or_default(), transactions = k.transactional(), offsets_topic = k.offsets_topic(), checkpoint = ?resume_from.as_ref().map(|p| p.to_string()), "Kafka log connected")
            }
        }
        // Bounded by the memory of the queued events, not by a count of batches.
        let (btx, brx) = super::queue::channel(config.source.common.max_queued_bytes);
        let (publisher, durable) = DurablePublisher::new(resume_from.clone());
        // Set when the source stopped on an error: a pipeline waiting for disk then stops
        // too (what it holds is read again), or a definite error would wait with it.
        let (source_ended, source_ended_rx) = watch::channel(false);
        let pipeline = Pipeline::new(
            out.clone(),
            registry.clone(),
            PipelineConfig {
                encoder: encoder_config(&config, connector_kind, &database),
                router: config.topic_router().expect("validated at load"),
                topic_config: topic_config.clone(),
                force_schema_change: config.format.schema_change == "force",
                group_commit_bytes: config.source.common.group_commit_bytes,
                group_commit: Duration::from_millis(config.source.common.group_commit_ms),
                key_columns: config.source.common.key_columns(),
                hidden: hidden.clone(),
                transaction_metadata: config.format.provide_transaction_metadata,
            },
            publisher,
        )
        .with_disk_wait(DiskWait::new(
            vec![shutdown.clone(), source_ended_rx],
            &metrics,
            status.clone(),
        ))
        .with_telemetry(&telemetry);
        let pipe = tokio::spawn(pipeline.run(brx));
        let source = match cdc_sources::build(&spec) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: {e}");
                break ExitCode::from(1);
            }
        };
        let ctx = SourceContext {
            batches: btx,
            durable,
            resume_from,
            acknowledged: acknowledged.clone(),
            shutdown: shutdown.clone(),
            metrics: metrics.clone(),
            progress: snapshot_progress.clone(),
            disk_budget: {
                let out = out.clone();
                DiskBudget::new(log_options.disk_budget_bytes, spilled, move || match &out {
                    Out::Log(log) => log.disk_bytes(),
                    Out::Kafka(_) => 0,
                })
            },
            history: history.clone(),
        };
        let src_result = source.run(ctx).await;
        if src_result.is_err() {
            let _ = source_ended.send(true);
        }
        let (stats, pipe_result) = match pipe.await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("error: the pipeline task failed: {e}");
                break ExitCode::from(1);
            }
        };
        tracing::info!(
            events = stats.events,
            records = stats.records,
            transactions = stats.transactions,
            flushes = stats.flushes,
            durable = ?stats.last_durable.as_ref().map(|p| p.to_string()),
            reconciled_deletes = stats.reconciled_deletes,
            "pipeline stopped"
        );
        if stats.last_durable.is_some() {
            acknowledged = stats.last_durable.clone();
        }
        // This run is over: recycled segments are cut to their flushed bytes, so the next
        // open has no stale tail to cut and report; unflushed appends are discarded, as
        // dropping the log would.
        if let Out::Log(log) = &out {
            if let Err(e) = tokio::task::block_in_place(|| log.close()) {
                tracing::warn!(error = %e, "closing the log; its next open recovers it");
            }
        }
        // A Kafka producer is dropped on a blocking thread: librdkafka waits for its
        // requests in flight.
        let dropped = tokio::task::spawn_blocking(move || drop(out));
        let _ = dropped.await;
        // The pipeline's error explains a source that stopped because the pipeline did.
        let transient = match (&pipe_result, &src_result) {
            (Err(e), _) if !e.is_transient() => {
                failed("pipeline", true, &e.to_string());
                tracing::error!(error = %e, "the pipeline stopped on a definite error");
                eprintln!("error: {e}");
                break ExitCode::from(1);
            }
            (Err(e), _) => {
                failed("pipeline", false, &e.to_string());
                tracing::warn!(error = %e, "the pipeline failed; will retry");
                true
            }
            (Ok(()), Err(e)) if !e.is_transient() => {
                failed("source", true, &e.to_string());
                tracing::error!(error = %e, "the source stopped on a definite error");
                eprintln!("error: {e}");
                break ExitCode::from(1);
            }
            (Ok(()), Err(e)) => {
                failed("source", false, &e.to_string());
                if stats.events == 0 && !said_waiting {
                    // A sidecar may start before its database: keep trying, but say
                    // plainly what the repeated warnings mean.
                    said_waiting = true;
                    eprintln!("cdc: waiting for the source database ({e}); retrying with backoff until it answers. Stop with Ctrl-C (or SIGTERM).");
                }
                tracing::warn!(error = %e, "the source failed; will retry");
                true
            }
            (Ok(()), Ok(())) => false,
        };
        if *shutdown.borrow() || !transient {
            tracing::info!("stopped");
            break ExitCode::SUCCESS;
        }
        // An attempt that made something durable, or ran a while, was a working
        // connection that broke: retry soon. Only attempts that fail without progress
        // back off further (0.5 s doubling to 30 s).
        if stats.flushes > 0 || started.elapsed() > Duration::from_secs(60) {
            backoff = Duration::from_millis(500);
        }
        tracing::info!(
            backoff_ms = backoff.as_millis() as u64,
            "restarting from the log's checkpoint"
        );
        let mut s = shutdown.clone();
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = s.wait_for(|v| *v) => { break ExitCode::SUCCESS; }
        }
        backoff = (backoff * 2).min(Duration::from_secs(30));
        restarts.inc();
        status.restarted();
    };
    drop(history);
    if let Some(log) = history_log {
        if let Err(e) = tokio::task::block_in_place(|| log.close()) {
            tracing::warn!(error = %e, "closing the schema history log; its next open recovers it");
        }
    }
    progress_reporter.finish();
    let _ = sinks_stop.send(true);
    crate::sink_run::join_all(sinks).await;
    let _ = admin_stop.send(true);
    if let Ok(a) = admin {
        let _ = tokio::time::timeout(Duration::from_secs(2), a.join).await;
    }
    code
}
