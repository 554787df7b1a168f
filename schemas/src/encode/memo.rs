//! Per-thread memo of the JSON envelope pieces that repeat from one event to the next: the
//! `source` block (the same for every row of a snapshot chunk, and for every change of a
//! Postgres transaction except its `lsn`) and the processing-time fields (the same for
//! every event of one encoding job). A hit copies the bytes written last time instead of
//! formatting ten numbers and two dozen small pieces again.
//!
//! Invariant: a memo entry holds exactly the bytes its renderer wrote for its key; the key
//! covers everything the renderer reads (the encoder is named by its unique id, so a
//! freed encoder's address reused by a new one cannot alias it).

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::event::SnapshotMarker;
use crate::position::PgPosition;

/// A fresh encoder id (see the module docs).
pub(crate) fn next_encoder_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// What the JSON `source` block of a Postgres event is rendered from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SourceKey {
    pub encoder: u64,
    pub ts_ms: i64,
    pub snapshot: SnapshotMarker,
    pub pos: PgPosition,
}

#[derive(Default)]
struct Memo {
    source: Option<SourceKey>,
    source_bytes: Vec<u8>,
    times: Option<i64>,
    times_bytes: Vec<u8>,
}

thread_local! {
    static MEMO: RefCell<Memo> = RefCell::new(Memo::default());
}

/// Appends the source block for `key`: the memo's copy, or what `render` writes (then
/// remembered).
pub(crate) fn source<E>(
    key: &SourceKey,
    out: &mut Vec<u8>,
    render: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
) -> Result<(), E> {
    MEMO.with(|m| {
        let Ok(mut m) = m.try_borrow_mut() else {
            return render(out);
        };
        if m.source.as_ref() == Some(key) {
            out.extend_from_slice(&m.source_bytes);
            return Ok(());
        }
        let start = out.len();
        render(out)?;
        m.source = Some(key.clone());
        m.source_bytes.clear();
        m.source_bytes.extend_from_slice(&out[start..]);
        Ok(())
    })
}

/// Appends the processing-time fields for `now_ns`: the memo's copy, or what `render`
/// writes (then remembered).
pub(crate) fn times(now_ns: i64, out: &mut Vec<u8>, render: impl FnOnce(&mut Vec<u8>)) {
    MEMO.with(|m| {
        let Ok(mut m) = m.try_borrow_mut() else {
            return render(out);
        };
        if m.times == Some(now_ns) {
            out.extend_from_slice(&m.times_bytes);
            return;
        }
        let start = out.len();
        render(out);
        m.times = Some(now_ns);
        m.times_bytes.clear();
        m.times_bytes.extend_from_slice(&out[start..]);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hit_copies_and_a_new_key_renders() {
        let key = |lsn| SourceKey {
            encoder: 7,
            ts_ms: 1,
            snapshot: SnapshotMarker::True,
            pos: PgPosition {
                lsn: crate::position::Lsn(lsn),
                ..PgPosition::default()
            },
        };
        let mut out = Vec::new();
        let mut calls = 0;
        for (lsn, text) in [(1, "a"), (1, "ignored"), (2, "b"), (1, "c")] {
            source::<()>(&key(lsn), &mut out, |o| {
                calls += 1;
                o.extend_from_slice(text.as_bytes());
                Ok(())
            })
            .unwrap();
        }
        assert_eq!(out, b"aabc");
        assert_eq!(calls, 3);
        // A failed render remembers nothing.
        let r = source(&key(9), &mut out, |o| {
            o.push(b'x');
            Err(())
        });
        assert!(r.is_err());
        source::<()>(&key(9), &mut out, |o| {
            o.push(b'y');
            Ok(())
        })
        .unwrap();
        assert!(out.ends_with(b"y"));
        let mut t = Vec::new();
        times(5, &mut t, |o| o.push(b'5'));
        times(5, &mut t, |o| o.push(b'!'));
        times(6, &mut t, |o| o.push(b'6'));
        assert_eq!(t, b"556");
    }
}
