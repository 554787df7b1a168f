//! Planning a table's chunks (see the parent module's "Chunks"): integer keys split
//! arithmetically, other keys by keyset pagination, and the SQL literals and comparisons
//! of the range predicates. Invariant: every row satisfies exactly one range.

use super::*;

pub(in crate::mysql) fn qualified(t: &MyTable) -> String {
    format!("{}.{}", my_ident(&t.database), my_ident(&t.name))
}

pub(in crate::mysql) fn is_integer(c: &MyColumn) -> bool {
    matches!(
        c.data_type.to_ascii_lowercase().as_str(),
        "tinyint" | "smallint" | "mediumint" | "int" | "integer" | "bigint"
    )
}

/// How a key column's value is written back into SQL as a range boundary; `None`: its
/// text form does not compare as the index orders (floating point, ENUM, SET, BIT, JSON,
/// spatial), so the table is read whole.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(in crate::mysql) enum Literal {
    /// Integers and decimals: the text as it is.
    Number,
    /// Binary strings: `X'…'` (compared byte-wise, as their index is).
    Hex,
    /// Character strings and temporal types: a quoted string, which the comparison
    /// converts to the column's character set and collation (or type).
    Quoted,
}

pub(in crate::mysql) fn literal_kind(c: &MyColumn) -> Option<Literal> {
    let dt = c.data_type.to_ascii_lowercase();
    Some(match dt.as_str() {
        "tinyint" | "smallint" | "mediumint" | "int" | "integer" | "bigint" | "decimal"
        | "numeric" => Literal::Number,
        "binary" | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob" => Literal::Hex,
        "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext"
            if c.charset.as_deref() == Some("binary") =>
        {
            Literal::Hex
        }
        "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" | "date"
        | "datetime" | "timestamp" | "time" | "year" => Literal::Quoted,
        _ => return None,
    })
}

/// The `WHERE` predicates that split `t` into ranges of about `chunk_rows` rows (see the
/// module documentation); one `None` for a table read whole.
pub(super) async fn plan_ranges(
    conn: &mut Conn,
    t: &MyTable,
    estimated_rows: u64,
    chunk_rows: u64,
    no_backslash: bool,
) -> Result<Vec<Option<String>>, SourceError> {
    let key: Vec<&MyColumn> = t
        .key
        .iter()
        .filter_map(|k| t.columns.iter().find(|c| &c.name == k))
        .collect();
    if key.is_empty() || key.len() != t.key.len() {
        return Ok(vec![None]);
    }
    let what = format!("planning the snapshot chunks of {}.{}", t.database, t.name);
    if key.len() == 1 && is_integer(key[0]) {
        if estimated_rows <= chunk_rows {
            return Ok(vec![None]);
        }
        let k = my_ident(&key[0].name);
        let (lo, hi): (Option<String>, Option<String>) = conn
            .query_first(format!("SELECT MIN({k}), MAX({k}) FROM {}", qualified(t)))
            .await
            .map_err(|e| my_err(&what, e))?
            .unwrap_or_default();
        let (Some(lo), Some(hi)) = (
            lo.and_then(|v| v.parse::<i128>().ok()),
            hi.and_then(|v| v.parse::<i128>().ok()),
        ) else {
            return Ok(vec![None]);
        };
        return Ok(integer_ranges(
            &k,
            lo,
            hi,
            estimated_rows.div_ceil(chunk_rows),
        ));
    }
    let kinds: Option<Vec<Literal>> = key.iter().map(|c| literal_kind(c)).collect();
    let Some(kinds) = kinds else {
        return Ok(vec![None]);
    };
    let names: Vec<String> = key.iter().map(|c| my_ident(&c.name)).collect();
    let order = names.join(", ");
    let mut ranges = Vec::new();
    let mut prev: Option<Vec<String>> = None;
    loop {
        let after = prev.as_ref().map(|b| compare(&names, b, ">"));
        let sql = format!(
            "SELECT {order} FROM {}{} ORDER BY {order} LIMIT 1 OFFSET {}",
            qualified(t),
            after
                .as_ref()
                .map(|a| format!(" WHERE {a}"))
                .unwrap_or_default(),
            chunk_rows - 1
        );
        let row: Option<mysql_async::Row> =
            conn.query_first(sql).await.map_err(|e| my_err(&what, e))?;
        let Some(row) = row else {
            ranges.push(after);
            break;
        };
        let bound: Vec<String> = kinds
            .iter()
            .enumerate()
            .map(|(i, kind)| literal(row.as_ref(i), *kind, no_backslash))
            .collect();
        let upto = compare(&names, &bound, "<=");
        ranges.push(Some(match after {
            Some(a) => format!("({a}) AND ({upto})"),
            None => upto,
        }));
        prev = Some(bound);
    }
    Ok(ranges)
}

/// `count` ranges of the integer key `k` between `lo` and `hi`, the first open below
/// and the last open above.
pub(super) fn integer_ranges(k: &str, lo: i128, hi: i128, count: u64) -> Vec<Option<String>> {
    let width = hi - lo + 1;
    let count = (count as i128).clamp(1, width.max(1));
    if count <= 1 {
        return vec![None];
    }
    let bounds: Vec<i128> = (1..count).map(|i| lo + width * i / count).collect();
    let mut out = Vec::with_capacity(count as usize);
    out.push(Some(format!("{k} < {}", bounds[0])));
    for w in bounds.windows(2) {
        out.push(Some(format!("{k} >= {} AND {k} < {}", w[0], w[1])));
    }
    out.push(Some(format!("{k} >= {}", bounds[bounds.len() - 1])));
    out
}

/// `(names) op (values)` in the lexicographic order of the key, spelt out so that the
/// range optimizer sees column comparisons: `a > x OR (a = x AND b > y)` for `>`, and the
/// same with `<` and a final `<=` for `<=`.
pub(in crate::mysql) fn compare(names: &[String], values: &[String], op: &str) -> String {
    let strict = if op == "<=" { "<" } else { op };
    let last = names.len() - 1;
    let mut s = format!("{} {op} {}", names[last], values[last]);
    for i in (0..last).rev() {
        s = format!(
            "{n} {strict} {v} OR ({n} = {v} AND ({s}))",
            n = names[i],
            v = values[i]
        );
    }
    s
}

/// A text-protocol value as an SQL literal of `kind`.
pub(in crate::mysql) fn literal(v: Option<&MyValue>, kind: Literal, no_backslash: bool) -> String {
    let bytes: &[u8] = match v {
        Some(MyValue::Bytes(b)) => b,
        Some(MyValue::NULL) | None => return "NULL".into(),
        Some(other) => return other.as_sql(no_backslash),
    };
    match kind {
        Literal::Number
            if bytes
                .iter()
                .all(|b| b.is_ascii_digit() || b"+-.eE".contains(b)) =>
        {
            String::from_utf8_lossy(bytes).into_owned()
        }
        Literal::Hex => {
            let mut s = String::with_capacity(3 + 2 * bytes.len());
            s.push_str("X'");
            for b in bytes {
                s.push_str(&format!("{b:02X}"));
            }
            s.push('\'');
            s
        }
        _ => MyValue::Bytes(bytes.to_vec()).as_sql(no_backslash),
    }
}

#[cfg(test)]
mod range_tests {
    use super::*;

    #[test]
    fn integer_ranges_cover_everything_once() {
        let r = integer_ranges("`id`", 1, 10, 3);
        assert_eq!(
            r,
            vec![
                Some("`id` < 4".to_string()),
                Some("`id` >= 4 AND `id` < 7".to_string()),
                Some("`id` >= 7".to_string()),
            ]
        );
        assert_eq!(integer_ranges("`id`", 5, 5, 4), vec![None]);
        assert_eq!(integer_ranges("`id`", 1, 100, 1), vec![None]);
        // More pieces than values: one per value.
        assert_eq!(integer_ranges("`id`", 1, 2, 9).len(), 2);
    }

    #[test]
    fn composite_comparisons_are_spelt_out() {
        let n = ["`a`".to_string(), "`b`".to_string()];
        let v = ["1".to_string(), "'x'".to_string()];
        assert_eq!(compare(&n, &v, ">"), "`a` > 1 OR (`a` = 1 AND (`b` > 'x'))");
        assert_eq!(
            compare(&n, &v, "<="),
            "`a` < 1 OR (`a` = 1 AND (`b` <= 'x'))"
        );
        assert_eq!(compare(&n[..1], &v[..1], ">"), "`a` > 1");
    }

    #[test]
    fn literals() {
        let b = |s: &[u8]| MyValue::Bytes(s.to_vec());
        assert_eq!(literal(Some(&b(b"-12")), Literal::Number, false), "-12");
        assert_eq!(
            literal(Some(&b(b"\x00\xff")), Literal::Hex, false),
            "X'00FF'"
        );
        assert_eq!(
            literal(Some(&b(b"o'k\\")), Literal::Quoted, false),
            "'o\\'k\\\\'"
        );
        assert_eq!(literal(Some(&b(b"o'k")), Literal::Quoted, true), "'o''k'");
        // Not a number after all: quoted, never pasted.
        assert_eq!(literal(Some(&b(b"1;x")), Literal::Number, true), "'1;x'");
    }
}
