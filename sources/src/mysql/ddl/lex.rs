//! Tokens: the tokenizer of DDL text.
//!
//! Invariants: versioned comments (`/*!NNNNN code */`, `/*M!NNNNN code */`) are code
//! the server runs, so their content is tokenized and their markers dropped; ordinary
//! comments are skipped. Quoted tokens carry their text unescaped.

#[derive(Clone, Debug, PartialEq)]
pub(super) enum K {
    /// Unquoted word (keyword or identifier).
    Word,
    /// `backquoted` identifier.
    Quoted,
    /// '…' or "…" string, unescaped.
    Str,
    Num,
    /// x'…' / 0x… (text: the hex digits).
    Hex,
    /// b'…' / 0b… (text: the bits).
    Bits,
    Sym,
}

#[derive(Clone, Debug)]
pub(super) struct Tok {
    pub(super) k: K,
    pub(super) text: String,
}

pub(super) fn lex(sql: &str) -> Result<Vec<Tok>, String> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let mut exec_comments = 0usize;
    let tok = |k: K, text: String| Tok { k, text };
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            // `/*!NNNNN code */` and `/*M!NNNNN code */`: code the server runs.
            let mut j = i + 2;
            if b.get(j) == Some(&b'M') && b.get(j + 1) == Some(&b'!') {
                j += 1;
            }
            if b.get(j) == Some(&b'!') {
                j += 1;
                let digits = b[j..]
                    .iter()
                    .take(6)
                    .take_while(|d| d.is_ascii_digit())
                    .count();
                i = j + digits;
                exec_comments += 1;
            } else {
                match sql[i + 2..].find("*/") {
                    Some(e) => i = i + 2 + e + 2,
                    None => return Err("unterminated comment".into()),
                }
            }
        } else if c == b'*' && b.get(i + 1) == Some(&b'/') && exec_comments > 0 {
            exec_comments -= 1;
            i += 2;
        } else if c == b'#'
            || (c == b'-'
                && b.get(i + 1) == Some(&b'-')
                && b.get(i + 2).is_none_or(|c| c.is_ascii_whitespace()))
        {
            i = sql[i..].find('\n').map(|e| i + e + 1).unwrap_or(b.len());
        } else if c == b'`' {
            let (s, n) = quoted(&sql[i..], '`')?;
            out.push(tok(K::Quoted, s));
            i += n;
        } else if c == b'\'' || c == b'"' {
            let (s, n) = quoted(&sql[i..], c as char)?;
            out.push(tok(K::Str, s));
            i += n;
        } else if (c == b'x' || c == b'X' || c == b'b' || c == b'B') && b.get(i + 1) == Some(&b'\'')
        {
            let (s, n) = quoted(&sql[i + 1..], '\'')?;
            let k = if c == b'x' || c == b'X' {
                K::Hex
            } else {
                K::Bits
            };
            out.push(tok(k, s));
            i += 1 + n;
        } else if c == b'0'
            && matches!(b.get(i + 1), Some(b'x') | Some(b'b'))
            && b.get(i + 2).is_some_and(|d| d.is_ascii_hexdigit())
        {
            let hex = b[i + 1] == b'x';
            let n = b[i + 2..]
                .iter()
                .take_while(|d| d.is_ascii_alphanumeric())
                .count();
            let s = sql[i + 2..i + 2 + n].to_string();
            out.push(tok(if hex { K::Hex } else { K::Bits }, s));
            i += 2 + n;
        } else if c.is_ascii_digit()
            || (c == b'.' && b.get(i + 1).is_some_and(|d| d.is_ascii_digit()))
        {
            let start = i;
            while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.') {
                i += 1;
            }
            if i < b.len()
                && (b[i] == b'e' || b[i] == b'E')
                && (b.get(i + 1).is_some_and(|d| d.is_ascii_digit())
                    || (matches!(b.get(i + 1), Some(b'+') | Some(b'-'))
                        && b.get(i + 2).is_some_and(|d| d.is_ascii_digit())))
            {
                i += 2;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
            }
            // An identifier may start with digits (`1abc`).
            if i < b.len() && is_word_byte(b[i]) {
                while i < b.len() && is_word_byte(b[i]) {
                    i += 1;
                }
                out.push(tok(K::Word, sql[start..i].to_string()));
            } else {
                out.push(tok(K::Num, sql[start..i].to_string()));
            }
        } else if is_word_byte(c) {
            let start = i;
            while i < b.len() && is_word_byte(b[i]) {
                i += 1;
            }
            out.push(tok(K::Word, sql[start..i].to_string()));
        } else {
            // Multi-byte operators do not matter to DDL; keep `<`, `=`, … one by one.
            let ch = sql[i..].chars().next().unwrap_or('?');
            out.push(tok(K::Sym, ch.to_string()));
            i += ch.len_utf8();
        }
    }
    Ok(out)
}

fn is_word_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80
}

/// A quoted token at the start of `s` (its quote `q`): the unescaped text and the bytes
/// consumed. Doubled quotes and (for strings) backslash escapes.
fn quoted(s: &str, q: char) -> Result<(String, usize), String> {
    let mut out = String::new();
    let mut it = s.char_indices().skip(1).peekable();
    while let Some((i, c)) = it.next() {
        if c == q {
            if it.peek().map(|&(_, n)| n) == Some(q) {
                out.push(q);
                it.next();
                continue;
            }
            return Ok((out, i + c.len_utf8()));
        }
        if c == '\\' && q != '`' {
            if let Some((_, n)) = it.next() {
                let c = match n {
                    'n' => '\n',
                    't' => '\t',
                    'r' => '\r',
                    '0' => '\0',
                    'b' => '\u{8}',
                    'Z' => '\u{1a}',
                    // `\%` and `\_` keep their backslash (LIKE patterns).
                    '%' | '_' => {
                        out.push('\\');
                        n
                    }
                    other => other,
                };
                out.push(c);
            }
            continue;
        }
        out.push(c);
    }
    Err(format!("unterminated {q}-quoted text"))
}
