//! The embedded log as a sink's [`LogConsumer`]: one consumer group over the topics a
//! [`TopicSelector`] chooses, in the writer's process (`cdc run`) or in another one
//! (`cdc sink`, on a log opened with [`Log::open_read_only`]).
//!
//! - Offsets are external group offsets (`Log::commit_external`: one file per group in
//!   the log's `groups.d`), in both cases, so there is one mechanism; a commit is durable
//!   (fsynced) before it returns. The sink's `protect` flag is stored with them: with it
//!   the writer's retention and disk budget keep every record the group has not read;
//!   without it retention ignores the group.
//! - The consumer holds the group's lock for its whole life: a second consumer of the
//!   same group, in any process, fails at construction ([`LogError::GroupLocked`], naming
//!   the other pid).
//! - Each partition gets a [`Reader`] at the group's committed offset, or at `reset` for a
//!   partition new to the group, which is committed at once (so a protecting group's
//!   unread records are kept from the start). Topics that appear later (a table added to
//!   the source) are picked up: the topic list is checked about once a second.
//! - `poll` takes durable records only, partition by partition, so a record a sink sees
//!   can never vanish in a crash of the writer. Waiting for new records uses the log's
//!   in-process notifications on the writer's log, and the directory's inotify watch
//!   (`Log::wait_for_change` + `Log::refresh`) on a read-only one; never a sleep loop.
//! - A committed offset below the log start (retention went past a group without
//!   `protect`, or a group that had it turned off) moves to the log start: the records in
//!   between are counted ([`EmbeddedConsumer::records_skipped`]) and an error-level line
//!   says that the target may now miss changes and how to rebuild it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cdc_log::{GroupLock, Log, LogError, Reader, ResetPolicy, StartAt};
use cdc_schemas::filter::glob;
use cdc_sinks::{LogConsumer, SinkError, SinkRecord, TopicPartition};

/// How often the topic list is checked for new topics the selector chooses.
const TOPIC_CHECK: Duration = Duration::from_secs(1);

type TopicPredicate = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// Which topics a consumer reads: names or patterns (`*` any run of characters, `?` one
/// character), or a predicate.
#[derive(Clone)]
pub struct TopicSelector {
    patterns: Vec<String>,
    predicate: Option<TopicPredicate>,
}

impl std::fmt::Debug for TopicSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopicSelector")
            .field("patterns", &self.patterns)
            .field("predicate", &self.predicate.is_some())
            .finish()
    }
}

impl TopicSelector {
    /// Topics matching any of `patterns`.
    pub fn patterns<I, S>(patterns: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        TopicSelector {
            patterns: patterns.into_iter().map(Into::into).collect(),
            predicate: None,
        }
    }

    /// Topics for which `f` is true.
    pub fn predicate(f: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        TopicSelector {
            patterns: Vec::new(),
            predicate: Some(Arc::new(f)),
        }
    }

    pub fn matches(&self, topic: &str) -> bool {
        self.predicate.as_ref().is_some_and(|f| f(topic))
            || self.patterns.iter().any(|p| glob(p, topic))
    }
}

/// A consumer group of the embedded log.
pub struct EmbeddedConsumer {
    log: Log,
    group: String,
    protect: bool,
    reset: ResetPolicy,
    selector: TopicSelector,
    readers: Vec<(Arc<str>, Reader)>,
    /// The group's committed offsets, as last written.
    committed: BTreeMap<(Arc<str>, u32), u64>,
    /// Where the next poll starts, so one busy partition cannot starve the others.
    next: usize,
    last_topic_check: Instant,
    records_skipped: u64,
    /// Held while this consumer lives: one consumer per group.
    _lock: GroupLock,
}

impl EmbeddedConsumer {
    /// Group `group` over every partition of the topics `topics` chooses, now and later.
    /// `reset` places a partition the group has no offset for (`None`: that is an error);
    /// `protect` is stored with the group's offsets (see the module docs). Works on a
    /// writable and on a read-only log. Fails with [`LogError::GroupLocked`] while another
    /// consumer of the group is open.
    pub fn new(
        log: &Log,
        group: &str,
        topics: TopicSelector,
        reset: ResetPolicy,
        protect: bool,
    ) -> Result<Self, LogError> {
        let lock = log.lock_group(group)?;
        log.refresh()?;
        let mut c = EmbeddedConsumer {
            log: log.clone(),
            group: group.to_string(),
            protect,
            reset,
            selector: topics,
            readers: Vec::new(),
            committed: BTreeMap::new(),
            next: 0,
            last_topic_check: Instant::now(),
            records_skipped: 0,
            _lock: lock,
        };
        // Commits every partition once: registers new ones and stores `protect` as given.
        c.add_topics(true)?;
        Ok(c)
    }

    /// Records between the group's committed offsets and the high watermarks, summed over
    /// its partitions.
    pub fn lag(&self) -> u64 {
        self.readers
            .iter()
            .map(|(t, r)| {
                let c = self
                    .committed
                    .get(&(t.clone(), r.partition()))
                    .copied()
                    .unwrap_or(r.position());
                r.high_watermark().saturating_sub(c)
            })
            .sum()
    }

    /// Records passed over because the group's offset had fallen below the log start.
    pub fn records_skipped(&self) -> u64 {
        self.records_skipped
    }

    /// The topics read now.
    pub fn topics(&self) -> Vec<Arc<str>> {
        let mut t: Vec<_> = self.readers.iter().map(|(t, _)| t.clone()).collect();
        t.dedup();
        t
    }

    /// Adds readers for the chosen topics not read yet, committing their start offsets
    /// (`all`: every partition's, so that the stored protect flag is this consumer's).
    fn add_topics(&mut self, all: bool) -> Result<(), LogError> {
        self.last_topic_check = Instant::now();
        let stored = self.log.external_group(&self.group)?.unwrap_or_default();
        let mut new = Vec::new();
        for name in self.log.topics() {
            if !self.selector.matches(&name) || self.readers.iter().any(|(t, _)| **t == *name) {
                continue;
            }
            let topic = self.log.topic(&name)?;
            let t: Arc<str> = name.as_str().into();
            for p in 0..topic.partitions() {
                let o = match stored.offsets.get(&(name.clone(), p)) {
                    Some(&o) => o,
                    None => {
                        let at = match self.reset {
                            ResetPolicy::Earliest => StartAt::Earliest,
                            ResetPolicy::Latest => StartAt::Latest,
                            ResetPolicy::None => {
                                return Err(LogError::NoCommittedOffset {
                                    group: self.group.clone(),
                                    topic: name.clone(),
                                    partition: p,
                                })
                            }
                        };
                        self.log.resolve_offset(&name, p, at)?
                    }
                };
                let reader = self.log.reader(&name, p, StartAt::Offset(o))?;
                self.readers.push((t.clone(), reader));
                if all || !stored.offsets.contains_key(&(name.clone(), p)) {
                    new.push((t.clone(), p, o));
                }
                self.committed.insert((t.clone(), p), o);
            }
            if !all {
                tracing::info!(group = %self.group, topic = %name, partitions = topic.partitions(), "consumer group picked up a new topic");
            }
        }
        if !new.is_empty() {
            let offsets: Vec<(&str, u32, u64)> =
                new.iter().map(|(t, p, o)| (&**t, *p, *o)).collect();
            self.log
                .commit_external(&self.group, self.protect, &offsets)?;
        }
        Ok(())
    }

    /// At most about once a second: new topics (read-only: after a refresh).
    fn check_topics(&mut self) -> Result<(), SinkError> {
        if self.last_topic_check.elapsed() < TOPIC_CHECK {
            return Ok(());
        }
        self.log.refresh().map_err(log_error)?;
        self.add_topics(false).map_err(log_error)
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
            let records = match reader.poll(max_bytes - bytes) {
                Ok(r) => r,
                Err(LogError::OffsetOutOfRange {
                    offset, log_start, ..
                }) if offset < log_start => {
                    let skipped = log_start - offset;
                    self.records_skipped += skipped;
                    tracing::error!(
                        group = %self.group,
                        topic = %topic,
                        partition = reader.partition(),
                        committed = offset,
                        log_start,
                        skipped,
                        "the group's offset is below the log start: retention deleted {skipped} records it had not read (its sink has protect = false), so the target may now miss changes; the group goes on from the log start. To rebuild the target: stop the sink, clear the target, `cdc log reset-group {} {topic} --to-earliest`, start the sink",
                        self.group
                    );
                    reader.seek(StartAt::Offset(log_start)).map_err(log_error)?;
                    reader.poll(max_bytes - bytes).map_err(log_error)?
                }
                Err(e) => return Err(log_error(e)),
            };
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

    /// Waits up to `slice` for a change that may bring records.
    async fn wait_slice(&self, slice: Duration) -> Result<(), SinkError> {
        if self.log.is_read_only() {
            // Another process writes: its flushes show as changes in the log directory.
            // Blocking calls, off the runtime's workers.
            let log = self.log.clone();
            let r = tokio::task::spawn_blocking(move || {
                if !log.refresh()? {
                    log.wait_for_change(slice)?;
                    log.refresh()?;
                }
                Ok::<_, LogError>(())
            })
            .await;
            return match r {
                Ok(r) => r.map_err(log_error),
                Err(e) => Err(SinkError::transient(
                    "waiting for the embedded log",
                    e.to_string(),
                )),
            };
        }
        if self.readers.is_empty() {
            // Nothing to wake on until a chosen topic exists.
            tokio::time::sleep(slice).await;
            return Ok(());
        }
        let ready: Vec<_> = self
            .readers
            .iter()
            .map(|(_, r)| Box::pin(r.ready()))
            .collect();
        let _ = tokio::time::timeout(slice, futures_util::future::select_all(ready)).await;
        Ok(())
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
        self.check_topics()?;
        let records = self.poll_now(max_bytes)?;
        if !records.is_empty() {
            return Ok(records);
        }
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(Vec::new());
            }
            // In slices of at most the topic check's period, so new topics are seen.
            self.wait_slice(left.min(TOPIC_CHECK)).await?;
            self.check_topics()?;
            let records = self.poll_now(max_bytes)?;
            if !records.is_empty() {
                return Ok(records);
            }
        }
    }

    fn lag(&self) -> u64 {
        EmbeddedConsumer::lag(self)
    }

    async fn commit(&mut self, offsets: &[(TopicPartition, u64)]) -> Result<(), SinkError> {
        if offsets.is_empty() {
            return Ok(());
        }
        let list: Vec<(&str, u32, u64)> = offsets
            .iter()
            .map(|(tp, o)| (&*tp.topic, tp.partition, *o))
            .collect();
        self.log
            .commit_external(&self.group, self.protect, &list)
            .map_err(log_error)?;
        for (tp, o) in offsets {
            self.committed.insert((tp.topic.clone(), tp.partition), *o);
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
                in_flight: 0,
            })
        }
    }

    /// A pipelining sink: each call leaves up to two new changes in flight (sent, not
    /// yet known durable) and reports them delivered in the next call, which must have
    /// them at its front.
    struct Pipelined {
        got: Vec<(u32, u64)>,
        in_flight: Vec<(u32, u64)>,
        stop_after: usize,
        stop: watch::Sender<bool>,
    }

    impl Sink for Pipelined {
        async fn deliver(&mut self, changes: &[Change]) -> Result<Delivered, SinkError> {
            let n = self.in_flight.len();
            let front: Vec<(u32, u64)> = changes[..n]
                .iter()
                .map(|c| (c.partition, c.offset))
                .collect();
            assert_eq!(front, self.in_flight, "what was in flight comes first");
            self.got.append(&mut self.in_flight);
            let left = (changes.len() - n).min(2);
            self.in_flight = changes[changes.len() - left..]
                .iter()
                .map(|c| (c.partition, c.offset))
                .collect();
            self.got.extend(
                changes[n..changes.len() - left]
                    .iter()
                    .map(|c| (c.partition, c.offset)),
            );
            if self.got.len() >= self.stop_after {
                let _ = self.stop.send(true);
            }
            Ok(Delivered {
                upto: changes.len() - left,
                rejected: Vec::new(),
                in_flight: left,
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

    /// A consumer of group `g` over topic `t`, from the earliest offset.
    fn group_g(log: &Log) -> Result<EmbeddedConsumer, LogError> {
        EmbeddedConsumer::new(
            log,
            "g",
            TopicSelector::patterns(["t"]),
            ResetPolicy::Earliest,
            true,
        )
    }

    /// Asserts that `got` holds offsets 0..10 of each of the two partitions, in order.
    fn each_record_once_in_order(got: &[(u32, u64)]) {
        for p in 0..2u32 {
            let offs: Vec<u64> = got
                .iter()
                .filter(|(q, _)| *q == p)
                .map(|(_, o)| *o)
                .collect();
            assert_eq!(offs, (0..10).collect::<Vec<_>>(), "partition {p}");
        }
    }

    async fn drive<S: Sink>(
        consumer: &mut EmbeddedConsumer,
        sink: &mut S,
        stop: watch::Receiver<bool>,
    ) -> driver::DriverStats {
        let opts = DriverOptions {
            min_backoff: Duration::from_millis(10),
            ..DriverOptions::default()
        };
        let prepare = Prepare::new(None, TableFilter::default(), ColumnMap::default(), false);
        let metrics = SinkMetrics::new(&Metrics::default(), "test");
        driver::run(
            consumer,
            sink,
            &mut NoLetters,
            prepare,
            &metrics,
            stop,
            &opts,
        )
        .await
        .unwrap()
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn changes_left_in_flight_are_delivered_by_the_next_call_without_new_records() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), LogOptions::default()).unwrap();
        fill(&log, 20);
        let (stop, stop_rx) = watch::channel(false);
        let mut sink = Pipelined {
            got: Vec::new(),
            in_flight: Vec::new(),
            stop_after: 20,
            stop,
        };
        let mut consumer = group_g(&log).unwrap();
        // The log has nothing after the 20 records: only a call without new records can
        // take the last ones out of flight.
        let stats = tokio::time::timeout(
            Duration::from_secs(20),
            drive(&mut consumer, &mut sink, stop_rx),
        )
        .await
        .expect("the changes in flight were read back");
        assert_eq!(stats.delivered, 20);
        assert!(sink.in_flight.is_empty());
        each_record_once_in_order(&sink.got);
        assert_eq!(log.committed("g", "t", 0), Some(10));
        assert_eq!(log.committed("g", "t", 1), Some(10));
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
        let mut consumer = group_g(&log).unwrap();
        assert_eq!(consumer.lag(), 20);
        let stats = drive(&mut consumer, &mut sink, stop_rx).await;
        assert_eq!(stats.delivered, 20);
        assert_eq!(stats.retries, 1, "the transient failure was retried once");
        // Every record once, in offset order within each partition.
        each_record_once_in_order(&sink.got);
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
        // The first consumer still holds the group: a second one is refused.
        let e = group_g(&log).err().unwrap();
        assert!(matches!(e, LogError::GroupLocked { .. }), "{e}");
        drop(consumer);
        let mut consumer = group_g(&log).unwrap();
        assert_eq!(consumer.lag(), 4);
        drive(&mut consumer, &mut sink, stop_rx).await;
        let mut got = sink.got.clone();
        got.sort();
        assert_eq!(got, vec![(0, 10), (0, 11), (1, 10), (1, 11)]);
    }

    #[test]
    fn patterns() {
        let s = TopicSelector::patterns(["app.public.*", "exact", "a?c"]);
        assert!(s.matches("app.public.users"));
        assert!(s.matches("app.public."));
        assert!(!s.matches("app.other.users"));
        assert!(s.matches("exact") && !s.matches("exactly"));
        assert!(s.matches("abc") && !s.matches("abbc"));
        assert!(TopicSelector::predicate(|t| t.len() == 2).matches("ab"));
    }

    fn append_to(log: &Log, topic: &str, n: u64, ts: i64) {
        let t = log
            .topic_or_create(
                topic,
                TopicConfig {
                    partitions: 1,
                    segment_bytes: 1024,
                    retention_ms: Some(1000),
                    ..TopicConfig::default()
                },
            )
            .unwrap();
        for i in 0..n {
            t.append(
                0,
                &[NewRecord::new(
                    Some(&i.to_be_bytes()),
                    Some(&[1u8; 100]),
                    ts,
                )],
            )
            .unwrap();
        }
        log.flush(None).unwrap();
    }

    /// A consumer on a read-only open (as `cdc sink` in another process): it waits for
    /// the writer's flushes through the directory watch, picks up a topic created later,
    /// and its commits are the writer's view of the group.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_read_only_consumer_follows_the_writer_and_new_topics() {
        let dir = tempfile::tempdir().unwrap();
        let w = Log::open(dir.path(), LogOptions::default()).unwrap();
        append_to(&w, "app.a", 3, cdc_log::now_ms());
        let ro = Log::open_read_only(dir.path()).unwrap();
        let mut c = EmbeddedConsumer::new(
            &ro,
            "sink",
            TopicSelector::patterns(["app.*"]),
            ResetPolicy::Earliest,
            true,
        )
        .unwrap();
        assert_eq!(c.lag(), 3);
        assert_eq!(w.groups()[0].protect, Some(true));
        let got = c.poll(1 << 20, Duration::from_secs(5)).await.unwrap();
        assert_eq!(got.len(), 3);
        // Nothing new: the poll waits, and wakes when the writer flushes.
        let writer = w.clone();
        let later = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            append_to(&writer, "app.a", 2, cdc_log::now_ms());
        });
        let t0 = Instant::now();
        let got = c.poll(1 << 20, Duration::from_secs(10)).await.unwrap();
        later.join().unwrap();
        assert_eq!(got.len(), 2, "woken by the writer's flush");
        assert!(t0.elapsed() < Duration::from_secs(5));
        let tp = TopicPartition {
            topic: "app.a".into(),
            partition: 0,
        };
        c.commit(&[(tp, 5)]).await.unwrap();
        assert_eq!(c.lag(), 0);
        assert_eq!(w.committed("sink", "app.a", 0), Some(5));
        // A table added to the source: its topic is read too, from its start.
        append_to(&w, "app.b", 4, cdc_log::now_ms());
        append_to(&w, "other", 1, cdc_log::now_ms());
        let mut got = Vec::new();
        let t0 = Instant::now();
        while got.len() < 4 && t0.elapsed() < Duration::from_secs(10) {
            got.extend(c.poll(1 << 20, Duration::from_secs(2)).await.unwrap());
        }
        assert_eq!(got.len(), 4);
        assert!(got.iter().all(|r| &*r.topic == "app.b"));
        assert_eq!(c.topics().len(), 2);
        assert_eq!(
            w.committed("sink", "app.b", 0),
            Some(0),
            "registered on pickup"
        );
        assert_eq!(c.lag(), 4);
    }

    /// A group without protect that retention outran: it goes on from the log start and
    /// counts what it missed; a protecting one keeps its records.
    #[tokio::test(flavor = "multi_thread")]
    async fn an_unprotected_group_below_the_log_start_resets_and_counts() {
        let dir = tempfile::tempdir().unwrap();
        let w = Log::open(dir.path(), LogOptions::default()).unwrap();
        append_to(&w, "t", 40, 0);
        let mut loose = EmbeddedConsumer::new(
            &w,
            "loose",
            TopicSelector::patterns(["t"]),
            ResetPolicy::Earliest,
            false,
        )
        .unwrap();
        let kept = EmbeddedConsumer::new(
            &w,
            "kept",
            TopicSelector::patterns(["t"]),
            ResetPolicy::Earliest,
            true,
        )
        .unwrap();
        w.enforce_retention().unwrap();
        assert_eq!(w.describe("t").unwrap().partitions[0].log_start_offset, 0);
        drop(kept);
        w.delete_group("kept").unwrap();
        w.enforce_retention().unwrap();
        let start = w.describe("t").unwrap().partitions[0].log_start_offset;
        assert!(start > 0);
        let got = loose.poll(1 << 20, Duration::from_secs(1)).await.unwrap();
        assert_eq!(got[0].offset, start, "went on from the log start");
        assert_eq!(loose.records_skipped(), start);
    }
}
