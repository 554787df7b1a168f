//! `source.message_key_columns`: record keys chosen by configuration (Debezium's
//! `message.key.columns`), for tables without a primary key or to key a table by other
//! columns than its primary key.
//!
//! Each entry is `<table pattern>:<column>[,<column>…]`; the pattern is `schema.table`
//! (MySQL: `database.table`) with `*` and `?` wildcards, as in `source.tables`. Debezium's
//! form, several entries in one string separated by `;`, is accepted too. The first entry
//! whose pattern matches a table gives its key columns, in the order written.
//!
//! Source-agnostic: the rules are applied to a [`TableSchema`] as the pipeline receives
//! it ([`MessageKeyColumns::apply`]), so every source gets them, and `cdc check` asks
//! [`MessageKeyColumns::for_table`] whether a keyless table will be keyed.
//!
//! Invariants after [`MessageKeyColumns::parse`]: every entry has a pattern of the form
//! `schema.table` and at least one column, no column twice.

use std::sync::Arc;

use cdc_schemas::{TableId, TableSchema};

use crate::config::KeyError;
use crate::filter::glob;

/// The configuration key, for messages.
pub const KEY: &str = "source.message_key_columns";

/// One entry: a table pattern and its key columns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyColumnsRule {
    pub pattern: String,
    pub columns: Vec<String>,
}

impl KeyColumnsRule {
    /// The entry as written in the configuration.
    pub fn entry(&self) -> String {
        format!("{}:{}", self.pattern, self.columns.join(","))
    }
}

/// The parsed `source.message_key_columns`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MessageKeyColumns {
    rules: Vec<KeyColumnsRule>,
}

/// A configured key column the table does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("table {table} has no column {column:?}, which {KEY} names as a key column (entry {entry:?}): fix the entry (column names are case-sensitive), or leave the table out of it")]
pub struct UnknownKeyColumn {
    pub table: String,
    pub column: String,
    pub entry: String,
}

impl MessageKeyColumns {
    /// Parses the configured entries; an error names `source.message_key_columns[i]`.
    pub fn parse(entries: &[String]) -> Result<Self, KeyError> {
        let mut rules = Vec::new();
        for (i, entry) in entries.iter().enumerate() {
            let err = |why: String| {
                (
                    format!("{KEY}[{i}]"),
                    format!("{entry:?}: {why}; write \"schema.table:column1,column2\" (MySQL: database.table; * and ? are wildcards), several tables in separate entries"),
                )
            };
            for part in entry.split(';').map(str::trim).filter(|p| !p.is_empty()) {
                let Some((pattern, cols)) = part.split_once(':') else {
                    return Err(err(format!("{part:?} has no ':' before the column list")));
                };
                let pattern = pattern.trim();
                if pattern.matches('.').count() != 1
                    || pattern.starts_with('.')
                    || pattern.ends_with('.')
                {
                    return Err(err(format!("{pattern:?} is not a table pattern")));
                }
                let mut columns: Vec<String> = Vec::new();
                for c in cols.split(',').map(str::trim) {
                    if c.is_empty() {
                        return Err(err(format!("an empty column name in {cols:?}")));
                    }
                    if columns.iter().any(|p| p == c) {
                        return Err(err(format!("column {c:?} is listed twice")));
                    }
                    columns.push(c.to_string());
                }
                rules.push(KeyColumnsRule {
                    pattern: pattern.to_string(),
                    columns,
                });
            }
        }
        Ok(MessageKeyColumns { rules })
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    pub fn rules(&self) -> &[KeyColumnsRule] {
        &self.rules
    }

    /// The entry that keys `table`, if any.
    pub fn for_table(&self, table: &TableId) -> Option<&KeyColumnsRule> {
        let name = table.to_string();
        self.rules.iter().find(|r| glob(&r.pattern, &name))
    }

    /// `table` keyed by its configured columns: `Ok(None)` when no entry matches it or
    /// its key is already those columns.
    pub fn apply(&self, table: &TableSchema) -> Result<Option<TableSchema>, UnknownKeyColumn> {
        let Some(rule) = self.for_table(&table.id) else {
            return Ok(None);
        };
        let mut key = Vec::with_capacity(rule.columns.len());
        for c in &rule.columns {
            match table.column_index(c) {
                Some(i) => key.push(i),
                None => {
                    return Err(UnknownKeyColumn {
                        table: table.id.to_string(),
                        column: c.clone(),
                        entry: rule.entry(),
                    })
                }
            }
        }
        if key == table.key {
            return Ok(None);
        }
        let mut t = table.clone();
        t.key = key;
        Ok(Some(t))
    }
}

/// Applies [`MessageKeyColumns`] to a stream of table schemas, remembering the result
/// per schema version so that each version is re-keyed once.
#[derive(Debug, Default)]
pub struct Rekeyer {
    rules: MessageKeyColumns,
    /// Per table: the source's schema and what it became.
    cache: std::collections::HashMap<TableId, (Arc<TableSchema>, Arc<TableSchema>)>,
}

impl Rekeyer {
    pub fn new(rules: MessageKeyColumns) -> Self {
        Rekeyer {
            rules,
            cache: Default::default(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The schema to encode `table`'s records with: `table` itself, or a copy keyed by
    /// the configured columns (the same `Arc` for every event of one schema version).
    pub fn rekey(
        &mut self,
        table: &Arc<TableSchema>,
    ) -> Result<Arc<TableSchema>, UnknownKeyColumn> {
        if let Some((src, out)) = self.cache.get(&table.id) {
            if Arc::ptr_eq(src, table) || **src == **table {
                return Ok(out.clone());
            }
        }
        let out = match self.rules.apply(table)? {
            Some(t) => Arc::new(t),
            None => table.clone(),
        };
        self.cache
            .insert(table.id.clone(), (table.clone(), out.clone()));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cdc_schemas::{Column, ColumnType};

    fn parse(e: &[&str]) -> Result<MessageKeyColumns, KeyError> {
        MessageKeyColumns::parse(&e.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    fn events() -> TableSchema {
        TableSchema::new(
            TableId::new("public", "events"),
            vec![
                Column::new("id", ColumnType::Int64, "int8"),
                Column::new("kind", ColumnType::Text { max_len: None }, "text"),
                Column::new("v", ColumnType::Int32, "int4"),
            ],
            &[],
        )
        .unwrap()
    }

    #[test]
    fn entries_parse_and_match_in_order() {
        let k = parse(&["public.events:kind, id", "public.*:v;other.t:a"]).unwrap();
        assert_eq!(k.rules().len(), 3);
        let t = k.apply(&events()).unwrap().unwrap();
        assert_eq!(t.key, vec![1, 0]);
        let mut other = events();
        other.id = TableId::new("public", "other");
        assert_eq!(k.apply(&other).unwrap().unwrap().key, vec![2]);
        other.id = TableId::new("x", "y");
        assert_eq!(k.apply(&other).unwrap(), None);
        assert_eq!(
            k.for_table(&TableId::new("other", "t")).unwrap().columns,
            ["a"]
        );
    }

    #[test]
    fn bad_entries_name_the_key() {
        for (entry, why) in [
            ("public.events", "no ':'"),
            ("events:id", "not a table pattern"),
            ("public.events:id,,kind", "empty column"),
            ("public.events:id,id", "twice"),
        ] {
            let e = parse(&["public.ok:id", entry]).unwrap_err();
            assert_eq!(e.0, "source.message_key_columns[1]", "{entry}");
            assert!(e.1.contains(why), "{entry}: {}", e.1);
        }
    }

    #[test]
    fn unknown_column_names_table_column_and_key() {
        let k = parse(&["public.ev*:id,nope"]).unwrap();
        let e = k.apply(&events()).unwrap_err().to_string();
        assert!(
            e.contains("public.events")
                && e.contains("\"nope\"")
                && e.contains("source.message_key_columns")
                && e.contains("public.ev*:id,nope"),
            "{e}"
        );
    }

    #[test]
    fn rekeyer_keeps_one_arc_per_version() {
        let mut r = Rekeyer::new(parse(&["public.events:id"]).unwrap());
        let t = Arc::new(events());
        let a = r.rekey(&t).unwrap();
        let b = r.rekey(&t).unwrap();
        assert!(Arc::ptr_eq(&a, &b) && a.key == vec![0]);
        let mut t2 = events();
        t2.columns.push(Column::new("w", ColumnType::Int32, "int4"));
        let c = r.rekey(&Arc::new(t2)).unwrap();
        assert_eq!(c.columns.len(), 4);
        assert!(!Arc::ptr_eq(&a, &c));
    }
}
