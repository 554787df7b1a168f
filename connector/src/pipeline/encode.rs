//! The encoding stage: events to encoded records, off the pipeline task and several jobs at
//! once, while the pipeline appends earlier jobs' records in order.
//!
//! Encoding (the JSON or Avro envelope) is the largest CPU cost of the data path after the
//! source's decoding; done inline it serialised everything behind one task. Here a batch is
//! cut into [`Job`]s of about [`JOB_BYTES`] of decoded events; each job runs on the blocking
//! pool and returns [`Piece`]s (records of one topic, about `APPEND_CHUNK_BYTES` each); the
//! pipeline awaits jobs strictly in the order it created them and appends their pieces.
//!
//! Invariants:
//! - a job encodes with the encoders captured when its segment was prepared ([`Encoders`]
//!   is copy-on-write), so a schema version registered for a later segment or batch never
//!   encodes an earlier one's events, and every encoder a job uses is registered before
//!   any of its records is appended;
//! - pieces of one job are in event order and split where the topic changes, so order
//!   within a topic (and so within a partition) is the order of the source;
//! - the batch's events (and with them its share of the queue's memory budget) are freed
//!   by the last of its jobs, on the worker: freeing rows is not the pipeline's work either.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use cdc_log::Topic;
use cdc_schemas::encode::{EncodeError, Encoder, RecordBuf};
use cdc_schemas::{Op, TableId, TableSchema};

use super::queue::Queued;
use super::APPEND_CHUNK_BYTES;

/// Decoded bytes per job: small enough that a few jobs in flight hold little memory, large
/// enough that handing one to a worker costs nothing next to encoding it.
pub(super) const JOB_BYTES: u64 = 1 << 20;

/// A table's encoder for one schema version, and its topic.
pub(super) struct TableState {
    pub schema: Arc<TableSchema>,
    pub encoder: Encoder,
    pub topic: Topic,
}

/// Every prepared (registered) encoder, as of one moment. Shared by the jobs prepared
/// from it; the pipeline changes its own copy with `Arc::make_mut`.
#[derive(Clone, Default)]
pub(super) struct Encoders {
    pub tables: HashMap<TableId, Arc<TableState>>,
    pub messages: Option<Arc<(Encoder, Topic)>>,
}

/// Events `range` of a batch, each table in it with one schema version, and the encoders
/// for them.
pub(super) struct Segment {
    pub range: Range<usize>,
    pub encoders: Arc<Encoders>,
}

/// Records of one topic, in order.
pub(super) struct Piece {
    pub topic: Topic,
    pub buf: RecordBuf,
}

/// Part of one segment of a batch to encode.
pub(super) struct Job {
    pub batch: Arc<Queued>,
    pub part: Segment,
    pub now_ns: i64,
}

/// Reused encode buffers: pieces go back here once appended, so steady-state encoding
/// allocates nothing per record (nor per piece).
#[derive(Clone, Default)]
pub(super) struct BufPool(Arc<Mutex<Vec<RecordBuf>>>);

/// Buffers kept for reuse; more than the pieces of the jobs in flight is waste.
const POOL_MAX: usize = 32;

impl BufPool {
    fn take(&self) -> RecordBuf {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .unwrap_or_default()
    }

    pub fn give(&self, mut buf: RecordBuf) {
        buf.clear();
        if buf.bytes.capacity() > 4 * APPEND_CHUNK_BYTES {
            // One huge record grew it: give the memory back.
            buf.bytes.shrink_to(APPEND_CHUNK_BYTES);
        }
        let mut pool = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if pool.len() < POOL_MAX {
            pool.push(buf);
        }
    }
}

impl Job {
    /// Encodes the job's events into pieces. On error nothing of the job is returned.
    pub fn run(self, pool: &BufPool) -> Result<Vec<Piece>, EncodeError> {
        let mut pieces: Vec<Piece> = Vec::new();
        let r = self.encode(pool, &mut pieces);
        // The last job of a batch frees its events here, on the worker.
        drop(self);
        match r {
            Ok(()) => Ok(pieces),
            Err(e) => {
                for p in pieces {
                    pool.give(p.buf);
                }
                Err(e)
            }
        }
    }

    fn encode(&self, pool: &BufPool, pieces: &mut Vec<Piece>) -> Result<(), EncodeError> {
        let seg = &self.part;
        // The table state of the previous event, by its schema's Arc: no lookup per event.
        let mut cached: Option<(&Arc<TableSchema>, &TableState)> = None;
        for ev in &self.batch.batch.events[seg.range.clone()] {
            let (enc, topic) = if ev.op == Op::Message {
                let m = seg.encoders.messages.as_ref().expect("prepared");
                (&m.0, &m.1)
            } else {
                let schema = ev.table.as_ref().expect("table event");
                let st = match cached {
                    Some((s, st)) if Arc::ptr_eq(s, schema) => st,
                    _ => {
                        let st = seg.encoders.tables.get(&schema.id).expect("prepared");
                        cached = Some((schema, st));
                        st
                    }
                };
                (&st.encoder, &st.topic)
            };
            let start_new = match pieces.last() {
                None => true,
                Some(p) => {
                    p.topic.name() != topic.name() || p.buf.bytes.len() >= APPEND_CHUNK_BYTES
                }
            };
            if start_new {
                pieces.push(Piece {
                    topic: topic.clone(),
                    buf: pool.take(),
                });
            }
            let piece = pieces.last_mut().expect("pushed");
            enc.records_into(ev, self.now_ns, &mut piece.buf)?;
        }
        Ok(())
    }
}

/// Cuts `range` (events of one segment) into pieces of about `per_job` events.
pub(super) fn split(range: Range<usize>, per_job: usize) -> impl Iterator<Item = Range<usize>> {
    let per_job = per_job.max(1);
    let end = range.end;
    range
        .step_by(per_job)
        .map(move |s| s..(s + per_job).min(end))
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn split_covers_the_range_in_order() {
        let parts: Vec<_> = split(3..10, 3).collect();
        assert_eq!(parts, vec![3..6, 6..9, 9..10]);
        assert_eq!(split(0..0, 5).count(), 0);
        assert_eq!(split(0..4, 0).count(), 4);
    }
}
