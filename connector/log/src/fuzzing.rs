//! Entry points for the coverage-guided fuzz targets (`fuzz/` at the repository root,
//! target `segment`): the byte-level decoders of this crate's private modules — ledger,
//! `topic.conf`, `groups`, segment indexes, the segment scanner and the recovery scan —
//! reachable from outside without making those modules public. Not an API: hidden from
//! the docs and free to change with the fuzz targets.
//!
//! Invariant (what the targets check): whatever the bytes, every function here returns;
//! none panics, overflows or allocates more than its input bounds.

use std::path::Path;

use crate::error::Result;
use crate::groups::GroupStore;
use crate::index::SegmentIndex;
use crate::ledger::{LedgerState, PartitionMark};
use crate::log::{Log, LogOptions};
use crate::partition::recovery::scan_segment;
use crate::segment::{BatchScanner, SegmentFile};
use crate::topic_config::TopicConfig;

/// Decodes `bytes` as each small file of a log directory: the ledger (either format),
/// a `topic.conf` (when UTF-8), the `groups` file, and (split at `index_len`) an offset
/// index and a time index of a segment of `log_size` bytes. Returns how many of the four
/// decoded.
pub fn decode_files(bytes: &[u8], index_len: usize, log_size: u64) -> usize {
    let mut ok = 0;
    if let Ok((state, _, fallback)) = LedgerState::decode_checked(bytes) {
        // What a writer's open does with a loaded state: encode it back into a slot.
        let _ = state.encode_slot(state.generation.max(1));
        let _ = fallback.map(|f| f.reason);
        ok += 1;
    }
    if let Ok(text) = std::str::from_utf8(bytes) {
        if let Ok(c) = TopicConfig::decode(text) {
            let _ = c.validate();
            let _ = c.encode();
            ok += 1;
        }
    }
    if let Ok(g) = GroupStore::decode(bytes) {
        let _ = g.encode();
        ok += 1;
    }
    let (offsets, times) = bytes.split_at(index_len.min(bytes.len()));
    if let Ok(idx) = SegmentIndex::decode(offsets, times, log_size) {
        for rel in [0, 1, u32::MAX / 2, u32::MAX] {
            let _ = idx.lookup(rel);
            let _ = idx.lookup_entry(rel);
        }
        let _ = idx.lookup_time(i64::MIN);
        let _ = idx.lookup_time(i64::MAX);
        ok += 1;
    }
    ok
}

/// Scans the segment file `path` (base offset `base`) twice: with the [`BatchScanner`]
/// from position 0 to its length, then with recovery's `scan_segment` (stopping at
/// `stop_at`; `contiguous`: the active segment's gapless rule). Returns the batches the
/// scanner read and the valid bytes recovery found.
pub fn scan_segment_file(
    path: &Path,
    base: u64,
    stop_at: u64,
    contiguous: bool,
) -> Result<(usize, u64)> {
    let file = SegmentFile::open_read_only(path.to_path_buf(), base)?;
    let len = file.len()?;
    let mut sc = if contiguous {
        BatchScanner::contiguous_from(&file, 0, len, base)
    } else {
        BatchScanner::new(&file, 0, len)
    };
    let mut batches = 0;
    while let Ok(Some((_, h, bytes))) = sc.next_batch() {
        // Records of a scanned batch decode (the scanner checked the CRC only).
        let mut out = Vec::new();
        let _ = crate::batch::decode_into(&bytes::Bytes::copy_from_slice(bytes), &h, 0, &mut out);
        batches += 1;
    }
    let (_, valid, _, _) = scan_segment(&file, len, stop_at, contiguous)?;
    Ok((batches, valid))
}

/// A valid format-2 ledger file (slot 0 written, slot 1 never) holding `checkpoint` and
/// `(topic, partition, log_start, durable_end)` marks: what a fuzz target writes beside
/// the segments it fuzzes, so `Log::open` gets past the ledger to recovery.
pub fn ledger_file(checkpoint: Option<&[u8]>, marks: &[(&str, u32, u64, u64)]) -> Vec<u8> {
    let state = LedgerState {
        generation: 1,
        checkpoint: checkpoint.map(<[u8]>::to_vec),
        partitions: marks
            .iter()
            .map(|&(t, p, log_start, durable_end)| {
                (
                    (t.to_string(), p),
                    PartitionMark {
                        log_start,
                        durable_end,
                    },
                )
            })
            .collect(),
    };
    state.encode_file().0
}

/// A read-only [`Log::open`] tried once: without the retries (and their sleeps) that
/// tell a writer's concurrent change from damage, which a fuzzed directory never races.
pub fn open_read_only_once(dir: &Path) -> Result<Log> {
    Log::open_once(
        dir,
        LogOptions {
            read_only: true,
            ..LogOptions::default()
        },
    )
}
