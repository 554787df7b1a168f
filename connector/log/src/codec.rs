//! The codecs of a batch's records section (`batch.rs` owns the batch layout; the codec
//! number is in its attributes): compression on write, bounded decompression on read.
//! lz4 is written as a standard LZ4 frame (its layout at `LZ4_FRAMES` and `lz4_frame`);
//! zstd as one zstd frame (level 1). Decompression is bounded by
//! [`MAX_DECOMPRESSED_BYTES`]: a zip bomb is an error, not an allocation.

use crate::batch::{Compression, MAX_DECOMPRESSED_BYTES};
use crate::error::{DecodeError, LogError};

/// Appends `input` compressed with `c` to `out`.
#[allow(unused_variables)]
pub(crate) fn compress_into(
    c: Compression,
    input: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), LogError> {
    match c {
        Compression::None => {
            out.extend_from_slice(input);
            Ok(())
        }
        Compression::Lz4 => {
            #[cfg(feature = "lz4")]
            {
                lz4_frame(input, out)
            }
            #[cfg(not(feature = "lz4"))]
            Err(LogError::UnsupportedCodec("lz4"))
        }
        Compression::Zstd => {
            #[cfg(feature = "zstd")]
            {
                zstd::stream::copy_encode(input, &mut *out, 1)
                    .map_err(|e| LogError::InvalidArgument(format!("zstd: {e}")))
            }
            #[cfg(not(feature = "zstd"))]
            Err(LogError::UnsupportedCodec("zstd"))
        }
    }
}

/// The LZ4 frame headers (lz4's frame format, version 1) an lz4 batch starts with, by the
/// largest block the frame declares (64 KiB, 256 KiB, 4 MiB): magic `184D2204`
/// (little-endian), FLG `0x60` (independent blocks, no block or content checksum, no
/// content size, no dictionary), BD (the block size code in bits 4-6), and the header
/// checksum `(xxh32(FLG, BD) >> 8) & 0xff`. A reader allocates a buffer of the declared
/// block size per frame (lz4_flex's decoder and Kafka's do), so a small batch declares a
/// small block: the choice lz4_flex's encoder makes (`BlockSize::Auto`), kept so that
/// batches read as cheaply as those it wrote. Kafka's lz4 codec reads any of them.
#[cfg(feature = "lz4")]
const LZ4_FRAMES: [(usize, [u8; 7]); 3] = [
    (64 << 10, [0x04, 0x22, 0x4d, 0x18, 0x60, 0x40, 0x82]),
    (256 << 10, [0x04, 0x22, 0x4d, 0x18, 0x60, 0x50, 0xfb]),
    (4 << 20, [0x04, 0x22, 0x4d, 0x18, 0x60, 0x70, 0x73]),
];

#[cfg(feature = "lz4")]
thread_local! {
    /// Where a block is compressed to before its bytes go to the batch: it only grows, so
    /// its bytes are zeroed once per thread, not once per batch (the block API wants an
    /// initialised slice). At most the bound of one 4 MiB block.
    static LZ4_OUT: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Writes `input` as one LZ4 frame at the end of `out`: the header, blocks of at most the
/// frame's block size (each a little-endian length, its top bit set for a block stored
/// uncompressed because compression would not shrink it, then the bytes), and the end
/// mark (a zero length). Compressed straight from `input`: no buffer of a frame encoder to
/// copy the input through or to allocate per batch.
#[cfg(feature = "lz4")]
fn lz4_frame(input: &[u8], out: &mut Vec<u8>) -> Result<(), LogError> {
    // The smallest block size that holds the input, else the largest.
    let (block_size, header) = LZ4_FRAMES
        .iter()
        .find(|(size, _)| input.len() <= *size)
        .unwrap_or(&LZ4_FRAMES[LZ4_FRAMES.len() - 1]);
    LZ4_OUT.with_borrow_mut(|dst| {
        out.extend_from_slice(header);
        for block in input.chunks(*block_size) {
            let bound = lz4_flex::block::get_maximum_output_size(block.len());
            if dst.len() < bound {
                dst.resize(bound, 0);
            }
            let n = lz4_flex::block::compress_into(block, dst)
                .map_err(|e| LogError::InvalidArgument(format!("lz4: {e}")))?;
            if n < block.len() {
                out.extend_from_slice(&(n as u32).to_le_bytes());
                out.extend_from_slice(&dst[..n]);
            } else {
                out.extend_from_slice(&(block.len() as u32 | 1 << 31).to_le_bytes());
                out.extend_from_slice(block);
            }
        }
        out.extend_from_slice(&0u32.to_le_bytes());
        Ok(())
    })
}

#[cfg(feature = "lz4")]
thread_local! {
    /// Where a block is decompressed to before its bytes go to the output: zeroed once
    /// per thread as it grows, where lz4_flex's frame decoder allocates and zeroes a
    /// buffer of the frame's block size (up to 4 MiB) for every batch.
    static LZ4_IN: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Decompresses an LZ4 frame of the shape [`lz4_frame`] writes (version 1, independent
/// blocks, no checksums, no content size, no dictionary) block by block into `out`.
/// `Ok(false)`: another shape (a frame some other writer made), for the general decoder.
#[cfg(feature = "lz4")]
fn lz4_blocks(input: &[u8], out: &mut Vec<u8>) -> Result<bool, DecodeError> {
    let bad = |m: &str| DecodeError::Decompress(format!("lz4: {m}"));
    if input.len() < 7 || input[..4] != [0x04, 0x22, 0x4d, 0x18] || input[4] != 0x60 {
        return Ok(false);
    }
    let block_max = match (input[5] >> 4) & 0x7 {
        4 => 64 << 10,
        5 => 256 << 10,
        6 => 1 << 20,
        7 => 4 << 20,
        _ => return Ok(false),
    };
    let mut rest = &input[7..];
    LZ4_IN.with_borrow_mut(|dst| {
        if dst.len() < block_max {
            dst.resize(block_max, 0);
        }
        loop {
            let Some((len, tail)) = rest.split_first_chunk::<4>() else {
                return Err(bad("frame ends without its end mark"));
            };
            let len = u32::from_le_bytes(*len);
            if len == 0 {
                return Ok(true);
            }
            let stored = len & (1 << 31) != 0;
            let n = (len & !(1 << 31)) as usize;
            if n > tail.len() || n > block_max {
                return Err(bad("block runs past the frame"));
            }
            let (block, after) = tail.split_at(n);
            if stored {
                out.extend_from_slice(block);
            } else {
                let got = lz4_flex::block::decompress_into(block, &mut dst[..block_max])
                    .map_err(|e| bad(&e.to_string()))?;
                out.extend_from_slice(&dst[..got]);
            }
            if out.len() > MAX_DECOMPRESSED_BYTES {
                return Err(DecodeError::Decompress(
                    "decompressed batch exceeds the limit".into(),
                ));
            }
            rest = after;
        }
    })
}

/// `input` decompressed with `c`, at most [`MAX_DECOMPRESSED_BYTES`].
#[allow(unused_variables)]
pub(crate) fn decompress(c: Compression, input: &[u8]) -> Result<Vec<u8>, DecodeError> {
    use std::io::Read;
    let limit = MAX_DECOMPRESSED_BYTES as u64 + 1;
    let mut out = Vec::new();
    match c {
        Compression::None => out.extend_from_slice(input),
        Compression::Lz4 => {
            #[cfg(feature = "lz4")]
            if !lz4_blocks(input, &mut out)? {
                out.clear();
                lz4_flex::frame::FrameDecoder::new(input)
                    .take(limit)
                    .read_to_end(&mut out)
                    .map_err(|e| DecodeError::Decompress(format!("lz4: {e}")))?;
            }
            #[cfg(not(feature = "lz4"))]
            return Err(DecodeError::UnsupportedCodec(3));
        }
        Compression::Zstd => {
            #[cfg(feature = "zstd")]
            zstd::stream::read::Decoder::new(input)
                .map_err(|e| DecodeError::Decompress(format!("zstd: {e}")))?
                .take(limit)
                .read_to_end(&mut out)
                .map_err(|e| DecodeError::Decompress(format!("zstd: {e}")))?;
            #[cfg(not(feature = "zstd"))]
            return Err(DecodeError::UnsupportedCodec(4));
        }
    }
    if out.len() > MAX_DECOMPRESSED_BYTES {
        return Err(DecodeError::Decompress(
            "decompressed batch exceeds the limit".into(),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hand-written frame is a valid LZ4 frame: its header is the one lz4_flex's own
    /// encoder writes for the same settings, and lz4_flex's decoder reads it back, for
    /// input that compresses, input that does not (stored blocks), several blocks, none.
    #[cfg(feature = "lz4")]
    #[test]
    fn lz4_frame_is_standard() {
        use std::io::{Read, Write};
        // The header lz4_flex's encoder writes for the same input (its automatic block
        // size, independent blocks, no checksums): ours, for every block size.
        for len in [
            0,
            100,
            64 << 10,
            (64 << 10) + 1,
            256 << 10,
            (256 << 10) + 1,
            5 << 20,
        ] {
            let input = vec![b'x'; len];
            let mut theirs = lz4_flex::frame::FrameEncoder::new(Vec::new());
            theirs.write_all(&input).unwrap();
            let theirs = theirs.finish().unwrap();
            let mut ours = Vec::new();
            lz4_frame(&input, &mut ours).unwrap();
            assert_eq!(theirs[..7], ours[..7], "{len}");
        }
        let mut noise = vec![0u8; 9 << 20];
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for b in noise.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        let text: Vec<u8> = (0..(9u32 << 18))
            .flat_map(|i| (i % 1000).to_le_bytes())
            .collect();
        for input in [&b""[..], b"abc", &noise[..100], &noise, &text] {
            let mut out = vec![1, 2];
            lz4_frame(input, &mut out).unwrap();
            let mut back = Vec::new();
            lz4_flex::frame::FrameDecoder::new(&out[2..])
                .read_to_end(&mut back)
                .unwrap();
            assert_eq!(back, input);
            // Our block-by-block reader takes the same frame, and so does `decompress`.
            let mut fast = Vec::new();
            assert!(lz4_blocks(&out[2..], &mut fast).unwrap());
            assert_eq!(fast, input);
            assert_eq!(decompress(Compression::Lz4, &out[2..]).unwrap(), input);
            // Cut short: an error (or, a header cut, the general decoder's error), never
            // a short batch.
            if out.len() > 12 {
                let mut short = Vec::new();
                assert!(!matches!(
                    lz4_blocks(&out[2..out.len() - 5], &mut short),
                    Ok(true)
                ));
                assert!(decompress(Compression::Lz4, &out[2..out.len() - 5]).is_err());
            }
        }
        // A frame of another shape (content checksum on): the general decoder reads it.
        let mut theirs = lz4_flex::frame::FrameEncoder::with_frame_info(
            lz4_flex::frame::FrameInfo::new().content_checksum(true),
            Vec::new(),
        );
        theirs.write_all(&text).unwrap();
        let theirs = theirs.finish().unwrap();
        assert!(!lz4_blocks(&theirs, &mut Vec::new()).unwrap());
        assert_eq!(decompress(Compression::Lz4, &theirs).unwrap(), text);
    }
}
