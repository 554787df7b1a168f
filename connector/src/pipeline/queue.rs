//! The hand-off from the source to the pipeline, bounded by memory rather than by count.
//!
//! A channel of N batches holds anything from N empty commits to N × `max_batch_events`
//! wide rows, so its memory depended on the workload (64 snapshot batches of 4096 rows
//! were ~150 MB). Here the source sends into a one-slot channel; a relay task takes each
//! batch, waits for a share of a semaphore worth `max_bytes` (the batch's
//! [`ChangeEvent::approx_size`] sum, in KiB, at least 1 KiB per batch so empty commits
//! count too), and queues it with that permit for the pipeline, which releases the permit
//! once the batch is appended. Decoded events waiting for the pipeline therefore stay
//! under `max_bytes`, plus the batch in the one slot and the one the relay holds while it
//! waits. A batch larger than the whole budget waits until the queue is empty and then
//! passes alone.
//!
//! Group commit asks "is anything queued?" ([`BatchReceiver::more_coming`]): a batch in
//! the slot or in the relay's hands counts, so the relay's hop does not end groups early
//! (each early end is one more fsync).
//!
//! Shutdown: when the source drops its sender the relay ends and the pipeline sees the end
//! of the queue after the last batch; when the pipeline drops the receiver, the relay's
//! next forward fails, it drops its receiver, and the source's next send fails.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cdc_schemas::ChangeEvent;
use cdc_sources::ChangeBatch;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

/// Budget unit: permits are KiB.
const UNIT: u64 = 1024;

/// A batch taken from the queue; dropping it returns its share of the budget.
pub struct Queued {
    pub batch: ChangeBatch,
    _permit: OwnedSemaphorePermit,
}

impl Queued {
    /// The batch's estimated size in bytes (what it holds of the budget).
    pub fn bytes(&self) -> u64 {
        self._permit.num_permits() as u64 * UNIT
    }
}

/// The pipeline's end of the queue.
pub struct BatchReceiver {
    rx: mpsc::UnboundedReceiver<Queued>,
    /// The source's end, to see whether its slot holds a batch (weak: it must not keep
    /// the channel open once the source is gone).
    slot: mpsc::WeakSender<ChangeBatch>,
    /// The relay took a batch from the slot and has not queued it yet.
    relaying: Arc<AtomicBool>,
}

/// Why [`BatchReceiver::try_recv`] returned nothing.
#[derive(Debug, PartialEq, Eq)]
pub enum TryRecvError {
    Empty,
    Disconnected,
}

impl BatchReceiver {
    pub async fn recv(&mut self) -> Option<Queued> {
        self.rx.recv().await
    }

    /// A batch is on its way: in the source's slot or being relayed (so `recv` returns it
    /// without waiting for the source).
    pub fn more_coming(&self) -> bool {
        self.relaying.load(Ordering::Acquire)
            || self
                .slot
                .upgrade()
                .is_some_and(|s| s.capacity() < s.max_capacity())
    }

    pub fn try_recv(&mut self) -> Result<Queued, TryRecvError> {
        self.rx.try_recv().map_err(|e| match e {
            mpsc::error::TryRecvError::Empty => TryRecvError::Empty,
            mpsc::error::TryRecvError::Disconnected => TryRecvError::Disconnected,
        })
    }
}

/// What a batch costs, in budget units.
fn cost(batch: &ChangeBatch) -> u64 {
    // The events' own structs are counted by the vector's capacity, the rest by walking
    // them — unless the source summed `approx_size` as it made them: walking a batch here,
    // on another thread, misses the cache on every row.
    let heap = if batch.approx_bytes > 0 {
        (batch.approx_bytes as usize)
            .saturating_sub(batch.events.len() * std::mem::size_of::<ChangeEvent>())
    } else {
        batch
            .events
            .iter()
            .map(|e| e.approx_size() - std::mem::size_of::<ChangeEvent>())
            .sum::<usize>()
    };
    let bytes: usize = std::mem::size_of::<ChangeBatch>()
        + batch.events.capacity() * std::mem::size_of::<ChangeEvent>()
        + heap;
    (bytes as u64).div_ceil(UNIT).max(1)
}

/// A queue holding at most about `max_bytes` of decoded events. Must be called inside a
/// tokio runtime (it spawns the relay).
pub fn channel(max_bytes: u64) -> (mpsc::Sender<ChangeBatch>, BatchReceiver) {
    let budget = (max_bytes / UNIT).clamp(1, u32::MAX as u64) as u32;
    let (src_tx, mut src_rx) = mpsc::channel::<ChangeBatch>(1);
    let (tx, rx) = mpsc::unbounded_channel();
    let sem = Arc::new(Semaphore::new(budget as usize));
    let relaying = Arc::new(AtomicBool::new(false));
    let slot = src_tx.downgrade();
    {
        let relaying = relaying.clone();
        tokio::spawn(async move {
            while let Some(batch) = src_rx.recv().await {
                relaying.store(true, Ordering::Release);
                let units = cost(&batch).min(budget as u64) as u32;
                let Ok(permit) = sem.clone().acquire_many_owned(units).await else {
                    break;
                };
                let sent = tx.send(Queued {
                    batch,
                    _permit: permit,
                });
                relaying.store(false, Ordering::Release);
                if sent.is_err() {
                    break;
                }
            }
        });
    }
    (src_tx, BatchReceiver { rx, slot, relaying })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cdc_schemas::{
        Column, ColumnType, PgPosition, Row, SourcePosition, TableId, TableSchema, Value,
    };
    use std::time::Duration;

    fn batch(rows: usize, text: usize) -> ChangeBatch {
        let t = Arc::new(
            TableSchema::new(
                TableId::new("public", "t"),
                vec![Column::new("v", ColumnType::Text { max_len: None }, "text")],
                &[],
            )
            .unwrap(),
        );
        ChangeBatch {
            events: (0..rows)
                .map(|_| {
                    ChangeEvent::create(
                        t.clone(),
                        Row::new(vec![Value::Text("x".repeat(text))]),
                        SourcePosition::Postgres(PgPosition::default()),
                        0,
                    )
                    .unwrap()
                })
                .collect(),
            commit: None,
            approx_bytes: 0,
            snapshot: None,
        }
    }

    #[tokio::test]
    async fn bounded_by_bytes_and_released_on_drop() {
        // ~100 KiB per batch, 256 KiB budget: two fit, the third waits.
        let (tx, mut rx) = channel(256 << 10);
        let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let producer = {
            let sent = sent.clone();
            tokio::spawn(async move {
                for _ in 0..6 {
                    tx.send(batch(100, 1000)).await.unwrap();
                    sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        // Two queued with permits, one held by the relay, one in the slot.
        let n = sent.load(std::sync::atomic::Ordering::SeqCst);
        assert!((2..=4).contains(&n), "{n} batches accepted");
        let mut got = 0;
        while let Some(q) = rx.recv().await {
            assert_eq!(q.batch.events.len(), 100);
            got += 1;
            drop(q);
            if got == 6 {
                break;
            }
        }
        producer.await.unwrap();
        assert!(rx.recv().await.is_none());
    }

    #[tokio::test]
    async fn more_coming_sees_the_slot_and_the_relay() {
        // Budget for one batch: the second waits in the relay, the third in the slot.
        let (tx, mut rx) = channel(120 << 10);
        assert!(!rx.more_coming());
        for _ in 0..3 {
            tx.send(batch(100, 1000)).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let first = rx.try_recv().unwrap();
        assert!(rx.try_recv().is_err());
        assert!(rx.more_coming());
        drop(first);
        let second = rx.recv().await.unwrap();
        drop(second);
        let third = rx.recv().await.unwrap();
        drop(third);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!rx.more_coming());
        drop(tx);
        assert!(rx.recv().await.is_none());
        assert!(!rx.more_coming());
    }

    #[tokio::test]
    async fn oversized_batch_passes_alone_and_empty_batches_flow() {
        let (tx, mut rx) = channel(4 << 10);
        tx.send(batch(100, 1000)).await.unwrap();
        tx.send(ChangeBatch::default()).await.unwrap();
        let a = rx.recv().await.unwrap();
        assert_eq!(a.batch.events.len(), 100);
        drop(a);
        let b = rx.recv().await.unwrap();
        assert!(b.batch.events.is_empty());
        drop(tx);
        drop(b);
        assert!(rx.recv().await.is_none());
    }
}
