//! The loop every sink runs: poll the log, decode the records into changes, deliver them,
//! send what the target refused to the dead-letter topic, commit what was delivered.
//!
//! Invariants: a group's committed offset for a partition is always one past a record
//! whose effect is durable in the target (or that was skipped: a tombstone, a table the
//! sink does not apply, a record now durable in the dead-letter topic), or where it was;
//! changes are delivered in log order per partition, each undelivered change again (and
//! before anything after it) until it is; a transient failure is retried with backoff
//! (0.5 s doubling to 30 s) from the same place and logged once per streak; a definite
//! one returns. Records held while the sink asks for more (a transaction not yet
//! complete) are bounded by [`DriverOptions::max_pending_bytes`]. Changes a sink left in
//! flight stay at the front of the next batch, which is delivered without waiting for
//! more records: the call reads their outcome.
//!
//! Offsets are committed at most every [`DriverOptions::commit_interval`] while records
//! keep coming, and at once when the log has nothing more for now, and at shutdown: a
//! commit is a durable write (two fsyncs for the embedded log), and one per batch cost
//! the drain more than applying it. What a crash then replays (at most an interval's
//! records) has its effect once, as any replay does.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cdc_schemas::filter::TableFilter;
use cdc_schemas::registry::SchemaRegistry;
use tokio::sync::watch;

use crate::change::{Change, DecodeError, Decoded, Decoder, Op};
use crate::metrics::SinkMetrics;
use crate::view::ColumnMap;
use crate::{DeadLetters, LogConsumer, Sink, SinkError, SinkRecord, TopicPartition};

/// How the driver reads, prepares and retries.
#[derive(Debug, Clone)]
pub struct DriverOptions {
    /// Bytes of records asked of the log per poll.
    pub max_poll_bytes: usize,
    /// Bound on the bytes of records read but not yet delivered.
    pub max_pending_bytes: usize,
    /// How long a poll waits for records before the loop looks at shutdown again.
    pub poll_wait: Duration,
    pub min_backoff: Duration,
    pub max_backoff: Duration,
    /// The longest a delivered position waits for its commit while records keep coming.
    pub commit_interval: Duration,
}

impl Default for DriverOptions {
    fn default() -> Self {
        DriverOptions {
            max_poll_bytes: 1 << 20,
            max_pending_bytes: 8 << 20,
            poll_wait: Duration::from_millis(500),
            min_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            commit_interval: Duration::from_secs(1),
        }
    }
}

/// What turns records into the changes a sink applies.
pub struct Prepare {
    pub decoder: Decoder,
    pub tables: TableFilter,
    pub columns: ColumnMap,
    /// Whether the sink wants transaction END records ([`Op::TxEnd`]).
    pub tx_ends: bool,
    /// The table of the last change and whether `tables` includes it (changes come in
    /// runs of one table; the decoder shares names, so this is mostly a pointer test).
    last_table: Option<(Arc<str>, Arc<str>, bool)>,
}

impl Prepare {
    pub fn new(
        registry: Option<Arc<dyn SchemaRegistry>>,
        tables: TableFilter,
        columns: ColumnMap,
        tx_ends: bool,
    ) -> Self {
        Prepare {
            decoder: Decoder::new(registry),
            tables,
            columns,
            tx_ends,
            last_table: None,
        }
    }

    /// The change `r` holds for this sink, `None` when it holds none.
    async fn prepare(&mut self, r: &SinkRecord) -> Result<Option<Change>, DecodeError> {
        let mut c = match self.decoder.decode(r).await? {
            Decoded::Skip => return Ok(None),
            Decoded::Change(c) => *c,
        };
        if c.op == Op::TxEnd {
            return Ok(self.tx_ends.then_some(c));
        }
        let included = match &self.last_table {
            Some((s, t, inc)) if same(s, &c.schema) && same(t, &c.table) => *inc,
            _ => {
                let id = cdc_schemas::TableId::new(c.schema.as_ref(), c.table.as_ref());
                let inc = self.tables.includes(&id);
                self.last_table = Some((c.schema.clone(), c.table.clone(), inc));
                inc
            }
        };
        if !included {
            return Ok(None);
        }
        self.columns.apply(&mut c);
        Ok(Some(c))
    }
}

fn same(a: &Arc<str>, b: &Arc<str>) -> bool {
    Arc::ptr_eq(a, b) || a == b
}

/// What a driver run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DriverStats {
    pub delivered: u64,
    pub dead_letters: u64,
    pub commits: u64,
    pub retries: u64,
}

/// Records read and not yet committed, with the changes decoded from them.
#[derive(Default)]
struct Pending {
    records: Vec<SinkRecord>,
    bytes: usize,
    /// Records `..decoded` have been prepared.
    decoded: usize,
    changes: Vec<Change>,
    /// For each change, the index of its record.
    change_record: Vec<usize>,
    /// Records that could not be decoded: index and why.
    undecodable: Vec<(usize, String)>,
}

impl Pending {
    fn push(&mut self, records: Vec<SinkRecord>) {
        for r in &records {
            self.bytes += r.key.as_ref().map_or(0, |k| k.len())
                + r.value.as_ref().map_or(0, |v| v.len())
                + 64;
        }
        if self.records.is_empty() {
            self.records = records; // taken as it is, not moved over one by one
        } else {
            self.records.extend(records);
        }
    }

    /// Removes the first `n` records and the first `c` changes (those of the records).
    fn drain(&mut self, n: usize, c: usize) {
        for r in &self.records[..n] {
            self.bytes = self.bytes.saturating_sub(
                r.key.as_ref().map_or(0, |k| k.len())
                    + r.value.as_ref().map_or(0, |v| v.len())
                    + 64,
            );
        }
        self.records.drain(..n);
        self.decoded -= n;
        self.changes.drain(..c);
        self.change_record.drain(..c);
        for i in &mut self.change_record {
            *i -= n;
        }
        self.undecodable.retain(|(i, _)| *i >= n);
        for (i, _) in &mut self.undecodable {
            *i -= n;
        }
    }
}

/// Records read, and decoded, while a batch is being delivered.
#[derive(Default)]
struct Ahead {
    records: Vec<SinkRecord>,
    /// Records `..decoded` have been prepared (all of them, unless the registry could
    /// not be reached: the main loop then decodes the rest, retrying).
    decoded: usize,
    changes: Vec<Change>,
    /// For each change, the index of its record in `records`.
    change_record: Vec<usize>,
    undecodable: Vec<(usize, String)>,
}

impl Ahead {
    /// Takes what the log has now (no waiting) and prepares it on another thread, so that
    /// the decoding runs beside the delivery of the batch before instead of taking turns
    /// with it; gives `prepare` back. A failed poll is
    /// left to the main loop's next poll, which retries it.
    async fn read<C: LogConsumer>(
        consumer: &mut C,
        prepare: Prepare,
        max: usize,
    ) -> (Prepare, Ahead) {
        let records = match consumer.poll(max, Duration::ZERO).await {
            Ok(r) if !r.is_empty() => r,
            _ => return (prepare, Ahead::default()),
        };
        // A thread of the blocking pool, not a task: a task spawned from this one would
        // mostly run on this worker (tokio's next-task slot) once it awaits, taking
        // turns with the delivery instead of running beside it. (The registry lookups of
        // Avro records are the only awaits inside.)
        let runtime = tokio::runtime::Handle::current();
        let task = tokio::task::spawn_blocking(move || {
            let mut prepare = prepare;
            let mut ahead = Ahead {
                records,
                ..Ahead::default()
            };
            // A registry that cannot be reached stops it: the main loop retries the rest.
            let _ = runtime.block_on(prepare_all(
                &mut prepare,
                &ahead.records,
                &mut ahead.decoded,
                &mut ahead.changes,
                &mut ahead.change_record,
                &mut ahead.undecodable,
            ));
            (prepare, ahead)
        });
        match task.await {
            Ok(done) => done,
            // The decoding panicked: so does the driver (as it would have inline).
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }

    /// Appends to `p`, which had decoded all it held.
    fn append_to(self, p: &mut Pending) {
        if self.records.is_empty() {
            return;
        }
        let base = p.records.len();
        debug_assert_eq!(p.decoded, base);
        p.push(self.records);
        p.decoded = base + self.decoded;
        if p.changes.is_empty() && base == 0 {
            p.changes = self.changes;
            p.change_record = self.change_record;
        } else {
            p.changes.extend(self.changes);
            p.change_record
                .extend(self.change_record.into_iter().map(|i| base + i));
        }
        p.undecodable
            .extend(self.undecodable.into_iter().map(|(i, why)| (base + i, why)));
    }
}

/// Prepares `records[*decoded..]`: each change with the index of its record, each record
/// that cannot be decoded with why. Stops at a record whose schema the registry could not
/// be asked for and returns that error (`decoded` stays at the record, to be retried).
async fn prepare_all(
    prepare: &mut Prepare,
    records: &[SinkRecord],
    decoded: &mut usize,
    changes: &mut Vec<Change>,
    change_record: &mut Vec<usize>,
    undecodable: &mut Vec<(usize, String)>,
) -> Option<SinkError> {
    while *decoded < records.len() {
        let i = *decoded;
        match prepare.prepare(&records[i]).await {
            Ok(Some(c)) => {
                changes.push(c);
                change_record.push(i);
            }
            Ok(None) => {}
            Err(DecodeError::Malformed(why)) => undecodable.push((i, why)),
            Err(DecodeError::Registry(e)) => return Some(e),
        }
        *decoded += 1;
    }
    None
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Runs `sink` over `consumer` until `shutdown` turns true (then returns `Ok`) or a
/// definite error.
pub async fn run<C: LogConsumer, S: Sink, D: DeadLetters>(
    consumer: &mut C,
    sink: &mut S,
    dead_letters: &mut D,
    mut prepare: Prepare,
    metrics: &SinkMetrics,
    mut shutdown: watch::Receiver<bool>,
    opts: &DriverOptions,
) -> Result<DriverStats, SinkError> {
    let mut stats = DriverStats::default();
    let mut p = Pending::default();
    // What the read-ahead brought, joined to `p` once the batch before it left `p` (so
    // that the delivered prefix is removed before, not shifted out from under, the next
    // batch), or at the next turn of the loop.
    let mut stash: Option<Ahead> = None;
    let mut retry = Retry::new(opts, metrics);
    // Whether the sink asked for more records before it can deliver what it has.
    let mut wants_more = true;
    // Changes the sink left in flight in its last delivery: it reads their outcome in the
    // next one, which is therefore not put off.
    let mut in_flight = 0;
    let mut last_applied_ms: Option<i64> = None;
    // Delivered and not yet committed: per partition, the next offset.
    let mut uncommitted: BTreeMap<TopicPartition, u64> = BTreeMap::new();
    let mut last_commit = Instant::now();
    metrics.up.set(1);
    loop {
        if let Some(a) = stash.take() {
            a.append_to(&mut p);
        }
        if *shutdown.borrow() {
            // Best effort: what is not committed is replayed, with its effect once.
            if let Err(e) = commit(consumer, &mut uncommitted, &mut stats, metrics).await {
                tracing::warn!(error = %e, "sink: the last offsets could not be committed at shutdown; they will be replayed");
            }
            report_lag(consumer, metrics, None, last_applied_ms);
            return Ok(stats);
        }
        report_lag(
            consumer,
            metrics,
            p.records.iter().map(|r| r.timestamp_ms).min(),
            last_applied_ms,
        );
        if (wants_more || p.records.is_empty()) && p.bytes < opts.max_pending_bytes {
            // With records in hand, only take what is already there; with a position to
            // commit, nothing more to read means now is the time to commit it.
            let wait = if !uncommitted.is_empty() || in_flight > 0 {
                Duration::ZERO
            } else if p.changes.is_empty() {
                opts.poll_wait
            } else {
                Duration::from_millis(50)
            };
            let polled = tokio::select! {
                // Biased: a shutdown is noticed before another poll starts waiting.
                biased;
                _ = shutdown.changed() => continue,
                r = consumer.poll(opts.max_poll_bytes, wait) => r,
            };
            match polled {
                Ok(records) if records.is_empty() && !uncommitted.is_empty() => {
                    commit_retrying(
                        consumer,
                        &mut uncommitted,
                        &mut stats,
                        metrics,
                        &mut retry,
                        &mut shutdown,
                    )
                    .await?;
                    last_commit = Instant::now();
                    report_lag(consumer, metrics, None, last_applied_ms);
                    continue;
                }
                Ok(records) => p.push(records),
                Err(e) => {
                    retry.after(e, &mut stats, &mut shutdown).await?;
                    continue;
                }
            }
        }
        // Prepare what was read.
        if let Some(e) = prepare_all(
            &mut prepare,
            &p.records,
            &mut p.decoded,
            &mut p.changes,
            &mut p.change_record,
            &mut p.undecodable,
        )
        .await
        {
            retry.after(e, &mut stats, &mut shutdown).await?;
        }
        if p.decoded == 0 {
            continue;
        }
        let (n_records, n_changes, mut letters) = if p.changes.is_empty() {
            // Nothing to apply in what was read: it is all passed over.
            (p.decoded, 0, Vec::new())
        } else {
            // While the target applies this batch, the next one is read and decoded (the
            // target's work and ours overlap instead of taking turns).
            let in_hand = p.changes.len();
            let read_ahead = p.decoded == p.records.len() && p.bytes < opts.max_pending_bytes;
            let (d, (back, ahead)) = tokio::join!(sink.deliver(&p.changes), async {
                if read_ahead {
                    Ahead::read(consumer, prepare, opts.max_poll_bytes).await
                } else {
                    (prepare, Ahead::default())
                }
            });
            prepare = back;
            stash = Some(ahead);
            let d = match d {
                Ok(d) => d,
                Err(e) => {
                    in_flight = 0;
                    retry.after(e, &mut stats, &mut shutdown).await?;
                    continue;
                }
            };
            let upto = d.upto.min(in_hand);
            in_flight = d.in_flight.min(in_hand - upto);
            if upto == 0 && in_flight > 0 {
                // All of it in flight: the next call, right after the next poll, reads it.
                wants_more = true;
                continue;
            }
            if upto == 0 {
                // The sink waits for more (the rest of a transaction); when no more can
                // be held, or nothing more came, back off a little.
                if p.bytes >= opts.max_pending_bytes {
                    sink.must_progress();
                }
                if p.bytes >= opts.max_pending_bytes || !wants_more {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                wants_more = true;
                continue;
            }
            let n_records = if upto == p.changes.len() {
                p.decoded
            } else {
                p.change_record[upto]
            };
            let mut letters: Vec<(SinkRecord, String)> = d
                .rejected
                .into_iter()
                .filter(|(i, _)| *i < upto)
                .map(|(i, why)| (p.records[p.change_record[i]].clone(), why))
                .collect();
            letters.sort_by_key(|(r, _)| (r.topic.clone(), r.partition, r.offset));
            // Changes in flight are not a request for more: the next call reads them.
            wants_more = upto + in_flight < in_hand;
            (n_records, upto, letters)
        };
        letters.extend(
            p.undecodable
                .iter()
                .filter(|(i, _)| *i < n_records)
                .map(|(i, why)| (p.records[*i].clone(), why.clone())),
        );
        if !letters.is_empty() {
            loop {
                match dead_letters.send(&letters).await {
                    Ok(()) => break,
                    Err(e) => {
                        retry.after(e, &mut stats, &mut shutdown).await?;
                        if *shutdown.borrow() {
                            return Ok(stats);
                        }
                    }
                }
            }
            // The error text may quote the row's values: it goes to the dead-letter
            // record's header, not to the log.
            for (r, _) in &letters {
                tracing::warn!(
                    topic = %r.topic,
                    partition = r.partition,
                    offset = r.offset,
                    "sink: record sent to the dead-letter topic (the error is in its __connect.errors.exception.message header)"
                );
            }
            stats.dead_letters += letters.len() as u64;
            metrics.dead_letters.add(letters.len() as u64);
        }
        for (tp, o) in next_offsets(&p.records[..n_records]) {
            let e = uncommitted.entry(tp).or_insert(0);
            *e = (*e).max(o);
        }
        if last_commit.elapsed() >= opts.commit_interval {
            commit_retrying(
                consumer,
                &mut uncommitted,
                &mut stats,
                metrics,
                &mut retry,
                &mut shutdown,
            )
            .await?;
            last_commit = Instant::now();
        }
        if let Some(last) = p.records[..n_records].iter().map(|r| r.timestamp_ms).max() {
            last_applied_ms = Some(last);
        }
        stats.delivered += n_changes as u64;
        metrics.applied.add(n_changes as u64);
        p.drain(n_records, n_changes);
        if let Some(a) = stash.take() {
            a.append_to(&mut p);
        }
        report_lag(
            consumer,
            metrics,
            p.records.iter().map(|r| r.timestamp_ms).min(),
            last_applied_ms,
        );
        retry.succeeded(&stats);
    }
}

/// Commits `uncommitted` (emptied once it is durable).
async fn commit<C: LogConsumer>(
    consumer: &mut C,
    uncommitted: &mut BTreeMap<TopicPartition, u64>,
    stats: &mut DriverStats,
    metrics: &SinkMetrics,
) -> Result<(), SinkError> {
    if uncommitted.is_empty() {
        return Ok(());
    }
    let offsets: Vec<(TopicPartition, u64)> =
        uncommitted.iter().map(|(tp, o)| (tp.clone(), *o)).collect();
    consumer.commit(&offsets).await?;
    uncommitted.clear();
    stats.commits += 1;
    metrics.commits.inc();
    Ok(())
}

/// [`commit`], retried on its own through transient failures: the changes are applied,
/// and applying them again would be a needless replay. A shutdown meanwhile returns
/// (the loop's shutdown check commits once more, or leaves it to the replay).
async fn commit_retrying<C: LogConsumer>(
    consumer: &mut C,
    uncommitted: &mut BTreeMap<TopicPartition, u64>,
    stats: &mut DriverStats,
    metrics: &SinkMetrics,
    retry: &mut Retry<'_>,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<(), SinkError> {
    loop {
        match commit(consumer, uncommitted, stats, metrics).await {
            Ok(()) => return Ok(()),
            Err(e) => {
                retry.after(e, stats, shutdown).await?;
                if *shutdown.borrow() {
                    return Ok(());
                }
            }
        }
    }
}

/// The lag gauges: records behind the group's committed offsets, and while there are
/// some, the age of the oldest record read and not applied (else of the newest applied).
fn report_lag<C: LogConsumer>(
    consumer: &C,
    metrics: &SinkMetrics,
    oldest_waiting_ms: Option<i64>,
    last_applied_ms: Option<i64>,
) {
    let lag = consumer.lag();
    metrics.lag_records.set(lag);
    metrics
        .lag_ms
        .set(match (lag, oldest_waiting_ms.or(last_applied_ms)) {
            (0, _) | (_, None) => 0,
            (_, Some(t)) => (now_ms() - t).max(0) as u64,
        });
}

/// Backoff over a streak of transient failures, logged once per streak.
struct Retry<'a> {
    opts: &'a DriverOptions,
    metrics: &'a SinkMetrics,
    backoff: Duration,
    streak: bool,
}

impl<'a> Retry<'a> {
    fn new(opts: &'a DriverOptions, metrics: &'a SinkMetrics) -> Self {
        Retry {
            opts,
            metrics,
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
            self.metrics.up.set(0);
            return Err(e);
        }
        if !self.streak {
            tracing::warn!(error = %e, "sink: transient failure; retrying with backoff");
            self.streak = true;
            self.metrics.up.set(0);
        }
        stats.retries += 1;
        self.metrics.retries.inc();
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
            self.metrics.up.set(1);
        }
        self.backoff = self.opts.min_backoff;
    }
}

/// Per partition, one past the last offset of `records`.
fn next_offsets(records: &[SinkRecord]) -> Vec<(TopicPartition, u64)> {
    let mut m: BTreeMap<TopicPartition, u64> = BTreeMap::new();
    for r in records {
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
