//! Record encoders: [`ChangeEvent`]s to Debezium-compatible keys and values, as Kafka
//! Connect JSON (with or without schemas) or Avro in the Confluent wire format.
//!
//! An [`Encoder`] is built once per table schema version (or once for Postgres logical
//! decoding messages). Building it derives everything that does not depend on the row:
//! the Connect key and value schemas, their Avro schema JSON, the JSON `"schema"` heads,
//! the escaped JSON field names and the constant parts of the `source` block in both
//! encodings. Encoding a row then only walks the per-column `connect::Conv` plans and
//! appends to the caller's buffer: no schema lookups, no name formatting, no JSON trees.
//!
//! Invariants:
//! - `encode_*` append to the buffer and, on error, truncate it back to its length on
//!   entry, so a reused buffer never holds half a record;
//! - an encoder only accepts events whose rows have its table's column count; a new table
//!   schema version needs a new encoder (and new schema ids);
//! - in Avro, the bytes written are exactly described by [`Encoder::avro_value_schema`] /
//!   [`Encoder::avro_key_schema`], framed with the ids given to
//!   [`Encoder::set_schema_ids`].
//!
//! Submodules: [`config`] (options), [`connect`] (type mapping), [`json`], [`avro`],
//! [`avro_schema`], [`envelope`] (event → records, tombstones, key changes), [`topic`]
//! (topic names and routing), [`temporal`] and [`convert`] (value conversions); private:
//! `record_schema` (the Connect schemas of envelopes and messages), `memo`.

pub mod avro;
pub mod avro_schema;
pub mod config;
pub mod connect;
pub mod convert;
pub mod envelope;
pub mod json;
mod memo;
mod record_schema;
pub mod temporal;
pub mod topic;

use std::time::{SystemTime, UNIX_EPOCH};

pub use config::{
    BigIntUnsignedHandlingMode, BinaryHandlingMode, ConnectorKind, DecimalHandlingMode,
    EncoderConfig, IntervalHandlingMode, RecordFormat, SourceInfo, TimePrecisionMode,
};
pub use connect::{ConnectField, ConnectSchema, ConnectType};
pub use convert::ValueError;
pub use envelope::{Record, RecordBuf, RecordKind, RecordSpan, HEADER_NEW_KEY, HEADER_OLD_KEY};
pub use record_schema::{source_schema, transaction_schema};
pub use topic::{RouteRule, TopicRouter};

use crate::event::{ChangeEvent, Op, TransactionInfo};
use crate::position::SourcePosition;
use crate::table::TableSchema;
use crate::value::Row;
use connect::{ColumnPlan, Conv};

/// Why a record could not be encoded. Each variant says what to do about it.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum EncodeError {
    #[error("table {table}, column {column:?}: {reason}")]
    Value {
        table: String,
        column: String,
        reason: ValueError,
    },
    #[error(
        "table {table}: the event's row has {got} values but this encoder was built for \
         {expected} columns; build a new Encoder for the table's new schema version"
    )]
    RowShape {
        table: String,
        expected: usize,
        got: usize,
    },
    #[error(
        "schema {schema}: two fields are both named {name:?} once sanitised for Avro; rename \
         one of the columns (Avro names allow only [A-Za-z0-9_])"
    )]
    NameConflict { schema: String, name: String },
    #[error(
        "table {table}: Avro schema ids are not set; register the key and value schemas and \
         call Encoder::set_schema_ids before encoding"
    )]
    SchemaIdsMissing { table: String },
    #[error(
        "table {table}: the event carries a {got} source position but the encoder is \
         configured for the {expected} connector; check the connector kind in the config"
    )]
    PositionMismatch {
        table: String,
        expected: &'static str,
        got: &'static str,
    },
    #[error("table {table}: a {op:?} event without its {what} row cannot be encoded")]
    MissingRow {
        table: String,
        op: Op,
        what: &'static str,
    },
    #[error(
        "a {op:?} event was given to the encoder for {encoder}; use the encoder built for \
         the event's own table (or Encoder::for_messages for logical decoding messages)"
    )]
    WrongEncoder { op: Op, encoder: String },
    #[error(
        "logical decoding messages exist only for Postgres; this encoder is configured for \
         {connector}"
    )]
    MessagesUnsupported { connector: &'static str },
}

/// The ids the schema registry assigned to an encoder's key and value schemas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchemaIds {
    /// `None` for keyless tables.
    pub key: Option<u32>,
    pub value: u32,
}

enum Target {
    Table {
        /// Display name for errors.
        table: String,
        columns: Vec<ColumnPlan>,
        key: Vec<ColumnPlan>,
    },
    Message,
}

/// Encodes one table's (or the logical messages') keys and values. See the module docs.
pub struct Encoder {
    /// Unique per encoder built (`memo.rs`).
    id: u64,
    config: EncoderConfig,
    target: Target,
    key_schema: Option<ConnectSchema>,
    value_schema: ConnectSchema,
    avro_key: Option<String>,
    avro_value: String,
    ids: Option<SchemaIds>,
    /// `{"schema":<schema>,"payload":` for schemas-enabled JSON, else empty.
    json_key_head: Vec<u8>,
    json_value_head: Vec<u8>,
    /// JSON `source` pieces: `{"version":…,"connector":…,"name":…,"ts_ms":`, then
    /// `,"db":…`, then the table part (`,"schema":…,"table":…` or `,"table":…`).
    src_json_head: Vec<u8>,
    src_json_db: Vec<u8>,
    src_json_table: Vec<u8>,
    /// Avro `source` pieces: the version/connector/name strings, the db string, and the
    /// table part (Postgres: schema + table strings; MySQL: the `table` union).
    src_avro_head: Vec<u8>,
    src_avro_db: Vec<u8>,
    src_avro_table: Vec<u8>,
}

fn table_label(t: &TableSchema) -> String {
    t.id.to_string()
}

impl Encoder {
    /// Builds the encoder for one version of a table's schema.
    pub fn new(config: &EncoderConfig, table: &TableSchema) -> Result<Encoder, EncodeError> {
        let prefix = &config.source.topic_prefix;
        let base = format!("{prefix}.{}.{}", table.id.schema, table.id.name);
        let mut fields = Vec::with_capacity(table.columns.len());
        let mut columns = Vec::with_capacity(table.columns.len());
        for (i, c) in table.columns.iter().enumerate() {
            let (f, p) = connect::plan_column(i, c, config)?;
            fields.push(f);
            columns.push(p);
        }
        let key_fields: Vec<ConnectField> = table.key.iter().map(|&i| fields[i].clone()).collect();
        let key: Vec<ColumnPlan> = table.key.iter().map(|&i| columns[i].clone()).collect();
        let key_schema = if key.is_empty() {
            None
        } else {
            Some(ConnectSchema::strukt(format!("{base}.Key"), key_fields))
        };
        let row_schema = ConnectSchema::strukt(format!("{base}.Value"), fields).optional();
        let value_schema = record_schema::envelope_schema(config, &base, row_schema);
        let db = match config.source.connector {
            ConnectorKind::Postgres => config.source.database.clone(),
            ConnectorKind::MySql | ConnectorKind::MariaDb => table.id.schema.clone(),
        };
        let (schema, tbl) = (table.id.schema.as_str(), table.id.name.as_str());
        Self::assemble(
            config,
            Target::Table {
                table: table_label(table),
                columns,
                key,
            },
            key_schema,
            value_schema,
            &db,
            schema,
            tbl,
        )
    }

    /// Builds the encoder for Postgres logical decoding messages (`op = m`), whose topic is
    /// `<prefix>.message`, key `{prefix}` and value `{op, ts_ms, source, transaction,
    /// message}`.
    pub fn for_messages(config: &EncoderConfig) -> Result<Encoder, EncodeError> {
        if config.source.connector != ConnectorKind::Postgres {
            return Err(EncodeError::MessagesUnsupported {
                connector: config.source.connector.name(),
            });
        }
        Self::assemble(
            config,
            Target::Message,
            Some(record_schema::message_key_schema()),
            record_schema::message_value_schema(config),
            &config.source.database.clone(),
            "",
            "",
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn assemble(
        config: &EncoderConfig,
        target: Target,
        key_schema: Option<ConnectSchema>,
        value_schema: ConnectSchema,
        db: &str,
        schema: &str,
        table: &str,
    ) -> Result<Encoder, EncodeError> {
        let avro_key = key_schema
            .as_ref()
            .map(avro_schema::avro_schema_json)
            .transpose()?;
        let avro_value = avro_schema::avro_schema_json(&value_schema)?;
        let schemas_enable = matches!(
            config.format,
            RecordFormat::Json {
                schemas_enable: true
            }
        );
        let head = |s: &ConnectSchema| {
            let mut b = Vec::new();
            if schemas_enable {
                b.extend_from_slice(b"{\"schema\":");
                json::write_connect_schema(&mut b, s, None);
                b.extend_from_slice(b",\"payload\":");
            }
            b
        };
        let json_key_head = key_schema.as_ref().map(head).unwrap_or_default();
        let json_value_head = head(&value_schema);

        let src = &config.source;
        let mut src_json_head = Vec::new();
        src_json_head.extend_from_slice(b"{\"version\":");
        json::write_str(&mut src_json_head, &src.version);
        src_json_head.extend_from_slice(b",\"connector\":");
        json::write_str(&mut src_json_head, src.connector.name());
        src_json_head.extend_from_slice(b",\"name\":");
        json::write_str(&mut src_json_head, &src.topic_prefix);
        src_json_head.extend_from_slice(b",\"ts_ms\":");
        let mut src_json_db = b",\"db\":".to_vec();
        json::write_str(&mut src_json_db, db);
        let mut src_json_table = Vec::new();
        let mut src_avro_head = Vec::new();
        avro::write_string(&mut src_avro_head, &src.version);
        avro::write_string(&mut src_avro_head, src.connector.name());
        avro::write_string(&mut src_avro_head, &src.topic_prefix);
        let mut src_avro_db = Vec::new();
        avro::write_string(&mut src_avro_db, db);
        let mut src_avro_table = Vec::new();
        match src.connector {
            ConnectorKind::Postgres => {
                src_json_table.extend_from_slice(b",\"schema\":");
                json::write_str(&mut src_json_table, schema);
                src_json_table.extend_from_slice(b",\"table\":");
                json::write_str(&mut src_json_table, table);
                avro::write_string(&mut src_avro_table, schema);
                avro::write_string(&mut src_avro_table, table);
            }
            ConnectorKind::MySql | ConnectorKind::MariaDb => {
                src_json_table.extend_from_slice(b",\"table\":");
                json::write_str(&mut src_json_table, table);
                avro::write_long(&mut src_avro_table, 1);
                avro::write_string(&mut src_avro_table, table);
            }
        }
        Ok(Encoder {
            id: memo::next_encoder_id(),
            config: config.clone(),
            target,
            key_schema,
            value_schema,
            avro_key,
            avro_value,
            ids: None,
            json_key_head,
            json_value_head,
            src_json_head,
            src_json_db,
            src_json_table,
            src_avro_head,
            src_avro_db,
            src_avro_table,
        })
    }

    pub fn config(&self) -> &EncoderConfig {
        &self.config
    }

    /// The Connect schema of the record key; `None` for keyless tables.
    pub fn key_schema(&self) -> Option<&ConnectSchema> {
        self.key_schema.as_ref()
    }

    /// The Connect schema of the record value (the envelope).
    pub fn value_schema(&self) -> &ConnectSchema {
        &self.value_schema
    }

    /// The Avro schema JSON of the key, to register under `<topic>-key`.
    pub fn avro_key_schema(&self) -> Option<&str> {
        self.avro_key.as_deref()
    }

    /// The Avro schema JSON of the value, to register under `<topic>-value`.
    pub fn avro_value_schema(&self) -> &str {
        &self.avro_value
    }

    /// Sets the registry ids the Avro frames carry.
    pub fn set_schema_ids(&mut self, ids: SchemaIds) {
        self.ids = Some(ids);
    }

    pub fn schema_ids(&self) -> Option<SchemaIds> {
        self.ids
    }

    fn label(&self) -> &str {
        match &self.target {
            Target::Table { table, .. } => table,
            Target::Message => "<logical decoding messages>",
        }
    }

    fn ids(&self) -> Result<SchemaIds, EncodeError> {
        self.ids.ok_or_else(|| EncodeError::SchemaIdsMissing {
            table: self.label().to_string(),
        })
    }

    fn value_error(&self, plan: &ColumnPlan, reason: ValueError) -> EncodeError {
        EncodeError::Value {
            table: self.label().to_string(),
            column: plan.name.clone(),
            reason,
        }
    }

    fn check_target(&self, ev: &ChangeEvent) -> Result<(), EncodeError> {
        let ok = match self.target {
            Target::Message => ev.op == Op::Message,
            Target::Table { .. } => ev.op != Op::Message,
        };
        if ok {
            Ok(())
        } else {
            Err(EncodeError::WrongEncoder {
                op: ev.op,
                encoder: self.label().to_string(),
            })
        }
    }

    /// Appends the record key of `ev` to `out`. Returns `Ok(false)` (and appends nothing)
    /// when the record has no key: keyless tables and truncate events.
    pub fn encode_key(&self, ev: &ChangeEvent, out: &mut Vec<u8>) -> Result<bool, EncodeError> {
        self.check_target(ev)?;
        let row = match (&self.target, ev.op) {
            (Target::Message, _) => None,
            (Target::Table { key, .. }, _) if key.is_empty() => return Ok(false),
            (_, Op::Truncate) => return Ok(false),
            (_, _) => match ev.key_row() {
                Some(r) => Some(r),
                None => {
                    return Err(EncodeError::MissingRow {
                        table: self.label().to_string(),
                        op: ev.op,
                        what: "key",
                    })
                }
            },
        };
        let start = out.len();
        let r = match row {
            Some(row) => self.encode_key_row(row, out),
            None => self.encode_message_key(ev, out),
        };
        if r.is_err() {
            out.truncate(start);
        }
        r.map(|()| true)
    }

    /// Appends the key of `row` (a full row of this encoder's table).
    pub(crate) fn encode_key_row(&self, row: &Row, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let Target::Table { key, .. } = &self.target else {
            return Ok(());
        };
        self.check_row(row)?;
        let placeholder = &self.config.unavailable_value_placeholder;
        match self.config.format {
            RecordFormat::Json { .. } => {
                out.extend_from_slice(&self.json_key_head);
                json::write_row(out, key, row, placeholder)
                    .map_err(|(p, e)| self.value_error(p, e))?;
                if !self.json_key_head.is_empty() {
                    out.push(b'}');
                }
            }
            RecordFormat::Avro => {
                let id = self
                    .ids()?
                    .key
                    .ok_or_else(|| EncodeError::SchemaIdsMissing {
                        table: self.label().to_string(),
                    })?;
                avro::write_frame(out, id);
                avro::write_row(out, key, row, placeholder)
                    .map_err(|(p, e)| self.value_error(p, e))?;
            }
        }
        Ok(())
    }

    fn encode_message_key(&self, ev: &ChangeEvent, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let prefix = ev.message.as_ref().map(|m| m.prefix.as_str());
        match self.config.format {
            RecordFormat::Json { .. } => {
                out.extend_from_slice(&self.json_key_head);
                out.extend_from_slice(b"{\"prefix\":");
                write_json_opt_str(out, prefix);
                out.push(b'}');
                if !self.json_key_head.is_empty() {
                    out.push(b'}');
                }
            }
            RecordFormat::Avro => {
                let id = self
                    .ids()?
                    .key
                    .ok_or_else(|| EncodeError::SchemaIdsMissing {
                        table: self.label().to_string(),
                    })?;
                avro::write_frame(out, id);
                write_avro_opt_str(out, prefix);
            }
        }
        Ok(())
    }

    fn check_row(&self, row: &Row) -> Result<(), EncodeError> {
        if let Target::Table { columns, .. } = &self.target {
            if row.len() != columns.len() {
                return Err(EncodeError::RowShape {
                    table: self.label().to_string(),
                    expected: columns.len(),
                    got: row.len(),
                });
            }
        }
        Ok(())
    }

    /// Appends the record value of `ev`, stamped with the current time as the envelope's
    /// `ts_ms`/`ts_us`/`ts_ns` (when the connector processed the event).
    pub fn encode_value(&self, ev: &ChangeEvent, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        self.encode_value_at(ev, now_ns(), out)
    }

    /// [`Encoder::encode_value`] with an explicit processing time (nanoseconds since the
    /// epoch), for deterministic output.
    pub fn encode_value_at(
        &self,
        ev: &ChangeEvent,
        processed_at_ns: i64,
        out: &mut Vec<u8>,
    ) -> Result<(), EncodeError> {
        self.check_target(ev)?;
        let start = out.len();
        let r = match self.target {
            Target::Message => self.encode_message_value(ev, processed_at_ns, out),
            Target::Table { .. } => {
                if matches!(ev.op, Op::Create | Op::Read | Op::Update) && ev.after.is_none() {
                    Err(EncodeError::MissingRow {
                        table: self.label().to_string(),
                        op: ev.op,
                        what: "after",
                    })
                } else if ev.op == Op::Delete && ev.before.is_none() {
                    Err(EncodeError::MissingRow {
                        table: self.label().to_string(),
                        op: ev.op,
                        what: "before",
                    })
                } else {
                    self.encode_envelope(
                        ev.op,
                        ev.before.as_ref(),
                        ev.after.as_ref(),
                        ev,
                        processed_at_ns,
                        out,
                    )
                }
            }
        };
        if r.is_err() {
            out.truncate(start);
        }
        r
    }

    /// The envelope for `op` with the given rows (which may differ from `ev`'s own for
    /// the delete/create pair of a key change). Unchanged TOASTed values in `after` that
    /// `ev`'s old row holds (REPLICA IDENTITY FULL) are written as those values.
    pub(crate) fn encode_envelope(
        &self,
        op: Op,
        before: Option<&Row>,
        after: Option<&Row>,
        ev: &ChangeEvent,
        now_ns: i64,
        out: &mut Vec<u8>,
    ) -> Result<(), EncodeError> {
        let Target::Table { columns, .. } = &self.target else {
            return Err(EncodeError::WrongEncoder {
                op,
                encoder: self.label().to_string(),
            });
        };
        for r in [before, after].into_iter().flatten() {
            self.check_row(r)?;
        }
        // The event's own old row, also for the create half of a key change.
        let filled;
        let after = match (ev.before.as_ref(), after) {
            (Some(b), Some(a)) if a.0.iter().any(|v| v.is_unchanged()) => {
                filled = fill_unchanged(b, a);
                Some(&filled)
            }
            _ => after,
        };
        let placeholder = &self.config.unavailable_value_placeholder;
        match self.config.format {
            RecordFormat::Json { .. } => {
                out.extend_from_slice(&self.json_value_head);
                out.extend_from_slice(b"{\"before\":");
                match before {
                    Some(r) => json::write_row(out, columns, r, placeholder)
                        .map_err(|(p, e)| self.value_error(p, e))?,
                    None => out.extend_from_slice(b"null"),
                }
                out.extend_from_slice(b",\"after\":");
                match after {
                    Some(r) => json::write_row(out, columns, r, placeholder)
                        .map_err(|(p, e)| self.value_error(p, e))?,
                    None => out.extend_from_slice(b"null"),
                }
                out.extend_from_slice(b",\"source\":");
                match &ev.position {
                    SourcePosition::Postgres(p)
                        if self.config.source.connector == ConnectorKind::Postgres =>
                    {
                        let key = memo::SourceKey {
                            encoder: self.id,
                            ts_ms: ev.source_ts_ms,
                            snapshot: ev.snapshot,
                            pos: p.clone(),
                        };
                        memo::source(&key, out, |o| self.write_source_json(ev, o))?;
                    }
                    _ => self.write_source_json(ev, out)?,
                }
                out.extend_from_slice(b",\"transaction\":");
                write_tx_json(out, ev.tx.as_ref());
                out.extend_from_slice(b",\"op\":\"");
                out.extend_from_slice(op.code().as_bytes());
                out.push(b'"');
                memo::times(now_ns, out, |o| {
                    o.extend_from_slice(b",\"ts_ms\":");
                    json::write_i64(o, now_ns.div_euclid(1_000_000));
                    o.extend_from_slice(b",\"ts_us\":");
                    json::write_i64(o, now_ns.div_euclid(1_000));
                    o.extend_from_slice(b",\"ts_ns\":");
                    json::write_i64(o, now_ns);
                });
                out.push(b'}');
                if !self.json_value_head.is_empty() {
                    out.push(b'}');
                }
            }
            RecordFormat::Avro => {
                avro::write_frame(out, self.ids()?.value);
                for row in [before, after] {
                    match row {
                        Some(r) => {
                            avro::write_long(out, 1);
                            avro::write_row(out, columns, r, placeholder)
                                .map_err(|(p, e)| self.value_error(p, e))?;
                        }
                        None => avro::write_long(out, 0),
                    }
                }
                self.write_source_avro(ev, out)?;
                write_tx_avro(out, ev.tx.as_ref());
                avro::write_string(out, op.code());
                for t in [
                    now_ns.div_euclid(1_000_000),
                    now_ns.div_euclid(1_000),
                    now_ns,
                ] {
                    avro::write_long(out, 1);
                    avro::write_long(out, t);
                }
            }
        }
        Ok(())
    }

    fn encode_message_value(
        &self,
        ev: &ChangeEvent,
        now_ns: i64,
        out: &mut Vec<u8>,
    ) -> Result<(), EncodeError> {
        let msg = ev.message.as_ref();
        let prefix = msg.map(|m| m.prefix.as_str());
        let content = msg.map(|m| m.content.as_slice());
        let mode = self.config.binary_handling_mode;
        match self.config.format {
            RecordFormat::Json { .. } => {
                out.extend_from_slice(&self.json_value_head);
                out.extend_from_slice(b"{\"op\":\"m\",\"ts_ms\":");
                json::write_i64(out, now_ns.div_euclid(1_000_000));
                out.extend_from_slice(b",\"source\":");
                self.write_source_json(ev, out)?;
                out.extend_from_slice(b",\"transaction\":");
                write_tx_json(out, ev.tx.as_ref());
                out.extend_from_slice(b",\"message\":{\"prefix\":");
                write_json_opt_str(out, prefix);
                out.extend_from_slice(b",\"content\":");
                match content {
                    Some(c) => json::write_value(
                        out,
                        &Conv::Bytes(mode),
                        &crate::value::Value::Bytes(c.to_vec()),
                        "",
                    )
                    .map_err(|reason| EncodeError::Value {
                        table: self.label().to_string(),
                        column: "content".into(),
                        reason,
                    })?,
                    None => out.extend_from_slice(b"null"),
                }
                out.extend_from_slice(b"}}");
                if !self.json_value_head.is_empty() {
                    out.push(b'}');
                }
            }
            RecordFormat::Avro => {
                avro::write_frame(out, self.ids()?.value);
                avro::write_string(out, "m");
                avro::write_long(out, 1);
                avro::write_long(out, now_ns.div_euclid(1_000_000));
                self.write_source_avro(ev, out)?;
                write_tx_avro(out, ev.tx.as_ref());
                write_avro_opt_str(out, prefix);
                match content {
                    Some(c) => {
                        avro::write_long(out, 1);
                        avro::write_value(
                            out,
                            &Conv::Bytes(mode),
                            &crate::value::Value::Bytes(c.to_vec()),
                            "",
                        )
                        .map_err(|reason| EncodeError::Value {
                            table: self.label().to_string(),
                            column: "content".into(),
                            reason,
                        })?;
                    }
                    None => avro::write_long(out, 0),
                }
            }
        }
        Ok(())
    }

    fn position_mismatch(&self, pos: &SourcePosition) -> EncodeError {
        EncodeError::PositionMismatch {
            table: self.label().to_string(),
            expected: self.config.source.connector.name(),
            got: match pos {
                SourcePosition::Postgres(_) => "Postgres",
                SourcePosition::Mysql(_) => "MySQL",
            },
        }
    }

    fn write_source_json(&self, ev: &ChangeEvent, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let pg = self.config.source.connector == ConnectorKind::Postgres;
        match (&ev.position, pg) {
            (SourcePosition::Postgres(_), true) | (SourcePosition::Mysql(_), false) => {}
            (p, _) => return Err(self.position_mismatch(p)),
        }
        out.extend_from_slice(&self.src_json_head);
        json::write_i64(out, ev.source_ts_ms);
        out.extend_from_slice(b",\"snapshot\":\"");
        out.extend_from_slice(ev.snapshot.as_str().as_bytes());
        out.push(b'"');
        out.extend_from_slice(&self.src_json_db);
        out.extend_from_slice(b",\"sequence\":");
        match &ev.position {
            SourcePosition::Postgres(p) => {
                // A JSON string holding a JSON array of two decimal LSN strings.
                out.extend_from_slice(b"\"[");
                if p.commit_lsn.0 == 0 {
                    out.extend_from_slice(b"null");
                } else {
                    out.extend_from_slice(b"\\\"");
                    json::write_u64(out, p.commit_lsn.0);
                    out.extend_from_slice(b"\\\"");
                }
                out.extend_from_slice(b",\\\"");
                json::write_u64(out, p.lsn.0);
                out.extend_from_slice(b"\\\"]\"");
            }
            SourcePosition::Mysql(_) => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"ts_us\":");
        json::write_i64(out, ev.source_ts_ms.saturating_mul(1_000));
        out.extend_from_slice(b",\"ts_ns\":");
        json::write_i64(out, ev.source_ts_ms.saturating_mul(1_000_000));
        out.extend_from_slice(&self.src_json_table);
        match &ev.position {
            SourcePosition::Postgres(p) => {
                out.extend_from_slice(b",\"txId\":");
                write_json_opt_i64(out, p.tx_id.map(i64::from));
                out.extend_from_slice(b",\"lsn\":");
                write_json_opt_i64(out, lsn_i64(p.lsn.0));
                out.extend_from_slice(b",\"xmin\":");
                write_json_opt_i64(out, p.xmin.map(|x| x as i64));
                // Replication origin of the transaction: not carried by ChangeEvent.
                out.extend_from_slice(b",\"origin\":null,\"origin_lsn\":null");
            }
            SourcePosition::Mysql(m) => {
                out.extend_from_slice(b",\"server_id\":");
                json::write_i64(out, m.server_id as i64);
                out.extend_from_slice(b",\"gtid\":");
                write_json_opt_str(out, m.gtid.as_deref());
                out.extend_from_slice(b",\"file\":");
                json::write_str(out, &m.file);
                out.extend_from_slice(b",\"pos\":");
                json::write_i64(out, m.pos as i64);
                out.extend_from_slice(b",\"row\":");
                json::write_i64(out, m.row as i64);
                out.extend_from_slice(b",\"thread\":");
                write_json_opt_i64(out, m.thread.map(|t| t as i64));
                out.extend_from_slice(b",\"query\":null");
            }
        }
        out.push(b'}');
        Ok(())
    }

    fn write_source_avro(&self, ev: &ChangeEvent, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let pg = self.config.source.connector == ConnectorKind::Postgres;
        match (&ev.position, pg) {
            (SourcePosition::Postgres(_), true) | (SourcePosition::Mysql(_), false) => {}
            (p, _) => return Err(self.position_mismatch(p)),
        }
        out.extend_from_slice(&self.src_avro_head);
        avro::write_long(out, ev.source_ts_ms);
        // snapshot: [Enum string, "null"] (default "false" puts the string first).
        avro::write_long(out, 0);
        avro::write_string(out, ev.snapshot.as_str());
        out.extend_from_slice(&self.src_avro_db);
        match &ev.position {
            SourcePosition::Postgres(p) => {
                avro::write_long(out, 1);
                // At most 47 bytes: fits write_formatted's one-byte length, no allocation.
                avro::write_formatted(out, |seq| {
                    seq.push(b'[');
                    if p.commit_lsn.0 == 0 {
                        seq.extend_from_slice(b"null");
                    } else {
                        seq.push(b'"');
                        json::write_u64(seq, p.commit_lsn.0);
                        seq.push(b'"');
                    }
                    seq.extend_from_slice(b",\"");
                    json::write_u64(seq, p.lsn.0);
                    seq.extend_from_slice(b"\"]");
                });
            }
            SourcePosition::Mysql(_) => avro::write_long(out, 0),
        }
        write_avro_opt_long(out, Some(ev.source_ts_ms.saturating_mul(1_000)));
        write_avro_opt_long(out, Some(ev.source_ts_ms.saturating_mul(1_000_000)));
        out.extend_from_slice(&self.src_avro_table);
        match &ev.position {
            SourcePosition::Postgres(p) => {
                write_avro_opt_long(out, p.tx_id.map(i64::from));
                write_avro_opt_long(out, lsn_i64(p.lsn.0));
                write_avro_opt_long(out, p.xmin.map(|x| x as i64));
                avro::write_long(out, 0); // origin: null
                avro::write_long(out, 0); // origin_lsn: null
            }
            SourcePosition::Mysql(m) => {
                avro::write_long(out, m.server_id as i64);
                write_avro_opt_str(out, m.gtid.as_deref());
                avro::write_string(out, &m.file);
                avro::write_long(out, m.pos as i64);
                avro::write_long(out, m.row as i64);
                write_avro_opt_long(out, m.thread.map(|t| t as i64));
                avro::write_long(out, 0); // query: not captured
            }
        }
        Ok(())
    }
}

/// `after` with each unchanged TOASTed value that `before` holds replaced by it: the value
/// did not change, and an old row image (REPLICA IDENTITY FULL) carries it in full, as
/// Debezium fills it. A `NULL` in `before` (a column absent from an old key image) is not
/// a value: the placeholder stays.
fn fill_unchanged(before: &Row, after: &Row) -> Row {
    Row(after
        .0
        .iter()
        .zip(before.0.iter().map(Some).chain(std::iter::repeat(None)))
        .map(|(a, b)| match (a, b) {
            (a, Some(b)) if a.is_unchanged() && !b.is_null() && !b.is_unchanged() => b.clone(),
            (a, _) => a.clone(),
        })
        .collect())
}

/// LSNs are u64; Debezium carries them in an int64 (they never reach 2^63 in practice).
fn lsn_i64(lsn: u64) -> Option<i64> {
    i64::try_from(lsn).ok()
}

pub(crate) fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos().min(i64::MAX as u128) as i64)
        .unwrap_or(0)
}

fn write_json_opt_str(out: &mut Vec<u8>, v: Option<&str>) {
    match v {
        Some(s) => json::write_str(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

fn write_json_opt_i64(out: &mut Vec<u8>, v: Option<i64>) {
    match v {
        Some(i) => json::write_i64(out, i),
        None => out.extend_from_slice(b"null"),
    }
}

fn write_avro_opt_str(out: &mut Vec<u8>, v: Option<&str>) {
    match v {
        Some(s) => {
            avro::write_long(out, 1);
            avro::write_string(out, s);
        }
        None => avro::write_long(out, 0),
    }
}

fn write_avro_opt_long(out: &mut Vec<u8>, v: Option<i64>) {
    match v {
        Some(i) => {
            avro::write_long(out, 1);
            avro::write_long(out, i);
        }
        None => avro::write_long(out, 0),
    }
}

fn write_tx_json(out: &mut Vec<u8>, tx: Option<&TransactionInfo>) {
    match tx {
        Some(t) => {
            out.extend_from_slice(b"{\"id\":");
            json::write_str(out, &t.id);
            out.extend_from_slice(b",\"total_order\":");
            json::write_i64(out, t.total_order.min(i64::MAX as u64) as i64);
            out.extend_from_slice(b",\"data_collection_order\":");
            json::write_i64(out, t.data_collection_order.min(i64::MAX as u64) as i64);
            out.push(b'}');
        }
        None => out.extend_from_slice(b"null"),
    }
}

fn write_tx_avro(out: &mut Vec<u8>, tx: Option<&TransactionInfo>) {
    match tx {
        Some(t) => {
            avro::write_long(out, 1);
            avro::write_string(out, &t.id);
            avro::write_long(out, t.total_order.min(i64::MAX as u64) as i64);
            avro::write_long(out, t.data_collection_order.min(i64::MAX as u64) as i64);
        }
        None => avro::write_long(out, 0),
    }
}
