//! Bounded memory for `cdc verify --sink` (`--memory-mb`): the ids of the source's rows,
//! for the scan of the target for the rows the source lacks ([`SinkView::extras`]).
//!
//! While they fit the budget the ids (8-byte hashes of the view's id of each row) are one
//! sorted vector in memory, and each scanned row is looked up in it. Past it, the ids are
//! written as sorted runs; the target's scan then goes to disk as well — its rows to a
//! file, their id hashes and places as sorted runs — and the two sides are merged by id
//! hash: a scanned row whose hash the source's runs lack is a row the source lacks.
//!
//! Files (in a [`SpillDir`]; integers little-endian, fixed-size records, no header):
//! - `ids-<n>`: a run of the source's id hashes, ascending, 8 bytes each;
//! - `scan-<n>`: a run of the scan's rows, ascending by id hash, 16 bytes each: the id
//!   hash and the byte offset of the row in `scan`;
//! - `scan`: the scanned rows in scan order, one line each: the JSON `[id, row]` (only
//!   the rows reported are read back);
//! - when [`MAX_RUNS`] runs of one kind are written, they are merged into one (bounding
//!   the open files and buffers of the final merge).
//!
//! Invariants: a scanned row is reported as missing in the source exactly when its id
//! hash is not among the source's, in memory and spilled alike; spilled, the reported
//! rows are the first `cap` in scan order (the byte offsets in `scan` grow with it) and
//! the rest are counted — what the in-memory scan reports.
//!
//! [`SinkView::extras`]: super::sink_view::SinkView::extras

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::{Path, PathBuf};

use cdc_sinks::view_read::ViewRow;

use super::spill::{Budget, In, Out, Smallest, SpillDir};
use super::VerifyError;

/// Runs of one kind at most before they are merged into one.
pub const MAX_RUNS: usize = 64;
const SCAN_RECORD: usize = 16;

/// The ids of the source's rows seen by the pass, and (spilled) the target's scan.
pub struct SeenIds {
    budget: Budget,
    /// Ids held in memory at most (`--memory-mb`'s keys, or the hidden `--spill-keys`).
    run_len: usize,
    dirs: Vec<PathBuf>,
    ids: Vec<u64>,
    /// Sorted (the source's pass is over, nothing was spilled).
    sorted: bool,
    spill: Option<Runs>,
}

/// The run files of a spilled [`SeenIds`].
struct Runs {
    id_runs: Vec<PathBuf>,
    scan_runs: Vec<PathBuf>,
    /// The scan's (id hash, offset in `scan`) not yet in a run.
    scan: Vec<(u64, u64)>,
    rows: Option<Out>,
    rows_at: u64,
    line: Vec<u8>,
    /// The number of the next run file.
    next: u32,
    /// Last: dropped after the open files.
    dir: SpillDir,
}

impl Runs {
    fn path(&mut self, kind: &str) -> PathBuf {
        self.next += 1;
        self.dir.path().join(format!("{kind}-{}", self.next))
    }
}

/// Writes `records` (already sorted) as a run file at `path`.
fn write_run<const N: usize>(
    dir: &Path,
    path: &Path,
    records: impl Iterator<Item = [u8; N]>,
    buffer: usize,
) -> Result<(), VerifyError> {
    let mut out = Out::create(dir, path, buffer)?;
    for r in records {
        out.put(dir, &r)?;
    }
    out.close(dir)
}

/// The records of sorted run files, merged in ascending order of their first 8 bytes.
struct Merge<const N: usize> {
    inputs: Vec<In<N>>,
    heap: BinaryHeap<Reverse<([u8; N], usize)>>,
}

/// The first 8 bytes as a little-endian integer: what runs are sorted by.
fn lead(b: &[u8]) -> u64 {
    u64::from_le_bytes(b[..8].try_into().unwrap())
}

impl<const N: usize> Merge<N> {
    fn open(dir: &Path, runs: &[PathBuf], buffer: usize) -> Result<Merge<N>, VerifyError> {
        let mut m = Merge {
            inputs: Vec::with_capacity(runs.len()),
            heap: BinaryHeap::with_capacity(runs.len()),
        };
        for (i, p) in runs.iter().enumerate() {
            let mut input = In::<N>::open(dir, p, buffer)?;
            if let Some(b) = input.next(dir)? {
                m.heap.push(Reverse((Self::keyed(b), i)));
            }
            m.inputs.push(input);
        }
        Ok(m)
    }

    /// The record with its sort key first, big-endian, so that arrays order as keys do.
    fn keyed(mut b: [u8; N]) -> [u8; N] {
        let k = lead(&b).to_be_bytes();
        b[..8].copy_from_slice(&k);
        b
    }

    fn unkeyed(mut b: [u8; N]) -> [u8; N] {
        let k = u64::from_be_bytes(b[..8].try_into().unwrap()).to_le_bytes();
        b[..8].copy_from_slice(&k);
        b
    }

    fn next(&mut self, dir: &Path) -> Result<Option<[u8; N]>, VerifyError> {
        let Some(Reverse((b, i))) = self.heap.pop() else {
            return Ok(None);
        };
        if let Some(n) = self.inputs[i].next(dir)? {
            self.heap.push(Reverse((Self::keyed(n), i)));
        }
        Ok(Some(Self::unkeyed(b)))
    }
}

/// Merges `runs` into one run at `to` and removes them.
fn compact<const N: usize>(
    dir: &Path,
    runs: &mut Vec<PathBuf>,
    to: PathBuf,
    budget: &Budget,
) -> Result<(), VerifyError> {
    let buffer = budget.buffer(runs.len() + 1);
    let mut m = Merge::<N>::open(dir, runs, buffer)?;
    let mut out = Out::create(dir, &to, buffer)?;
    while let Some(b) = m.next(dir)? {
        out.put(dir, &b)?;
    }
    out.close(dir)?;
    drop(m);
    for p in runs.drain(..) {
        let _ = std::fs::remove_file(p);
    }
    runs.push(to);
    Ok(())
}

impl SeenIds {
    /// `dirs`: where the spill's temporary directory may go, in order of preference.
    pub fn new(budget: Budget, dirs: Vec<PathBuf>) -> SeenIds {
        SeenIds {
            budget,
            run_len: budget.max_keys.max(1),
            dirs,
            ids: Vec::new(),
            sorted: false,
            spill: None,
        }
    }

    /// The id hash of the next source row.
    pub fn insert(&mut self, h: u64) -> Result<(), VerifyError> {
        if self.ids.len() >= self.run_len {
            self.write_ids()?;
        }
        if self.ids.len() == self.ids.capacity() {
            // Grown by hand up to the run's length: doubling past it would hold twice
            // the budget while it moves.
            let more = self.ids.capacity().max(1024);
            self.ids
                .reserve_exact(more.min(self.run_len - self.ids.len()).max(1));
        }
        self.ids.push(h);
        Ok(())
    }

    /// The ids in memory as a sorted run file (starting the spill).
    fn write_ids(&mut self) -> Result<(), VerifyError> {
        if self.spill.is_none() {
            let dir = SpillDir::create(&self.dirs)?;
            tracing::info!(
                dir = %dir.path().display(),
                ids_in_memory = self.ids.len(),
                "verify: spilled the source's ids to run files"
            );
            self.spill = Some(Runs {
                id_runs: Vec::new(),
                scan_runs: Vec::new(),
                scan: Vec::new(),
                rows: None,
                rows_at: 0,
                line: Vec::new(),
                next: 0,
                dir,
            });
        }
        let budget = self.budget;
        let s = self.spill.as_mut().expect("created above");
        self.ids.sort_unstable();
        let path = s.path("ids");
        let dir = s.dir.path().to_path_buf();
        write_run(
            &dir,
            &path,
            self.ids.drain(..).map(u64::to_le_bytes),
            64 << 10,
        )?;
        s.id_runs.push(path);
        if s.id_runs.len() >= MAX_RUNS {
            let to = s.path("ids");
            compact::<8>(&dir, &mut s.id_runs, to, &budget)?;
        }
        Ok(())
    }

    /// The end of the source's pass.
    pub fn finish(&mut self) -> Result<(), VerifyError> {
        if self.spill.is_some() {
            if !self.ids.is_empty() {
                self.write_ids()?;
            }
            self.ids = Vec::new();
        } else {
            self.ids.sort_unstable();
            self.sorted = true;
        }
        Ok(())
    }

    /// Whether the ids went to disk (then the scan's rows go to [`SeenIds::scan_row`]).
    pub fn spilled(&self) -> bool {
        self.spill.is_some()
    }

    /// Whether the source had a row of this id hash (in memory, after
    /// [`SeenIds::finish`]).
    pub fn contains(&self, h: u64) -> bool {
        debug_assert!(self.sorted);
        self.ids.binary_search(&h).is_ok()
    }

    /// The next row of the target's scan (spilled).
    pub fn scan_row(&mut self, h: u64, id: &str, row: &Option<ViewRow>) -> Result<(), VerifyError> {
        let run_len = self.run_len;
        let budget = self.budget;
        let s = self.spill.as_mut().expect("spilled");
        let dir = s.dir.path().to_path_buf();
        if s.rows.is_none() {
            s.rows = Some(Out::create(&dir, &dir.join("scan"), 64 << 10)?);
        }
        s.line.clear();
        serde_json::to_writer(&mut s.line, &(id, row))
            .map_err(|e| VerifyError::Failed(format!("writing a row of the view: {e}")))?;
        s.line.push(b'\n');
        s.rows.as_mut().expect("opened above").put(&dir, &s.line)?;
        s.scan.push((h, s.rows_at));
        s.rows_at += s.line.len() as u64;
        // Two u64 a record: half as many as ids make a run.
        if s.scan.len() >= (run_len / 2).max(1) {
            Self::write_scan(s, &budget)?;
        }
        Ok(())
    }

    fn write_scan(s: &mut Runs, budget: &Budget) -> Result<(), VerifyError> {
        if s.scan.is_empty() {
            return Ok(());
        }
        s.scan.sort_unstable();
        let path = s.path("scan");
        let dir = s.dir.path().to_path_buf();
        let records = s.scan.drain(..).map(|(h, at)| {
            let mut b = [0u8; SCAN_RECORD];
            b[..8].copy_from_slice(&h.to_le_bytes());
            b[8..].copy_from_slice(&at.to_le_bytes());
            b
        });
        write_run(&dir, &path, records, 64 << 10)?;
        s.scan_runs.push(path);
        if s.scan_runs.len() >= MAX_RUNS {
            let to = s.path("scan");
            compact::<SCAN_RECORD>(&dir, &mut s.scan_runs, to, budget)?;
        }
        Ok(())
    }

    /// (Spilled) the end of the scan: the offsets in `scan` of its rows whose id the
    /// source lacks, the `cap` first in scan order kept.
    pub fn extras(&mut self, cap: usize) -> Result<Smallest<u64>, VerifyError> {
        let budget = self.budget;
        let s = self.spill.as_mut().expect("spilled");
        let dir = s.dir.path().to_path_buf();
        Self::write_scan(s, &budget)?;
        s.scan = Vec::new();
        if let Some(o) = s.rows.take() {
            o.close(&dir)?;
        }
        let buffer = budget.buffer(s.id_runs.len() + s.scan_runs.len());
        let mut ids = Merge::<8>::open(&dir, &s.id_runs, buffer)?;
        let mut scan = Merge::<SCAN_RECORD>::open(&dir, &s.scan_runs, buffer)?;
        let mut found = Smallest::new(cap);
        let mut id = ids.next(&dir)?.map(|b| lead(&b));
        while let Some(b) = scan.next(&dir)? {
            let h = lead(&b);
            while id.is_some_and(|i| i < h) {
                id = ids.next(&dir)?.map(|b| lead(&b));
            }
            if id != Some(h) {
                found.push(lead(&b[8..]));
            }
        }
        tracing::info!(
            id_runs = s.id_runs.len(),
            scan_runs = s.scan_runs.len(),
            missing_in_source = found.pushed(),
            "verify: compared the spilled ids"
        );
        Ok(found)
    }

    /// The scanned row at `at` (an offset [`SeenIds::extras`] gives): its id and row.
    pub fn row_at(&self, at: u64) -> Result<(String, Option<ViewRow>), VerifyError> {
        let s = self.spill.as_ref().expect("spilled");
        super::spill::json_line_at(s.dir.path(), "scan", at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The ids of `source` and a scan of `view`, with ids held in memory at most `keys`:
    /// the scanned ids the source lacks, in scan order (at most `cap`), and how many.
    fn missing(source: &[u64], view: &[u64], keys: usize, cap: usize) -> (Vec<String>, u64) {
        let parent = tempfile::tempdir().unwrap();
        let budget = Budget::from_mb(1).with_keys(keys);
        let mut seen = SeenIds::new(budget, vec![parent.path().to_path_buf()]);
        for &h in source {
            seen.insert(h).unwrap();
        }
        seen.finish().unwrap();
        let row = |h: u64| Some(json!({"id": h, "v": "x"}).as_object().unwrap().clone());
        if !seen.spilled() {
            let all: Vec<String> = view
                .iter()
                .filter(|h| !seen.contains(**h))
                .map(|h| h.to_string())
                .collect();
            let n = all.len() as u64;
            return (all.into_iter().take(cap).collect(), n);
        }
        for &h in view {
            seen.scan_row(h, &h.to_string(), &row(h)).unwrap();
        }
        let found = seen.extras(cap).unwrap();
        let n = found.pushed();
        let ids = found
            .into_sorted()
            .into_iter()
            .map(|at| {
                let (id, r) = seen.row_at(at).unwrap();
                assert_eq!(r, row(id.parse().unwrap()));
                id
            })
            .collect();
        drop(seen);
        assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 0);
        (ids, n)
    }

    #[test]
    fn spilled_ids_find_what_memory_finds() {
        // Hashes spread over the whole range, some only in the view, in no order.
        let mix = |i: u64| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (i >> 3);
        let source: Vec<u64> = (0..5000).map(mix).collect();
        let mut view: Vec<u64> = (0..5000).filter(|i| i % 7 != 0).map(mix).collect();
        view.extend((5000..5300).map(mix));
        // 0 is a source's (mix(0)), u64::MAX is not.
        view.extend([0, u64::MAX]);
        view.rotate_left(1234);
        for cap in [0, 5, 1000] {
            let memory = missing(&source, &view, usize::MAX, cap);
            assert_eq!(memory.1, 301);
            assert_eq!(memory.0.len(), cap.min(301));
            // Runs of 100 ids: 50 runs; of 3: more than MAX_RUNS, merged on the way.
            for keys in [100, 3] {
                assert_eq!(missing(&source, &view, keys, cap), memory, "{keys} {cap}");
            }
        }
        assert_eq!(missing(&[], &[1, 2], 1, 10).1, 2);
        assert_eq!(missing(&[1, 2, 3], &[], 1, 10).1, 0);
    }
}
