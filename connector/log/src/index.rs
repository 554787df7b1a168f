//! The sparse offset index and the time index of one segment. Owns the in-memory form and
//! the `.index` / `.timeindex` file formats (the same entry layouts as Kafka's).
//!
//! The indexes are derived data: the `.log` file is the truth. The active segment's index
//! lives only in memory and is rebuilt by scanning on open (recovery scans that segment
//! anyway); a closed segment's index files are written and fsynced when it is rolled (or
//! rewritten by the cleaner), loaded on open, sanity-checked, and rebuilt from the `.log`
//! if they fail the check. So a torn index can cost a scan, never a wrong read.
//!
//! # File `NNNNNNNNNNNNNNNNNNNN.index` (big-endian), one entry per indexed batch
//!
//! ```text
//!   4  relativeOffset i32  batch base offset - segment base offset
//!   4  position       i32  byte position of that batch in the .log file
//! ```
//! An entry is added when at least `INDEX_INTERVAL_BYTES` were appended since the last
//! one (and for the first batch). Entries strictly increase in both fields.
//!
//! # File `NNNNNNNNNNNNNNNNNNNN.timeindex` (big-endian)
//!
//! ```text
//!   8  timestamp      i64  largest record timestamp seen in the segment so far
//!   4  relativeOffset i32  offset of a record with that timestamp - segment base offset
//! ```
//! Added at the same interval when the largest timestamp grew, and once more when the
//! segment is closed so the last entry holds the segment's largest timestamp (used by
//! time retention). Both fields are non-decreasing. Every record at an offset <= an
//! entry's offset has a timestamp <= the entry's timestamp.

/// Bytes of log between two offset index entries (Kafka's `index.interval.bytes`).
pub const INDEX_INTERVAL_BYTES: u64 = 4096;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SegmentIndex {
    /// (relative offset of a batch's base, byte position of the batch)
    pub offsets: Vec<(u32, u32)>,
    /// (largest timestamp so far, relative offset of the record carrying it)
    pub times: Vec<(i64, u32)>,
    bytes_since_entry: u64,
    /// Largest timestamp and its relative offset, indexed or not.
    pub max_timestamp: Option<(i64, u32)>,
}

impl SegmentIndex {
    /// Records that a batch was appended at `position`.
    pub fn on_batch(
        &mut self,
        rel_base: u32,
        position: u32,
        len: u64,
        max_ts: i64,
        rel_of_max_ts: u32,
        has_records: bool,
    ) {
        let due = self.offsets.is_empty() || self.bytes_since_entry >= INDEX_INTERVAL_BYTES;
        if due {
            self.offsets.push((rel_base, position));
            self.bytes_since_entry = 0;
        }
        self.bytes_since_entry += len;
        if has_records && self.max_timestamp.is_none_or(|(t, _)| max_ts > t) {
            self.max_timestamp = Some((max_ts, rel_of_max_ts));
        }
        if due {
            self.add_time_entry();
        }
    }

    fn add_time_entry(&mut self) {
        if let Some((t, o)) = self.max_timestamp {
            if self.times.last().is_none_or(|&(lt, lo)| t > lt && o >= lo) {
                self.times.push((t, o));
            }
        }
    }

    /// Called when the segment is closed: the last time entry becomes the segment maximum.
    pub fn seal(&mut self) {
        self.add_time_entry();
    }

    /// Byte position from which to scan for relative offset `rel`.
    pub fn lookup(&self, rel: u32) -> u32 {
        self.lookup_entry(rel).map_or(0, |(_, p)| p)
    }

    /// The entry used by [`lookup`](Self::lookup): (relative base offset of the batch
    /// there, position). Readers check the batch really has that base offset, so a
    /// damaged index is an error, never a silently skipped record.
    pub fn lookup_entry(&self, rel: u32) -> Option<(u32, u32)> {
        match self.offsets.partition_point(|&(o, _)| o <= rel) {
            0 => None,
            i => Some(self.offsets[i - 1]),
        }
    }

    /// Relative offset from which to scan for the first record with timestamp >= `ts`:
    /// every record before it has a smaller timestamp.
    pub fn lookup_time(&self, ts: i64) -> u32 {
        match self.times.partition_point(|&(t, _)| t < ts) {
            0 => 0,
            i => self.times[i - 1].1.saturating_add(1),
        }
    }

    pub fn encode_offsets(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.offsets.len() * 8);
        for &(o, p) in &self.offsets {
            out.extend_from_slice(&o.to_be_bytes());
            out.extend_from_slice(&p.to_be_bytes());
        }
        out
    }

    pub fn encode_times(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.times.len() * 12);
        for &(t, o) in &self.times {
            out.extend_from_slice(&t.to_be_bytes());
            out.extend_from_slice(&o.to_be_bytes());
        }
        out
    }

    /// Decodes both files and checks their invariants against the segment size.
    pub fn decode(offsets: &[u8], times: &[u8], log_size: u64) -> Result<SegmentIndex, String> {
        if offsets.len() % 8 != 0 || times.len() % 12 != 0 {
            return Err("index file size is not a whole number of entries".into());
        }
        let mut idx = SegmentIndex::default();
        for e in offsets.chunks_exact(8) {
            let o = u32::from_be_bytes([e[0], e[1], e[2], e[3]]);
            let p = u32::from_be_bytes([e[4], e[5], e[6], e[7]]);
            if let Some(&(lo, lp)) = idx.offsets.last() {
                if o <= lo || p <= lp {
                    return Err("offset index entries do not increase".into());
                }
            } else if p != 0 {
                return Err("first offset index entry is not at position 0".into());
            }
            if p as u64 >= log_size {
                return Err("offset index entry points past the end of the segment".into());
            }
            idx.offsets.push((o, p));
        }
        if log_size > 0 && idx.offsets.is_empty() {
            return Err("offset index is empty for a non-empty segment".into());
        }
        for e in times.chunks_exact(12) {
            let mut t = [0u8; 8];
            t.copy_from_slice(&e[..8]);
            let t = i64::from_be_bytes(t);
            let o = u32::from_be_bytes([e[8], e[9], e[10], e[11]]);
            if idx.times.last().is_some_and(|&(lt, lo)| t <= lt || o < lo) {
                return Err("time index entries do not increase".into());
            }
            idx.times.push((t, o));
        }
        idx.max_timestamp = idx.times.last().copied();
        Ok(idx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups() {
        let mut i = SegmentIndex::default();
        i.on_batch(0, 0, 5000, 10, 0, true);
        i.on_batch(10, 5000, 100, 20, 19, true);
        i.on_batch(20, 5100, 5000, 15, 25, true);
        i.on_batch(30, 10100, 10, 40, 35, true);
        i.seal();
        assert_eq!(i.offsets, vec![(0, 0), (10, 5000), (30, 10100)]);
        assert_eq!(i.lookup(5), 0);
        assert_eq!(i.lookup(29), 5000);
        assert_eq!(i.lookup(31), 10100);
        assert_eq!(i.times, vec![(10, 0), (20, 19), (40, 35)]);
        assert_eq!(i.lookup_time(5), 0);
        assert_eq!(i.lookup_time(15), 1);
        assert_eq!(i.lookup_time(25), 20);
        let d = SegmentIndex::decode(&i.encode_offsets(), &i.encode_times(), 10110).unwrap();
        assert_eq!(d.offsets, i.offsets);
        assert_eq!(d.times, i.times);
        assert!(SegmentIndex::decode(&i.encode_offsets(), &[], 10100).is_err());
    }
}
