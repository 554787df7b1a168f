//! Character data of a binlog row event, from the column's character set into UTF-8.
//!
//! Row events carry a string column's bytes as stored, in the column's character set
//! (the text protocol instead converts to the session's `character_set_results`, which
//! the snapshot keeps at `utf8mb4`). The sets decoded here are the ones tables use in
//! practice: the UTF-8 family, MySQL's `latin1` (which is Windows-1252, with the five
//! bytes Windows leaves undefined mapped to the C1 controls of the same number), `ascii`
//! and the UCS/UTF-16/UTF-32 families. Anything else is [`Charset::Other`]: its bytes
//! become [`Value::raw`] with a lossy UTF-8 reading, never an error.
//!
//! Invariant: [`decode`] is total; it returns [`Value::Text`] exactly when the bytes are
//! valid in the character set.

use cdc_schemas::Value;

/// A column's character set, resolved once per column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Charset {
    /// `utf8mb4`, `utf8mb3`, `utf8`.
    Utf8,
    /// MySQL's `latin1` (Windows-1252).
    Latin1,
    Ascii,
    /// `binary`: the bytes are the value.
    Binary,
    /// `ucs2` (UCS-2, big-endian).
    Ucs2,
    /// `utf16` (big-endian).
    Utf16,
    Utf16Le,
    /// `utf32` (big-endian).
    Utf32,
    /// Any other character set: kept as lossy text in a [`Value::raw`].
    Other(String),
}

impl Charset {
    /// The character set named as `information_schema` names it (case-insensitive).
    /// `None` (a column without one) reads as UTF-8.
    pub fn from_name(name: Option<&str>) -> Charset {
        let Some(name) = name else {
            return Charset::Utf8;
        };
        match name.to_ascii_lowercase().as_str() {
            "utf8mb4" | "utf8mb3" | "utf8" => Charset::Utf8,
            "latin1" => Charset::Latin1,
            "ascii" => Charset::Ascii,
            "binary" => Charset::Binary,
            "ucs2" => Charset::Ucs2,
            "utf16" => Charset::Utf16,
            "utf16le" => Charset::Utf16Le,
            "utf32" => Charset::Utf32,
            other => Charset::Other(other.to_string()),
        }
    }
}

/// Windows-1252 bytes 0x80..=0x9F; MySQL maps the undefined 0x81, 0x8D, 0x8F, 0x90 and
/// 0x9D to U+0081, U+008D, U+008F, U+0090 and U+009D.
const CP1252_HIGH: [char; 32] = [
    '\u{20AC}', '\u{0081}', '\u{201A}', '\u{0192}', '\u{201E}', '\u{2026}', '\u{2020}', '\u{2021}',
    '\u{02C6}', '\u{2030}', '\u{0160}', '\u{2039}', '\u{0152}', '\u{008D}', '\u{017D}', '\u{008F}',
    '\u{0090}', '\u{2018}', '\u{2019}', '\u{201C}', '\u{201D}', '\u{2022}', '\u{2013}', '\u{2014}',
    '\u{02DC}', '\u{2122}', '\u{0161}', '\u{203A}', '\u{0153}', '\u{009D}', '\u{017E}', '\u{0178}',
];

fn latin1_char(b: u8) -> char {
    match b {
        0x80..=0x9F => CP1252_HIGH[(b - 0x80) as usize],
        _ => b as char,
    }
}

/// A string column's bytes as a value: [`Value::Text`], or [`Value::Bytes`] for the
/// `binary` set, or [`Value::raw`] (lossy text) when the bytes are not valid in `cs` or
/// `cs` is not one this module knows.
pub fn decode(cs: &Charset, bytes: &[u8]) -> Value {
    match cs {
        Charset::Utf8 => match std::str::from_utf8(bytes) {
            Ok(s) => Value::Text(s.to_owned()),
            Err(_) => lossy(bytes),
        },
        Charset::Latin1 => {
            if bytes.is_ascii() {
                // SAFETY-free fast path: ASCII is UTF-8.
                return Value::Text(String::from_utf8_lossy(bytes).into_owned());
            }
            let mut s = String::with_capacity(bytes.len() + bytes.len() / 2);
            s.extend(bytes.iter().map(|&b| latin1_char(b)));
            Value::Text(s)
        }
        Charset::Ascii => {
            if bytes.is_ascii() {
                Value::Text(String::from_utf8_lossy(bytes).into_owned())
            } else {
                lossy(bytes)
            }
        }
        Charset::Binary => Value::Bytes(bytes.to_vec()),
        Charset::Ucs2 | Charset::Utf16 | Charset::Utf16Le => {
            if bytes.len() % 2 != 0 {
                return lossy(bytes);
            }
            let le = *cs == Charset::Utf16Le;
            let units = bytes.chunks_exact(2).map(|p| {
                if le {
                    u16::from_le_bytes([p[0], p[1]])
                } else {
                    u16::from_be_bytes([p[0], p[1]])
                }
            });
            match char::decode_utf16(units).collect::<Result<String, _>>() {
                Ok(s) => Value::Text(s),
                Err(_) => lossy(bytes),
            }
        }
        Charset::Utf32 => {
            if bytes.len() % 4 != 0 {
                return lossy(bytes);
            }
            let chars = bytes
                .chunks_exact(4)
                .map(|p| char::from_u32(u32::from_be_bytes([p[0], p[1], p[2], p[3]])));
            match chars.collect::<Option<String>>() {
                Some(s) => Value::Text(s),
                None => lossy(bytes),
            }
        }
        Charset::Other(_) => lossy(bytes),
    }
}

/// [`decode`] of an owned buffer: UTF-8 and ASCII text reuse it.
pub fn decode_owned(cs: &Charset, bytes: Vec<u8>) -> Value {
    match cs {
        Charset::Utf8 => match String::from_utf8(bytes) {
            Ok(s) => Value::Text(s),
            Err(e) => lossy(e.as_bytes()),
        },
        Charset::Ascii | Charset::Latin1 if bytes.is_ascii() => match String::from_utf8(bytes) {
            Ok(s) => Value::Text(s),
            Err(e) => lossy(e.as_bytes()),
        },
        Charset::Binary => Value::Bytes(bytes),
        _ => decode(cs, &bytes),
    }
}

/// Bytes that are not valid text: the lossy reading, as the raw text and the typed form.
#[cold]
pub fn lossy(bytes: &[u8]) -> Value {
    let s = String::from_utf8_lossy(bytes).into_owned();
    Value::raw(s.clone(), Value::Text(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(v: Value) -> String {
        match v {
            Value::Text(s) => s,
            other => panic!("not text: {other:?}"),
        }
    }

    #[test]
    fn names() {
        assert_eq!(Charset::from_name(Some("UTF8MB4")), Charset::Utf8);
        assert_eq!(Charset::from_name(Some("utf8mb3")), Charset::Utf8);
        assert_eq!(Charset::from_name(None), Charset::Utf8);
        assert_eq!(Charset::from_name(Some("latin1")), Charset::Latin1);
        assert_eq!(
            Charset::from_name(Some("gbk")),
            Charset::Other("gbk".into())
        );
    }

    #[test]
    fn utf8_and_invalid_utf8() {
        assert_eq!(text(decode(&Charset::Utf8, "žluť😀".as_bytes())), "žluť😀");
        let v = decode(&Charset::Utf8, b"a\xffb");
        let Value::Raw(r) = v else { panic!() };
        assert_eq!(r.text, "a\u{FFFD}b");
        assert_eq!(
            decode_owned(&Charset::Utf8, "é".as_bytes().to_vec()),
            Value::Text("é".into())
        );
    }

    #[test]
    fn latin1_is_cp1252() {
        // é, €, the undefined 0x81, ÿ
        assert_eq!(
            text(decode(&Charset::Latin1, b"\xe9\x80\x81\xff")),
            "é€\u{81}ÿ"
        );
        assert_eq!(
            text(decode_owned(&Charset::Latin1, b"\x93q\x94".to_vec())),
            "\u{201C}q\u{201D}"
        );
        assert_eq!(text(decode(&Charset::Latin1, b"plain")), "plain");
    }

    #[test]
    fn ascii_binary_wide() {
        assert!(matches!(decode(&Charset::Ascii, b"\x80"), Value::Raw(_)));
        assert_eq!(
            decode(&Charset::Binary, b"\x00\xff"),
            Value::Bytes(vec![0, 255])
        );
        assert_eq!(text(decode(&Charset::Ucs2, b"\x00a\x01\x7e")), "až");
        assert_eq!(text(decode(&Charset::Utf16, b"\xd8\x3d\xde\x00")), "😀");
        assert_eq!(text(decode(&Charset::Utf16Le, b"a\x00")), "a");
        assert_eq!(text(decode(&Charset::Utf32, b"\x00\x01\xf6\x00")), "😀");
        assert!(matches!(
            decode(&Charset::Utf16, b"\xd8\x3d"),
            Value::Raw(_)
        ));
    }

    #[test]
    fn unknown_charset_is_raw_lossy() {
        let v = decode(&Charset::Other("sjis".into()), b"\x82\xa0ok");
        let Value::Raw(r) = v else { panic!() };
        assert!(r.text.ends_with("ok"));
        assert!(matches!(r.typed, Value::Text(_)));
    }
}
