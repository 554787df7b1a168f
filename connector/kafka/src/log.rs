//! [`KafkaLog`]: the producer side of Kafka as the log.
//!
//! # Exactly once
//!
//! With transactions (the default), records are produced inside a Kafka transaction begun
//! at the first record after a commit; [`KafkaLog::commit`] adds the source position to
//! `<name>.offsets` and commits, so the records of a durable group and the position that
//! covers them become visible to `read_committed` consumers together, or not at all. The
//! caller acknowledges the position to the database only after `commit` returns. A crash
//! (or an error) before that leaves an open transaction that the next producer with the
//! same `transactional.id` aborts in [`KafkaLog::connect`] (`init_transactions`), and the
//! source resends from the position read back from Kafka: each change is committed once.
//!
//! Without transactions: the idempotent producer (no duplicates from its own retries, no
//! reordering within a partition), and `commit` waits until every record produced so far
//! is acknowledged by all in-sync replicas, then writes the position and waits for it (a
//! record that failed for good never sits behind a stored position). A crash between a record's
//! write and its position's resends it: at least once, in order per key.
//!
//! # Failures
//!
//! librdkafka retries what it can (leader moves, timeouts) within `message.timeout.ms`.
//! A failure that reaches us ends this producer: the caller drops it, builds a new one
//! and resumes from the position in Kafka ([`KafkaLogError::is_transient`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;

use crate::error::KafkaLogError;
use crate::settings::{KafkaSettings, TopicSpec};

/// Delivery reports: the first failure, kept until the next commit reports it.
#[derive(Default)]
pub(crate) struct Reports {
    first_error: Mutex<Option<KafkaError>>,
    failed: AtomicBool,
}

impl ClientContext for Reports {
    /// librdkafka's own log lines, at our levels: a broker that is down is worth a
    /// warning (the connector retries), not an error line per attempt.
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
        trace_librdkafka(level, fac, log_message);
    }

    /// Client-wide errors (all brokers down, a transport failure): librdkafka retries
    /// them; what fails for good reaches us as the result of a call.
    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(%error, reason, "Kafka client error (librdkafka retries)");
    }
}

impl ProducerContext for Reports {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            self.failed.store(true, Ordering::Release);
            let mut first = self.first_error.lock().unwrap_or_else(|p| p.into_inner());
            // The cause, not its consequence: once a record fails for good, librdkafka
            // purges the others of the transaction, in no set order of reports.
            if first.as_ref().is_none_or(is_purge) && (first.is_none() || !is_purge(e)) {
                *first = Some(e.clone());
            }
        }
    }
}

/// librdkafka's own log lines, at our levels: a broker that is down is worth a warning
/// (the clients retry), not an error line per attempt.
pub(crate) fn trace_librdkafka(
    level: rdkafka::config::RDKafkaLogLevel,
    fac: &str,
    log_message: &str,
) {
    use rdkafka::config::RDKafkaLogLevel as L;
    match level {
        L::Emerg | L::Alert | L::Critical | L::Error | L::Warning => {
            tracing::warn!(facility = fac, "librdkafka: {log_message}")
        }
        L::Notice | L::Info => tracing::info!(facility = fac, "librdkafka: {log_message}"),
        L::Debug => tracing::debug!(facility = fac, "librdkafka: {log_message}"),
    }
}

/// A record dropped from the queue because its transaction failed.
fn is_purge(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(RDKafkaErrorCode::PurgeQueue | RDKafkaErrorCode::PurgeInflight)
    )
}

impl Reports {
    pub(crate) fn take(&self) -> Option<KafkaError> {
        if !self.failed.load(Ordering::Acquire) {
            return None;
        }
        let e = self
            .first_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        self.failed.store(false, Ordering::Release);
        e
    }
}

/// One record to produce (borrowed: librdkafka copies it).
pub struct OutRecord<'a> {
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: &'a [(&'a str, Option<&'a [u8]>)],
    pub timestamp_ms: i64,
}

/// The connector's writer into Kafka. One per pipeline attempt.
pub struct KafkaLog {
    /// Polled by whoever calls in (no poll thread of its own): delivery reports are
    /// served as records are sent and while a commit waits, never raced for.
    producer: BaseProducer<Reports>,
    pub(crate) admin: crate::topics::Admin,
    pub(crate) settings: KafkaSettings,
    /// `<name>.offsets` and the key of this connector's position in it.
    offsets_topic: String,
    offsets_key: Vec<u8>,
    /// A transaction is open (records produced since the last commit).
    in_transaction: AtomicBool,
    /// Records produced since the last commit.
    produced: std::sync::atomic::AtomicU64,
}

/// Sleep between two polls for delivery reports while waiting for them (a full local
/// queue, a commit). Not `poll(timeout)`: the crate's poll spins on the clock until
/// its timeout (measured: most of the producer's CPU), and returns only then.
const POLL_WAIT: Duration = Duration::from_micros(200);
/// Records sent between two polls for delivery reports.
const POLL_EVERY: u64 = 1024;

impl KafkaLog {
    /// Builds the producer, fences an earlier producer of this connector and aborts its
    /// open transaction (transactions on), creates `<name>.offsets` if missing. Blocking.
    pub fn connect(settings: KafkaSettings, name: &str) -> Result<Arc<KafkaLog>, KafkaLogError> {
        let tid = settings.transactional_id.clone();
        let producer: BaseProducer<Reports> = settings
            .producer()
            .create_with_context(Reports::default())
            .map_err(KafkaLogError::Config)?;
        let admin = crate::topics::Admin::new(&settings)?;
        let log = KafkaLog {
            producer,
            admin,
            offsets_topic: offsets_topic(name),
            offsets_key: name.as_bytes().to_vec(),
            in_transaction: AtomicBool::new(false),
            produced: Default::default(),
            settings,
        };
        // Reachable at all (a clear error instead of a hang in init_transactions).
        log.admin
            .admin
            .inner()
            .fetch_metadata(None, log.settings.timeout)
            .map_err(|e| {
                // Serves the producer's queued events: librdkafka's own log lines say why
                // (refused connection, TLS handshake, authentication).
                log.producer.poll(Duration::ZERO);
                KafkaLogError::from_kafka("metadata request", e, &tid)
            })?;
        if log.settings.transactions {
            log.producer
                .init_transactions(log.settings.timeout)
                .map_err(|e| match e.rdkafka_error_code() {
                    Some(
                        RDKafkaErrorCode::UnsupportedVersion
                        | RDKafkaErrorCode::UnsupportedForMessageFormat,
                    ) => KafkaLogError::Unsupported {
                        what: "transactions",
                        detail: format!("the broker does not support them ({e}); set [log] transactions = false for the idempotent producer (at least once)"),
                    },
                    _ => KafkaLogError::from_kafka("init_transactions", e, &tid),
                })?;
        }
        log.ensure_topic(
            &log.offsets_topic.clone(),
            &TopicSpec {
                partitions: 1,
                configs: vec![("cleanup.policy".into(), "compact".into())],
            },
        )?;
        Ok(Arc::new(log))
    }

    /// `<name>.offsets`.
    pub fn offsets_topic(&self) -> &str {
        &self.offsets_topic
    }

    /// The key of this connector's records in `<name>.offsets`.
    pub(crate) fn offsets_key(&self) -> &[u8] {
        &self.offsets_key
    }

    /// The settings it was connected with (for a reader of the same cluster).
    pub fn settings(&self) -> &KafkaSettings {
        &self.settings
    }

    /// Whether records are produced in transactions.
    pub fn transactional(&self) -> bool {
        self.settings.transactions
    }

    fn tid(&self) -> &str {
        &self.settings.transactional_id
    }

    fn begin_if_needed(&self) -> Result<(), KafkaLogError> {
        if self.settings.transactions && !self.in_transaction.load(Ordering::Acquire) {
            self.producer
                .begin_transaction()
                .map_err(|e| KafkaLogError::from_kafka("begin_transaction", e, self.tid()))?;
            self.in_transaction.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// Produces one record to `topic`'s `partition` (in the open transaction, begun if
    /// none is). Returns once librdkafka holds a copy; a delivery failure is reported by
    /// the next [`KafkaLog::commit`].
    pub fn send(
        &self,
        topic: &str,
        partition: u32,
        r: &OutRecord<'_>,
    ) -> Result<(), KafkaLogError> {
        self.begin_if_needed()?;
        let headers = (!r.headers.is_empty()).then(|| {
            r.headers.iter().fold(
                OwnedHeaders::new_with_capacity(r.headers.len()),
                |h, (k, v)| h.insert(Header { key: k, value: *v }),
            )
        });
        loop {
            let mut rec: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic)
                .partition(partition as i32)
                .timestamp(r.timestamp_ms);
            if let Some(k) = r.key {
                rec = rec.key(k);
            }
            if let Some(v) = r.value {
                rec = rec.payload(v);
            }
            if let Some(h) = &headers {
                rec = rec.headers(h.clone());
            }
            match self.producer.send(rec) {
                Ok(()) => {
                    let n = self.produced.fetch_add(1, Ordering::Relaxed);
                    if n % POLL_EVERY == POLL_EVERY - 1 {
                        self.producer.poll(Duration::ZERO);
                    }
                    return Ok(());
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    // Backpressure: the brokers have not acknowledged enough yet.
                    self.producer.poll(Duration::ZERO);
                    std::thread::sleep(POLL_WAIT);
                }
                Err((e, _)) => return Err(KafkaLogError::from_kafka("produce", e, self.tid())),
            }
        }
    }

    /// Makes everything produced so far and `checkpoint` (the source position covering
    /// it) durable together: with transactions, one commit; without, both acknowledged
    /// by every in-sync replica. Blocking. On error nothing may be acknowledged to the
    /// source; the producer is then done for (drop it, connect again).
    pub fn commit(&self, checkpoint: &[u8]) -> Result<(), KafkaLogError> {
        let position = OutRecord {
            key: Some(&self.offsets_key),
            value: Some(checkpoint),
            headers: &[],
            timestamp_ms: now_ms(),
        };
        if !self.settings.transactions {
            // Every record acknowledged before the position is written: a record that
            // failed for good must not end up behind a stored position.
            self.flush_acknowledged()?;
            self.send(&self.offsets_topic, 0, &position)?;
            self.flush_acknowledged()?;
            self.produced.store(0, Ordering::Relaxed);
            return Ok(());
        }
        self.send(&self.offsets_topic, 0, &position)?;
        let r = self
            .wait_delivered()
            .and_then(|()| self.producer.commit_transaction(self.settings.timeout));
        self.in_transaction.store(false, Ordering::Release);
        if let Err(e) = r {
            if let KafkaError::Transaction(t) = &e {
                if t.txn_requires_abort() {
                    let _ = self.producer.abort_transaction(self.settings.timeout);
                }
            }
            // A record that failed for good makes the commit fail: report it.
            let e = self.reports().take().unwrap_or(e);
            return Err(KafkaLogError::from_kafka(
                "transaction commit",
                e,
                self.tid(),
            ));
        }
        self.produced.store(0, Ordering::Relaxed);
        Ok(())
    }

    /// Waits until every record produced so far is acknowledged; the first that failed
    /// for good is the error.
    fn flush_acknowledged(&self) -> Result<(), KafkaLogError> {
        self.wait_delivered()
            .map_err(|e| KafkaLogError::from_kafka("flush", e, self.tid()))?;
        if let Some(e) = self.reports().take() {
            return Err(KafkaLogError::from_kafka("produce", e, self.tid()));
        }
        Ok(())
    }

    /// Abandons what was produced since the last commit (a pipeline stopping inside a
    /// source transaction): aborted with transactions; without, it may already be in
    /// Kafka, ahead of its position (at least once).
    pub fn abort(&self) {
        if self.settings.transactions && self.in_transaction.swap(false, Ordering::AcqRel) {
            if let Err(e) = self.producer.abort_transaction(self.settings.timeout) {
                tracing::warn!(error = %e, "aborting the open Kafka transaction failed; the next start fences it");
            }
        }
    }

    /// Waits until librdkafka holds no record that is not delivered (or failed), serving
    /// delivery reports as they come. The crate's `flush` (which `commit_transaction`
    /// calls first) polls in slices of 100 ms and returns at the end of one, so each
    /// commit took 100 ms (measured: 100 ms a commit against 6 ms with this, `linger.ms`
    /// = 5 included).
    fn wait_delivered(&self) -> Result<(), KafkaError> {
        let deadline = std::time::Instant::now() + self.settings.timeout;
        loop {
            // One event a call (a delivery report covers a whole batch of records).
            self.producer.poll(Duration::ZERO);
            if self.producer.in_flight_count() == 0 {
                return Ok(());
            }
            if std::time::Instant::now() >= deadline {
                return Err(KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut));
            }
            std::thread::sleep(POLL_WAIT);
        }
    }

    fn reports(&self) -> &Reports {
        self.producer.context()
    }
}

/// The topic holding the source positions of connector `name`.
pub fn offsets_topic(name: &str) -> String {
    format!("{name}.offsets")
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
