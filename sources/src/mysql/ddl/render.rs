//! Types and defaults as the server prints them in `information_schema.COLUMNS`
//! (`DATA_TYPE`, `COLUMN_TYPE`, `CHARACTER_SET_NAME`, `COLUMN_DEFAULT`), per flavour.
//!
//! Invariants: the text is what the server prints after running the same statement
//! (MariaDB: `int(11)`, quoted literal defaults, `current_timestamp()`; MySQL 8: integer
//! display widths only with ZEROFILL and for `tinyint(1)`, unquoted literal defaults), so
//! that a followed schema equals a re-read one.

use super::column::TypeSpec;
use super::default::DefaultValue;
use super::lex::{Tok, K};
use crate::mysql::schema::{charset_of_collation, Flavor};
use crate::mysql::table::MyColumn;

/// A column type as the server prints it.
pub(super) struct TypeInfo {
    pub(super) data_type: String,
    /// The declared length / display width (`char(n)`, `int(n)`), as printed.
    pub(super) len: Option<u64>,
    pub(super) column_type: String,
    pub(super) charset: Option<String>,
    /// Fractional-second digits of temporal types, the scale of decimals.
    pub(super) scale: u64,
}

impl TypeInfo {
    pub(super) fn of(c: &MyColumn) -> TypeInfo {
        TypeInfo::new(
            c.data_type.clone(),
            c.column_type.clone(),
            c.charset.clone(),
        )
    }

    /// Length and scale read back from the printed type (`decimal(10,2)`, `time(3)`,
    /// `int(5) unsigned zerofill`).
    fn new(data_type: String, column_type: String, charset: Option<String>) -> TypeInfo {
        let nums: Vec<u64> = if matches!(data_type.as_str(), "enum" | "set") {
            Vec::new()
        } else {
            column_type
                .split_once('(')
                .and_then(|(_, r)| r.split_once(')'))
                .map(|(inner, _)| {
                    inner
                        .split(',')
                        .filter_map(|n| n.trim().parse().ok())
                        .collect()
                })
                .unwrap_or_default()
        };
        let scale = match data_type.as_str() {
            "decimal" | "float" | "double" => nums.get(1).copied().unwrap_or(0),
            "time" | "datetime" | "timestamp" => nums.first().copied().unwrap_or(0),
            _ => 0,
        };
        TypeInfo {
            len: nums.first().copied(),
            data_type,
            column_type,
            charset,
            scale,
        }
    }
}

/// The bytes per character of a character set (for TEXT sizing).
fn mbmaxlen(cs: &str) -> u64 {
    match cs {
        "utf8mb4" | "utf16" | "utf16le" | "utf32" | "gb18030" => 4,
        "utf8mb3" | "ujis" | "eucjpms" => 3,
        "ucs2" | "big5" | "sjis" | "euckr" | "gb2312" | "gbk" | "cp932" => 2,
        _ => 1,
    }
}

/// The smallest TEXT/BLOB type holding `bytes`.
fn blob_for(bytes: u64, text: bool) -> &'static str {
    match (bytes, text) {
        (0..=255, true) => "tinytext",
        (0..=255, false) => "tinyblob",
        (256..=65535, true) => "text",
        (256..=65535, false) => "blob",
        (65536..=16_777_215, true) => "mediumtext",
        (65536..=16_777_215, false) => "mediumblob",
        (_, true) => "longtext",
        (_, false) => "longblob",
    }
}

fn blob_max(t: &str) -> u64 {
    match t {
        "tinytext" | "tinyblob" => 255,
        "text" | "blob" => 65535,
        "mediumtext" | "mediumblob" => 16_777_215,
        _ => 4_294_967_295,
    }
}

fn is_textual(base: &str) -> bool {
    matches!(
        base,
        "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" | "enum" | "set"
    )
}

pub(super) fn resolve_type(s: &TypeSpec, flavor: Flavor, table_cs: Option<&str>) -> TypeInfo {
    let mut base = s.base.clone();
    let mut charset = None;
    if s.json && flavor.is_mariadb() {
        // MariaDB's JSON is LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin.
        base = "longtext".into();
        charset = Some("utf8mb4".to_string());
    } else if is_textual(&base) {
        let cs = s
            .charset
            .clone()
            .or_else(|| s.collate.as_deref().map(charset_of_collation))
            .or_else(|| table_cs.map(str::to_string))
            .unwrap_or_else(|| "utf8mb4".into());
        if cs == "binary" && base != "enum" && base != "set" {
            base = match base.as_str() {
                "char" => "binary".into(),
                "varchar" => "varbinary".into(),
                t => t.replace("text", "blob"),
            };
        } else {
            if base == "text" {
                if let Some(n) = s.len {
                    base = blob_for(n * mbmaxlen(&cs), true).into();
                }
            }
            charset = Some(cs);
        }
    } else if base == "blob" {
        if let Some(n) = s.len {
            base = blob_for(n, false).into();
        }
    }
    let mysql8 = flavor == Flavor::MySql8;
    let sign = |t: String| {
        let mut t = t;
        if s.unsigned {
            t.push_str(" unsigned");
        }
        if s.zerofill {
            t.push_str(" zerofill");
        }
        t
    };
    let column_type = match base.as_str() {
        "tinyint" | "smallint" | "mediumint" | "int" | "bigint" => {
            let (signed_w, unsigned_w) = match base.as_str() {
                "tinyint" => (4, 3),
                "smallint" => (6, 5),
                "mediumint" => (9, 8),
                "int" => (11, 10),
                _ => (20, 20),
            };
            let w = s
                .len
                .unwrap_or(if s.unsigned { unsigned_w } else { signed_w });
            let keep_width = !mysql8
                || s.zerofill
                || (base == "tinyint" && s.len == Some(1) && s.width_given && !s.unsigned);
            if keep_width {
                sign(format!("{base}({w})"))
            } else {
                sign(base.clone())
            }
        }
        "bit" => format!("bit({})", s.len.unwrap_or(1)),
        "decimal" => sign(format!(
            "decimal({},{})",
            s.len.unwrap_or(10),
            s.scale.unwrap_or(0)
        )),
        "float" | "double" => match (s.len, s.scale) {
            (Some(m), Some(d)) => sign(format!("{base}({m},{d})")),
            _ => sign(base.clone()),
        },
        "time" | "datetime" | "timestamp" => match s.len {
            Some(f) if f > 0 => format!("{base}({f})"),
            _ => base.clone(),
        },
        "year" if !mysql8 => "year(4)".into(),
        "char" | "binary" => format!("{base}({})", s.len.unwrap_or(1)),
        "varchar" | "varbinary" => format!("{base}({})", s.len.unwrap_or(0)),
        "enum" | "set" => {
            let vals: Vec<String> = s
                .values
                .iter()
                .map(|v| format!("'{}'", v.trim_end_matches(' ').replace('\'', "''")))
                .collect();
            format!("{base}({})", vals.join(","))
        }
        _ => base.clone(),
    };
    TypeInfo::new(base, column_type, charset)
}

/// CONVERT TO CHARACTER SET `cs` on one column: character columns take the charset; TEXT
/// types grow to hold as many characters in the new charset.
pub(super) fn convert_column(c: &mut MyColumn, cs: &str) {
    let Some(old) = c.charset.clone() else {
        return;
    };
    if old == "binary" || !is_textual(&c.data_type) {
        return;
    }
    if cs == "binary" {
        let base = match c.data_type.as_str() {
            "char" => "binary".to_string(),
            "varchar" => "varbinary".to_string(),
            "enum" | "set" => c.data_type.clone(),
            t => t.replace("text", "blob"),
        };
        if base != c.data_type {
            c.column_type = c.column_type.replacen(&c.data_type, &base, 1);
            c.data_type = base;
            c.charset = None;
            return;
        }
    }
    if c.data_type.ends_with("text") {
        let chars = blob_max(&c.data_type) / mbmaxlen(&old);
        let new = blob_for(chars * mbmaxlen(cs), true).to_string();
        if blob_max(&new) > blob_max(&c.data_type) {
            c.column_type = new.clone();
            c.data_type = new;
        }
    }
    c.charset = Some(cs.to_string());
}

/// The default of a column declared without DEFAULT.
pub(super) fn implicit_default(flavor: Flavor, nullable: bool) -> Option<String> {
    // MariaDB (10.2.7+) reports a nullable column's implicit default as the text `NULL`;
    // MySQL as SQL NULL.
    (flavor.is_mariadb() && nullable).then(|| "NULL".to_string())
}

/// After `ALTER COLUMN … DROP DEFAULT`.
pub(super) fn drop_default(flavor: Flavor, nullable: bool) -> Option<String> {
    implicit_default(flavor, nullable)
}

/// A default as `information_schema.COLUMNS.COLUMN_DEFAULT` prints it.
pub(super) fn default_text(
    flavor: Flavor,
    ty: &TypeInfo,
    d: DefaultValue,
    nullable: bool,
) -> Option<String> {
    let maria = flavor.is_mariadb();
    let dt = ty.data_type.as_str();
    // BINARY(n) pads its default with NUL bytes to n.
    let pad = |s: &str| -> String {
        let mut s = s.to_string();
        if dt == "binary" {
            if let Some(n) = ty.len {
                while (s.len() as u64) < n {
                    s.push('\0');
                }
            }
        }
        s
    };
    let quote = |s: &str| {
        let s = pad(s);
        if maria {
            format!("'{}'", escape_literal(&s))
        } else {
            s
        }
    };
    let numeric = matches!(
        dt,
        "tinyint"
            | "smallint"
            | "mediumint"
            | "int"
            | "bigint"
            | "decimal"
            | "float"
            | "double"
            | "year"
    );
    match d {
        DefaultValue::Null => {
            implicit_default(flavor, nullable).or_else(|| maria.then(|| "NULL".into()))
        }
        DefaultValue::Now(prec) => Some(match (maria, prec) {
            (true, Some(n)) => format!("current_timestamp({n})"),
            (true, None) => "current_timestamp()".into(),
            (false, Some(n)) => format!("CURRENT_TIMESTAMP({n})"),
            (false, None) => "CURRENT_TIMESTAMP".into(),
        }),
        DefaultValue::Num(n) if numeric => Some(zerofill(ty, format_number(dt, &n, ty.scale))),
        DefaultValue::Str(s) if numeric => {
            Some(zerofill(ty, format_number(dt, s.trim(), ty.scale)))
        }
        DefaultValue::Num(n) if dt == "bit" => Some(bits_text(n.parse::<u64>().unwrap_or(0))),
        DefaultValue::Bits(b) if dt == "bit" => {
            Some(bits_text(u64::from_str_radix(&b, 2).unwrap_or(0)))
        }
        DefaultValue::Hex(h) if dt == "bit" => {
            Some(bits_text(u64::from_str_radix(&h, 16).unwrap_or(0)))
        }
        DefaultValue::Str(s) | DefaultValue::Num(s)
            if matches!(dt, "date" | "datetime" | "timestamp" | "time") =>
        {
            Some(quote(&format_temporal(dt, &s, ty.scale)))
        }
        DefaultValue::Str(s) => Some(quote(&s)),
        DefaultValue::Num(n) => Some(quote(&n)),
        DefaultValue::Hex(h) => {
            let bytes: Vec<u8> = h
                .as_bytes()
                .chunks(2)
                .filter_map(|c| u8::from_str_radix(std::str::from_utf8(c).ok()?, 16).ok())
                .collect();
            Some(quote(&String::from_utf8_lossy(&bytes)))
        }
        DefaultValue::Bits(b) => Some(quote(&b)),
        DefaultValue::Expr(toks) => {
            let e = print_expr(&toks);
            // MariaDB prints an operator expression in parentheses, a call bare.
            let operator = toks.iter().any(|t| {
                t.k == K::Sym
                    && matches!(
                        t.text.as_str(),
                        "+" | "-" | "*" | "/" | "%" | "=" | "<" | ">" | "|" | "&"
                    )
            });
            Some(
                if maria && operator && !(e.starts_with('(') && e.ends_with(')')) {
                    format!("({e})")
                } else {
                    e
                },
            )
        }
    }
}

/// A ZEROFILL column's default is printed padded to the display width.
fn zerofill(ty: &TypeInfo, n: String) -> String {
    match ty.len {
        Some(w) if ty.column_type.ends_with(" zerofill") && (n.len() as u64) < w => {
            format!("{n:0>width$}", width = w as usize)
        }
        _ => n,
    }
}

/// A string literal's text as MariaDB prints it between single quotes.
fn escape_literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            '\0' => out.push_str("\\0"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\u{1a}' => out.push_str("\\Z"),
            c => out.push(c),
        }
    }
    out
}

fn bits_text(v: u64) -> String {
    format!("b'{v:b}'")
}

/// A numeric default in the column's type: integers rounded, decimals to their scale,
/// floats shortest.
fn format_number(dt: &str, s: &str, scale: u64) -> String {
    let v: f64 = s.parse().unwrap_or_else(|_| {
        // Leading numeric prefix, as the server's conversion takes.
        let n: String = s
            .chars()
            .enumerate()
            .take_while(|&(i, c)| {
                c.is_ascii_digit() || c == '.' || (i == 0 && (c == '-' || c == '+'))
            })
            .map(|(_, c)| c)
            .collect();
        n.parse().unwrap_or(0.0)
    });
    match dt {
        "decimal" => format!("{:.*}", scale as usize, v),
        "float" | "double" => {
            if scale > 0 {
                format!("{:.*}", scale as usize, v)
            } else if dt == "float" {
                format!("{}", v as f32)
            } else {
                format!("{v}")
            }
        }
        _ => {
            // Integers: exact when the text is an integer, else rounded half away.
            if let Ok(i) = s.parse::<i128>() {
                i.to_string()
            } else {
                format!("{}", v.round() as i128)
            }
        }
    }
}

/// A temporal default normalised: dates `YYYY-MM-DD`, times and datetimes with seconds and
/// the column's fractional digits.
fn format_temporal(dt: &str, s: &str, fsp: u64) -> String {
    let s = s.trim();
    let (main, frac) = match s.split_once('.') {
        Some((m, f)) => (m, f),
        None => (s, ""),
    };
    let frac_text = |f: &str| -> String {
        if fsp == 0 {
            return String::new();
        }
        let mut f: String = f.chars().take(fsp as usize).collect();
        while f.len() < fsp as usize {
            f.push('0');
        }
        format!(".{f}")
    };
    let hms = |t: &str| -> String {
        let mut parts: Vec<String> = t.split(':').map(|x| format!("{:0>2}", x)).collect();
        while parts.len() < 3 {
            parts.push("00".into());
        }
        parts.join(":")
    };
    match dt {
        "date" => main.split([' ', 'T']).next().unwrap_or(main).to_string(),
        "time" => format!("{}{}", hms(main), frac_text(frac)),
        _ => {
            let (d, t) = main.split_once([' ', 'T']).unwrap_or((main, "00:00:00"));
            format!("{d} {}{}", hms(t), frac_text(frac))
        }
    }
}

/// An expression default as the server prints it (MariaDB: lower-case function names,
/// backquoted identifiers, spaced binary operators).
fn print_expr(toks: &[Tok]) -> String {
    let mut out = String::new();
    for (i, t) in toks.iter().enumerate() {
        let next_paren = toks
            .get(i + 1)
            .is_some_and(|n| n.k == K::Sym && n.text == "(");
        match t.k {
            K::Word if next_paren => {
                // The server prints some functions under their canonical names.
                let f = t.text.to_ascii_lowercase();
                out.push_str(match f.as_str() {
                    "length" => "octet_length",
                    "character_length" => "char_length",
                    other => other,
                })
            }
            K::Word | K::Quoted => {
                if t.k == K::Word
                    && matches!(
                        t.text.to_ascii_uppercase().as_str(),
                        "AND" | "OR" | "NOT" | "IS" | "NULL" | "LIKE" | "IN" | "DIV" | "MOD"
                    )
                {
                    if !out.is_empty() && !out.ends_with(['(', ' ']) {
                        out.push(' ');
                    }
                    out.push_str(&t.text.to_ascii_lowercase());
                    out.push(' ');
                } else {
                    out.push_str(&format!("`{}`", t.text));
                }
            }
            K::Str => out.push_str(&format!(
                "'{}'",
                t.text.replace('\\', "\\\\").replace('\'', "\\'")
            )),
            K::Num => out.push_str(&t.text),
            K::Hex => out.push_str(&format!("0x{}", t.text)),
            K::Bits => out.push_str(&format!("b'{}'", t.text)),
            K::Sym => match t.text.as_str() {
                "+" | "-" | "*" | "/" | "%" | "=" | "<" | ">" | "|" | "&" => {
                    if out.ends_with(' ') {
                        out.push_str(&t.text);
                        out.push(' ');
                    } else {
                        out.push(' ');
                        out.push_str(&t.text);
                        out.push(' ');
                    }
                }
                other => {
                    if other == ")" && out.ends_with(' ') {
                        out.pop();
                    }
                    out.push_str(other);
                }
            },
        }
    }
    out.trim().to_string()
}
