//! The segment/batch decoder over thousands of random and mutated inputs (what the
//! `segment` fuzz target (`fuzz/`) does first, bounded, so `cargo test` exercises it).

mod common;

use cdc_log::batch::{encode_batch, Compression};
use cdc_log::{fuzz_decode_segment, HeaderRef, NewRecord};
use common::Rng;

fn valid_segment(rng: &mut Rng, c: Compression) -> Vec<u8> {
    let mut out = Vec::new();
    let mut scratch = Vec::new();
    let mut base = 0u64;
    let h = [
        HeaderRef {
            key: "h",
            value: Some(b"hv"),
        },
        HeaderRef {
            key: "n",
            value: None,
        },
    ];
    for _ in 0..1 + rng.below(4) {
        let n = 1 + rng.below(5) as usize;
        let vals: Vec<Vec<u8>> = (0..n)
            .map(|i| vec![i as u8; rng.below(100) as usize])
            .collect();
        let recs: Vec<NewRecord<'_>> = vals
            .iter()
            .enumerate()
            .map(|(i, v)| NewRecord {
                key: if i % 2 == 0 { Some(&b"key"[..]) } else { None },
                value: if i % 3 == 2 { None } else { Some(&v[..]) },
                headers: if i % 2 == 1 { &h } else { &[] },
                timestamp: 1000 + i as i64,
            })
            .collect();
        encode_batch(&mut out, base, &recs, None, None, c, &mut scratch).unwrap();
        base += n as u64;
    }
    out
}

#[test]
fn decoder_never_panics() {
    let iters: u64 = std::env::var("CDC_LOG_DECODER_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5000);
    let mut rng = Rng(0xdead_beef_cafe_f00d);
    let codecs = [Compression::None, Compression::Lz4, Compression::Zstd];
    for i in 0..iters {
        let c = codecs[(i % 3) as usize];
        let mut data = valid_segment(&mut rng, c);
        let (n, ok) = fuzz_decode_segment(&data);
        assert!(ok && n > 0, "valid segment rejected");
        match rng.below(4) {
            0 => {
                // Pure noise.
                let len = rng.below(300) as usize;
                data = (0..len).map(|_| rng.next() as u8).collect();
            }
            1 => {
                let at = rng.below(data.len() as u64) as usize;
                data.truncate(at);
            }
            _ => {
                for _ in 0..1 + rng.below(6) {
                    let at = rng.below(data.len() as u64) as usize;
                    data[at] = rng.next() as u8;
                }
            }
        }
        let _ = fuzz_decode_segment(&data);
        // Also with the CRC fixed up, so mutations reach the record decoder.
        if data.len() >= 61 {
            let total = (12
                + i32::from_be_bytes([data[8], data[9], data[10], data[11]]).max(0) as usize)
                .min(data.len());
            if total > 21 {
                let crc = crc32c_of(&data[21..total]);
                data[17..21].copy_from_slice(&crc.to_be_bytes());
                let _ = fuzz_decode_segment(&data);
            }
        }
    }
}

/// CRC-32C (Castagnoli), bitwise: the test does not depend on the crc32c crate.
fn crc32c_of(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}
