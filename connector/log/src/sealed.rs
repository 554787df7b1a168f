//! Batches built away from the partition: a producer encodes (and compresses) a whole
//! record batch on its own thread, and the append only copies it into the active
//! segment's stage and writes its base offset. Kafka producers work the same way (the
//! broker assigns offsets to batches the client built and compressed).
//!
//! The bytes are exactly those [`crate::batch::encode_batch`] writes (layout in
//! `batch.rs`), built with base offset 0 and record offset deltas 0, 1, 2, ... (dense:
//! offsets stay gapless). What makes the late base offset safe: the batch CRC covers
//! bytes `[21, end)` only (attributes onwards), and `baseOffset` is bytes `[0, 8)`, so
//! writing the real base offset at append leaves the CRC valid; every other field is
//! final when the batch is sealed (`lastOffsetDelta`, the timestamps, the codec, the
//! record count). Readers, recovery and the cleaner cannot tell such a batch from one the
//! partition encoded itself.
//!
//! Invariants: a [`SealedBatch`] is only made by [`SealedBatch::seal`] (its fields are
//! private), so it always holds one valid batch of at least one record, no larger than
//! [`crate::batch::MAX_BATCH_BYTES`]; appending it follows every rule of an append (the
//! records reach readers and the disk only through the next flush, see `partition.rs`).

use crate::batch::{encode_batch, Compression, EncodedBatch};
use crate::error::{LogError, Result};
use crate::record::NewRecord;

/// One complete record batch whose base offset is written when it is appended
/// ([`crate::Topic::append_sealed`]). Reusable: [`SealedBatch::seal`] keeps the buffer's
/// capacity, so a producer that seals batches in a loop allocates nothing per batch.
#[derive(Debug, Default)]
pub struct SealedBatch {
    buf: Vec<u8>,
    records: u32,
    last_offset_delta: u32,
    max_timestamp: i64,
    /// Offset delta of the (last) record with the largest timestamp, for the time index.
    max_timestamp_delta: u32,
    compression: Compression,
    /// Some record has no key (refused by a compacted topic).
    keyless: bool,
}

impl SealedBatch {
    pub fn new() -> Self {
        Self::default()
    }

    /// Encodes `records` (at least one) as one batch with `compression`, replacing what
    /// the batch held. `scratch` holds the uncompressed records section while a codec
    /// compresses it (reuse it too). On error the batch is empty.
    pub fn seal(
        &mut self,
        records: &[NewRecord<'_>],
        compression: Compression,
        scratch: &mut Vec<u8>,
    ) -> Result<()> {
        self.clear();
        if records.is_empty() {
            return Err(LogError::InvalidArgument("append of zero records".into()));
        }
        let enc = match encode_batch(&mut self.buf, 0, records, None, None, compression, scratch) {
            Ok(enc) => enc,
            Err(e) => {
                self.clear();
                return Err(e);
            }
        };
        self.records = records.len() as u32;
        self.last_offset_delta = enc.last_offset as u32;
        self.max_timestamp = enc.max_timestamp;
        self.max_timestamp_delta = enc.offset_of_max_timestamp as u32;
        self.compression = compression;
        self.keyless = records.iter().any(|r| r.key.is_none());
        Ok(())
    }

    /// Empties the batch, keeping its buffer.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.records = 0;
        self.keyless = false;
    }

    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// Records in the batch.
    pub fn records(&self) -> usize {
        self.records as usize
    }

    /// Bytes of the batch as stored.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn compression(&self) -> Compression {
        self.compression
    }

    pub(crate) fn has_keyless(&self) -> bool {
        self.keyless
    }

    /// Capacity of the buffer (for pools that bound what they keep).
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Gives memory back past `bytes` of capacity.
    pub fn shrink_to(&mut self, bytes: usize) {
        self.buf.shrink_to(bytes);
    }

    /// Copies the batch to the end of `out` with `base_offset` written into it; returns
    /// what the partition's index needs. The CRC does not cover the base offset.
    pub(crate) fn place(&self, out: &mut Vec<u8>, base_offset: u64) -> EncodedBatch {
        let start = out.len();
        out.extend_from_slice(&self.buf);
        out[start..start + 8].copy_from_slice(&(base_offset as i64).to_be_bytes());
        EncodedBatch {
            len: self.buf.len(),
            base_offset,
            last_offset: base_offset + self.last_offset_delta as u64,
            max_timestamp: self.max_timestamp,
            offset_of_max_timestamp: base_offset + self.max_timestamp_delta as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{decode_into, validate_batch};
    use crate::record::HeaderRef;
    use bytes::Bytes;
    use proptest::prelude::*;

    /// (key, value, headers, timestamp) of a generated record.
    type Gen = (
        Option<Vec<u8>>,
        Option<Vec<u8>>,
        Vec<(String, Option<Vec<u8>>)>,
        i64,
    );

    fn gen_record() -> impl Strategy<Value = Gen> {
        (
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..300)),
            proptest::collection::vec(
                (
                    "[a-z]{0,8}",
                    proptest::option::of(proptest::collection::vec(any::<u8>(), 0..20)),
                ),
                0..4,
            ),
            0i64..5_000,
        )
    }

    fn codecs() -> Vec<Compression> {
        let mut c = vec![Compression::None];
        #[cfg(feature = "lz4")]
        c.push(Compression::Lz4);
        #[cfg(feature = "zstd")]
        c.push(Compression::Zstd);
        c
    }

    proptest! {
        /// A sealed batch placed at any base offset is byte for byte the batch the
        /// partition would have encoded there, and reads back as the records given.
        #[test]
        fn placed_batch_equals_encoded_batch(
            recs in proptest::collection::vec(gen_record(), 1..30),
            base in 0u64..(1 << 40),
            codec in 0usize..3,
        ) {
            let codecs = codecs();
            let compression = codecs[codec % codecs.len()];
            let headers: Vec<Vec<HeaderRef<'_>>> = recs
                .iter()
                .map(|r| r.2.iter().map(|(k, v)| HeaderRef { key: k, value: v.as_deref() }).collect())
                .collect();
            let new: Vec<NewRecord<'_>> = recs
                .iter()
                .zip(&headers)
                .map(|(r, h)| NewRecord { key: r.0.as_deref(), value: r.1.as_deref(), headers: h, timestamp: r.3 })
                .collect();
            let mut scratch = Vec::new();
            let mut sealed = SealedBatch::new();
            sealed.seal(&new, compression, &mut scratch).unwrap();
            prop_assert_eq!(sealed.records(), new.len());
            let mut placed = vec![0xAAu8; 3];
            let info = sealed.place(&mut placed, base);
            let placed = placed.split_off(3);
            let mut direct = Vec::new();
            let want = encode_batch(&mut direct, base, &new, None, None, compression, &mut scratch).unwrap();
            prop_assert_eq!(&placed, &direct);
            prop_assert_eq!(info, want);
            let h = validate_batch(&placed).unwrap();
            prop_assert_eq!(h.base_offset, base);
            prop_assert_eq!(h.last_offset(), base + new.len() as u64 - 1);
            let mut out = Vec::new();
            decode_into(&Bytes::from(placed), &h, 0, &mut out).unwrap();
            prop_assert_eq!(out.len(), new.len());
            for (i, (got, r)) in out.iter().zip(&recs).enumerate() {
                prop_assert_eq!(got.offset, base + i as u64);
                prop_assert_eq!(got.timestamp, r.3);
                prop_assert_eq!(got.key.as_deref(), r.0.as_deref());
                prop_assert_eq!(got.value.as_deref(), r.1.as_deref());
                let hs: Vec<(String, Option<Vec<u8>>)> = got
                    .headers
                    .iter()
                    .map(|h| (h.key.clone(), h.value.as_ref().map(|v| v.to_vec())))
                    .collect();
                prop_assert_eq!(&hs, &r.2);
            }
        }
    }

    #[test]
    fn reseal_reuses_and_replaces() {
        let mut s = SealedBatch::new();
        let mut scratch = Vec::new();
        s.seal(
            &[NewRecord::new(None, Some(b"a"), 1)],
            Compression::None,
            &mut scratch,
        )
        .unwrap();
        assert!(s.has_keyless());
        s.seal(
            &[
                NewRecord::new(Some(b"k"), Some(b"b"), 9),
                NewRecord::new(Some(b"k"), None, 3),
            ],
            Compression::None,
            &mut scratch,
        )
        .unwrap();
        assert!(!s.has_keyless());
        assert_eq!(s.records(), 2);
        let mut out = Vec::new();
        let info = s.place(&mut out, 7);
        assert_eq!((info.base_offset, info.last_offset), (7, 8));
        assert_eq!((info.max_timestamp, info.offset_of_max_timestamp), (9, 7));
        assert!(s.seal(&[], Compression::None, &mut scratch).is_err());
        assert!(s.is_empty());
    }
}
