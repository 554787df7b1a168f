//! The loop every sink runs: poll the log, deliver, commit what was delivered.
//!
//! Invariants: a group's committed offset for a partition is always one past a record
//! the sink reported delivered, or where it was; records are delivered in log order per
//! partition, each undelivered record again (and before anything after it) until it is;
//! a transient failure is retried with backoff (0.5 s doubling to 30 s) from the same
//! place, and logged once per streak; a definite one returns.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::sync::watch;

use crate::{Delivery, LogConsumer, Sink, SinkError, SinkRecord, TopicPartition};

/// How the driver reads and retries.
#[derive(Debug, Clone)]
pub struct DriverOptions {
    /// Bytes of records asked of the log per poll.
    pub max_poll_bytes: usize,
    /// How long a poll waits for records before the loop looks at shutdown again.
    pub poll_wait: Duration,
    pub min_backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for DriverOptions {
    fn default() -> Self {
        DriverOptions {
            max_poll_bytes: 1 << 20,
            poll_wait: Duration::from_millis(500),
            min_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
        }
    }
}

/// What a driver run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DriverStats {
    pub delivered: u64,
    pub commits: u64,
    pub retries: u64,
}

/// Runs `sink` over `consumer` until `shutdown` turns true (then returns `Ok`) or a
/// definite error.
pub async fn run<C: LogConsumer, S: Sink>(
    consumer: &mut C,
    sink: &mut S,
    mut shutdown: watch::Receiver<bool>,
    opts: &DriverOptions,
) -> Result<DriverStats, SinkError> {
    let mut stats = DriverStats::default();
    // Polled but not yet delivered, in log order.
    let mut pending: Vec<SinkRecord> = Vec::new();
    let mut retry = Retry::new(opts);
    loop {
        if *shutdown.borrow() {
            return Ok(stats);
        }
        if pending.is_empty() {
            let polled = tokio::select! {
                // Biased: a shutdown is noticed before another poll starts waiting.
                biased;
                _ = shutdown.changed() => continue,
                r = consumer.poll(opts.max_poll_bytes, opts.poll_wait) => r,
            };
            match polled {
                Ok(records) => pending = records,
                Err(e) => {
                    retry.after(e, &mut stats, &mut shutdown).await?;
                    continue;
                }
            }
            if pending.is_empty() {
                continue;
            }
        }
        let n = match sink.deliver(&pending).await {
            Ok(Delivery::All) => pending.len(),
            Ok(Delivery::Prefix(0)) => {
                let e = SinkError::transient("sink", "delivered nothing of the batch");
                retry.after(e, &mut stats, &mut shutdown).await?;
                continue;
            }
            Ok(Delivery::Prefix(n)) => n.min(pending.len()),
            Err(e) => {
                retry.after(e, &mut stats, &mut shutdown).await?;
                continue;
            }
        };
        let offsets = next_offsets(&pending[..n]);
        // The commit is retried on its own: the records are delivered, and delivering
        // them again would be a needless replay.
        loop {
            match consumer.commit(&offsets).await {
                Ok(()) => break,
                Err(e) => {
                    retry.after(e, &mut stats, &mut shutdown).await?;
                    if *shutdown.borrow() {
                        return Ok(stats);
                    }
                }
            }
        }
        stats.delivered += n as u64;
        stats.commits += 1;
        pending.drain(..n);
        retry.succeeded(&stats);
    }
}

/// Backoff over a streak of transient failures, logged once per streak.
struct Retry<'a> {
    opts: &'a DriverOptions,
    backoff: Duration,
    streak: bool,
}

impl<'a> Retry<'a> {
    fn new(opts: &'a DriverOptions) -> Self {
        Retry {
            opts,
            backoff: opts.min_backoff,
            streak: false,
        }
    }

    /// A definite `e` is returned; a transient one is waited out (or until shutdown).
    async fn after(
        &mut self,
        e: SinkError,
        stats: &mut DriverStats,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<(), SinkError> {
        if !e.is_transient() {
            return Err(e);
        }
        if !self.streak {
            tracing::warn!(error = %e, "sink: transient failure; retrying with backoff");
            self.streak = true;
        }
        stats.retries += 1;
        tokio::select! {
            _ = tokio::time::sleep(self.backoff) => {}
            _ = shutdown.changed() => {}
        }
        self.backoff = (self.backoff * 2).min(self.opts.max_backoff);
        Ok(())
    }

    fn succeeded(&mut self, stats: &DriverStats) {
        if self.streak {
            tracing::info!(
                retries = stats.retries,
                "sink delivering again after transient failures"
            );
            self.streak = false;
        }
        self.backoff = self.opts.min_backoff;
    }
}

/// Per partition, one past the last offset of `delivered`.
fn next_offsets(delivered: &[SinkRecord]) -> Vec<(TopicPartition, u64)> {
    let mut m: BTreeMap<TopicPartition, u64> = BTreeMap::new();
    for r in delivered {
        let tp = TopicPartition {
            topic: r.topic.clone(),
            partition: r.partition,
        };
        let e = m.entry(tp).or_insert(0);
        *e = (*e).max(r.offset + 1);
    }
    m.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(topic: &str, partition: u32, offset: u64) -> SinkRecord {
        SinkRecord {
            topic: topic.into(),
            partition,
            offset,
            timestamp_ms: 0,
            key: None,
            value: None,
            headers: Vec::new(),
        }
    }

    #[test]
    fn commits_one_past_the_last_delivered_per_partition() {
        let d = vec![
            rec("a", 0, 5),
            rec("a", 1, 2),
            rec("a", 0, 6),
            rec("b", 0, 0),
        ];
        let o = next_offsets(&d);
        let got: Vec<(String, u32, u64)> = o
            .into_iter()
            .map(|(tp, n)| (tp.topic.to_string(), tp.partition, n))
            .collect();
        assert_eq!(
            got,
            vec![("a".into(), 0, 7), ("a".into(), 1, 3), ("b".into(), 0, 1)]
        );
    }
}
