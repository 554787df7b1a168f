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
//!   A commit of everything the member was given of a partition takes the member's
//!   position instead when librdkafka has stepped past transaction markers after it, so
//!   a drained group's lag is 0 (a transaction's commit marker takes an offset that no
//!   record holds).
//! - A commit names only partitions the member holds now: those a rebalance took away
//!   are dropped (their new owner starts at the last committed offset and replays the
//!   rest, which a sink's conditional writes make harmless).
//! - The topic list is read again every [`TOPIC_CHECK`]; a new topic the predicate
//!   chooses (a table added to the source) joins the subscription.
//! - Blocking calls (librdkafka's poll and commit): the caller runs them off the async
//!   executor's cooperative path.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Headers, Message};
use rdkafka::statistics::Statistics;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use crate::error::KafkaLogError;
use crate::read::ReadRecord;
use crate::settings::KafkaSettings;

/// How often the cluster's topic list is read for new topics to subscribe to.
pub const TOPIC_CHECK: Duration = Duration::from_secs(5);

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
    /// Set by a rebalance: the next commit reads the assignment again.
    rebalanced: AtomicBool,
}

impl ClientContext for GroupContext {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
        use rdkafka::config::RDKafkaLogLevel as L;
        match level {
            L::Emerg | L::Alert | L::Critical | L::Error | L::Warning => {
                tracing::warn!(facility = fac, "librdkafka: {log_message}")
            }
            L::Notice | L::Info => tracing::info!(facility = fac, "librdkafka: {log_message}"),
            L::Debug => tracing::debug!(facility = fac, "librdkafka: {log_message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(group = %self.group, %error, reason, "Kafka consumer error (librdkafka retries)");
    }

    fn stats(&self, s: Statistics) {
        let mut lag = 0u64;
        for t in s.topics.values() {
            for p in t.partitions.values() {
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
        self.rebalanced.store(true, Ordering::Release);
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
                rebalanced: AtomicBool::new(false),
            })
            .map_err(KafkaLogError::Config)?;
        Ok(KafkaGroup {
            consumer,
            chooses: Box::new(chooses),
            subscribed: Vec::new(),
            checked: None,
            given: HashMap::new(),
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
            .map_err(|e| Self::err("metadata request", e))?;
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
        self.check_topics()?;
        if self.subscribed.is_empty() {
            // Nothing to read yet (the connector has not created its topics).
            std::thread::sleep(wait.min(Duration::from_millis(200)));
            return Ok(());
        }
        let mut bytes = 0;
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
            let topic = match self.names.get(m.topic()) {
                Some(t) => t.clone(),
                None => {
                    let t: Arc<str> = Arc::from(m.topic());
                    self.names.insert(m.topic().to_string(), t.clone());
                    t
                }
            };
            let headers = m
                .headers()
                .map(|h| h.iter().map(|h| (h.key, h.value)).collect())
                .unwrap_or_default();
            let rec = ReadRecord {
                partition: m.partition() as u32,
                offset: m.offset() as u64,
                timestamp: m.timestamp().to_millis(),
                key: m.key(),
                value: m.payload(),
                headers,
            };
            bytes += rec.key.map_or(0, <[u8]>::len) + rec.value.map_or(0, <[u8]>::len) + 64;
            f(&topic, &rec);
            self.given
                .insert((topic, m.partition()), m.offset().saturating_add(1));
        }
        Ok(())
    }

    /// Commits `offsets` (topic, partition, next offset to read) for the partitions this
    /// member holds; the others are dropped (see the module doc). Blocking.
    pub fn commit(&mut self, offsets: &[(Arc<str>, u32, u64)]) -> Result<(), KafkaLogError> {
        if self
            .consumer
            .context()
            .rebalanced
            .swap(false, Ordering::AcqRel)
        {
            // Offsets given before the rebalance are no guide to where the member is now.
            self.given.clear();
        }
        let held = self
            .consumer
            .assignment()
            .map_err(|e| Self::err("assignment", e))?;
        let positions = self
            .consumer
            .position()
            .map_err(|e| Self::err("position", e))?;
        let mut tpl = TopicPartitionList::new();
        for (topic, partition, offset) in offsets {
            let p = *partition as i32;
            if held.find_partition(topic, p).is_none() {
                tracing::debug!(group = %self.group, topic = %topic, partition, "Kafka group: not committing a partition no longer held");
                continue;
            }
            let mut at = *offset as i64;
            // Everything given of the partition is committed: past the markers after it.
            if self.given.get(&(topic.clone(), p)) == Some(&at) {
                if let Some(Offset::Offset(pos)) =
                    positions.find_partition(topic, p).map(|e| e.offset())
                {
                    at = at.max(pos);
                }
            }
            tpl.add_partition_offset(topic, p, Offset::Offset(at))
                .map_err(|e| Self::err("commit", e))?;
        }
        if tpl.count() == 0 {
            return Ok(());
        }
        match self.consumer.commit(&tpl, CommitMode::Sync) {
            Ok(()) => Ok(()),
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
