//! Tests of [`super`]: the records, the budget, the rebuild, and the spilled comparison
//! against the in-memory one.

use super::*;
use serde_json::json;

fn row(v: serde_json::Value) -> JsonRow {
    v.as_object().unwrap().clone()
}

#[test]
fn records_round_trip() {
    for ev in [
        Event::Upsert {
            key: u64::MAX,
            row: 7,
            ts: -3,
        },
        Event::Delete { key: 1, ts: 99 },
        Event::Truncate { ts: i64::MIN },
    ] {
        assert_eq!(Event::decode(&ev.encode()), Some(ev));
    }
    let mut b = Event::Truncate { ts: 0 }.encode();
    b[0] = 9;
    assert_eq!(Event::decode(&b), None);
    assert_eq!(src_fields(&src_record(1, 2, 3)), (1, 2, 3));
}

#[test]
fn budget_sizes() {
    let b = Budget::from_mb(64);
    // 2^21 slots of 25 bytes: 52 MB; 2^22 would pass 64 MiB.
    assert_eq!(b.max_keys, (1 << 21) / 8 * 7);
    assert_eq!(Budget::from_mb(0), Budget::from_mb(1));
    let b = b.with_keys(4);
    let mut m = HashMap::new();
    for k in 0..4u64 {
        assert!(b.room_for_one(&m), "{k}");
        m.insert(k, ());
    }
    assert!(!b.room_for_one(&m));
    assert_eq!(b.buckets_for(0), 2);
    assert_eq!(b.buckets_for(30), 10);
    assert_eq!(b.buckets_for(u64::MAX), MAX_BUCKETS);
}

#[test]
fn smallest_keeps_the_least_and_counts_the_rest() {
    let mut s = Smallest::new(3);
    for x in [5, 1, 9, 3, 7, 2] {
        s.push(x);
    }
    assert_eq!((s.pushed(), s.dropped()), (6, 3));
    assert_eq!(s.into_sorted(), vec![1, 2, 3]);
    let mut s = Smallest::new(0);
    s.push(1);
    assert_eq!(s.dropped(), 1);
}

#[test]
fn buckets_are_spread_and_levels_differ() {
    let k = 8;
    let mut counts = [0usize; 8];
    let mut same = 0;
    for key in 0..8000u64 {
        let h = key.wrapping_mul(0x2545_f491_4f6c_dd1d);
        counts[bucket_of(h, 0, k)] += 1;
        same += (bucket_of(h, 0, k) == bucket_of(h, 1, k)) as usize;
    }
    assert!(
        counts.iter().all(|&c| (800..1200).contains(&c)),
        "{counts:?}"
    );
    assert!(same < 1500, "{same}");
}

/// A log of changes (with the key's text, to print) and the source's rows, compared in
/// memory and spilled with a tiny budget: the same answer.
fn events() -> Vec<Event> {
    let mut evs = Vec::new();
    for k in 0..40u64 {
        evs.push(Event::Upsert {
            key: k * 1_000_003,
            row: k,
            ts: 10,
        });
    }
    // Updates, deletes, a truncate (at 20: clears everything not newer), then more.
    for k in 0..10u64 {
        evs.push(Event::Upsert {
            key: k * 1_000_003,
            row: 100 + k,
            ts: 15,
        });
    }
    evs.push(Event::Delete {
        key: 3 * 1_000_003,
        ts: 16,
    });
    // A key written after the truncate in log order but stamped earlier: cleared at
    // the end, as the newest truncate is newer.
    evs.push(Event::Upsert {
        key: 5 * 1_000_003,
        row: 555,
        ts: 25,
    });
    // Of the truncate's millisecond: before it in log order, cleared by it; after it,
    // kept (the end clears only what is older than the newest truncate).
    evs.push(Event::Upsert {
        key: 7 * 1_000_003,
        row: 777,
        ts: 20,
    });
    evs.push(Event::Truncate { ts: 20 });
    evs.push(Event::Upsert {
        key: 6 * 1_000_003,
        row: 666,
        ts: 19,
    });
    evs.push(Event::Upsert {
        key: 8 * 1_000_003,
        row: 888,
        ts: 20,
    });
    for k in 30..60u64 {
        evs.push(Event::Upsert {
            key: k * 1_000_003,
            row: k + 1,
            ts: 30,
        });
    }
    evs.push(Event::Delete {
        key: 31 * 1_000_003,
        ts: 31,
    });
    evs
}

fn in_memory(evs: &[Event]) -> Rebuild {
    let mut rb = Rebuild::default();
    for &e in evs {
        rb.apply(e);
    }
    let t = rb.truncated;
    rb.finish(t);
    rb
}

#[test]
fn rebuild_follows_truncates_by_log_time() {
    let rb = in_memory(&events());
    let row = |k: u64| rb.map.get(&(k * 1_000_003)).map(|(r, _)| *r);
    assert_eq!(row(5), Some(555)); // newer than the truncate
    assert_eq!(row(6), None); // older than the newest truncate
    assert_eq!(row(7), None); // its millisecond, before it
    assert_eq!(row(8), Some(888)); // its millisecond, after it
    assert_eq!(row(0), None);
    assert_eq!(row(31), None);
    assert_eq!(row(30), Some(31));
    assert_eq!(rb.map.len(), 31);
}

fn spilled(evs: &[Event], keys: usize, split_at: usize, rows: &[(u64, u64)]) -> Found {
    let tmp = tempfile::tempdir().unwrap();
    let budget = Budget::from_mb(1).with_keys(keys);
    // The first `split_at` events rebuilt in memory, then spilled.
    let mut rb = Rebuild::default();
    for &e in &evs[..split_at] {
        rb.apply(e);
    }
    let mut s = Spill::start(&[tmp.path().to_path_buf()], budget, 3, &rb.map).unwrap();
    for &e in &evs[split_at..] {
        s.log_event(e).unwrap();
    }
    s.end_log(rb.truncated).unwrap();
    for &(key, r) in rows {
        let k = row(json!({ "id": key }));
        s.source_row(key, r, &k, &row(json!({ "id": key, "r": r })))
            .unwrap();
    }
    let dir = s.dir().to_path_buf();
    let found = s.compare(5).unwrap();
    let (off, key, _) = found.source.heap.peek().copied().unwrap();
    let (k, after) = s.row_at(off).unwrap();
    assert_eq!(k, row(json!({ "id": key })));
    assert_eq!(after["id"], json!(key));
    drop(s);
    assert!(!dir.exists(), "the spill directory is removed");
    found
}

#[test]
fn spilled_compare_equals_in_memory() {
    let evs = events();
    let rb = in_memory(&evs);
    // The source: most of the view's rows, one changed, two it lacks, some only here.
    let mut rows: Vec<(u64, u64)> = rb.map.iter().map(|(k, (r, _))| (*k, *r)).collect();
    rows.sort();
    rows[4].1 += 1;
    let lacked: Vec<u64> = vec![rows.remove(7).0, rows.remove(11).0];
    rows.extend((100..108u64).map(|k| (k * 7, 1)));
    // In memory: take each source row's key out.
    let mut map = rb.map.clone();
    let mut src_diffs = Vec::new();
    for (i, (k, r)) in rows.iter().enumerate() {
        match map.remove(k) {
            Some((h, _)) if h == *r => {}
            Some(_) => src_diffs.push((i, *k, true)),
            None => src_diffs.push((i, *k, false)),
        }
    }
    let mut extras: Vec<u64> = map.keys().copied().collect();
    extras.sort();
    assert_eq!(extras.len(), 2);
    assert_eq!(src_diffs.len(), 9);
    for (keys, split_at) in [(3, 0), (3, 45), (1000, 10), (2, 60)] {
        let found = spilled(&evs, keys, split_at, &rows);
        assert_eq!(found.view_rows, rb.map.len() as u64, "{keys} {split_at}");
        assert_eq!(found.source.pushed(), 9);
        let kept: Vec<(u64, bool)> = found
            .source
            .into_sorted()
            .into_iter()
            .map(|(_, k, v)| (k, v))
            .collect();
        let want: Vec<(u64, bool)> = src_diffs[..5].iter().map(|&(_, k, v)| (k, v)).collect();
        assert_eq!(kept, want, "the first 5 in source order");
        let mut l = lacked.clone();
        l.sort();
        assert_eq!(found.extras.into_sorted(), l);
        if keys == 3 {
            assert!(found.buckets > 3, "split again: {}", found.buckets);
        }
    }
}

#[test]
fn a_full_disk_names_the_directory() {
    let e = io_err(
        Path::new("/spill/here"),
        "writing a bucket file",
        io::Error::from_raw_os_error(libc::ENOSPC),
    );
    let VerifyError::Failed(m) = e else { panic!() };
    assert!(
        m.starts_with("spilling to /spill/here: writing a bucket file: "),
        "{m}"
    );
    assert!(m.contains("the disk is full"), "{m}");
    // A real full device: the buffered write fails at the latest when closed.
    if let Ok(f) = std::fs::OpenOptions::new().write(true).open("/dev/full") {
        let dir = Path::new("/dev");
        let mut o = Out {
            w: BufWriter::with_capacity(4096, f),
        };
        let r = (0..1000)
            .try_for_each(|_| o.put(dir, &[0u8; 25]))
            .and_then(|_| o.close(dir));
        let Err(VerifyError::Failed(m)) = r else {
            panic!("{r:?}")
        };
        assert!(
            m.contains("spilling to /dev") && m.contains("disk is full"),
            "{m}"
        );
    }
}
