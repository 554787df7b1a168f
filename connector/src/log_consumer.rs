//! The embedded log as a sink's [`LogConsumer`]: one consumer group over a set of topics.
//!
//! Each partition of each topic gets a [`Reader`] positioned at the group's committed
//! offset (or at `reset` for a group new to the partition, which registers it so the
//! disk budget keeps its unread records). `poll` takes durable records only (up to the
//! high watermark), partition by partition, so a record a sink sees can never vanish in a
//! crash of the writer; `commit` stores the group's offsets durably (the log's group
//! store, fsynced) before it returns.
//!
//! Reads come from the page cache in the common case and are done inline; waiting for
//! new records uses the log's notifications, never polling with a sleep.

use std::sync::Arc;
use std::time::Duration;

use cdc_log::{Log, LogError, Reader, ResetPolicy};
use cdc_sinks::{LogConsumer, SinkError, SinkRecord, TopicPartition};

/// A consumer group of the embedded log.
pub struct EmbeddedConsumer {
    log: Log,
    group: String,
    readers: Vec<(Arc<str>, Reader)>,
    /// Where the next poll starts, so one busy partition cannot starve the others.
    next: usize,
}

impl EmbeddedConsumer {
    /// Group `group` over every partition of `topics`.
    pub fn new(
        log: &Log,
        group: &str,
        topics: &[&str],
        reset: ResetPolicy,
    ) -> Result<Self, LogError> {
        let mut readers = Vec::new();
        for &t in topics {
            let topic = log.topic(t)?;
            let name: Arc<str> = t.into();
            for p in 0..topic.partitions() {
                readers.push((name.clone(), log.consumer(group, t, p, reset)?));
            }
        }
        Ok(EmbeddedConsumer {
            log: log.clone(),
            group: group.to_string(),
            readers,
            next: 0,
        })
    }

    fn poll_now(&mut self, max_bytes: usize) -> Result<Vec<SinkRecord>, SinkError> {
        let mut out = Vec::new();
        let mut bytes = 0;
        let n = self.readers.len();
        for i in 0..n {
            if bytes >= max_bytes {
                break;
            }
            let (topic, reader) = &mut self.readers[(self.next + i) % n];
            let records = reader.poll(max_bytes - bytes).map_err(log_error)?;
            for r in records {
                bytes += r.size_hint();
                out.push(SinkRecord {
                    topic: topic.clone(),
                    partition: reader.partition(),
                    offset: r.offset,
                    timestamp_ms: r.timestamp,
                    key: r.key,
                    value: r.value,
                    headers: r.headers.into_iter().map(|h| (h.key, h.value)).collect(),
                });
            }
        }
        self.next = (self.next + 1) % n.max(1);
        Ok(out)
    }
}

fn log_error(e: LogError) -> SinkError {
    if e.is_transient() {
        SinkError::transient("reading the embedded log", e.to_string()).caused_by(e)
    } else {
        SinkError::definite(
            "reading the embedded log",
            e.to_string(),
            "see the message; `cdc log describe` shows the topic's state",
        )
        .caused_by(e)
    }
}

impl LogConsumer for EmbeddedConsumer {
    async fn poll(
        &mut self,
        max_bytes: usize,
        wait: Duration,
    ) -> Result<Vec<SinkRecord>, SinkError> {
        let records = self.poll_now(max_bytes)?;
        if !records.is_empty() || self.readers.is_empty() {
            return Ok(records);
        }
        let ready: Vec<_> = self
            .readers
            .iter()
            .map(|(_, r)| Box::pin(r.ready()))
            .collect();
        if tokio::time::timeout(wait, futures_util::future::select_all(ready))
            .await
            .is_err()
        {
            return Ok(Vec::new());
        }
        self.poll_now(max_bytes)
    }

    fn lag(&self) -> u64 {
        self.readers
            .iter()
            .map(|(t, r)| {
                let committed = self
                    .log
                    .committed(&self.group, t, r.partition())
                    .unwrap_or(r.position());
                r.high_watermark().saturating_sub(committed)
            })
            .sum()
    }

    async fn commit(&mut self, offsets: &[(TopicPartition, u64)]) -> Result<(), SinkError> {
        for (tp, offset) in offsets {
            self.log
                .commit(&self.group, &tp.topic, tp.partition, *offset)
                .map_err(log_error)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cdc_log::{LogOptions, NewRecord, TopicConfig};
    use cdc_schemas::filter::TableFilter;
    use cdc_schemas::metrics::Metrics;
    use cdc_sinks::driver::{self, DriverOptions, Prepare};
    use cdc_sinks::metrics::SinkMetrics;
    use cdc_sinks::view::ColumnMap;
    use cdc_sinks::{Change, DeadLetters, Delivered, Sink};
    use tokio::sync::watch;

    /// A sink that keeps what it was given, and fails the way a target can: it takes a
    /// prefix of a batch, then fails transiently once, then takes everything.
    struct Collect {
        got: Vec<(u32, u64)>,
        calls: u32,
        stop_after: usize,
        stop: watch::Sender<bool>,
    }

    impl Sink for Collect {
        async fn deliver(&mut self, changes: &[Change]) -> Result<Delivered, SinkError> {
            self.calls += 1;
            let take = match self.calls {
                1 => 3.min(changes.len()),
                2 => return Err(SinkError::transient("test target", "restarting")),
                _ => changes.len(),
            };
            self.got
                .extend(changes[..take].iter().map(|c| (c.partition, c.offset)));
            if self.got.len() >= self.stop_after {
                let _ = self.stop.send(true);
            }
            Ok(Delivered {
                upto: take,
                rejected: Vec::new(),
            })
        }
    }

    struct NoLetters;
    impl DeadLetters for NoLetters {
        async fn send(&mut self, records: &[(SinkRecord, String)]) -> Result<(), SinkError> {
            panic!("no record should be refused: {records:?}")
        }
    }

    fn fill(log: &Log, n: u64) {
        let t = log
            .topic_or_create(
                "t",
                TopicConfig {
                    partitions: 2,
                    ..TopicConfig::default()
                },
            )
            .unwrap();
        for i in 0..n {
            let k = format!(r#"{{"id":{i}}}"#);
            let v = format!(
                r#"{{"before":null,"after":{{"id":{i}}},"source":{{"schema":"public","table":"t"}},"op":"c"}}"#
            );
            t.append(
                (i % 2) as u32,
                &[NewRecord::new(Some(k.as_bytes()), Some(v.as_bytes()), 0)],
            )
            .unwrap();
        }
        log.flush(None).unwrap();
    }

    async fn drive(
        consumer: &mut EmbeddedConsumer,
        sink: &mut Collect,
        stop: watch::Receiver<bool>,
    ) -> driver::DriverStats {
        let opts = DriverOptions {
            min_backoff: Duration::from_millis(10),
            ..DriverOptions::default()
        };
        let mut prepare = Prepare::new(None, TableFilter::default(), ColumnMap::default(), false);
        let metrics = SinkMetrics::new(&Metrics::default(), "test");
        driver::run(
            consumer,
            sink,
            &mut NoLetters,
            &mut prepare,
            &metrics,
            stop,
            &opts,
        )
        .await
        .unwrap()
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn delivered_records_are_committed_in_order_and_a_restart_resumes_after_them() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), LogOptions::default()).unwrap();
        fill(&log, 20);
        let (stop, stop_rx) = watch::channel(false);
        let mut sink = Collect {
            got: Vec::new(),
            calls: 0,
            stop_after: 20,
            stop,
        };
        let mut consumer = EmbeddedConsumer::new(&log, "g", &["t"], ResetPolicy::Earliest).unwrap();
        assert_eq!(consumer.lag(), 20);
        let stats = drive(&mut consumer, &mut sink, stop_rx).await;
        assert_eq!(stats.delivered, 20);
        assert_eq!(stats.retries, 1, "the transient failure was retried once");
        // Every record once, in offset order within each partition.
        for p in 0..2u32 {
            let offs: Vec<u64> = sink
                .got
                .iter()
                .filter(|(q, _)| *q == p)
                .map(|(_, o)| *o)
                .collect();
            assert_eq!(offs, (0..10).collect::<Vec<_>>(), "partition {p}");
        }
        assert_eq!(log.committed("g", "t", 0), Some(10));
        assert_eq!(log.committed("g", "t", 1), Some(10));
        assert_eq!(consumer.lag(), 0);

        // More records; a new consumer of the same group (a restart) starts after the
        // delivered ones and sees only the new records.
        fill(&log, 4);
        let (stop, stop_rx) = watch::channel(false);
        let mut sink = Collect {
            got: Vec::new(),
            calls: 2,
            stop_after: 4,
            stop,
        };
        let mut consumer = EmbeddedConsumer::new(&log, "g", &["t"], ResetPolicy::Earliest).unwrap();
        drive(&mut consumer, &mut sink, stop_rx).await;
        let mut got = sink.got.clone();
        got.sort();
        assert_eq!(got, vec![(0, 10), (0, 11), (1, 10), (1, 11)]);
    }
}
