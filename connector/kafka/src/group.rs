//! [`KafkaGroup`]: a member of a Kafka consumer group over the topics a predicate
//! chooses, for a sink reading a Kafka log. Kafka's group protocol shares the partitions
//! among the members (several `cdc sink` processes with one group), so each partition is
//! read by one member at a time, in offset order.
//!
//! Invariants:
//! - Committed records only (`isolation.level=read_committed`): a record of a transaction
//!   the connector aborted (a crash mid-commit) is never seen.
//! - Offsets move only through [`KafkaGroup::commit`] (`enable.auto.commit` and
//!   `enable.auto.offset.store` are off): the caller commits what its target holds.
//!   Besides, an idle member whose commits cover everything it was given commits, about
//!   once a second, librdkafka's fetch position when that is further (past a
//!   transaction's commit marker, which takes an offset no record holds), so a drained
//!   group's lag is 0.
//! - A commit names only partitions the member holds now: those a rebalance took away
//!   are dropped (their new owner starts at the last committed offset and replays the
//!   rest, which a sink's conditional writes make harmless).
//! - The topic list is read again every [`TOPIC_CHECK`]; a new topic the predicate
//!   chooses (a table added to the source) joins the subscription.
//! - Blocking calls (librdkafka's poll and commit): the caller runs them off the async
//!   executor's cooperative path.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::statistics::Statistics;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use crate::error::KafkaLogError;
use crate::read::ReadRecord;
use crate::settings::KafkaSettings;

/// How often the cluster's topic list is read for new topics to subscribe to.
pub const TOPIC_CHECK: Duration = Duration::from_secs(5);

/// How often an idle member looks for commit markers to step over.
const MARKER_CHECK: Duration = Duration::from_secs(1);

/// Where a group starts on a partition it has no committed offset for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupStart {
    Earliest,
    Latest,
}

type TopicPredicate = Box<dyn Fn(&str) -> bool + Send + Sync>;

/// The consumer's context: the group's lag from librdkafka's statistics, rebalances
/// logged.
struct GroupContext {
    group: String,
    /// Σ over the partitions held of (last stable offset − committed offset).
    lag: AtomicU64,
    /// Rebalances so far: what the member was given before one is no guide to where it
    /// is after it.
    rebalances: AtomicU64,
    /// Per partition fetched, librdkafka's fetch position (the offset after the last it
    /// has read from the broker, records it hands out or not), from the last statistics.
    fetched: std::sync::Mutex<HashMap<(String, i32), i64>>,
}

impl ClientContext for GroupContext {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
        crate::log::trace_librdkafka(level, fac, log_message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(group = %self.group, %error, reason, "Kafka consumer error (librdkafka retries)");
    }

    fn stats(&self, s: Statistics) {
        let mut lag = 0u64;
        let mut fetched = self.fetched.lock().unwrap_or_else(|p| p.into_inner());
        fetched.clear();
        for t in s.topics.values() {
            for p in t.partitions.values() {
                if p.partition >= 0 && p.fetch_state == "active" && p.next_offset >= 0 {
                    fetched.insert((t.topic.clone(), p.partition), p.next_offset);
                }
                // The partitions this member fetches ("active"); -1 is librdkafka's
                // internal unassigned partition.
                if p.partition < 0 || p.fetch_state != "active" || p.ls_offset < 0 {
                    continue;
                }
                let from = if p.committed_offset >= 0 {
                    p.committed_offset
                } else {
                    p.lo_offset.max(0)
                };
                lag += (p.ls_offset - from).max(0) as u64;
            }
        }
        self.lag.store(lag, Ordering::Relaxed);
    }
}

impl ConsumerContext for GroupContext {
    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        self.rebalances.fetch_add(1, Ordering::AcqRel);
        // Fetch positions of the old assignment say nothing about the new one.
        self.fetched
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        let list = |tpl: &TopicPartitionList| {
            tpl.elements()
                .iter()
                .map(|e| format!("{}[{}]", e.topic(), e.partition()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match rebalance {
            Rebalance::Assign(tpl) => {
                tracing::info!(group = %self.group, partitions = %list(tpl), "Kafka group: partitions assigned")
            }
            Rebalance::Revoke(tpl) => {
                tracing::info!(group = %self.group, partitions = %list(tpl), "Kafka group: partitions revoked")
            }
            Rebalance::Error(e) => {
                tracing::warn!(group = %self.group, error = %e, "Kafka group: rebalance failed")
            }
        }
    }
}

/// One member of a consumer group.
pub struct KafkaGroup {
    consumer: BaseConsumer<GroupContext>,
    chooses: TopicPredicate,
    subscribed: Vec<String>,
    checked: Option<Instant>,
    /// Per partition, the offset after the last record handed out.
    given: HashMap<(Arc<str>, i32), i64>,
    /// Per partition, the offset last committed by this member.
    committed: HashMap<(Arc<str>, i32), i64>,
    /// When an idle poll last looked for commit markers to step over.
    markers_checked: Instant,
    /// The context's rebalance count `given` and `committed` are of.
    rebalances: u64,
    /// One shared name per topic.
    names: HashMap<String, Arc<str>>,
    timeout: Duration,
    group: String,
}

impl KafkaGroup {
    /// Joins `group` on the topics `chooses` picks (on the first poll). Blocking.
    pub fn connect(
        settings: &KafkaSettings,
        group: &str,
        start: GroupStart,
        chooses: impl Fn(&str) -> bool + Send + Sync + 'static,
    ) -> Result<KafkaGroup, KafkaLogError> {
        let mut c = settings.base();
        c.set("group.id", group);
        c.set("enable.auto.commit", "false");
        c.set("enable.auto.offset.store", "false");
        c.set("isolation.level", "read_committed");
        c.set("allow.auto.create.topics", "false");
        c.set(
            "auto.offset.reset",
            match start {
                GroupStart::Earliest => "earliest",
                GroupStart::Latest => "latest",
            },
        );
        if !settings.properties.contains_key("statistics.interval.ms") {
            c.set("statistics.interval.ms", "500");
        }
        let consumer: BaseConsumer<GroupContext> = c
            .create_with_context(GroupContext {
                group: group.to_string(),
                lag: AtomicU64::new(0),
                rebalances: AtomicU64::new(0),
                fetched: std::sync::Mutex::new(HashMap::new()),
            })
            .map_err(KafkaLogError::Config)?;
        Ok(KafkaGroup {
            consumer,
            chooses: Box::new(chooses),
            subscribed: Vec::new(),
            checked: None,
            given: HashMap::new(),
            committed: HashMap::new(),
            markers_checked: Instant::now(),
            rebalances: 0,
            names: HashMap::new(),
            timeout: settings.timeout,
            group: group.to_string(),
        })
    }

    fn err(what: &'static str, e: KafkaError) -> KafkaLogError {
        KafkaLogError::from_kafka(what, e, "")
    }

    /// Subscribes to the topics chosen now, if the list changed (or was never read).
    fn check_topics(&mut self) -> Result<(), KafkaLogError> {
        if self.checked.is_some_and(|t| t.elapsed() < TOPIC_CHECK) {
            return Ok(());
        }
        let md = self
            .consumer
            .fetch_metadata(None, self.timeout)
            .map_err(|e| {
                if self.subscribed.is_empty() {
                    // Nothing to consume yet: serves librdkafka's queued log lines, which
                    // say why (refused connection, TLS handshake, authentication).
                    let _ = self.consumer.poll(Duration::ZERO);
                }
                Self::err("metadata request", e)
            })?;
        self.checked = Some(Instant::now());
        let mut topics: Vec<String> = md
            .topics()
            .iter()
            .filter(|t| t.error().is_none() && (self.chooses)(t.name()))
            .map(|t| t.name().to_string())
            .collect();
        topics.sort();
        if topics != self.subscribed && !topics.is_empty() {
            let names: Vec<&str> = topics.iter().map(String::as_str).collect();
            self.consumer
                .subscribe(&names)
                .map_err(|e| Self::err("subscribe", e))?;
            tracing::info!(group = %self.group, topics = %names.join(", "), "Kafka group: subscribed");
            self.subscribed = topics;
        }
        Ok(())
    }

    /// Calls `f` with the records available, waiting up to `wait` for the first, until
    /// about `max_bytes` of keys and values were given. Blocking.
    pub fn poll(
        &mut self,
        max_bytes: usize,
        wait: Duration,
        mut f: impl FnMut(&Arc<str>, &ReadRecord<'_>),
    ) -> Result<(), KafkaLogError> {
        if let Err(e) = self.check_topics() {
            if self.subscribed.is_empty() {
                return Err(e);
            }
            // Reading goes on with the topics known; the list is asked again later.
            tracing::warn!(group = %self.group, error = %e, "Kafka group: the topic list could not be read again");
        }
        if self.subscribed.is_empty() {
            // Nothing to read yet (the connector has not created its topics).
            std::thread::sleep(wait.min(Duration::from_millis(200)));
            return Ok(());
        }
        let mut bytes = 0;
        let mut given = 0usize;
        let mut timeout = wait;
        while bytes < max_bytes {
            let m = match self.consumer.poll(timeout) {
                None => break,
                Some(Ok(m)) => m,
                Some(Err(KafkaError::PartitionEOF(_))) => continue,
                Some(Err(e)) => {
                    if bytes > 0 {
                        // What was read is handed out; the error comes back next time.
                        tracing::warn!(group = %self.group, error = %e, "Kafka fetch error");
                        break;
                    }
                    return Err(Self::err("fetch", e));
                }
            };
            timeout = Duration::ZERO;
            // A rebalance is served inside the consumer's poll: this record is of the
            // assignment it made.
            let n = self.consumer.context().rebalances.load(Ordering::Acquire);
            if n != self.rebalances {
                self.rebalances = n;
                self.given.clear();
                self.committed.clear();
            }
            let topic = match self.names.get(m.topic()) {
                Some(t) => t.clone(),
                None => {
                    let t: Arc<str> = Arc::from(m.topic());
                    self.names.insert(m.topic().to_string(), t.clone());
                    t
                }
            };
            let rec = crate::read::record_of(&m);
            bytes += rec.key.map_or(0, <[u8]>::len) + rec.value.map_or(0, <[u8]>::len) + 64;
            f(&topic, &rec);
            given += 1;
            self.given
                .insert((topic, m.partition()), m.offset().saturating_add(1));
        }
        if given == 0 && self.markers_checked.elapsed() >= MARKER_CHECK {
            self.markers_checked = Instant::now();
            self.step_over_markers();
        }
        Ok(())
    }

    /// Forgets what was given and committed before the last rebalance.
    fn forget_after_rebalance(&mut self) {
        let n = self.consumer.context().rebalances.load(Ordering::Acquire);
        if n != self.rebalances {
            self.rebalances = n;
            self.given.clear();
            self.committed.clear();
        }
    }

    /// Idle, with everything given committed: commits the position of each partition
    /// where librdkafka has stepped past records it does not hand out (a transaction's
    /// commit marker, an aborted transaction's records), so that the group's committed
    /// offset reaches the high watermark and its lag is 0. Best effort: a failure leaves
    /// the lag at the marker's 1 until the next check.
    fn step_over_markers(&mut self) {
        self.forget_after_rebalance();
        let fetched = self
            .consumer
            .context()
            .fetched
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut tpl = TopicPartitionList::new();
        let mut moved = Vec::new();
        for ((topic, p), &done) in &self.committed {
            if self.given.get(&(topic.clone(), *p)) != Some(&done) {
                continue;
            }
            // librdkafka enqueues a fetch's records before it moves the fetch position
            // past them, and this poll found none waiting: what lies between the last
            // record given and the fetch position holds no record to hand out.
            if let Some(&pos) = fetched.get(&(topic.to_string(), *p)) {
                if pos > done
                    && tpl
                        .add_partition_offset(topic, *p, Offset::Offset(pos))
                        .is_ok()
                {
                    moved.push(((topic.clone(), *p), pos));
                }
            }
        }
        if tpl.count() == 0 {
            return;
        }
        match self.consumer.commit(&tpl, CommitMode::Sync) {
            Ok(()) => {
                for (k, pos) in moved {
                    self.given.insert(k.clone(), pos);
                    self.committed.insert(k, pos);
                }
            }
            Err(e) => {
                tracing::debug!(group = %self.group, error = %e, "Kafka group: stepping over commit markers failed; tried again later")
            }
        }
    }

    /// Commits `offsets` (topic, partition, next offset to read) for the partitions this
    /// member holds; the others are dropped (see the module doc). Blocking.
    pub fn commit(&mut self, offsets: &[(Arc<str>, u32, u64)]) -> Result<(), KafkaLogError> {
        self.forget_after_rebalance();
        let held = self
            .consumer
            .assignment()
            .map_err(|e| Self::err("assignment", e))?;
        let mut tpl = TopicPartitionList::new();
        for (topic, partition, offset) in offsets {
            let p = *partition as i32;
            if held.find_partition(topic, p).is_none() {
                tracing::debug!(group = %self.group, topic = %topic, partition, "Kafka group: not committing a partition no longer held");
                continue;
            }
            let at = *offset as i64;
            tpl.add_partition_offset(topic, p, Offset::Offset(at))
                .map_err(|e| Self::err("commit", e))?;
        }
        if tpl.count() == 0 {
            return Ok(());
        }
        match self.consumer.commit(&tpl, CommitMode::Sync) {
            Ok(()) => {
                for e in tpl.elements() {
                    if let Offset::Offset(o) = e.offset() {
                        let topic = self
                            .names
                            .get(e.topic())
                            .cloned()
                            .unwrap_or_else(|| Arc::from(e.topic()));
                        self.committed.insert((topic, e.partition()), o);
                    }
                }
                Ok(())
            }
            // The group moved on while this was in hand: the partitions' new owners
            // replay from the last commit.
            Err(KafkaError::ConsumerCommit(
                RDKafkaErrorCode::RebalanceInProgress
                | RDKafkaErrorCode::IllegalGeneration
                | RDKafkaErrorCode::UnknownMemberId,
            )) => {
                tracing::info!(group = %self.group, "Kafka group: a rebalance took the partitions of a commit; their new owners replay from the last committed offsets");
                Ok(())
            }
            Err(e) => Err(Self::err("offset commit", e)),
        }
    }

    /// Records between the committed offsets of the partitions this member holds and
    /// their last stable offsets, as of librdkafka's last statistics (every 500 ms).
    pub fn lag(&self) -> u64 {
        self.consumer.context().lag.load(Ordering::Relaxed)
    }
}

/// One partition of a group's view of a topic, for `cdc log groups`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupPartition {
    pub partition: u32,
    /// The group's committed offset; `None` when it has none for the partition.
    pub committed: Option<i64>,
    pub low: i64,
    pub high: i64,
}

impl GroupPartition {
    /// Records from the committed offset (or the log start) to the high watermark.
    pub fn lag(&self) -> i64 {
        (self.high - self.committed.unwrap_or(self.low).max(self.low)).max(0)
    }
}

/// Where a reset moves a group's offset.
#[derive(Debug, Clone, Copy)]
pub enum ResetTo {
    Earliest,
    Latest,
    Offset(i64),
    /// The first record at or after this time (ms since the epoch); the end if none.
    Timestamp(i64),
}

/// A client for reading and moving one group's committed offsets without joining it
/// (Kafka's OffsetFetch and OffsetCommit outside the group protocol).
pub struct GroupOffsets {
    consumer: BaseConsumer<crate::offsets::QuietEof>,
    group: String,
    timeout: Duration,
}

impl GroupOffsets {
    pub fn connect(settings: &KafkaSettings, group: &str) -> Result<GroupOffsets, KafkaLogError> {
        let consumer = settings
            .reader(group)
            .create_with_context(crate::offsets::QuietEof)
            .map_err(KafkaLogError::Config)?;
        Ok(GroupOffsets {
            consumer,
            group: group.to_string(),
            timeout: settings.timeout,
        })
    }

    fn err(what: &'static str, e: KafkaError) -> KafkaLogError {
        KafkaLogError::from_kafka(what, e, "")
    }

    /// The group's committed offsets and the watermarks of `partitions` partitions of
    /// `topic`.
    pub fn describe(
        &self,
        topic: &str,
        partitions: u32,
    ) -> Result<Vec<GroupPartition>, KafkaLogError> {
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition(topic, p as i32);
        }
        let committed = self
            .consumer
            .committed_offsets(tpl, self.timeout)
            .map_err(|e| Self::err("group offsets request", e))?;
        let mut out = Vec::new();
        for p in 0..partitions {
            let (low, high) = self
                .consumer
                .fetch_watermarks(topic, p as i32, self.timeout)
                .map_err(|e| Self::err("watermarks request", e))?;
            let committed = match committed
                .find_partition(topic, p as i32)
                .map(|e| e.offset())
            {
                Some(Offset::Offset(o)) => Some(o),
                _ => None,
            };
            out.push(GroupPartition {
                partition: p,
                committed,
                low,
                high,
            });
        }
        Ok(out)
    }

    /// Commits `to` for `partitions` of `topic` (clamped to each partition's log start and
    /// high watermark); returns (partition, old committed, new). Kafka refuses it while
    /// the group has members: their position would win.
    pub fn reset(
        &self,
        topic: &str,
        partitions: &[u32],
        to: ResetTo,
    ) -> Result<Vec<(u32, Option<i64>, i64)>, KafkaLogError> {
        let n = partitions.iter().max().map_or(0, |p| p + 1);
        let now = self.describe(topic, n)?;
        let mut tpl = TopicPartitionList::new();
        let mut out = Vec::new();
        for &p in partitions {
            let d = now[p as usize];
            let target = match to {
                ResetTo::Earliest => d.low,
                ResetTo::Latest => d.high,
                ResetTo::Offset(o) => o,
                ResetTo::Timestamp(ts) => {
                    crate::read::offset_for_time(&self.consumer, topic, p, ts, self.timeout)?
                        .unwrap_or(d.high)
                }
            };
            let target = target.clamp(d.low, d.high);
            tpl.add_partition_offset(topic, p as i32, Offset::Offset(target))
                .map_err(|e| Self::err("offset commit", e))?;
            out.push((p, d.committed, target));
        }
        self.consumer
            .commit(&tpl, CommitMode::Sync)
            .map_err(|e| match e.rdkafka_error_code() {
                Some(
                    RDKafkaErrorCode::UnknownMemberId
                    | RDKafkaErrorCode::IllegalGeneration
                    | RDKafkaErrorCode::RebalanceInProgress,
                ) => KafkaLogError::Unsupported {
                    what: "group reset",
                    detail: format!(
                        "group {:?} has active members; stop its sinks (cdc run, cdc sink) and run the reset again",
                        self.group
                    ),
                },
                _ => Self::err("offset commit", e),
            })?;
        Ok(out)
    }
}
