//! Kafka's default partitioner for keyed records, bit for bit, so a key lands in the same
//! partition here as with Kafka's Java client (`BuiltInPartitioner.partitionForKey`):
//! `toPositive(murmur2(key)) % numPartitions`, with Kafka's murmur2 (seed `0x9747b28c`).
//!
//! Keyless records: the log does not use Kafka's "sticky" partitioner (it depends on batch
//! timing and is not reproducible). Instead each [`crate::Topic`] handle keeps a round-robin
//! counter starting at 0: keyless record *n* appended through `append_keyed` on a topic goes
//! to partition `n % numPartitions`. Deterministic for one writer, which is the pipeline.

/// Kafka's `Utils.murmur2`: 32-bit MurmurHash2 with seed 0x9747b28c, little-endian blocks.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let length = data.len();
    let mut h: u32 = SEED ^ (length as u32);
    let chunks = data.chunks_exact(4);
    let tail = chunks.remainder();
    for c in chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    // Java's switch falls through: 3 then 2 then 1.
    if tail.len() >= 3 {
        h ^= (tail[2] as u32) << 16;
    }
    if tail.len() >= 2 {
        h ^= (tail[1] as u32) << 8;
    }
    if !tail.is_empty() {
        h ^= tail[0] as u32;
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// Kafka's `Utils.toPositive`: clears the sign bit (not `abs`, so `i32::MIN` maps to 0).
pub fn to_positive(n: i32) -> i32 {
    n & 0x7fff_ffff
}

/// The partition Kafka's default partitioner picks for `key` among `num_partitions`.
pub fn partition_for_key(key: &[u8], num_partitions: u32) -> u32 {
    debug_assert!(num_partitions > 0);
    (to_positive(murmur2(key)) as u32) % num_partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_utils_test_vectors() {
        // From Kafka's clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java.
        let cases: &[(&str, i32)] = &[
            ("21", -973932308),
            ("foobar", -790332482),
            ("a-little-bit-long-string", -985981536),
            ("a-little-bit-longer-string", -1486304829),
            (
                "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58897971,
            ),
            ("abc", 479470107),
            ("string-f-24-chars-length", 124730809),
            ("string-fo-25-chars-length", 1269511650),
            ("string-foo-26-chars-length", 119165628),
            ("string-last-27-chars-length", 1089971754),
        ];
        for (s, want) in cases {
            assert_eq!(murmur2(s.as_bytes()), *want, "murmur2({s:?})");
        }
    }

    #[test]
    fn partition_is_positive_modulo() {
        assert_eq!(to_positive(i32::MIN), 0);
        assert_eq!(to_positive(-1), i32::MAX);
        // "21" hashes negative: toPositive(-973932308) = 1173551340.
        assert_eq!(partition_for_key(b"21", 10), (1173551340u32) % 10);
        for n in 1..20 {
            assert!(partition_for_key(b"foobar", n) < n);
        }
    }
}
