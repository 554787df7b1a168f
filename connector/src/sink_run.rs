//! Running sinks: one owned task per `[[sink]]` inside `cdc run` (the sidecar case: one
//! process), or one sink alone (`cdc sink --config FILE --sink NAME`) against an embedded
//! log that another process writes.
//!
//! Both read the log through a read-only open, so a sink is the same code wherever it
//! runs and never holds the writer's lock; its group offsets are its own (see
//! `log_consumer.rs`). Dead letters go to the sink's own small log,
//! `<log.dir>/sinks/<sink name>/` (topic `dlq.<connector>.<sink>` by default; read it
//! with `cdc log --data-dir <log.dir>/sinks/<sink name> tail <topic>`), because a reader of
//! the main log may not append to it.
//!
//! Supervision: a transient failure to start (the target or the log not there yet) is
//! retried with backoff; a definite one stops that sink only — inside `cdc run` the
//! source goes on streaming (the log buffers for the sink; `cdc_sink_up` is 0), alone the
//! command exits 1. Shutdown: each sink's driver finishes the batch in hand, commits what
//! was delivered, and returns; `cdc run` waits for its sinks after the source stopped.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cdc_log::{HeaderRef, Log, LogError, LogOptions, NewRecord, ResetPolicy, TopicConfig};
use cdc_schemas::metrics::Metrics;
use cdc_schemas::registry::SchemaRegistry;
use cdc_sinks::{dlq_headers, DeadLetters, SinkContext, SinkError, SinkRecord, SinkSpec};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::Instrument as _;

use crate::config::{Config, LogKind};
use crate::kafka_consumer::{KafkaConsumer, KafkaDeadLetters};
use crate::log_consumer::{EmbeddedConsumer, TopicSelector};

/// The directory of a sink's own files (its dead-letter log).
pub fn sink_dir(log_dir: &Path, sink: &str) -> PathBuf {
    log_dir.join("sinks").join(sink)
}

/// The dead-letter topic of one sink, in its own embedded log (opened on first use).
pub struct EmbeddedDeadLetters {
    dir: PathBuf,
    topic: String,
    sink: String,
    log: Option<Log>,
}

impl EmbeddedDeadLetters {
    pub fn new(log_dir: &Path, spec: &SinkSpec) -> Self {
        EmbeddedDeadLetters {
            dir: sink_dir(log_dir, spec.name()),
            topic: spec.dead_letter_topic(),
            sink: spec.name().to_string(),
            log: None,
        }
    }

    fn append(
        &mut self,
        records: &[(SinkRecord, String)],
    ) -> Result<(), cdc_schemas::failure::BoxError> {
        if self.log.is_none() {
            std::fs::create_dir_all(&self.dir)?;
            self.log = Some(Log::open(&self.dir, LogOptions::default())?);
        }
        let log = self.log.as_ref().expect("opened above");
        let topic = log.topic_or_create(
            &self.topic,
            TopicConfig {
                partitions: 1,
                // Dead letters wait for an operator: kept until deleted by hand.
                retention_ms: None,
                ..TopicConfig::default()
            },
        )?;
        let now = cdc_log::now_ms();
        for (r, why) in records {
            let partition = r.partition.to_string();
            let offset = r.offset.to_string();
            let headers: Vec<HeaderRef<'_>> =
                dead_letter_headers(r, why, &self.sink, &partition, &offset)
                    .into_iter()
                    .map(|(key, value)| HeaderRef { key, value })
                    .collect();
            topic.append(
                0,
                &[NewRecord {
                    key: r.key.as_deref(),
                    value: r.value.as_deref(),
                    headers: &headers,
                    timestamp: now.max(r.timestamp_ms),
                }],
            )?;
        }
        log.flush(None)?;
        Ok(())
    }
}

/// A dead letter's headers: the record's own, then Kafka Connect's error headers (where
/// it came from, why it was refused, which sink refused it).
pub fn dead_letter_headers<'a>(
    r: &'a SinkRecord,
    why: &'a str,
    sink: &'a str,
    partition: &'a str,
    offset: &'a str,
) -> Vec<(&'a str, Option<&'a [u8]>)> {
    let mut headers: Vec<(&str, Option<&[u8]>)> = r
        .headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_deref()))
        .collect();
    headers.extend([
        (dlq_headers::TOPIC, Some(r.topic.as_bytes())),
        (dlq_headers::PARTITION, Some(partition.as_bytes())),
        (dlq_headers::OFFSET, Some(offset.as_bytes())),
        (dlq_headers::MESSAGE, Some(why.as_bytes())),
        (dlq_headers::SINK, Some(sink.as_bytes())),
    ]);
    headers
}

impl DeadLetters for EmbeddedDeadLetters {
    async fn send(&mut self, records: &[(SinkRecord, String)]) -> Result<(), SinkError> {
        tokio::task::block_in_place(|| self.append(records)).map_err(|e| {
            // A full disk or a broken dead-letter log must not lose the record: the
            // driver retries, and the offset does not move past it meanwhile.
            SinkError::transient(
                format!("writing the dead-letter topic in {}", self.dir.display()),
                e.to_string(),
            )
            .caused_by(e)
        })
    }
}

/// Runs one sink until shutdown or a definite failure, restarting it after transient
/// failures to start. `registry`: for Avro records.
pub async fn run_sink(
    config: Arc<Config>,
    spec: SinkSpec,
    registry: Option<Arc<dyn SchemaRegistry>>,
    metrics: Metrics,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), SinkError> {
    let mut backoff = Duration::from_millis(500);
    let mut warned = false;
    loop {
        if *shutdown.borrow() {
            return Ok(());
        }
        let attempt = async {
            match config.log.kind {
                LogKind::Embedded => {
                    let log = open_log(&config.log.dir)?;
                    let ctx = SinkContext {
                        consumer: new_consumer(&log, &spec)?,
                        dead_letters: EmbeddedDeadLetters::new(&config.log.dir, &spec),
                        registry: registry.clone(),
                        metrics: metrics.clone(),
                        shutdown: shutdown.clone(),
                    };
                    cdc_sinks::run(&spec, ctx).await
                }
                LogKind::Kafka => {
                    let settings = config.log.kafka_settings(&config.name);
                    let consumer =
                        tokio::task::block_in_place(|| KafkaConsumer::connect(&settings, &spec))?;
                    let ctx = SinkContext {
                        consumer,
                        dead_letters: KafkaDeadLetters::new(&settings, &spec),
                        registry: registry.clone(),
                        metrics: metrics.clone(),
                        shutdown: shutdown.clone(),
                    };
                    cdc_sinks::run(&spec, ctx).await
                }
            }
        };
        match attempt.await {
            Ok(stats) => {
                tracing::info!(
                    sink = spec.name(),
                    delivered = stats.delivered,
                    dead_letters = stats.dead_letters,
                    commits = stats.commits,
                    "sink stopped"
                );
                return Ok(());
            }
            Err(e) if e.is_transient() => {
                if !warned {
                    tracing::warn!(sink = spec.name(), error = %e, "sink cannot start yet; retrying with backoff");
                    warned = true;
                }
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = shutdown.wait_for(|v| *v) => return Ok(()),
                }
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
            Err(e) => return Err(e),
        }
    }
}

fn open_log(dir: &Path) -> Result<Log, SinkError> {
    Log::open_read_only(dir).map_err(|e| {
        // Before the connector's first run the log does not exist yet: wait for it.
        SinkError::transient(
            format!("opening the embedded log at {} to read", dir.display()),
            e.to_string(),
        )
        .caused_by(e)
    })
}

fn new_consumer(log: &Log, spec: &SinkSpec) -> Result<EmbeddedConsumer, SinkError> {
    let reset = if spec.starts_at_earliest() {
        ResetPolicy::Earliest
    } else {
        ResetPolicy::Latest
    };
    // A predicate, not today's list: topics created later (a table added) are read too.
    let chooser = spec.clone();
    let topics = TopicSelector::predicate(move |t| chooser.reads_topic(t));
    EmbeddedConsumer::new(log, &spec.group(), topics, reset, spec.protects_unread()).map_err(|e| {
        match e {
            LogError::GroupLocked { .. } => SinkError::definite(
                format!("opening sink {}'s consumer group", spec.name()),
                e.to_string(),
                "another process runs this sink (cdc run and cdc sink with the same \
                 [[sink]]?): stop it, or give this sink its own `group`",
            ),
            e => SinkError::transient(
                format!("opening sink {}'s consumer group", spec.name()),
                e.to_string(),
            )
            .caused_by(e),
        }
    })
}

/// Starts every `[[sink]]` of `config` as a named task of `cdc run`; each stops at
/// shutdown.
pub fn spawn_all(
    config: &Arc<Config>,
    registry: &Arc<dyn SchemaRegistry>,
    metrics: &Metrics,
    status: &crate::admin::Status,
    shutdown: &watch::Receiver<bool>,
) -> Vec<(String, JoinHandle<Result<(), SinkError>>)> {
    config
        .sinks
        .iter()
        .map(|spec| {
            let name = spec.name().to_string();
            // The same names give the same figures the sink's driver updates.
            status.add_sink(&name, cdc_sinks::metrics::SinkMetrics::new(metrics, &name));
            let run = run_sink(
                config.clone(),
                spec.clone(),
                Some(registry.clone()),
                metrics.clone(),
                shutdown.clone(),
            );
            let status = status.clone();
            let task = {
                let name = name.clone();
                async move {
                    let r = run.await;
                    if let Err(e) = &r {
                        // The source goes on: the log keeps the records for the sink.
                        tracing::error!(error = %e, "sink stopped on a definite error; the connector goes on streaming into the log (restart it once the cause is fixed)");
                        status.sink_stopped(&name, e.to_string());
                    }
                    r
                }
            };
            // Named by its span: every log line of the task says which sink it is.
            let span = tracing::info_span!("sink", name = %name);
            (name, tokio::spawn(task.instrument(span)))
        })
        .collect()
}

/// Waits for the sinks `spawn_all` started, logging how each ended.
pub async fn join_all(sinks: Vec<(String, JoinHandle<Result<(), SinkError>>)>) {
    for (name, h) in sinks {
        match h.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::error!(sink = %name, error = %e, "sink stopped on a definite error")
            }
            Err(e) => tracing::error!(sink = %name, error = %e, "sink task failed"),
        }
    }
}

/// `cdc sink --config FILE --sink NAME`: one sink alone, until SIGINT/SIGTERM.
pub async fn standalone(
    config: Config,
    name: &str,
    listen: Option<std::net::SocketAddr>,
) -> std::process::ExitCode {
    use std::process::ExitCode;
    let Some(spec) = config.sinks.iter().find(|s| s.name() == name).cloned() else {
        let names: Vec<&str> = config.sinks.iter().map(|s| s.name()).collect();
        eprintln!(
            "error: the configuration has no [[sink]] named {name:?} (it has: {})",
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        );
        return ExitCode::from(2);
    };
    // Avro schemas: the configured remote registry, or the embedded one through the
    // admin address of the `cdc run` that writes the log.
    let registry_url = match config.registry.remote_options() {
        Some(o) => Some(o),
        None => Some(cdc_registry::remote::RemoteOptions::new(format!(
            "http://{}",
            config.admin.listen
        ))),
    };
    let registry: Option<Arc<dyn SchemaRegistry>> = registry_url
        .and_then(|o| cdc_registry::remote::RemoteRegistry::new(o).ok())
        .map(|r| Arc::new(r) as Arc<dyn SchemaRegistry>);
    let metrics = Metrics::default();
    let shutdown = crate::pipeline::run::shutdown_signal(config.shutdown_timeout);
    let (admin_stop, admin_stop_rx) = watch::channel(false);
    let admin = match listen {
        Some(addr) => {
            let mut o = crate::admin::AdminOptions::new(addr).token(config.admin.token());
            o.metrics = metrics.clone();
            let mut done = admin_stop_rx;
            match crate::admin::serve(o, async move {
                let _ = done.wait_for(|v| *v).await;
            })
            .await
            {
                Ok(a) => {
                    tracing::info!(listen = %a.local_addr, "sink admin server listening (health, metrics)");
                    Some(a)
                }
                Err(e) => {
                    eprintln!("error: cannot listen on {addr}: {e}");
                    return ExitCode::from(1);
                }
            }
        }
        None => None,
    };
    tracing::info!(sink = name, group = %spec.group(), log = %config.log.dir.display(), "sink starting");
    let result = run_sink(Arc::new(config), spec, registry, metrics, shutdown).await;
    let _ = admin_stop.send(true);
    if let Some(a) = admin {
        let _ = tokio::time::timeout(Duration::from_secs(2), a.join).await;
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
#[path = "sink_run_tests.rs"]
mod tests;
