//! Per-topic configuration and its file. Owns the format of `topics/<name>/topic.conf`.
//!
//! # File `<dir>/topics/<name>/topic.conf`
//!
//! UTF-8 text, one `key=value` per line, `#` starts a comment line, written atomically
//! (temp + fsync + rename + dir fsync) once at topic creation. Keys use Kafka's names;
//! every key below must be present; an unknown key or a bad value is an error naming the
//! line. The last line is `checksum=<8 hex digits>`, the CRC-32C of every byte before
//! that line: a damaged file (say `partitions=2` cut to `partitions=`) is an error,
//! never a silently different topic. (To edit by hand, recompute it, or delete the line
//! and the file is refused until you restore it.)
//!
//! ```text
//! partitions=3                  number of partitions (1..=10000); fixed after creation
//! segment.bytes=1073741824      roll the active segment past this size
//! retention.ms=604800000        delete closed segments whose newest record is older; -1 = forever
//! retention.bytes=-1            per partition: delete oldest closed segments above this; -1 = no limit
//! cleanup.policy=delete         delete | compact | compact,delete | none (nothing is ever
//!                               deleted: no retention, no compaction, no disk-budget relief)
//! delete.retention.ms=86400000  how long a tombstone survives compaction
//! compression.type=none         none | lz4 | zstd (codec of batches we write)
//! segment.ms=604800000          roll the active segment once its first record is this old; -1 = never
//! ```
//!
//! `segment.ms` was added later: a file without it is read with the default (7 days).

use std::fmt::Write as _;
use std::path::Path;

use crate::batch::Compression;
use crate::error::{LogError, Result};
use crate::fsutil;

pub const FILE_NAME: &str = "topic.conf";

/// What the cleaner does with closed segments (`cleanup.policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CleanupPolicy {
    pub delete: bool,
    pub compact: bool,
}

impl CleanupPolicy {
    pub const DELETE: CleanupPolicy = CleanupPolicy {
        delete: true,
        compact: false,
    };
    pub const COMPACT: CleanupPolicy = CleanupPolicy {
        delete: false,
        compact: true,
    };
    pub const COMPACT_DELETE: CleanupPolicy = CleanupPolicy {
        delete: true,
        compact: true,
    };
    /// Records are never deleted: neither retention, nor compaction, nor disk-budget
    /// relief touches the topic (for state that must outlive everything, such as a
    /// source's schema history).
    pub const NONE: CleanupPolicy = CleanupPolicy {
        delete: false,
        compact: false,
    };

    fn name(self) -> &'static str {
        match (self.compact, self.delete) {
            (true, true) => "compact,delete",
            (true, false) => "compact",
            (false, true) => "delete",
            (false, false) => "none",
        }
    }

    fn parse(s: &str) -> Option<CleanupPolicy> {
        if s.trim() == "none" {
            return Some(CleanupPolicy::NONE);
        }
        let mut p = CleanupPolicy {
            delete: false,
            compact: false,
        };
        for part in s.split(',') {
            match part.trim() {
                "delete" => p.delete = true,
                "compact" => p.compact = true,
                _ => return None,
            }
        }
        Some(p)
    }
}

/// Topic configuration (Kafka's names and defaults, except where noted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicConfig {
    pub partitions: u32,
    /// Roll the active segment when it would exceed this many bytes. Default 1 GiB.
    pub segment_bytes: u64,
    /// Delete closed segments whose newest timestamp is older than this. `None` = forever.
    /// Default 7 days.
    pub retention_ms: Option<i64>,
    /// Per-partition size bound for retention. `None` = unbounded (default).
    pub retention_bytes: Option<u64>,
    pub cleanup_policy: CleanupPolicy,
    /// How long tombstones survive compaction, measured from the tombstone's timestamp.
    /// Default 1 day.
    pub delete_retention_ms: i64,
    pub compression: Compression,
    /// Roll the active segment once its first record's timestamp is older than this (on
    /// append, and in maintenance), so time retention can drop a quiet partition's data.
    /// `None` = never. Default 7 days (Kafka's `segment.ms`).
    pub segment_ms: Option<i64>,
}

impl Default for TopicConfig {
    fn default() -> Self {
        TopicConfig {
            partitions: 1,
            segment_bytes: 1 << 30,
            retention_ms: Some(7 * 24 * 3600 * 1000),
            retention_bytes: None,
            cleanup_policy: CleanupPolicy::DELETE,
            delete_retention_ms: 24 * 3600 * 1000,
            compression: Compression::None,
            segment_ms: Some(7 * 24 * 3600 * 1000),
        }
    }
}

impl TopicConfig {
    /// A config with `partitions` partitions and defaults otherwise.
    pub fn with_partitions(partitions: u32) -> Self {
        TopicConfig {
            partitions,
            ..Default::default()
        }
    }

    pub fn validate(&self) -> Result<()> {
        if self.partitions == 0 || self.partitions > 10_000 {
            return Err(LogError::InvalidConfig(format!(
                "partitions must be 1..=10000, got {}",
                self.partitions
            )));
        }
        if self.segment_bytes < 1024 || self.segment_bytes > (1 << 40) {
            return Err(LogError::InvalidConfig(format!(
                "segment.bytes must be between 1 KiB and 1 TiB, got {}",
                self.segment_bytes
            )));
        }
        if self.segment_ms.is_some_and(|m| m < 1) {
            return Err(LogError::InvalidConfig(
                "segment.ms must be >= 1 (or unset = never)".into(),
            ));
        }
        if self.delete_retention_ms < 0 {
            return Err(LogError::InvalidConfig(
                "delete.retention.ms must be >= 0".into(),
            ));
        }
        Ok(())
    }

    pub fn encode(&self) -> String {
        let mut s = String::from("# cdc-log topic config; see connector/log/src/topic_config.rs\n");
        let _ = writeln!(s, "partitions={}", self.partitions);
        let _ = writeln!(s, "segment.bytes={}", self.segment_bytes);
        let _ = writeln!(s, "retention.ms={}", self.retention_ms.unwrap_or(-1));
        let _ = writeln!(
            s,
            "retention.bytes={}",
            self.retention_bytes.map_or(-1, |b| b as i64)
        );
        let _ = writeln!(s, "cleanup.policy={}", self.cleanup_policy.name());
        let _ = writeln!(s, "delete.retention.ms={}", self.delete_retention_ms);
        let _ = writeln!(s, "compression.type={}", self.compression.name());
        let _ = writeln!(s, "segment.ms={}", self.segment_ms.unwrap_or(-1));
        let crc = crc32c::crc32c(s.as_bytes());
        let _ = writeln!(s, "checksum={crc:08x}");
        s
    }

    pub fn decode(text: &str) -> std::result::Result<TopicConfig, String> {
        let body_end = text.trim_end_matches('\n').rfind('\n').map_or(0, |i| i + 1);
        let last = text[body_end..].trim();
        let stored = last
            .strip_prefix("checksum=")
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .ok_or("missing or bad checksum line (the file is truncated or was edited)")?;
        let computed = crc32c::crc32c(&text.as_bytes()[..body_end]);
        if stored != computed {
            return Err(format!(
                "checksum mismatch (stored {stored:08x}, computed {computed:08x})"
            ));
        }
        let text = &text[..body_end];
        let mut c = TopicConfig::default();
        let mut seen = 0u32;
        let mut expected = 7u32;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (k, v) = line
                .split_once('=')
                .ok_or_else(|| format!("line {}: expected key=value", i + 1))?;
            let (k, v) = (k.trim(), v.trim());
            let bad = || format!("line {}: bad value {v:?} for {k}", i + 1);
            let int = || v.parse::<i64>().map_err(|_| bad());
            seen += 1;
            match k {
                "partitions" => c.partitions = u32::try_from(int()?).map_err(|_| bad())?,
                "segment.bytes" => c.segment_bytes = u64::try_from(int()?).map_err(|_| bad())?,
                "retention.ms" => c.retention_ms = Some(int()?).filter(|&x| x >= 0),
                "retention.bytes" => c.retention_bytes = u64::try_from(int()?).ok(),
                "cleanup.policy" => c.cleanup_policy = CleanupPolicy::parse(v).ok_or_else(bad)?,
                "delete.retention.ms" => c.delete_retention_ms = int()?,
                "compression.type" => c.compression = Compression::from_name(v).ok_or_else(bad)?,
                "segment.ms" => {
                    expected = 8;
                    c.segment_ms = Some(int()?).filter(|&x| x >= 0);
                }
                _ => return Err(format!("line {}: unknown key {k:?}", i + 1)),
            }
        }
        if seen != expected {
            return Err(format!(
                "expected the {expected} keys exactly once, found {seen} lines"
            ));
        }
        Ok(c)
    }

    pub fn load(topic_dir: &Path) -> Result<Option<TopicConfig>> {
        let path = topic_dir.join(FILE_NAME);
        let Some(buf) = fsutil::read_optional(&path)? else {
            return Ok(None);
        };
        let text = String::from_utf8(buf).map_err(|_| {
            LogError::corrupt_file(
                "topic config",
                &path,
                "not UTF-8",
                "fix or restore the file",
            )
        })?;
        let c = TopicConfig::decode(&text).map_err(|r| {
            LogError::corrupt_file("topic config", &path, r, "fix or restore the file")
        })?;
        c.validate().map_err(|e| {
            LogError::corrupt_file("topic config", &path, e, "fix or restore the file")
        })?;
        Ok(Some(c))
    }

    pub fn store(&self, topic_dir: &Path) -> Result<()> {
        fsutil::write_atomic(&topic_dir.join(FILE_NAME), self.encode().as_bytes())
    }
}

/// Kafka's legal topic names: 1..=249 chars of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 249
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(LogError::InvalidArgument(format!(
            "illegal topic name {name:?}: use 1-249 characters of [a-zA-Z0-9._-]"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let c = TopicConfig {
            partitions: 7,
            segment_bytes: 4096,
            retention_ms: None,
            retention_bytes: Some(1 << 20),
            cleanup_policy: CleanupPolicy::COMPACT_DELETE,
            delete_retention_ms: 5,
            compression: Compression::Zstd,
            segment_ms: Some(60_000),
        };
        assert_eq!(TopicConfig::decode(&c.encode()).unwrap(), c);
        assert!(TopicConfig::decode("partitions=x").is_err());
        let text = c.encode();
        // (Only the final newline may go: it carries no meaning.)
        for cut in 0..text.len() - 1 {
            assert!(TopicConfig::decode(&text[..cut]).is_err(), "cut at {cut}");
        }
        assert!(TopicConfig::decode("nope=1").is_err());
        assert!(validate_topic_name("a.b-c_9").is_ok());
        assert!(validate_topic_name("a/b").is_err());
    }

    #[test]
    fn policy_none_round_trips_and_is_valid() {
        let c = TopicConfig {
            retention_ms: None,
            cleanup_policy: CleanupPolicy::NONE,
            ..TopicConfig::default()
        };
        c.validate().unwrap();
        assert!(c.encode().contains("cleanup.policy=none\n"));
        assert_eq!(TopicConfig::decode(&c.encode()).unwrap(), c);
        // "none" is a policy of its own, never mixed with the others.
        assert_eq!(CleanupPolicy::parse("none,delete"), None);
    }
}
