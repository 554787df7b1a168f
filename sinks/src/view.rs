//! What a sink's view holds of a row: the columns it keeps and what it calls them
//! ([`ColumnMap`], from `include_columns`, `exclude_columns`, `rename_columns`), and the
//! name a row gets in the target ([`KeyTemplate`], [`key_text`]).
//!
//! Invariants: column selection applies to the after-image only (the key's columns always
//! name the row); a table no setting names keeps every column under its own name; a
//! key's text is the same for the same key values whatever the record format was.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::change::Change;

/// Column selection and renames, per table.
#[derive(Debug, Clone, Default)]
pub struct ColumnMap {
    /// (table pattern, columns kept)
    include: TableLists,
    exclude: TableLists,
    /// (table pattern, column) → new name
    rename: Vec<(String, String, String)>,
    resolved: HashMap<String, Arc<TableColumns>>,
}

#[derive(Debug, Default, PartialEq)]
struct TableColumns {
    include: Option<Vec<String>>,
    exclude: Vec<String>,
    rename: Vec<(String, String)>,
}

impl TableColumns {
    fn is_identity(&self) -> bool {
        self.include.is_none() && self.exclude.is_empty() && self.rename.is_empty()
    }
}

/// (table pattern, columns) per entry.
type TableLists = Vec<(String, Vec<String>)>;

fn parse_list(key: &'static str, v: &[String]) -> Result<TableLists, (&'static str, String)> {
    v.iter()
        .map(|e| {
            let (t, cols) = e.split_once(':').ok_or_else(|| {
                (
                    key,
                    format!(
                        "{e:?}: write \"schema.table:column1,column2\" (MySQL: \"db.table:…\")"
                    ),
                )
            })?;
            let cols: Vec<String> = cols
                .split(',')
                .map(|c| c.trim().to_string())
                .filter(|c| !c.is_empty())
                .collect();
            if t.is_empty() || cols.is_empty() {
                return Err((key, format!("{e:?}: names no table or no column")));
            }
            Ok((t.to_string(), cols))
        })
        .collect()
}

impl ColumnMap {
    /// From the sink's settings; an error names the setting and the bad entry.
    pub fn new(
        include: &[String],
        exclude: &[String],
        rename: &BTreeMap<String, String>,
    ) -> Result<ColumnMap, (&'static str, String)> {
        let include = parse_list("include_columns", include)?;
        let exclude = parse_list("exclude_columns", exclude)?;
        let rename = rename
            .iter()
            .map(|(from, to)| {
                let (t, c) = from
                    .rsplit_once('.')
                    .filter(|(t, c)| !t.is_empty() && !c.is_empty())
                    .ok_or_else(|| {
                        (
                            "rename_columns",
                            format!("{from:?}: write \"schema.table.column\" = \"new_name\""),
                        )
                    })?;
                if to.is_empty() {
                    return Err(("rename_columns", format!("{from:?}: the new name is empty")));
                }
                Ok((t.to_string(), c.to_string(), to.clone()))
            })
            .collect::<Result<_, _>>()?;
        Ok(ColumnMap {
            include,
            exclude,
            rename,
            resolved: HashMap::new(),
        })
    }

    fn for_table(&mut self, table: &str) -> Arc<TableColumns> {
        if let Some(t) = self.resolved.get(table) {
            return t.clone();
        }
        let m = |p: &str| cdc_schemas::filter::glob(p, table);
        let include = self
            .include
            .iter()
            .filter(|(p, _)| m(p))
            .flat_map(|(_, c)| c.iter().cloned())
            .collect::<Vec<_>>();
        let t = Arc::new(TableColumns {
            include: if self.include.iter().any(|(p, _)| m(p)) {
                Some(include)
            } else {
                None
            },
            exclude: self
                .exclude
                .iter()
                .filter(|(p, _)| m(p))
                .flat_map(|(_, c)| c.iter().cloned())
                .collect(),
            rename: self
                .rename
                .iter()
                .filter(|(p, _, _)| m(p))
                .map(|(_, c, to)| (c.clone(), to.clone()))
                .collect(),
        });
        self.resolved.insert(table.to_string(), t.clone());
        t
    }

    /// Applies the table's selection and renames to `change`'s after-image.
    pub fn apply(&mut self, change: &mut Change) {
        if !change.has_after()
            || (self.include.is_empty() && self.exclude.is_empty() && self.rename.is_empty())
        {
            return;
        }
        let t = self.for_table(&change.table_id());
        if t.is_identity() {
            return;
        }
        // Columns are selected or renamed: an after-image kept as text is parsed.
        change.parse_after();
        let Some(after) = change.after.as_mut() else {
            return;
        };
        if let Some(keep) = &t.include {
            after.retain(|k, _| keep.iter().any(|c| c == k));
        }
        after.retain(|k, _| !t.exclude.iter().any(|c| c == k));
        if !t.rename.is_empty() {
            let old = std::mem::take(after);
            for (k, v) in old {
                match t.rename.iter().find(|(from, _)| *from == k) {
                    Some((_, to)) => after.insert(to.clone(), v),
                    None => after.insert(k, v),
                };
            }
        }
    }
}

/// A value as text in a key: strings as they are, numbers and booleans as JSON writes
/// them, anything else as its JSON.
pub fn value_text(v: &Value, out: &mut String) {
    match v {
        Value::String(s) => out.push_str(s),
        Value::Number(n) => {
            let _ = write!(out, "{n}");
        }
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Null => out.push_str("null"),
        other => out.push_str(&other.to_string()),
    }
}

/// The row's key as text: its key columns' values in key order, joined by `:`. A
/// document id for targets that key by one string (search engines).
pub fn key_text(key: &Map<String, Value>, out: &mut String) {
    for (i, v) in key.values().enumerate() {
        if i > 0 {
            out.push(':');
        }
        value_text(v, out);
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Prefix,
    Schema,
    Table,
    Key,
    Column(String),
}

/// A name template such as `"{prefix}:{table}:{key}"`: `{prefix}`, `{schema}` (or
/// `{db}`: the Postgres schema / MySQL database), `{table}`, `{key}` (the key's values
/// joined by `:`) and `{<key column>}` are replaced, everything else is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyTemplate {
    parts: Vec<Part>,
    prefix: String,
}

impl KeyTemplate {
    /// Parses `template`; `{prefix}` becomes `prefix`.
    pub fn parse(template: &str, prefix: &str) -> Result<KeyTemplate, String> {
        let mut parts = Vec::new();
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                parts.push(Part::Text(rest[..open].to_string()));
            }
            let close = rest[open..]
                .find('}')
                .ok_or_else(|| format!("{template:?}: a '{{' without its '}}'"))?
                + open;
            let name = &rest[open + 1..close];
            parts.push(match name {
                "prefix" => Part::Prefix,
                "schema" | "db" => Part::Schema,
                "table" => Part::Table,
                "key" => Part::Key,
                "" => return Err(format!("{template:?}: an empty {{}}")),
                col => Part::Column(col.to_string()),
            });
            rest = &rest[close + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_string()));
        }
        if !parts
            .iter()
            .any(|p| matches!(p, Part::Key | Part::Column(_)))
        {
            return Err(format!(
                "{template:?} names no key: add {{key}} (or key columns such as {{id}}), or every row would get the same name"
            ));
        }
        Ok(KeyTemplate {
            parts,
            prefix: prefix.to_string(),
        })
    }

    /// Whether the name has the table in it (a truncate can then find the table's rows by
    /// pattern).
    pub fn names_table(&self) -> bool {
        self.parts.contains(&Part::Table)
    }

    /// The name of `change`'s row, written into `out` (cleared first). A `{column}` the
    /// key lacks renders as empty.
    pub fn render(&self, change: &Change, out: &mut String) {
        out.clear();
        self.render_append(change, out);
    }

    /// The name of `change`'s row, appended to `out`.
    pub fn render_append(&self, change: &Change, out: &mut String) {
        for p in &self.parts {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Prefix => out.push_str(&self.prefix),
                Part::Schema => out.push_str(&change.schema),
                Part::Table => out.push_str(&change.table),
                Part::Key => key_text(&change.key, out),
                Part::Column(c) => {
                    if let Some(v) = change.key.get(c) {
                        value_text(v, out);
                    }
                }
            }
        }
    }

    /// The name with the key parts (and everything after the first of them) replaced by
    /// `*`: a pattern matching every row of `change`'s table.
    pub fn table_pattern(&self, change: &Change) -> String {
        let mut out = String::new();
        for p in &self.parts {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Prefix => out.push_str(&self.prefix),
                Part::Schema => out.push_str(&change.schema),
                Part::Table => out.push_str(&change.table),
                Part::Key | Part::Column(_) => {
                    out.push('*');
                    break;
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::change::Op;
    use serde_json::json;

    fn change(after: Value) -> Change {
        Change {
            topic: "t".into(),
            partition: 0,
            offset: 0,
            timestamp_ms: 0,
            op: Op::Update,
            schema: "public".into(),
            table: "orders".into(),
            key: json!({"id": 7, "region": "eu"})
                .as_object()
                .unwrap()
                .clone(),
            after: after.as_object().cloned(),
            source_ts_ms: None,
            tx: None,
            after_json: None,
            truncate_copies: 0,
            tx_end: None,
        }
    }

    #[test]
    fn include_exclude_rename() {
        let mut renames = BTreeMap::new();
        renames.insert("public.orders.total".to_string(), "amount".to_string());
        let mut m = ColumnMap::new(
            &["public.orders:id,total,note".into()],
            &["public.*:note".into()],
            &renames,
        )
        .unwrap();
        let mut c = change(json!({"id": 7, "total": 3, "note": "n", "secret": "s"}));
        m.apply(&mut c);
        assert_eq!(
            Value::Object(c.after.unwrap()),
            json!({"id": 7, "amount": 3})
        );
        let mut other = change(json!({"id": 1, "x": 2}));
        other.table = "lines".into();
        let mut m2 = ColumnMap::new(&["public.orders:id".into()], &[], &BTreeMap::new()).unwrap();
        m2.apply(&mut other);
        assert_eq!(
            Value::Object(other.after.unwrap()),
            json!({"id": 1, "x": 2})
        );
        assert!(ColumnMap::new(&["orders".into()], &[], &BTreeMap::new()).is_err());
    }

    #[test]
    fn templates() {
        let c = change(json!({}));
        let t = KeyTemplate::parse("{prefix}:{table}:{key}", "app").unwrap();
        let mut s = String::new();
        t.render(&c, &mut s);
        assert_eq!(s, "app:orders:7:eu");
        assert_eq!(t.table_pattern(&c), "app:orders:*");
        let t = KeyTemplate::parse("{schema}/{table}/{region}-{id}", "").unwrap();
        t.render(&c, &mut s);
        assert_eq!(s, "public/orders/eu-7");
        assert!(KeyTemplate::parse("{prefix}:{table}", "p").is_err());
        assert!(KeyTemplate::parse("{key", "p").is_err());
    }
}
