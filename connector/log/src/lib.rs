//! # cdc-log: the embedded, partitioned, append-only log
//!
//! Kafka's log model, in-process, on local disk: the default destination of every change
//! the connector captures and the buffer between the database and every sink. It stores
//! Kafka record batch v2 on disk, places keys with Kafka's default partitioner, and makes
//! records durable together with the source position they cover, in one atomic step.
//!
//! ## Using it
//!
//! ```no_run
//! use std::time::Duration;
//! use cdc_log::{Log, LogOptions, NewRecord, ResetPolicy, StartAt, TopicConfig};
//!
//! # fn main() -> Result<(), cdc_log::LogError> {
//! let log = Log::open("/var/lib/cdc/log", LogOptions::default())?;
//! let topic = log.topic_or_create("app.public.users", TopicConfig::with_partitions(3))?;
//!
//! // Pipeline: append (partition chosen by Kafka's murmur2 partitioner), then flush with
//! // the source position these records cover. Only then acknowledge it to the database.
//! let placed = topic.append_keyed(&[NewRecord::new(Some(b"user-1"), Some(b"{...}"), 1_700_000_000_000)])?;
//! log.flush(Some(b"lsn:0/16B3748"))?;
//! // After a restart: resume the source from here; records and checkpoint always agree.
//! let resume_from = log.checkpoint();
//!
//! // Sink: a consumer-group reader, blocking until durable records arrive.
//! let mut reader = log.consumer("search-sink", "app.public.users", placed[0].0, ResetPolicy::Earliest)?;
//! let records = reader.next_batch(1 << 20, Duration::from_millis(500))?;
//! // ... deliver ...
//! reader.commit()?;
//!
//! // Tail from a time, async-friendly: `reader.ready().await` completes on new data.
//! let tail = log.reader("app.public.users", 0, StartAt::Timestamp(1_700_000_000_000))?;
//! # let _ = (resume_from, records, tail); Ok(()) }
//! ```
//!
//! ## The pieces (each module's docs give its invariants and, where it owns a file, the
//! byte-by-byte format)
//!
//! - [`log`]: [`Log`] (topics, describe) and [`Topic`], with a child module per job:
//!   `open` (open/recover), `append` ([`Topic`]'s `append`, `append_keyed`; the flush
//!   policy), `flush` (`flush` + checkpoint, `close`), `view` (read-only `refresh`),
//!   `consumers` (readers, groups), `budget` (disk budget), `maintenance` (retention and
//!   compaction runs, the maintenance thread).
//! - [`reader`]: [`Reader`] — poll / `next_batch` with timeout / `wait` / async `ready`,
//!   [`StartAt`] (offset, timestamp, earliest, latest), [`ResetPolicy`].
//! - `partition`: a partition's segments, single writer, high watermark, append path;
//!   its children `recovery` (open against the ledger) and `refresh` (read-only
//!   catch-up).
//! - [`batch`]: Kafka record batch v2 encoder/decoder (segment `.log` format); `codec`:
//!   its records section's lz4 (frame format) and zstd compression.
//! - [`sealed`]: [`SealedBatch`], a batch a producer encodes and compresses on its own
//!   thread; [`Topic::append_sealed`] only writes its base offset (the CRC does not cover
//!   it).
//! - `index`: offset and time index (`.index`, `.timeindex` formats).
//! - `segment`: segment files and naming, the batch scanner.
//! - `stage`: the active segment's write staging (large, mostly `O_DIRECT`, writes).
//! - `writer`: the background threads that take a stage's full MiBs (write-behind).
//! - `ledger`: the durable-state file (`ledger` format).
//! - `groups`: committed offsets (`groups` format).
//! - [`topic_config`]: [`TopicConfig`] and `topic.conf`.
//! - `retention`, `compaction`: deleting and cleaning closed segments (the cleaner's
//!   bounded key map and its per-partition checkpoint).
//! - `recycle`: the pool of dropped segment files a roll reuses (overwrites are cheaper
//!   to make durable than appends to new files).
//! - [`partitioner`]: Kafka's murmur2 partitioner.
//! - [`metrics`]: counters; [`error`]: [`LogError`] (transient vs definite).
//!
//! ## Guarantees
//!
//! - Offsets are gapless per partition as written; compaction may remove records later,
//!   survivors keep their offsets.
//! - Readers only see durable records (below the high watermark); a tailing reader wakes
//!   on the flush that makes records durable (Condvar / Waker, no polling).
//! - After any crash, what the ledger says is durable is exactly what is there: unflushed
//!   and torn tails are cut on open (warned and counted), and the checkpoint matches.
//! - Corruption inside durable data is an error naming the file and byte, never skipped,
//!   never a panic.
//! - Open never deletes a partition the ledger marks durable (a durable topic without its
//!   `topic.conf` is refused with [`LogError::TopicConfigMissing`]); a damaged newest
//!   ledger slot, after which recovery cuts flushed records, is an error-level event and
//!   a metric, never a silent fallback.
//! - [`Log::close`] stops and joins the log's threads and waits for its writes before it
//!   releases the directory lock: nothing of a closed log writes any more.
//! - Dropping a [`Log`] does not flush: unflushed appends are lost, like a crash. Flush
//!   first.

pub mod batch;
mod codec;
mod compaction;
pub mod error;
mod external;
mod failpoint;
mod fsutil;
#[doc(hidden)]
pub mod fuzzing;
mod groups;
mod index;
mod ledger;
pub mod log;
pub mod metrics;
pub mod notify;
mod partition;
pub mod partitioner;
pub mod reader;
pub mod record;
mod recycle;
mod retention;
pub mod sealed;
mod segment;
mod stage;
pub mod topic_config;
mod varint;
mod writer;

pub use crate::batch::Compression;
pub use crate::error::{DecodeError, LogError, Result};
pub use crate::external::{ExternalGroup, GroupLock};
pub use crate::log::{
    FlushInfo, FlushPolicy, GroupLag, Log, LogOptions, MaintenanceReport, PartitionDescription,
    Topic, TopicDescription,
};
pub use crate::metrics::{Metrics, MetricsSnapshot};
pub use crate::partition::AppendInfo;
pub use crate::partitioner::{murmur2, partition_for_key};
pub use crate::reader::{Reader, RecordView, ResetPolicy, StartAt};
pub use crate::record::{now_ms, Header, HeaderRef, NewRecord, Record};
pub use crate::sealed::SealedBatch;
pub use crate::topic_config::{CleanupPolicy, TopicConfig};

/// Decoder entry point for fuzzing and tests: walks `data` as a segment (batches back to
/// back), fully validating each batch and decoding its records. Returns the number of
/// records decoded before the first invalid batch, and whether the whole input was valid.
/// Must never panic, whatever the input.
pub fn fuzz_decode_segment(data: &[u8]) -> (usize, bool) {
    let mut pos = 0;
    let mut n = 0;
    while pos < data.len() {
        let rest = &data[pos..];
        let Ok(h) = batch::BatchHeader::parse(rest) else {
            return (n, false);
        };
        let total = h.total_len();
        if total > rest.len() {
            return (n, false);
        }
        let one = &rest[..total];
        if batch::validate_batch(one).is_err() {
            return (n, false);
        }
        let bytes = bytes::Bytes::copy_from_slice(one);
        let mut out = Vec::new();
        if batch::decode_into(&bytes, &h, 0, &mut out).is_err() {
            return (n, false);
        }
        n += out.len();
        pos += total;
    }
    (n, true)
}
