//! Batches sealed by the producer ([`SealedBatch`], `Topic::append_sealed`) against the
//! partition's own encoding (`Topic::append`): the same records give the same bytes on
//! disk, the same offsets, indexes and reads; they become visible and durable only
//! through a flush; and the append refuses what `append` refuses.

mod common;

use cdc_log::{
    CleanupPolicy, Compression, HeaderRef, LogError, NewRecord, SealedBatch, TopicConfig,
};
use common::*;

/// Every segment file of `topic` (name, bytes), sorted by name.
fn files(dir: &std::path::Path, topic: &str) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for p in 0..2 {
        let d = dir.join("topics").join(topic).join(p.to_string());
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd {
            let e = e.unwrap();
            out.push((
                format!("{p}/{}", e.file_name().to_string_lossy()),
                std::fs::read(e.path()).unwrap(),
            ));
        }
    }
    out.sort();
    out
}

#[test]
fn sealed_appends_write_what_appends_write() {
    let a_dir = tempfile::tempdir().unwrap();
    let b_dir = tempfile::tempdir().unwrap();
    let (a, b) = (open(a_dir.path()), open(b_dir.path()));
    let codecs = [
        ("n", Compression::None),
        ("l", Compression::Lz4),
        ("z", Compression::Zstd),
    ];
    let mut scratch = Vec::new();
    let mut sealed = SealedBatch::new();
    for (name, c) in codecs {
        let cfg = TopicConfig {
            compression: c,
            ..small_topic(2)
        };
        let (ta, tb) = (
            a.create_topic(name, cfg.clone()).unwrap(),
            b.create_topic(name, cfg).unwrap(),
        );
        for i in 0..120u32 {
            let p = i % 2;
            let v = format!("value-{i}-{}", "x".repeat((i % 70) as usize));
            let k = i.to_be_bytes();
            // Zero to three headers, one of them null-valued.
            let hs = [
                HeaderRef {
                    key: "a",
                    value: Some(b"1"),
                },
                HeaderRef {
                    key: "b",
                    value: None,
                },
                HeaderRef {
                    key: "",
                    value: Some(b""),
                },
            ];
            let n = (i % 4) as usize;
            let recs: Vec<NewRecord<'_>> = (0..1 + i % 3)
                .map(|j| NewRecord {
                    key: (j != 1).then_some(&k[..]),
                    value: (j != 2).then_some(v.as_bytes()),
                    headers: &hs[..n],
                    timestamp: 1000 + i as i64 - j as i64,
                })
                .collect();
            let ia = ta.append(p, &recs).unwrap();
            sealed.seal(&recs, c, &mut scratch).unwrap();
            let ib = tb.append_sealed(p, &sealed).unwrap();
            assert_eq!(ia, ib, "{name} append {i}");
            if i % 17 == 0 {
                a.flush(Some(b"cp")).unwrap();
                b.flush(Some(b"cp")).unwrap();
            }
        }
        a.flush(Some(b"cp")).unwrap();
        b.flush(Some(b"cp")).unwrap();
        for p in 0..2 {
            assert_eq!(read_all(&a, name, p), read_all(&b, name, p), "{name}/{p}");
        }
        assert_eq!(a.verify(name).unwrap(), b.verify(name).unwrap());
        assert!(b.describe(name).unwrap().partitions[0].segments > 1);
    }
    a.close().unwrap();
    b.close().unwrap();
    drop((a, b));
    for (name, _) in codecs {
        assert_eq!(
            files(a_dir.path(), name),
            files(b_dir.path(), name),
            "{name}"
        );
    }
    // Reopened (recovery checks the durable tail batch by batch): the same records.
    let (a, b) = (open(a_dir.path()), open(b_dir.path()));
    for (name, _) in codecs {
        for p in 0..2 {
            let recs = read_all(&b, name, p);
            assert!(recs.windows(2).all(|w| w[1].offset == w[0].offset + 1));
            assert_eq!(recs, read_all(&a, name, p));
        }
    }
}

#[test]
fn sealed_appends_are_durable_only_through_a_flush() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    let t = log
        .create_topic(
            "t",
            TopicConfig {
                compression: Compression::Lz4,
                ..small_topic(1)
            },
        )
        .unwrap();
    let mut s = SealedBatch::new();
    let mut scratch = Vec::new();
    let v = vec![b'v'; 3000];
    s.seal(
        &[rec(b"k1", &v, 1), rec(b"k2", &v, 2)],
        Compression::Lz4,
        &mut scratch,
    )
    .unwrap();
    assert_eq!(t.append_sealed(0, &s).unwrap().base_offset, 0);
    assert!(
        read_all(&log, "t", 0).is_empty(),
        "not visible before a flush"
    );
    log.flush(Some(b"one")).unwrap();
    assert_eq!(read_all(&log, "t", 0).len(), 2);
    // Appended, not flushed: a crash (drop) loses it, the checkpoint stays.
    assert_eq!(t.append_sealed(0, &s).unwrap().base_offset, 2);
    drop(t);
    drop(log);
    let log = open(dir.path());
    assert_eq!(log.checkpoint().as_deref(), Some(&b"one"[..]));
    let t = log.topic("t").unwrap();
    assert_eq!(read_all(&log, "t", 0).len(), 2);
    // Offsets go on from the durable end, gapless.
    let info = t.append_sealed(0, &s).unwrap();
    assert_eq!((info.base_offset, info.last_offset), (2, 3));
    log.flush(None).unwrap();
    let offsets: Vec<u64> = read_all(&log, "t", 0).iter().map(|r| r.offset).collect();
    assert_eq!(offsets, [0, 1, 2, 3]);
}

#[test]
fn sealed_appends_refuse_what_appends_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    let plain = log.create_topic("p", small_topic(1)).unwrap();
    let compact = log
        .create_topic(
            "c",
            TopicConfig {
                cleanup_policy: CleanupPolicy::COMPACT,
                ..small_topic(1)
            },
        )
        .unwrap();
    let mut s = SealedBatch::new();
    let mut scratch = Vec::new();
    let invalid = |r: Result<cdc_log::AppendInfo, LogError>| {
        assert!(matches!(r, Err(LogError::InvalidArgument(_))), "{r:?}");
    };
    // Never sealed: empty.
    invalid(plain.append_sealed(0, &s));
    s.seal(&[rec(b"k", b"v", 1)], Compression::Zstd, &mut scratch)
        .unwrap();
    // A topic keeps its codec.
    invalid(plain.append_sealed(0, &s));
    assert!(matches!(
        plain.append_sealed(3, &s),
        Err(LogError::UnknownPartition { .. })
    ));
    s.seal(
        &[rec(b"k", b"v", 1), NewRecord::new(None, Some(b"v"), 2)],
        Compression::None,
        &mut scratch,
    )
    .unwrap();
    invalid(compact.append_sealed(0, &s));
    assert!(s.seal(&[], Compression::None, &mut scratch).is_err());
    log.flush(None).unwrap();
    assert!(read_all(&log, "p", 0).is_empty());
    assert!(read_all(&log, "c", 0).is_empty());
}
