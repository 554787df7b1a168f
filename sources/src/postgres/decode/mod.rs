//! Value decoding: [`text`] parses the text output format (pgoutput tuples, COPY text),
//! [`binary`] the binary send format, [`copy`] the framing of `COPY … TO STDOUT` data.

pub mod binary;
pub mod copy;
pub mod text;

pub use binary::{decode_binary, BinKind};
pub use text::{parse_str, parse_value, ValueError, ValueKind};
