//! Kafka's variable-length integers (zigzag + base-128, least significant group first),
//! as used inside record-batch v2 records (`ByteUtils.writeVarint` / `writeVarlong`).
//!
//! Owns nothing but pure functions; decoders never read past the slice and reject
//! encodings longer than Kafka allows (5 bytes for a varint, 10 for a varlong).

use crate::error::DecodeError;

#[inline]
fn zigzag32(v: i32) -> u32 {
    ((v << 1) ^ (v >> 31)) as u32
}

#[inline]
fn zigzag64(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Bytes needed to encode `v` as a Kafka varint.
#[inline]
pub fn varint_len(v: i32) -> usize {
    uvarint_len(zigzag32(v) as u64)
}

/// Bytes needed to encode `v` as a Kafka varlong.
#[inline]
pub fn varlong_len(v: i64) -> usize {
    uvarint_len(zigzag64(v))
}

#[inline]
fn uvarint_len(mut u: u64) -> usize {
    let mut n = 1;
    while u >= 0x80 {
        u >>= 7;
        n += 1;
    }
    n
}

#[inline]
fn put_uvarint(out: &mut Vec<u8>, mut u: u64) {
    while u >= 0x80 {
        out.push((u as u8) | 0x80);
        u >>= 7;
    }
    out.push(u as u8);
}

#[inline]
pub fn put_varint(out: &mut Vec<u8>, v: i32) {
    put_uvarint(out, zigzag32(v) as u64)
}

#[inline]
pub fn put_varlong(out: &mut Vec<u8>, v: i64) {
    put_uvarint(out, zigzag64(v))
}

#[inline]
fn get_uvarint(buf: &[u8], pos: &mut usize, max_bytes: usize) -> Result<u64, DecodeError> {
    let mut result: u64 = 0;
    let mut shift = 0u32;
    for i in 0..max_bytes {
        let Some(&b) = buf.get(*pos + i) else {
            return Err(DecodeError::Truncated {
                need: *pos + i + 1,
                have: buf.len(),
            });
        };
        result |= ((b & 0x7f) as u64) << shift;
        if b & 0x80 == 0 {
            *pos += i + 1;
            return Ok(result);
        }
        shift += 7;
    }
    Err(DecodeError::Malformed("varint too long"))
}

/// Reads a Kafka varint at `*pos`, advancing it.
#[inline]
pub fn get_varint(buf: &[u8], pos: &mut usize) -> Result<i32, DecodeError> {
    let u = get_uvarint(buf, pos, 5)?;
    if u > u32::MAX as u64 {
        return Err(DecodeError::Malformed("varint overflows 32 bits"));
    }
    let u = u as u32;
    Ok(((u >> 1) as i32) ^ -((u & 1) as i32))
}

/// Reads a Kafka varlong at `*pos`, advancing it.
#[inline]
pub fn get_varlong(buf: &[u8], pos: &mut usize) -> Result<i64, DecodeError> {
    let u = get_uvarint(buf, pos, 10)?;
    Ok(((u >> 1) as i64) ^ -((u & 1) as i64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_lengths() {
        // Values from Kafka's ByteUtilsTest: zigzag of -1 is 1, of 1 is 2, of i32::MIN is u32::MAX.
        let mut out = Vec::new();
        for v in [0, 1, -1, 63, -64, 64, i32::MAX, i32::MIN, 300, -300] {
            out.clear();
            put_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v));
            let mut pos = 0;
            assert_eq!(get_varint(&out, &mut pos).unwrap(), v);
            assert_eq!(pos, out.len());
        }
        for v in [0i64, 1, -1, i64::MAX, i64::MIN, 1 << 40] {
            out.clear();
            put_varlong(&mut out, v);
            assert_eq!(out.len(), varlong_len(v));
            let mut pos = 0;
            assert_eq!(get_varlong(&out, &mut pos).unwrap(), v);
        }
        out.clear();
        put_varint(&mut out, -1);
        assert_eq!(out, [1]);
        out.clear();
        put_varint(&mut out, 1);
        assert_eq!(out, [2]);
        out.clear();
        put_varint(&mut out, 300);
        assert_eq!(out, [0xd8, 0x04]);
    }

    #[test]
    fn rejects_overlong_and_truncated() {
        let mut pos = 0;
        assert!(get_varint(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x01], &mut pos).is_err());
        let mut pos = 0;
        assert!(matches!(
            get_varint(&[0x80], &mut pos),
            Err(DecodeError::Truncated { .. })
        ));
    }
}
