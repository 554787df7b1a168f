//! The Postgres side of `cdc verify` ([`crate::verify`]): one table read in primary-key
//! order, chunk by chunk, inside one `REPEATABLE READ READ ONLY` transaction per pass,
//! with the rows decoded exactly as the snapshot decodes them (the same
//! [`describe_table`] schema and the same [`CopyDecoder`], binary where the snapshot reads
//! binary), so they are the values a snapshot record would carry.
//!
//! Chunks: keyset pagination on the key. For each chunk, `SELECT k::text … WHERE (k) >
//! (lo) ORDER BY t.k OFFSET n-1 LIMIT 1` finds its last key as text (`None`: the rest of
//! the table is the last chunk; `t.k`, qualified, is the column, not the text output of
//! the same name), then `COPY (SELECT … WHERE (k) > (lo) AND (k) <= (hi) ORDER BY
//! k) TO STDOUT` reads it. COPY takes no parameters, so the bounds are the server's own
//! text of the key values, quoted and cast back to the column's type: exact for every
//! type. Memory is one chunk.
//!
//! Position: the first statement of each pass is `pg_current_wal_lsn()`, which is where
//! the transaction's snapshot is taken, so every commit the pass sees is at or before it.

use std::sync::Arc;

use cdc_schemas::{Lsn, Row, TableId, TableSchema};
use futures_util::StreamExt;

use super::conn::PgEndpoint;
use super::decode::copy::{binary_plan, CopyDecoder};
use super::decode::BinKind;
use super::relation::{RelationCache, RelationInfo, StaticTypeResolver};
use super::replication::{quote_ident, quote_literal};
use super::snapshot::{describe_table, SESSION_SETTINGS};
use crate::SourceError;

fn pg_err(what: &str, e: tokio_postgres::Error) -> SourceError {
    super::conn::source_error(what, e, "see the server's message")
}

/// Reads one table for verification.
pub struct PgVerify {
    client: tokio_postgres::Client,
    rel: Arc<RelationInfo>,
    binary: Option<Vec<BinKind>>,
    select_list: String,
    qualified: String,
    /// Quoted key column names, in key order, joined by `, `.
    key_list: String,
    /// The same, each qualified by the table: what the queries `ORDER BY`. The chunk
    /// bound's select list is the key's text under the key columns' own names, and a bare
    /// name in `ORDER BY` means an output column first — so `ORDER BY "id"` would sort by
    /// the text (`'10' < '9'`), and a chunk (typed bounds) could hold any number of rows.
    key_order: String,
    /// `format_type` of each key column, for casting literals back.
    key_types: Vec<String>,
    /// The key's text of the last row of the previous chunk; `None` before the first.
    after: Option<Vec<Option<String>>>,
    done: bool,
    in_tx: bool,
}

impl PgVerify {
    pub async fn open(endpoint: &PgEndpoint, table: &TableId) -> Result<PgVerify, SourceError> {
        let client = endpoint.connect().await.map_err(|e| {
            SourceError::from(crate::postgres::replication::ReplicationError::Connect(e))
        })?;
        client
            .batch_execute(SESSION_SETTINGS)
            .await
            .map_err(|e| pg_err("preparing the verify session", e))?;
        let resolver = Arc::new(StaticTypeResolver::new());
        let mut cache = RelationCache::with_resolver(resolver.clone());
        let rel = describe_table(&client, &mut cache, &resolver, table).await?;
        if rel.schema.key.is_empty() {
            return Err(SourceError::definite(
                format!("verifying {table}"),
                "the table has no primary key (nor replica identity index): its records have no key, so rows cannot be matched",
                "verify a table with a key",
            ));
        }
        let key_names: Vec<&str> = rel
            .schema
            .key
            .iter()
            .map(|&i| rel.columns[i].name.as_str())
            .collect();
        let mut key_types = Vec::with_capacity(key_names.len());
        for name in &key_names {
            let row = client
                .query_one(
                    "SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a WHERE a.attrelid = $1 AND a.attname = $2",
                    &[&rel.id, name],
                )
                .await
                .map_err(|e| pg_err("reading the key's types", e))?;
            key_types.push(row.get::<_, String>(0));
        }
        let select_list = rel
            .columns
            .iter()
            .map(|c| quote_ident(&c.name))
            .collect::<Vec<_>>()
            .join(", ");
        let qualified = format!(
            "{}.{}",
            quote_ident(&table.schema),
            quote_ident(&table.name)
        );
        let key_order = key_names
            .iter()
            .map(|n| format!("{qualified}.{}", quote_ident(n)))
            .collect::<Vec<_>>()
            .join(", ");
        Ok(PgVerify {
            client,
            binary: binary_plan(&rel),
            select_list,
            qualified,
            key_list: key_names
                .iter()
                .map(|n| quote_ident(n))
                .collect::<Vec<_>>()
                .join(", "),
            key_order,
            key_types,
            rel,
            after: None,
            done: false,
            in_tx: false,
        })
    }

    pub fn schema(&self) -> Arc<TableSchema> {
        self.rel.schema.clone()
    }

    /// Whether [`PgVerify::lookup`] can find rows by their record key's JSON values: keys
    /// of types whose record value is their SQL text (integers, text, uuid, boolean).
    pub fn can_lookup(&self) -> bool {
        self.key_types.iter().all(|t| {
            matches!(
                t.as_str(),
                "smallint" | "integer" | "bigint" | "text" | "uuid" | "boolean" | "oid"
            ) || t.starts_with("character varying")
                || t.starts_with("character(")
                || t == "character"
        })
    }

    /// Starts a pass (ending the previous one): a new snapshot; returns its WAL position.
    pub async fn begin(&mut self) -> Result<Lsn, SourceError> {
        self.end().await?;
        self.client
            .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await
            .map_err(|e| pg_err("starting the verify transaction", e))?;
        self.in_tx = true;
        let row = self
            .client
            .query_one("SELECT pg_current_wal_lsn()::text", &[])
            .await
            .map_err(|e| pg_err("reading the current WAL position", e))?;
        let text: String = row.get(0);
        self.after = None;
        self.done = false;
        text.parse::<Lsn>().map_err(|e| {
            SourceError::definite(
                "reading the current WAL position",
                e.to_string(),
                "report this",
            )
        })
    }

    pub async fn end(&mut self) -> Result<(), SourceError> {
        if self.in_tx {
            self.in_tx = false;
            self.client
                .batch_execute("COMMIT")
                .await
                .map_err(|e| pg_err("ending the verify transaction", e))?;
        }
        Ok(())
    }

    /// `(k1, k2)` compared with the literals `vals`.
    fn key_predicate(&self, op: &str, vals: &[Option<String>]) -> String {
        let lits: Vec<String> = vals
            .iter()
            .zip(&self.key_types)
            .map(|(v, t)| match v {
                Some(v) => format!("{}::{t}", quote_literal(v)),
                None => "NULL".into(),
            })
            .collect();
        format!("({}) {op} ({})", self.key_list, lits.join(", "))
    }

    /// The next chunk of at most `max_rows` rows in key order; empty when the pass has
    /// read every row.
    pub async fn next_chunk(&mut self, max_rows: usize) -> Result<Vec<Row>, SourceError> {
        if self.done {
            return Ok(Vec::new());
        }
        let max_rows = max_rows.max(1);
        let lower = self.after.as_ref().map(|a| self.key_predicate(">", a));
        let key_text = self
            .rel
            .schema
            .key
            .iter()
            .map(|&i| format!("{}::text", quote_ident(&self.rel.columns[i].name)))
            .collect::<Vec<_>>()
            .join(", ");
        let bound_sql = format!(
            "SELECT {key_text} FROM {} {} ORDER BY {} OFFSET {} LIMIT 1",
            self.qualified,
            lower
                .as_ref()
                .map(|l| format!("WHERE {l}"))
                .unwrap_or_default(),
            self.key_order,
            max_rows - 1
        );
        let hi: Option<Vec<Option<String>>> = self
            .client
            .query_opt(bound_sql.as_str(), &[])
            .await
            .map_err(|e| pg_err("finding a verify chunk's bound", e))?
            .map(|r| (0..self.key_types.len()).map(|i| r.get(i)).collect());
        let mut filter: Vec<String> = lower.into_iter().collect();
        if let Some(hi) = &hi {
            filter.push(self.key_predicate("<=", hi));
        }
        let rows = self.copy(&filter.join(" AND ")).await?;
        match hi {
            Some(hi) => self.after = Some(hi),
            None => self.done = true,
        }
        Ok(rows)
    }

    /// The rows (in this pass's snapshot) whose key is one of `keys`, each given as the
    /// record key's JSON values in key order (only when [`PgVerify::can_lookup`]).
    pub async fn lookup(
        &mut self,
        keys: &[Vec<serde_json::Value>],
    ) -> Result<Vec<Row>, SourceError> {
        let mut out = Vec::new();
        for part in keys.chunks(500) {
            let tuples: Vec<String> = part
                .iter()
                .map(|k| {
                    let vals: Vec<Option<String>> = k.iter().map(json_text).collect();
                    let lits: Vec<String> = vals
                        .iter()
                        .zip(&self.key_types)
                        .map(|(v, t)| match v {
                            Some(v) => format!("{}::{t}", quote_literal(v)),
                            None => "NULL".into(),
                        })
                        .collect();
                    format!("({})", lits.join(", "))
                })
                .collect();
            if tuples.is_empty() {
                continue;
            }
            let filter = format!("({}) IN ({})", self.key_list, tuples.join(", "));
            out.extend(self.copy(&filter).await?);
        }
        Ok(out)
    }

    async fn copy(&self, filter: &str) -> Result<Vec<Row>, SourceError> {
        let mut sql = format!(
            "COPY (SELECT {} FROM {}{} ORDER BY {}) TO STDOUT",
            self.select_list,
            self.qualified,
            if filter.is_empty() {
                String::new()
            } else {
                format!(" WHERE {filter}")
            },
            self.key_order
        );
        let mut decoder = match &self.binary {
            Some(plan) => {
                sql.push_str(" (FORMAT binary)");
                CopyDecoder::binary(plan.clone())
            }
            None => CopyDecoder::text(),
        };
        let stream = self
            .client
            .copy_out(sql.as_str())
            .await
            .map_err(|e| pg_err("reading rows to verify", e))?;
        futures_util::pin_mut!(stream);
        let mut rows = Vec::new();
        let bad = |e: String| {
            SourceError::definite(
                format!("verifying {}", self.rel.schema.id),
                e,
                "report this as a bug, with the column's type",
            )
        };
        while let Some(data) = stream.next().await {
            let data = data.map_err(|e| pg_err("reading rows to verify", e))?;
            decoder
                .feed(&self.rel, &data, &mut |row| {
                    rows.push(row);
                    Ok(())
                })
                .map_err(bad)?;
        }
        decoder
            .finish(&self.rel, &mut |row| {
                rows.push(row);
                Ok(())
            })
            .map_err(bad)?;
        Ok(rows)
    }
}

/// A record key's JSON value as the SQL text of the column value (for the key types
/// [`PgVerify::can_lookup`] accepts).
fn json_text(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::Null => None,
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        other => Some(other.to_string()),
    }
}
