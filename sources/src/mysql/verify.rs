//! The MySQL / MariaDB side of `cdc verify` ([`crate::verify`]): one table read in
//! primary-key order, chunk by chunk, inside one `START TRANSACTION WITH CONSISTENT
//! SNAPSHOT, READ ONLY` per pass, with the snapshot's select list, text-protocol session
//! (`time_zone = '+00:00'`) and row decoder ([`super::snapshot::decode_text_row`]), so the
//! values are the ones a snapshot record would carry.
//!
//! Chunks: keyset pagination, `WHERE (key) > (last key of the previous chunk) ORDER BY
//! key LIMIT n`, with the last key written back as SQL by the snapshot's own literals and
//! spelt-out comparisons ([`super::snapshot::compare`]). A key with a column whose text
//! does not order as its index (FLOAT, ENUM, …) is refused: it could not be paged.
//!
//! Position: the binlog file and offset read right after the transaction started, so
//! every commit the pass sees is before it.

use std::sync::Arc;

use cdc_schemas::filter::TableFilter;
use cdc_schemas::{Row, TableId, TableSchema};
use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use super::binlog::{connect_err, my_err, Flavor};
use super::config::MySqlSourceConfig;
use super::decode::{self, DecodeOptions};
use super::schema::Schemas;
use super::snapshot::{
    compare, current_position, decode_text_row, is_integer, literal, literal_kind, qualified,
    Literal,
};
use super::source::{my_ident, schema_err};
use super::stream::Captured;
use crate::SourceError;

/// Reads one table for verification.
pub struct MyVerify {
    conn: Conn,
    flavor: Flavor,
    c: Captured,
    opts: DecodeOptions,
    select: String,
    /// Index in the row of each key column, its quoted name and literal kind.
    key_index: Vec<usize>,
    key_names: Vec<String>,
    key_kinds: Vec<Literal>,
    no_backslash: bool,
    after: Option<Vec<String>>,
    done: bool,
    in_tx: bool,
}

fn sql_err(what: &str) -> impl Fn(mysql_async::Error) -> SourceError + '_ {
    move |e| my_err(what, e)
}

impl MyVerify {
    pub async fn open(cfg: &MySqlSourceConfig, table: &TableId) -> Result<MyVerify, SourceError> {
        let mut conn = cfg.endpoint.connect().await.map_err(connect_err)?;
        conn.query_drop(
            "SET SESSION time_zone = '+00:00'; SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
        )
        .await
        .map_err(sql_err("preparing the verify session"))?;
        let version: Option<String> = conn
            .query_first("SELECT VERSION()")
            .await
            .map_err(sql_err("reading the server version"))?;
        let flavor = Flavor::of_version(version.as_deref().unwrap_or(""));
        let filter = TableFilter::new(&[table.to_string()], &[]);
        let schemas = Schemas::load(&mut conn, &filter)
            .await
            .map_err(schema_err)?;
        let Some(my) = schemas.get_id(table).cloned() else {
            return Err(SourceError::definite(
                format!("verifying {table}"),
                "the table does not exist or the source's user cannot see it",
                "check --table (database.table) and the user's grants",
            ));
        };
        let mut key_index = Vec::new();
        let mut key_kinds = Vec::new();
        for k in &my.key {
            let Some(i) = my.columns.iter().position(|c| &c.name == k) else {
                continue;
            };
            let Some(kind) = literal_kind(&my.columns[i]) else {
                return Err(SourceError::definite(
                    format!("verifying {table}"),
                    format!("key column {k:?} has a type whose text does not order as its index, so the table cannot be read in key order"),
                    "verify a table with an integer, decimal, string or temporal key",
                ));
            };
            key_index.push(i);
            key_kinds.push(kind);
        }
        if key_index.is_empty() || key_index.len() != my.key.len() {
            return Err(SourceError::definite(
                format!("verifying {table}"),
                "the table has no primary key: its records have no key, so rows cannot be matched",
                "verify a table with a primary key",
            ));
        }
        let key_names = my.key.iter().map(|k| my_ident(k)).collect();
        let list: Vec<String> = my
            .columns
            .iter()
            .map(|col| decode::select_expr(col, &my_ident(&col.name)).into_owned())
            .collect();
        let select = format!("SELECT {} FROM {}", list.join(", "), qualified(&my));
        let mode: Option<String> = conn
            .query_first("SELECT @@sql_mode")
            .await
            .map_err(sql_err("reading the session's sql_mode"))?;
        Ok(MyVerify {
            conn,
            flavor,
            c: Captured::new(my)?,
            opts: cfg.decode.clone(),
            select,
            key_index,
            key_names,
            key_kinds,
            no_backslash: mode.is_some_and(|m| m.contains("NO_BACKSLASH_ESCAPES")),
            after: None,
            done: false,
            in_tx: false,
        })
    }

    pub fn schema(&self) -> Arc<TableSchema> {
        self.c.schema.clone()
    }

    /// Whether [`MyVerify::lookup`] can find rows by their record key's JSON values: keys
    /// of integer and character types, whose record value is their SQL text.
    pub fn can_lookup(&self) -> bool {
        self.key_index.iter().zip(&self.key_kinds).all(|(&i, k)| {
            let c = &self.c.my.columns[i];
            is_integer(c)
                || (*k == Literal::Quoted
                    && matches!(
                        c.data_type.to_ascii_lowercase().as_str(),
                        "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext"
                    ))
        })
    }

    /// Starts a pass (ending the previous one); returns the binlog file and offset.
    pub async fn begin(&mut self) -> Result<(String, u64), SourceError> {
        self.end().await?;
        self.conn
            .query_drop("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
            .await
            .map_err(sql_err("starting the verify transaction"))?;
        self.in_tx = true;
        self.after = None;
        self.done = false;
        let at = current_position(&mut self.conn, self.flavor).await?;
        Ok((at.file, at.pos))
    }

    pub async fn end(&mut self) -> Result<(), SourceError> {
        if self.in_tx {
            self.in_tx = false;
            self.conn
                .query_drop("COMMIT")
                .await
                .map_err(sql_err("ending the verify transaction"))?;
        }
        Ok(())
    }

    /// The next chunk of at most `max_rows` rows in key order; empty when the pass has
    /// read every row.
    pub async fn next_chunk(&mut self, max_rows: usize) -> Result<Vec<Row>, SourceError> {
        if self.done {
            return Ok(Vec::new());
        }
        let order = self.key_names.join(", ");
        let sql = format!(
            "{}{} ORDER BY {order} LIMIT {}",
            self.select,
            self.after
                .as_ref()
                .map(|a| format!(" WHERE {}", compare(&self.key_names, a, ">")))
                .unwrap_or_default(),
            max_rows.max(1)
        );
        let (rows, last) = self.read(sql, true).await?;
        if rows.len() < max_rows.max(1) {
            self.done = true;
        }
        if let Some(last) = last {
            self.after = Some(last);
        }
        Ok(rows)
    }

    /// The rows (in this pass's snapshot) whose key is one of `keys`, each given as the
    /// record key's JSON values in key order (only when [`MyVerify::can_lookup`]).
    pub async fn lookup(
        &mut self,
        keys: &[Vec<serde_json::Value>],
    ) -> Result<Vec<Row>, SourceError> {
        let mut out = Vec::new();
        for part in keys.chunks(500) {
            let tuples: Vec<String> = part
                .iter()
                .map(|k| {
                    let lits: Vec<String> = k.iter().map(|v| self.json_literal(v)).collect();
                    format!("({})", lits.join(", "))
                })
                .collect();
            if tuples.is_empty() {
                continue;
            }
            let sql = format!(
                "{} WHERE ({}) IN ({})",
                self.select,
                self.key_names.join(", "),
                tuples.join(", ")
            );
            out.extend(self.read(sql, false).await?.0);
        }
        Ok(out)
    }

    fn json_literal(&self, v: &serde_json::Value) -> String {
        match v {
            serde_json::Value::Null => "NULL".into(),
            serde_json::Value::String(s) => {
                mysql_async::Value::Bytes(s.as_bytes().to_vec()).as_sql(self.no_backslash)
            }
            serde_json::Value::Bool(b) => if *b { "1" } else { "0" }.into(),
            other => other.to_string(),
        }
    }

    /// Runs `sql`; returns the decoded rows and (with `keep_last`) the last row's key as
    /// SQL literals.
    async fn read(
        &mut self,
        sql: String,
        keep_last: bool,
    ) -> Result<(Vec<Row>, Option<Vec<String>>), SourceError> {
        let what = format!("reading {} to verify", self.c.schema.id);
        let mut result = self
            .conn
            .query_iter(sql)
            .await
            .map_err(|e| my_err(&what, e))?;
        let mut rows = Vec::new();
        let mut last = None;
        let mut other = Vec::new();
        while let Some(row) = result.next().await.map_err(|e| my_err(&what, e))? {
            rows.push(Row::new(decode_text_row(
                &self.c, &row, &self.opts, &mut other,
            )));
            if keep_last {
                last = Some(
                    self.key_index
                        .iter()
                        .zip(&self.key_kinds)
                        .map(|(&i, kind)| literal(row.as_ref(i), *kind, self.no_backslash))
                        .collect(),
                );
            }
        }
        drop(result);
        Ok((rows, last))
    }
}
