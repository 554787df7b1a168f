//! Errors of the embedded log.
//!
//! Owns [`LogError`], the one error type of the public API, and [`DecodeError`], what the
//! pure decoders (batch, ledger, group offsets, topic config) report before the caller adds
//! the file and position. Every message says what failed and what the operator should do.
//!
//! Errors are either *transient* (the same call may succeed later: disk full, the disk
//! budget is exhausted, an I/O error that is not known to be fatal) or *definite* (retrying
//! cannot help: corrupt data, a bad argument, a failed fsync). [`LogError::is_transient`]
//! tells which; callers retry the first kind with backoff and stop on the second.

use std::io;
use std::path::PathBuf;

/// Result alias used throughout the crate.
pub type Result<T, E = LogError> = std::result::Result<T, E>;

/// What a decoder found wrong with bytes, without knowing where they came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Fewer bytes than the structure needs: a torn write or a truncated file.
    #[error("truncated: need {need} bytes, have {have}")]
    Truncated { need: usize, have: usize },
    /// The magic byte is not 2 (record batch v2) or a file magic does not match.
    #[error("bad magic {found}")]
    BadMagic { found: u64 },
    /// A length field is out of its legal range.
    #[error("bad length {value} for {what}")]
    BadLength { what: &'static str, value: i64 },
    /// The stored checksum does not match the bytes.
    #[error("crc mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    /// A structural rule is broken (e.g. a varint too long, records past the batch end).
    #[error("malformed: {0}")]
    Malformed(&'static str),
    /// The batch uses a compression codec this build cannot read.
    #[error("unsupported compression codec {0}")]
    UnsupportedCodec(u8),
    /// The compressed payload did not decompress.
    #[error("decompression failed: {0}")]
    Decompress(String),
}

/// Every error of the log.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// An I/O call failed; `op` says what we were doing, `path` on what.
    #[error(
        "I/O error while {op} {path}: {source}; if this persists check the disk and permissions"
    )]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// ENOSPC / EDQUOT. Transient: appends may resume once space is freed.
    #[error("disk full while {op} {path}: free space under {dir} (or lower retention); writes resume once there is room")]
    DiskFull {
        op: &'static str,
        path: PathBuf,
        dir: PathBuf,
    },
    /// An fsync failed. After a failed fsync the page cache can no longer be trusted
    /// (the kernel may have dropped the dirty pages), so the log refuses further writes.
    #[error("fsync of {path} failed: {source}; the log is now read-only in this process: fix the disk, then reopen the log (recovery will cut back to the last durable state)")]
    FsyncFailed {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// [`crate::Log::close`] ran: the log takes no more writes.
    #[error("the log at {0} was closed; open it again to write")]
    Closed(PathBuf),
    /// The log was poisoned by an earlier fatal error (see the first error logged).
    #[error("the log refused the operation after an earlier fatal error ({0}); reopen the log")]
    Poisoned(String),
    /// A batch in a closed segment (or in the durable part of the active one) is corrupt.
    #[error("corrupt batch in segment {file} at byte {position} (offset {offset}): {reason}; restore the partition from a replica or delete this segment and everything after it")]
    CorruptSegment {
        file: PathBuf,
        position: u64,
        offset: u64,
        reason: String,
    },
    /// The ledger says more is durable than the partition holds: fsynced data disappeared.
    #[error("partition {topic}-{partition}: the ledger records durable end offset {ledger_end} but the segments end at offset {found_end} ({detail}); data that was fsynced is gone: restore the partition, or open with LogOptions::accept_damaged_tail to cut the ledger back (the stored checkpoint may then be ahead of the records)")]
    DurableDataLost {
        topic: String,
        partition: u32,
        ledger_end: u64,
        found_end: u64,
        detail: String,
    },
    /// A topic directory without its `topic.conf` holds partitions the ledger records as
    /// durable (the file was lost or removed by hand, not a creation interrupted by a
    /// crash): the log refuses to open rather than delete them.
    #[error("topic {topic:?}: {} is missing, but the ledger records durable records in {durable} of {}; the log refuses to open rather than delete them. To keep them, put topic.conf back: restore it from a backup, or copy the topic.conf of another topic created with the same settings (it must say partitions={partitions}). To give them up instead, move {} out of the log directory and open the log once with LogOptions::accept_damaged_tail, which then removes the topic from the ledger", file.display(), topic_dir(file).display(), topic_dir(file).display())]
    TopicConfigMissing {
        topic: String,
        /// The missing `topic.conf` (in the topic's directory).
        file: PathBuf,
        /// The partitions the ledger holds durable records of, with their offset ranges.
        durable: String,
        /// How many partitions the topic had (its partition directories and the ledger).
        partitions: u32,
    },
    /// A small metadata file (ledger, group offsets, topic config, index) is unreadable.
    #[error("corrupt {what} file {file}: {reason}; {advice}")]
    CorruptFile {
        what: &'static str,
        file: PathBuf,
        reason: String,
        advice: &'static str,
    },
    /// Another process (or another `Log` in this process) holds the directory.
    #[error("the log at {} is in use by another process{}: stop it, or use a read-only command (Log::open_read_only) or another directory", dir.display(), pid.map(|p| format!(" (pid {p})")).unwrap_or_default())]
    Locked { dir: PathBuf, pid: Option<u32> },
    /// A write on a log opened read-only.
    #[error("the log at {} is open read-only; writing needs the writer lock (Log::open)", .0.display())]
    ReadOnly(PathBuf),
    /// A read-only open of a directory that holds no log.
    #[error("{} is not a cdc log directory (no ledger file); check the path", .0.display())]
    NotALog(PathBuf),
    #[error("topic {0:?} does not exist; create it first")]
    UnknownTopic(String),
    #[error("topic {0:?} already exists")]
    TopicExists(String),
    #[error("topic {topic:?} has {partitions} partitions; partition {partition} does not exist")]
    UnknownPartition {
        topic: String,
        partition: u32,
        partitions: u32,
    },
    /// Kafka's OFFSET_OUT_OF_RANGE: the requested offset is below the log start offset or
    /// above the log end offset. The reader's reset policy decides what happens next.
    #[error("offset {offset} is out of range for {topic}-{partition} (log start {log_start}, high watermark {high_watermark}); reset the consumer (earliest/latest) or seek to a valid offset")]
    OffsetOutOfRange {
        topic: String,
        partition: u32,
        offset: u64,
        log_start: u64,
        high_watermark: u64,
    },
    /// The disk budget is used up by records that registered groups have not read.
    /// Transient: wait (see `Log::wait_for_budget`) until consumers advance or retention runs.
    #[error("disk budget exhausted: {used} of {budget} bytes used by records that consumer groups have not read yet; waiting for consumers to advance or retention to free space")]
    BudgetExhausted { used: u64, budget: u64 },
    /// A group has no committed offset for the partition and its reset policy is `None`.
    #[error("group {group:?} has no committed offset for {topic}-{partition} and its reset policy is none; reset the group (earliest/latest/offset/time) first")]
    NoCommittedOffset {
        group: String,
        topic: String,
        partition: u32,
    },
    /// Another consumer holds the group's lock (`groups.d/<group>.lock`): two consumers of
    /// one group would overwrite each other's offsets. Definite.
    #[error("consumer group {group:?} of the log at {} is in use by another consumer{}: stop it first (one process per sink), or give this one another group", dir.display(), pid.map(|p| format!(" (pid {p})")).unwrap_or_default())]
    GroupLocked {
        group: String,
        dir: PathBuf,
        pid: Option<u32>,
    },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("invalid topic config: {0}")]
    InvalidConfig(String),
    /// A batch uses a codec this build was compiled without.
    #[error("compression codec {0} is not supported by this build; enable the cargo feature (zstd, lz4) of cdc-log")]
    UnsupportedCodec(&'static str),
}

/// The directory of a topic's `topic.conf`.
fn topic_dir(file: &std::path::Path) -> &std::path::Path {
    file.parent().unwrap_or(file)
}

impl LogError {
    /// True when the same operation may succeed later (retry with backoff); false when
    /// retrying cannot help and the operator must act.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            LogError::Io { .. } | LogError::DiskFull { .. } | LogError::BudgetExhausted { .. }
        )
    }

    /// Wraps an I/O error, turning ENOSPC/EDQUOT into [`LogError::DiskFull`].
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> LogError {
        let path = path.into();
        match source.raw_os_error() {
            Some(code) if code == libc::ENOSPC || code == libc::EDQUOT => {
                let dir = path
                    .parent()
                    .map(|p| p.to_path_buf())
                    .unwrap_or_else(|| path.clone());
                LogError::DiskFull { op, path, dir }
            }
            _ => LogError::Io { op, path, source },
        }
    }

    pub(crate) fn corrupt_file(
        what: &'static str,
        file: impl Into<PathBuf>,
        reason: impl std::fmt::Display,
        advice: &'static str,
    ) -> LogError {
        LogError::CorruptFile {
            what,
            file: file.into(),
            reason: reason.to_string(),
            advice,
        }
    }
}
