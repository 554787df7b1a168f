//! The append path: [`Topic`] (one batch to one partition, a batch the producer sealed
//! (`sealed.rs`), or records spread by key with Kafka's partitioner) and the [`FlushPolicy`], which decides when an append, or the
//! policy's timer thread, flushes without being asked.
//!
//! Invariants: an append is refused before it reaches the partition when the log is
//! read-only, closed or poisoned, when a compacted topic gets a record without a key, or
//! when the disk budget has no room (`budget.rs`). Automatic flushes pass no checkpoint:
//! only the pipeline's explicit `flush(Some(..))` moves it. A roll inside an append is
//! settled into the disk-usage gauge even when the append then fails.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

use super::{FlushPolicy, Log, LogInner, Topic};
use crate::error::{LogError, Result};
use crate::metrics::Metrics;
use crate::partition::{lock, AppendInfo, Partition};
use crate::partitioner::partition_for_key;
use crate::record::NewRecord;
use crate::sealed::SealedBatch;
use crate::topic_config::TopicConfig;

impl Log {
    fn after_append(&self, info: &AppendInfo, records: usize) -> Result<()> {
        let m = &self.inner.metrics;
        Metrics::add(&m.appended_records, records as u64);
        Metrics::add(&m.appended_bytes, info.bytes);
        Metrics::add(&m.appended_batches, 1);
        Metrics::add(&m.total_bytes, info.bytes);
        let since = self
            .inner
            .bytes_since_flush
            .fetch_add(info.bytes, Ordering::Relaxed)
            + info.bytes;
        match self.inner.options.flush_policy {
            FlushPolicy::Manual => {}
            FlushPolicy::EveryAppend => {
                self.flush(None)?;
            }
            FlushPolicy::Threshold { bytes, interval } => {
                let due_bytes = bytes.is_some_and(|b| since >= b);
                let due_time =
                    interval.is_some_and(|i| lock(&self.inner.flush_lock).last.elapsed() >= i);
                if due_bytes || due_time {
                    self.flush(None)?;
                }
            }
        }
        Ok(())
    }
}

impl Topic {
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    pub fn config(&self) -> &TopicConfig {
        &self.inner.config
    }

    pub fn partitions(&self) -> u32 {
        self.inner.config.partitions
    }

    /// Appends `records` as one batch to `partition`; returns the offsets they got. Not
    /// visible to readers (nor durable) until the next [`Log::flush`].
    pub fn append(&self, partition: u32, records: &[NewRecord<'_>]) -> Result<AppendInfo> {
        self.log.check_poisoned()?;
        let part = self.partition(partition)?;
        if records.is_empty() {
            return Err(LogError::InvalidArgument("append of zero records".into()));
        }
        if self.inner.config.cleanup_policy.compact && records.iter().any(|r| r.key.is_none()) {
            return Err(self.keyless_refused());
        }
        self.log.admit()?;
        let info = part.append(
            records,
            self.inner.config.compression,
            self.inner.config.segment_bytes,
            self.inner.config.segment_ms,
        );
        // A roll inside the append may have closed a recycled segment (its stale length
        // leaves the disk usage), also when the append then failed.
        self.log.settle_released(part);
        let info = info?;
        self.log.after_append(&info, records.len())?;
        Ok(info)
    }

    /// Appends a batch sealed by the producer ([`SealedBatch::seal`], typically on another
    /// thread, with this topic's codec: [`TopicConfig::compression`]) to `partition`; the
    /// partition only writes its base offset. Same rules and durability as [`Topic::append`].
    pub fn append_sealed(&self, partition: u32, batch: &SealedBatch) -> Result<AppendInfo> {
        self.log.check_poisoned()?;
        let part = self.partition(partition)?;
        if batch.is_empty() {
            return Err(LogError::InvalidArgument("append of zero records".into()));
        }
        if batch.compression() != self.inner.config.compression {
            // A topic keeps the codec it was created with.
            return Err(LogError::InvalidArgument(format!(
                "a batch sealed with {} appended to topic {:?}, which uses {}",
                batch.compression().name(),
                self.inner.name,
                self.inner.config.compression.name()
            )));
        }
        if self.inner.config.cleanup_policy.compact && batch.has_keyless() {
            return Err(self.keyless_refused());
        }
        self.log.admit()?;
        let info = part.append_sealed(
            batch,
            self.inner.config.segment_bytes,
            self.inner.config.segment_ms,
        );
        self.log.settle_released(part);
        let info = info?;
        self.log.after_append(&info, batch.records())?;
        Ok(info)
    }

    fn partition(&self, partition: u32) -> Result<&Arc<Partition>> {
        self.inner
            .partitions
            .get(partition as usize)
            .ok_or(LogError::UnknownPartition {
                topic: self.inner.name.clone(),
                partition,
                partitions: self.inner.config.partitions,
            })
    }

    fn keyless_refused(&self) -> LogError {
        LogError::InvalidArgument(format!(
            "topic {:?} is compacted: every record needs a key",
            self.inner.name
        ))
    }

    /// The partition Kafka's default partitioner gives `key`; keyless records go
    /// round-robin (see `partitioner.rs`).
    pub fn partition_for(&self, key: Option<&[u8]>) -> u32 {
        let n = self.inner.config.partitions;
        match key {
            Some(k) => partition_for_key(k, n),
            None => self.inner.round_robin.fetch_add(1, Ordering::Relaxed) % n,
        }
    }

    /// Appends records choosing each one's partition with the partitioner, one batch per
    /// partition, preserving order within a partition. Returns (partition, offset) per
    /// record, in input order.
    pub fn append_keyed(&self, records: &[NewRecord<'_>]) -> Result<Vec<(u32, u64)>> {
        let n = self.inner.config.partitions as usize;
        let targets: Vec<u32> = records.iter().map(|r| self.partition_for(r.key)).collect();
        let mut out = vec![(0u32, 0u64); records.len()];
        let mut group: Vec<NewRecord<'_>> = Vec::with_capacity(records.len());
        let mut idx: Vec<usize> = Vec::with_capacity(records.len());
        for p in 0..n as u32 {
            group.clear();
            idx.clear();
            for (i, r) in records.iter().enumerate() {
                if targets[i] == p {
                    group.push(*r);
                    idx.push(i);
                }
            }
            if group.is_empty() {
                continue;
            }
            let info = self.append(p, &group)?;
            for (j, &i) in idx.iter().enumerate() {
                out[i] = (p, info.base_offset + j as u64);
            }
        }
        Ok(out)
    }

    /// High watermark of a partition (offset after the last durable record).
    pub fn high_watermark(&self, partition: u32) -> Option<u64> {
        self.inner
            .partitions
            .get(partition as usize)
            .map(|p| p.high_watermark())
    }
}

/// The timer of `FlushPolicy::Threshold { interval: Some(..) }`: flushes (keeping the
/// checkpoint) when appended data has waited `every` without a flush. Ticks at half the
/// interval, so unflushed data waits at most about 1.5 x the interval.
pub(super) fn spawn_flusher(
    weak: Weak<LogInner>,
    stop: Arc<(Mutex<bool>, Condvar)>,
    every: Duration,
) -> Option<std::thread::JoinHandle<()>> {
    let tick = (every / 2).max(Duration::from_millis(1));
    let spawned = std::thread::Builder::new()
        .name("cdc-log-flusher".into())
        .spawn(move || loop {
            {
                let (m, c) = &*stop;
                let g = lock(m);
                let (g, _) = c
                    .wait_timeout_while(g, tick, |stopped| !*stopped)
                    .unwrap_or_else(|e| e.into_inner());
                if *g {
                    return;
                }
            }
            let Some(inner) = weak.upgrade() else { return };
            let due = inner.bytes_since_flush.load(Ordering::Relaxed) > 0
                && lock(&inner.flush_lock).last.elapsed() >= every;
            if !due {
                continue;
            }
            let log = Log { inner, user: None };
            if let Err(e) = log.flush(None) {
                if matches!(e, LogError::Closed(_)) {
                    return;
                }
                if !matches!(e, LogError::Poisoned(_)) {
                    tracing::warn!(error = %e, transient = e.is_transient(), "timed flush failed");
                }
            }
        });
    match spawned {
        Ok(h) => Some(h),
        Err(e) => {
            tracing::warn!(error = %e, "could not start the log flush timer; flush explicitly");
            None
        }
    }
}
