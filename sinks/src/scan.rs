//! A fast reader of the fields a sink uses from a Debezium JSON envelope: one pass over
//! the record's bytes that validates what it skips and builds nothing for it.
//!
//! Why: a sink reads every record of the log, and most of a record is what it does not
//! use (`before`, most of `source`, the timestamps). serde's typed parse of the same
//! fields spent more time than the rest of a Redis sink together (key names parsed and
//! checked one by one, every string validated on its own, visitors per field); this
//! scanner validates the whole record's UTF-8 once and walks the JSON grammar byte by
//! byte.
//!
//! Contract: [`envelope`] returns `Some` only for a record that serde's reading
//! ([`crate::change`]'s `Lean`) would read too, with the same values; anything else —
//! invalid JSON, a field of an unexpected type, a duplicate field, an escaped key or an
//! escaped string among the fields returned, a transaction-topic record, a nesting
//! deeper than serde allows — is `None`, and the caller reads the record with serde,
//! which either reads it or says precisely what is wrong. The unit tests and a property
//! test check both readings against each other.

/// The parts of an envelope a sink uses (see `change::Lean`), borrowed from the record.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Envelope<'a> {
    pub op: Option<&'a str>,
    /// The text of `after` when it is not `null`.
    pub after: Option<&'a [u8]>,
    pub source: Option<Source<'a>>,
    pub transaction: Option<Tx<'a>>,
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Source<'a> {
    pub schema: Option<&'a str>,
    pub db: Option<&'a str>,
    pub table: Option<&'a str>,
    pub ts_ms: Option<i64>,
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Tx<'a> {
    pub id: Option<&'a str>,
    pub total_order: Option<u64>,
    pub data_collection_order: Option<u64>,
}

/// serde_json's nesting limit: deeper input is left to it (it refuses it).
const MAX_DEPTH: usize = 127;

/// Reads `bytes` as a Debezium envelope (with or without a `schema`/`payload` wrapper);
/// `None` when the record is not one this fast path reads (see the module doc).
pub fn envelope(bytes: &[u8]) -> Option<Envelope<'_>> {
    // Validated once here, so that every slice taken below is a `str`.
    let text = std::str::from_utf8(bytes).ok()?;
    let mut s = Scanner {
        text,
        b: text.as_bytes(),
        at: 0,
    };
    s.ws();
    let mut env = s.envelope(true)?;
    s.ws();
    if s.at != s.b.len() {
        return None;
    }
    if let Some(p) = env.1 {
        // Wrapped: the envelope is the payload (what is beside it is not used).
        env.0 = p;
    }
    Some(env.0)
}

/// A record key that is a flat JSON object of integers, strings without escapes,
/// booleans and nulls (what the connector writes for a primary key), as the map serde
/// would read; `None` for anything else (a float, an escape, a `schema`/`payload`
/// wrapper, nesting), which the caller reads with serde.
pub fn flat_key(bytes: &[u8]) -> Option<serde_json::Map<String, serde_json::Value>> {
    use serde_json::Value;
    let text = std::str::from_utf8(bytes).ok()?;
    let mut s = Scanner {
        text,
        b: text.as_bytes(),
        at: 0,
    };
    let mut map = serde_json::Map::new();
    s.object(|s, key| {
        s.ws();
        let v = match s.peek()? {
            b'"' => match s.string()? {
                (v, false) => Value::String(v.to_string()),
                (_, true) => return None,
            },
            b't' => s.literal(b"true").map(|()| Value::Bool(true))?,
            b'f' => s.literal(b"false").map(|()| Value::Bool(false))?,
            b'n' => s.literal(b"null").map(|()| Value::Null)?,
            _ => {
                let n = s.number()?;
                if let Ok(i) = n.parse::<i64>() {
                    Value::from(i)
                } else if let Ok(u) = n.parse::<u64>() {
                    Value::from(u)
                } else {
                    return None; // a float: serde's reading of it is left to serde
                }
            }
        };
        // A duplicate key: serde keeps the last, but leave that to it.
        map.insert(key.to_string(), v).is_none().then_some(())
    })?;
    s.ws();
    (s.at == s.b.len() && !(map.len() == 2 && map.contains_key("schema"))).then_some(map)
}

struct Scanner<'a> {
    text: &'a str,
    b: &'a [u8],
    at: usize,
}

/// The index of the first byte of `b` that ends a run of plain string characters: a
/// quote, a backslash or a control character (which JSON forbids unescaped). Eight bytes
/// at a time (the classic "has a zero byte" bit tricks), as strings are mostly short and a
/// call into a vectorized search costs more than it saves on them. (A 16-byte SSE2 loop
/// measured no faster on the bench's drain, 2026-12-07.)
fn string_stop(b: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut at = 0;
    while let Some(chunk) = b.get(at..at + 8) {
        let v = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        let quote = v ^ (ONES * b'"' as u64);
        let slash = v ^ (ONES * b'\\' as u64);
        // A byte below 0x20: v - 0x20 borrows into its high bit while v's is clear.
        let found = (quote.wrapping_sub(ONES) & !quote)
            | (slash.wrapping_sub(ONES) & !slash)
            | (v.wrapping_sub(ONES * 0x20) & !v);
        let found = found & HIGH;
        if found != 0 {
            // The lowest flagged byte is exact (a borrow only moves toward higher bytes).
            return Some(at + (found.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    b[at..]
        .iter()
        .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
        .map(|i| at + i)
}

/// Which field of an object a key names.
fn seen(mask: &mut u32, bit: u32) -> Option<()> {
    if *mask & bit != 0 {
        return None; // a duplicate field: serde refuses it
    }
    *mask |= bit;
    Some(())
}

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.at).copied()
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.at += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        self.ws();
        (self.peek()? == c).then(|| self.at += 1)
    }

    /// `text` starting here (a literal).
    fn literal(&mut self, text: &[u8]) -> Option<()> {
        let end = self.at + text.len();
        (self.b.get(self.at..end)? == text).then(|| self.at = end)
    }

    /// A `null` here (after white space)? Consumes it.
    fn null(&mut self) -> bool {
        self.ws();
        if self.b[self.at..].starts_with(b"null") {
            self.at += 4;
            true
        } else {
            false
        }
    }

    /// A string at the cursor (its opening quote); returns its contents and whether they
    /// hold an escape.
    fn string(&mut self) -> Option<(&'a str, bool)> {
        self.ws();
        if self.peek()? != b'"' {
            return None;
        }
        self.at += 1;
        let start = self.at;
        let mut escaped = false;
        loop {
            let rest = &self.b[self.at..];
            let n = string_stop(rest)?;
            if rest[n] < 0x20 {
                return None;
            }
            self.at += n;
            if rest[n] == b'"' {
                // Cut at ASCII quotes: char boundaries of the validated text.
                let s = &self.text[start..self.at];
                self.at += 1;
                return Some((s, escaped));
            }
            escaped = true;
            self.at += 1;
            match *self.b.get(self.at)? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.at += 1,
                b'u' => {
                    let hex = self.b.get(self.at + 1..self.at + 5)?;
                    if !hex.iter().all(u8::is_ascii_hexdigit) {
                        return None;
                    }
                    // Surrogates are left to serde, which checks their pairing.
                    if matches!(hex[0], b'd' | b'D') && hex[1] >= b'8' {
                        return None;
                    }
                    self.at += 5;
                }
                _ => return None,
            }
        }
    }

    /// A string without escapes, or `null`.
    fn plain_string_or_null(&mut self) -> Option<Option<&'a str>> {
        if self.null() {
            return Some(None);
        }
        match self.string()? {
            (s, false) => Some(Some(s)),
            (_, true) => None,
        }
    }

    /// A JSON number; returns its text.
    fn number(&mut self) -> Option<&'a str> {
        self.ws();
        let start = self.at;
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.peek()? {
            b'0' => self.at += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            if !self.peek()?.is_ascii_digit() {
                return None;
            }
            self.digits();
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.at += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.at += 1;
            }
            if !self.peek()?.is_ascii_digit() {
                return None;
            }
            self.digits();
        }
        Some(&self.text[start..self.at])
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.at += 1;
        }
    }

    /// An integer (no fraction, no exponent) that fits `T`, or `null`.
    fn int_or_null<T: std::str::FromStr>(&mut self) -> Option<Option<T>> {
        if self.null() {
            return Some(None);
        }
        let n = self.number()?;
        if n.bytes().any(|c| matches!(c, b'.' | b'e' | b'E')) {
            return None; // serde reads a float here, and refuses it for an integer field
        }
        n.parse().ok().map(Some)
    }

    /// Skips one JSON value, validating it; returns its text.
    fn value(&mut self, depth: usize) -> Option<&'a [u8]> {
        self.ws();
        let start = self.at;
        match self.peek()? {
            b'{' => {
                if depth >= MAX_DEPTH {
                    return None;
                }
                self.at += 1;
                self.ws();
                if self.peek()? == b'}' {
                    self.at += 1;
                } else {
                    loop {
                        self.string()?;
                        self.eat(b':')?;
                        self.value(depth + 1)?;
                        self.ws();
                        match self.peek()? {
                            b',' => self.at += 1,
                            b'}' => {
                                self.at += 1;
                                break;
                            }
                            _ => return None,
                        }
                    }
                }
            }
            b'[' => {
                if depth >= MAX_DEPTH {
                    return None;
                }
                self.at += 1;
                self.ws();
                if self.peek()? == b']' {
                    self.at += 1;
                } else {
                    loop {
                        self.value(depth + 1)?;
                        self.ws();
                        match self.peek()? {
                            b',' => self.at += 1,
                            b']' => {
                                self.at += 1;
                                break;
                            }
                            _ => return None,
                        }
                    }
                }
            }
            b'"' => {
                self.string()?;
            }
            b't' => self.literal(b"true")?,
            b'f' => self.literal(b"false")?,
            b'n' => self.literal(b"null")?,
            _ => {
                self.number()?;
            }
        }
        Some(&self.b[start..self.at])
    }

    /// The members of an object at the cursor, each given to `f` with its key (which
    /// must not hold an escape: a key serde would unescape is left to serde).
    fn object(&mut self, mut f: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        self.ws();
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(());
        }
        loop {
            let (key, escaped) = self.string()?;
            if escaped {
                return None;
            }
            self.eat(b':')?;
            f(self, key)?;
            self.ws();
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// An envelope object; with `outer`, a `payload` in it is read as the envelope
    /// (returned second).
    fn envelope(&mut self, outer: bool) -> Option<(Envelope<'a>, Option<Envelope<'a>>)> {
        let mut env = Envelope::default();
        let mut payload = None;
        let mut mask = 0u32;
        self.object(|s, key| {
            match key {
                "op" => {
                    seen(&mut mask, 1)?;
                    env.op = s.plain_string_or_null()?;
                }
                "after" => {
                    seen(&mut mask, 2)?;
                    if !s.null() {
                        env.after = Some(s.value(2)?);
                    }
                }
                "source" => {
                    seen(&mut mask, 4)?;
                    if !s.null() {
                        env.source = Some(s.source()?);
                    }
                }
                "transaction" => {
                    seen(&mut mask, 8)?;
                    if !s.null() {
                        env.transaction = Some(s.transaction()?);
                    }
                }
                "payload" => {
                    seen(&mut mask, 16)?;
                    if !s.null() {
                        if !outer {
                            return None; // a payload in a payload: left to serde
                        }
                        payload = Some(s.envelope(false)?.0);
                    }
                }
                // A record of the transaction topic: left to serde.
                "status" | "id" | "event_count" | "data_collections" => return None,
                _ => {
                    s.value(1)?;
                }
            }
            Some(())
        })?;
        Some((env, payload))
    }

    fn source(&mut self) -> Option<Source<'a>> {
        let mut src = Source::default();
        let mut mask = 0u32;
        self.object(|s, key| {
            match key {
                "schema" => {
                    seen(&mut mask, 1)?;
                    src.schema = s.plain_string_or_null()?;
                }
                "db" => {
                    seen(&mut mask, 2)?;
                    src.db = s.plain_string_or_null()?;
                }
                "table" => {
                    seen(&mut mask, 4)?;
                    src.table = s.plain_string_or_null()?;
                }
                "ts_ms" => {
                    seen(&mut mask, 8)?;
                    src.ts_ms = s.int_or_null()?;
                }
                _ => {
                    s.value(2)?;
                }
            }
            Some(())
        })?;
        Some(src)
    }

    fn transaction(&mut self) -> Option<Tx<'a>> {
        let mut tx = Tx::default();
        let mut mask = 0u32;
        self.object(|s, key| {
            match key {
                "id" => {
                    seen(&mut mask, 1)?;
                    tx.id = s.plain_string_or_null()?;
                }
                "total_order" => {
                    seen(&mut mask, 2)?;
                    tx.total_order = s.int_or_null()?;
                }
                "data_collection_order" => {
                    seen(&mut mask, 4)?;
                    tx.data_collection_order = s.int_or_null()?;
                }
                _ => {
                    s.value(2)?;
                }
            }
            Some(())
        })?;
        Some(tx)
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn string_stop_finds_the_first_quote_backslash_or_control_byte() {
        let naive = |b: &[u8]| b.iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20);
        // Every length up to 40 (the 8- and 1-byte steps and their ends), with the
        // stop byte at each place, and none.
        for len in 0..40 {
            for stop in [b'"', b'\\', 0x00, 0x1f, 0x0a] {
                for at in 0..=len {
                    let mut b: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
                    // Bytes near the edges of the tested ranges that are not stops.
                    if len > 3 {
                        b[len / 2] = 0x20;
                        b[len / 3] = 0xff;
                        b[len / 4] = b'!';
                    }
                    if at < len {
                        b[at] = stop;
                    }
                    assert_eq!(string_stop(&b), naive(&b), "{b:?}");
                }
            }
        }
    }

    use super::*;

    const RECORD: &str = r#"{"before":null,"after":{"id":1,"customer_id":2,"status":"paid","amount":"AQ==","payload":"c4ca","updated_at":"2024-01-01T00:00:01.000000Z"},"source":{"version":"cdc-0.1.0","connector":"postgresql","name":"bench","ts_ms":1796612120576,"snapshot":"false","db":"bench","sequence":"[\"26777480\",\"26518144\"]","ts_us":1796612120576000,"schema":"public","table":"orders","txId":728,"lsn":26518144,"xmin":null},"transaction":{"id":"728:26777480","total_order":1,"data_collection_order":1},"op":"c","ts_ms":1796612145897}"#;

    #[test]
    fn reads_a_record_of_the_connector() {
        let e = envelope(RECORD.as_bytes()).unwrap();
        assert_eq!(e.op, Some("c"));
        assert_eq!(
            e.after,
            Some(&br#"{"id":1,"customer_id":2,"status":"paid","amount":"AQ==","payload":"c4ca","updated_at":"2024-01-01T00:00:01.000000Z"}"#[..])
        );
        assert_eq!(
            e.source,
            Some(Source {
                schema: Some("public"),
                db: Some("bench"),
                table: Some("orders"),
                ts_ms: Some(1796612120576),
            })
        );
        assert_eq!(
            e.transaction,
            Some(Tx {
                id: Some("728:26777480"),
                total_order: Some(1),
                data_collection_order: Some(1),
            })
        );
    }

    #[test]
    fn reads_the_payload_of_a_wrapped_record() {
        let wrapped = format!(
            r#" {{ "schema" : {{"type":"struct","fields":[{{"a":[1,2.5e3,-0.1,true,false,null]}}]}}, "payload" : {RECORD} }} "#
        );
        assert_eq!(envelope(wrapped.as_bytes()), envelope(RECORD.as_bytes()));
    }

    #[test]
    fn leaves_to_serde_what_it_does_not_read() {
        for bad in [
            // Not JSON, or not all of it.
            r#"{"op":"c""#,
            r#"{"op":"c"} x"#,
            r#"{"op":"c",}"#,
            r#"{"a":01}"#,
            r#"{"a":1.}"#,
            r#"{"a":"\x"}"#,
            "{\"a\":\"\u{1}\"}",
            r#"{"a":tru}"#,
            // Types serde refuses, duplicates.
            r#"{"op":1}"#,
            r#"{"op":"c","op":"u"}"#,
            r#"{"source":{"ts_ms":1.5}}"#,
            r#"{"source":{"ts_ms":"1"}}"#,
            r#"{"transaction":{"total_order":-1}}"#,
            r#"{"source":[]}"#,
            // Escapes where a value is returned or a key is matched.
            r#"{"op":"\u0063"}"#,
            r#"{"\u006fp":"c"}"#,
            r#"{"source":{"table":"a\"b"}}"#,
            // Surrogates, transaction-topic records, a payload in a payload.
            r#"{"after":{"a":"\ud800"}}"#,
            r#"{"status":"END","id":"1","event_count":2}"#,
            r#"{"payload":{"payload":{"op":"c"}}}"#,
        ] {
            assert_eq!(envelope(bad.as_bytes()), None, "{bad}");
        }
        // Invalid UTF-8.
        assert_eq!(envelope(b"{\"a\":\"\xff\"}"), None);
        // Deeper than serde goes.
        let deep = format!("{{\"after\":{}{}}}", "[".repeat(200), "]".repeat(200));
        assert_eq!(envelope(deep.as_bytes()), None);
    }

    #[test]
    fn reads_flat_keys_as_serde_does() {
        for key in [
            r#"{"id":1}"#,
            r#"{"id":-9223372036854775808,"region":"eu","ok":true,"n":null}"#,
            r#"{ "id" : 18446744073709551615 }"#,
            r#"{}"#,
        ] {
            let serde: serde_json::Map<String, serde_json::Value> =
                serde_json::from_str(key).unwrap();
            assert_eq!(flat_key(key.as_bytes()), Some(serde), "{key}");
        }
        for other in [
            r#"{"id":1.5}"#,
            r#"{"id":"a\"b"}"#,
            r#"{"id":[1]}"#,
            r#"{"id":1,"id":2}"#,
            r#"{"schema":{},"payload":{"id":1}}"#,
            r#"{"id":1} x"#,
            r#"{"id":1e3}"#,
            r#"[1]"#,
        ] {
            assert_eq!(flat_key(other.as_bytes()), None, "{other}");
        }
    }

    #[test]
    fn reads_escapes_it_skips_and_nulls() {
        let e = envelope(
            br#"{"before":{"a":"x\"\\\/\b\f\n\r\t\u00e9y"},"after":null,"source":null,"transaction":null,"op":null,"payload":null}"#,
        )
        .unwrap();
        assert_eq!(e, Envelope::default());
        let e = envelope(r#"{"op":"d","after":{"é":"ü"}}"#.as_bytes()).unwrap();
        assert_eq!(e.after, Some(r#"{"é":"ü"}"#.as_bytes()));
    }
}
