//! Fuzz target: the segment/batch decoder must never panic, whatever the bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = cdc_log::fuzz_decode_segment(data);
});
