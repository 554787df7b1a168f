//! `cdc log verify` and `cdc log repair`: damaged segments of the embedded log, found and
//! cut, with the source made to take the damage back from the database.
//!
//! The log checks itself as it goes: every batch carries a CRC, a torn tail past the
//! durable end (what a crash in the middle of a write leaves) is cut on open, and data
//! that was fsynced and is no longer there (a truncated or overwritten durable tail) or a
//! corrupt batch at the end of a closed segment stops `cdc run` with a definite error.
//! Damage deeper inside a closed segment is found when something reads it. This module
//! gives the operator the two commands that follow:
//!
//! - `verify` reads every batch of every topic of the data log and of the logs beside it
//!   (`registry/`, `history/`), read-only (it works while `cdc run` writes), and names each
//!   damaged file, byte and offset. Exit 0 when all is intact, 1 otherwise.
//! - `repair` (the connector stopped: it takes the writer lock) cuts each damaged partition
//!   at its first bad batch: the segment truncated there, the segments after it removed,
//!   the ledger's durable end cut back. The records from there on are gone from the log,
//!   so the stored source position is now ahead of what the log holds; when anything of
//!   the data log was cut, `repair` stores the checkpoint "snapshot incomplete", and the
//!   next `cdc run` takes a new snapshot (Postgres: with a new slot), whose `op = r` records
//!   and reconciliation deletes bring every table back to its current rows. Versions that
//!   were only in the cut records are not restored: the database no longer has them.
//!
//! Invariant: `repair` removes only records at or after a damaged batch (never an intact
//! prefix), and never leaves a checkpoint that claims records the log no longer has.

use std::fs;
use std::path::{Path, PathBuf};

use cdc_log::{Log, LogError, LogOptions};
use cdc_schemas::Checkpoint;

/// The logs under a connector's log directory: the data log, then those beside it.
fn logs(dir: &Path) -> Vec<(&'static str, PathBuf)> {
    let mut v = vec![("data", dir.to_path_buf())];
    for (what, sub) in [("registry", "registry"), ("schema history", "history")] {
        let p = dir.join(sub);
        if p.join("ledger").exists() {
            v.push((what, p));
        }
    }
    v
}

/// Reads every batch of every log under `dir`; the damage found, one line each.
pub(crate) fn verify(dir: &Path) -> Result<Vec<String>, LogError> {
    if !dir.join("ledger").exists() {
        return Err(LogError::NotALog(dir.to_path_buf()));
    }
    let mut damage = Vec::new();
    for (what, path) in logs(dir) {
        let log = match Log::open_read_only(&path) {
            Ok(l) => l,
            Err(e) if is_damage(&e) => {
                println!("{what} log\tDAMAGED\t{e}");
                damage.push(e.to_string());
                continue;
            }
            Err(e) => return Err(e),
        };
        for t in log.topics() {
            match log.verify(&t) {
                Ok(n) => println!("{t}\t{n} records\tintact"),
                Err(e) if is_damage(&e) => {
                    println!("{t}\tDAMAGED\t{e}");
                    damage.push(e.to_string());
                }
                Err(e) => return Err(e),
            }
        }
    }
    Ok(damage)
}

fn is_damage(e: &LogError) -> bool {
    matches!(
        e,
        LogError::CorruptSegment { .. }
            | LogError::DurableDataLost { .. }
            | LogError::CorruptFile { .. }
            | LogError::TopicConfigMissing { .. }
    )
}

/// What `repair` did to one log.
#[derive(Debug, Default)]
pub(crate) struct Repaired {
    /// One line per cut: where and why.
    pub cuts: Vec<String>,
}

/// Repairs every log under `dir` (see the module docs); the data log's checkpoint becomes
/// "snapshot incomplete" when anything of it was cut.
pub(crate) fn repair(dir: &Path) -> Result<Vec<(&'static str, Repaired)>, LogError> {
    let mut out = Vec::new();
    for (what, path) in logs(dir) {
        let r = repair_one(&path, what == "data")?;
        out.push((what, r));
    }
    Ok(out)
}

fn repair_one(dir: &Path, resnapshot: bool) -> Result<Repaired, LogError> {
    let mut r = Repaired::default();
    // Each round removes at least one damaged batch (or cuts the ledger back once), so
    // the number of rounds is bounded by the damage; the bound only guards against a bug.
    for _ in 0..10_000 {
        match Log::open(dir, LogOptions::default()) {
            Ok(log) => {
                let mut found = None;
                for t in log.topics() {
                    if let Err(e) = log.verify(&t) {
                        found = Some(e);
                        break;
                    }
                }
                match found {
                    None => {
                        if resnapshot && !r.cuts.is_empty() {
                            log.flush(Some(&Checkpoint::SnapshotIncomplete.to_bytes()))?;
                        }
                        log.close()?;
                        return Ok(r);
                    }
                    Some(LogError::CorruptSegment {
                        file,
                        position,
                        offset,
                        reason,
                    }) => {
                        log.close()?;
                        drop(log);
                        cut_segment(&file, position)?;
                        r.cuts.push(format!("{} cut at byte {position} (offset {offset}): {reason}; the segments after it removed", file.display()));
                    }
                    Some(e) => return Err(e),
                }
            }
            Err(LogError::CorruptSegment {
                file,
                position,
                offset,
                reason,
            }) => {
                cut_segment(&file, position)?;
                r.cuts.push(format!(
                    "{} cut at byte {position} (offset {offset}): {reason}; the segments after it removed",
                    file.display()
                ));
            }
            Err(LogError::DurableDataLost {
                topic,
                partition,
                ledger_end,
                found_end,
                detail,
            }) => {
                // Open once accepting the shorter tail: recovery cuts the ledger back.
                let log = Log::open(
                    dir,
                    LogOptions {
                        accept_damaged_tail: true,
                        ..LogOptions::default()
                    },
                )?;
                log.close()?;
                r.cuts.push(format!("partition {topic}-{partition}: durable end cut back from offset {ledger_end} to {found_end} ({detail})"));
            }
            Err(e) => return Err(e),
        }
    }
    Err(LogError::InvalidArgument(format!(
        "the repair of {} did not converge; report this",
        dir.display()
    )))
}

/// Truncates segment `file` at byte `position` and removes its index files and every
/// segment after it in its partition: the next open scans it as the active segment and
/// cuts the ledger back to its valid end.
fn cut_segment(file: &Path, position: u64) -> Result<(), LogError> {
    let io = |op: &'static str, p: &Path, source: std::io::Error| LogError::Io {
        op,
        path: p.to_path_buf(),
        source,
    };
    let f = fs::OpenOptions::new()
        .write(true)
        .open(file)
        .map_err(|e| io("opening a damaged segment", file, e))?;
    f.set_len(position)
        .map_err(|e| io("truncating a damaged segment", file, e))?;
    f.sync_all()
        .map_err(|e| io("syncing a damaged segment", file, e))?;
    let dir = file.parent().unwrap_or(Path::new("."));
    let base = segment_base(file);
    for e in fs::read_dir(dir).map_err(|e| io("listing", dir, e))? {
        let e = e.map_err(|e| io("listing", dir, e))?;
        let p = e.path();
        let Some(b) = segment_base(&p) else { continue };
        let ext = p.extension().and_then(|x| x.to_str()).unwrap_or("");
        let later = base.is_some_and(|base| b > base);
        let own_index = Some(b) == base && ext != "log";
        if later || own_index {
            fs::remove_file(&p).map_err(|e| io("removing a segment after the damage", &p, e))?;
        }
    }
    Ok(())
}

/// The base offset of a segment, index or time-index file (`00000000000000000042.log`).
fn segment_base(p: &Path) -> Option<u64> {
    let name = p.file_name()?.to_str()?;
    let (stem, _) = name.split_once('.')?;
    (stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()))
        .then(|| stem.parse().ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cdc_log::{NewRecord, StartAt, TopicConfig};

    fn write(dir: &Path, n: u32) {
        let log = Log::open(dir, LogOptions::default()).unwrap();
        let t = log
            .create_topic(
                "t",
                TopicConfig {
                    partitions: 1,
                    segment_bytes: 1024,
                    compression: cdc_log::Compression::None,
                    ..TopicConfig::default()
                },
            )
            .unwrap();
        for i in 0..n {
            let v = format!("value-{i}-{}", "x".repeat(60));
            t.append(
                0,
                &[NewRecord::new(
                    Some(format!("k{i}").as_bytes()),
                    Some(v.as_bytes()),
                    i as i64,
                )],
            )
            .unwrap();
            log.flush(Some(b"at")).unwrap();
        }
        log.close().unwrap();
    }

    fn segments(dir: &Path) -> Vec<PathBuf> {
        let mut v: Vec<_> = fs::read_dir(dir.join("topics").join("t").join("0"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "log"))
            .collect();
        v.sort();
        v
    }

    fn count(dir: &Path) -> u64 {
        let log = Log::open_read_only(dir).unwrap();
        let mut r = log.reader("t", 0, StartAt::Earliest).unwrap();
        let mut n = 0;
        loop {
            let batch = r.poll(1 << 20).unwrap();
            if batch.is_empty() {
                break;
            }
            n += batch.len() as u64;
        }
        n
    }

    #[test]
    fn a_flipped_bit_in_a_closed_segment_is_cut_there_and_the_checkpoint_reset() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), 60);
        let segs = segments(dir.path());
        assert!(segs.len() >= 4, "several segments: {segs:?}");
        // A bit in the middle of the second segment.
        let victim = &segs[1];
        let mut bytes = fs::read(victim).unwrap();
        let at = bytes.len() / 2;
        bytes[at] ^= 0x10;
        fs::write(victim, bytes).unwrap();
        assert!(!verify(dir.path()).unwrap().is_empty(), "verify finds it");
        let r = repair(dir.path()).unwrap();
        assert!(r[0].1.cuts[0].contains("crc mismatch"), "{r:?}");
        assert!(verify(dir.path()).unwrap().is_empty());
        let n = count(dir.path());
        assert!(n > 0 && n < 60, "an intact prefix stays: {n}");
        let log = Log::open(dir.path(), LogOptions::default()).unwrap();
        assert_eq!(
            log.checkpoint(),
            Some(Checkpoint::SnapshotIncomplete.to_bytes())
        );
    }

    #[test]
    fn an_intact_log_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), 20);
        let r = repair(dir.path()).unwrap();
        assert!(r[0].1.cuts.is_empty());
        let log = Log::open(dir.path(), LogOptions::default()).unwrap();
        assert_eq!(log.checkpoint(), Some(b"at".to_vec()));
        drop(log);
        assert_eq!(count(dir.path()), 20);
    }

    #[test]
    fn a_truncated_durable_tail_is_cut_back() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), 20);
        let segs = segments(dir.path());
        let last = segs.last().unwrap();
        let len = fs::metadata(last).unwrap().len();
        let f = fs::OpenOptions::new().write(true).open(last).unwrap();
        f.set_len(len - 30).unwrap();
        drop(f);
        assert!(matches!(
            Log::open(dir.path(), LogOptions::default()),
            Err(LogError::DurableDataLost { .. })
        ));
        let r = repair(dir.path()).unwrap();
        assert_eq!(r[0].1.cuts.len(), 1, "{r:?}");
        assert_eq!(count(dir.path()), 19);
    }
}
