//! Record encoders: [`ChangeEvent`]s to Debezium-compatible keys and values, as Kafka
//! Connect JSON (with or without schemas) or Avro in the Confluent wire format.
//!
//! An [`Encoder`] is built once per table schema version (or once for Postgres logical
//! decoding messages). Building it derives everything that does not depend on the row:
//! the Connect key and value schemas, their Avro schema JSON, the JSON `"schema"` heads
//! and the constant parts of the `source` block in the configured format (JSON field
//! names are compile-time constants). Encoding a row then only walks the per-column
//! `connect::Conv` plans and appends to the caller's buffer: no schema lookups, no name
//! formatting, no JSON trees.
//!
//! This module holds the public API and what each record is made of (key, envelope,
//! message), written once for every format against the `writer::FormatWriter` seam;
//! `json.rs` and `avro.rs` implement it. Each entry point picks the format once
//! (`writer::with_writer!`), so the shared code is monomorphised per format and the hot
//! path has no dynamic dispatch.
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
//! (topic names and routing), [`txmeta`] (the transaction metadata topic's BEGIN/END
//! records), [`temporal`] and [`convert`] (value conversions); private:
//! `writer` (the format seam), `source` (the `source` and `transaction` blocks),
//! `record_schema` (the Connect schemas of envelopes and messages), `memo`.

pub mod avro;
pub mod avro_schema;
pub mod config;
pub mod connect;
pub mod convert;
pub mod envelope;
pub mod hidden;
pub mod json;
mod memo;
mod record_schema;
pub mod redelete;
pub mod redelete_avro;
mod source;
pub mod temporal;
pub mod topic;
pub mod txmeta;
mod writer;

use std::time::{SystemTime, UNIX_EPOCH};

pub use config::{
    BigIntUnsignedHandlingMode, BinaryHandlingMode, ConnectorKind, DecimalHandlingMode,
    EncoderConfig, IntervalHandlingMode, RecordFormat, SourceInfo, TimePrecisionMode,
};
pub use connect::{ConnectField, ConnectSchema, ConnectType};
pub use convert::ValueError;
pub use envelope::{
    HiddenValue, Record, RecordBuf, RecordKind, RecordSpan, HEADER_NEW_KEY, HEADER_OLD_KEY,
    HEADER_TRUNCATE_PARTITIONS,
};
pub use hidden::{HiddenReason, UnrepresentableMode, HEADER_UNREPRESENTABLE};
pub use record_schema::{source_schema, transaction_schema};
pub use topic::{RouteRule, TopicRouter};
pub use txmeta::TransactionMetadataEncoder;

use crate::event::{ChangeEvent, Op};
use crate::table::TableSchema;
use crate::value::{Row, Value};
use connect::{ColumnPlan, Conv};
use hidden::{HeaderBuf, Hidden, Image};
use source::SourcePieces;
use std::sync::Arc;
use writer::{field, with_writer, AnyWriter, FormatWriter, IdsMissing};

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
        /// Display name for errors, and the table of hidden values' headers.
        table: Arc<str>,
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
    /// The configured format's writer.
    writer: AnyWriter,
    /// The event-independent parts of the `source` block, in that format.
    source: SourcePieces,
}

fn table_label(t: &TableSchema) -> Arc<str> {
    t.id.to_string().into()
}

/// The table label of message encoders (they have no columns, so no hidden values).
fn no_table() -> &'static Arc<str> {
    static NONE: std::sync::OnceLock<Arc<str>> = std::sync::OnceLock::new();
    NONE.get_or_init(|| Arc::from(""))
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
        let writer = match config.format {
            RecordFormat::Json { schemas_enable } => AnyWriter::Json(json::JsonWriter::new(
                schemas_enable,
                key_schema.as_ref(),
                &value_schema,
            )),
            RecordFormat::Avro => AnyWriter::Avro(avro::AvroWriter),
        };
        let source =
            with_writer!(writer, w => SourcePieces::new(w, &config.source, db, schema, table));
        Ok(Encoder {
            id: memo::next_encoder_id(),
            config: config.clone(),
            target,
            key_schema,
            value_schema,
            avro_key,
            avro_value,
            ids: None,
            writer,
            source,
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

    fn ids_missing(&self) -> EncodeError {
        EncodeError::SchemaIdsMissing {
            table: self.label().to_string(),
        }
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

    /// Appends the record key of `ev` to `out`. Returns `Ok(false)` (and appends nothing)
    /// when the record has no key: keyless tables and truncate events. A key value the
    /// format cannot carry is written as its stand-in; its header is only kept by
    /// [`Encoder::records_into`].
    pub fn encode_key(&self, ev: &ChangeEvent, out: &mut Vec<u8>) -> Result<bool, EncodeError> {
        self.encode_key_into(ev, out, None)
    }

    #[inline(always)]
    pub(crate) fn encode_key_into(
        &self,
        ev: &ChangeEvent,
        out: &mut Vec<u8>,
        headers: Option<&mut HeaderBuf>,
    ) -> Result<bool, EncodeError> {
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
        let r = with_writer!(self.writer, w => match row {
            Some(row) => self.write_key_row(w, row, out, headers),
            None => self.write_message_key(w, ev, out),
        });
        if r.is_err() {
            out.truncate(start);
        }
        r.map(|()| true)
    }

    /// Appends the key of `row` (a full row of this encoder's table).
    pub(crate) fn encode_key_row(
        &self,
        row: &Row,
        out: &mut Vec<u8>,
        headers: Option<&mut HeaderBuf>,
    ) -> Result<(), EncodeError> {
        with_writer!(self.writer, w => self.write_key_row(w, row, out, headers))
    }

    /// Appends the record value of `ev`, stamped with the current time as the envelope's
    /// `ts_ms`/`ts_us`/`ts_ns` (when the connector processed the event). Values the format
    /// cannot carry are written as their stand-ins (`hidden.rs`); their headers are only
    /// kept by [`Encoder::records_into`].
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
        self.encode_value_into(ev, processed_at_ns, out, None)
    }

    #[inline(always)]
    pub(crate) fn encode_value_into(
        &self,
        ev: &ChangeEvent,
        processed_at_ns: i64,
        out: &mut Vec<u8>,
        headers: Option<&mut HeaderBuf>,
    ) -> Result<(), EncodeError> {
        self.check_target(ev)?;
        let start = out.len();
        let r = match self.target {
            Target::Message => with_writer!(self.writer, w => {
                self.write_message_value(w, ev, processed_at_ns, out)
            }),
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
                        headers,
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
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn encode_envelope(
        &self,
        op: Op,
        before: Option<&Row>,
        after: Option<&Row>,
        ev: &ChangeEvent,
        now_ns: i64,
        out: &mut Vec<u8>,
        mut headers: Option<&mut HeaderBuf>,
    ) -> Result<(), EncodeError> {
        with_writer!(self.writer, w => {
            self.write_envelope(w, op, [before, after], ev, now_ns, out, &mut headers)
        })
    }

    /// Where a row's hidden values go.
    #[inline]
    fn hidden<'a>(&'a self, image: Image, out: Option<&'a mut HeaderBuf>) -> Hidden<'a> {
        Hidden {
            mode: self.config.unrepresentable_handling_mode,
            image,
            table: match &self.target {
                Target::Table { table, .. } => table,
                Target::Message => no_table(),
            },
            out,
        }
    }

    #[inline]
    fn open_key<W: FormatWriter>(&self, w: &W, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        w.open_key(out, self.ids.and_then(|i| i.key))
            .map_err(|IdsMissing| self.ids_missing())
    }

    #[inline]
    fn open_value<W: FormatWriter>(&self, w: &W, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        w.open_value(out, self.ids.map(|i| i.value))
            .map_err(|IdsMissing| self.ids_missing())
    }

    fn write_key_row<W: FormatWriter>(
        &self,
        w: &W,
        row: &Row,
        out: &mut Vec<u8>,
        headers: Option<&mut HeaderBuf>,
    ) -> Result<(), EncodeError> {
        let Target::Table { key, .. } = &self.target else {
            return Ok(());
        };
        self.check_row(row)?;
        self.open_key(w, out)?;
        let mut hidden = self.hidden(Image::Key, headers);
        w.row(
            out,
            key,
            row,
            &self.config.unavailable_value_placeholder,
            &mut hidden,
        )
        .map_err(|(p, e)| self.value_error(p, e))?;
        w.close_key(out);
        Ok(())
    }

    fn write_message_key<W: FormatWriter>(
        &self,
        w: &W,
        ev: &ChangeEvent,
        out: &mut Vec<u8>,
    ) -> Result<(), EncodeError> {
        self.open_key(w, out)?;
        w.field(out, field!(first "prefix"));
        w.opt_string(out, ev.message.as_ref().map(|m| m.prefix.as_str()));
        w.end_struct(out);
        w.close_key(out);
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn write_envelope<W: FormatWriter>(
        &self,
        w: &W,
        op: Op,
        [before, after]: [Option<&Row>; 2],
        ev: &ChangeEvent,
        now_ns: i64,
        out: &mut Vec<u8>,
        headers: &mut Option<&mut HeaderBuf>,
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
        self.open_value(w, out)?;
        w.field(out, field!(first "before"));
        let mut hidden = self.hidden(Image::Before, headers.as_deref_mut());
        self.write_opt_row(w, columns, before, out, &mut hidden)?;
        w.field(out, field!("after"));
        let mut hidden = self.hidden(Image::After, headers.as_deref_mut());
        self.write_opt_row(w, columns, after, out, &mut hidden)?;
        w.field(out, field!("source"));
        self.write_source(w, ev, out)?;
        w.field(out, field!("transaction"));
        source::write_transaction(w, out, ev.tx.as_ref());
        w.field(out, field!("op"));
        w.symbol(out, op.code());
        if W::MEMOIZE {
            memo::times(now_ns, out, |o| write_times(w, o, now_ns));
        } else {
            write_times(w, out, now_ns);
        }
        w.end_struct(out);
        w.close_value(out);
        Ok(())
    }

    /// An envelope's `before` or `after`: the row, or NULL.
    #[inline(always)]
    fn write_opt_row<W: FormatWriter>(
        &self,
        w: &W,
        columns: &[ColumnPlan],
        row: Option<&Row>,
        out: &mut Vec<u8>,
        hidden: &mut Hidden<'_>,
    ) -> Result<(), EncodeError> {
        let Some(r) = row else {
            w.null(out);
            return Ok(());
        };
        w.branch(out, 1);
        w.row(
            out,
            columns,
            r,
            &self.config.unavailable_value_placeholder,
            hidden,
        )
        .map_err(|(p, e)| self.value_error(p, e))
    }

    fn write_message_value<W: FormatWriter>(
        &self,
        w: &W,
        ev: &ChangeEvent,
        now_ns: i64,
        out: &mut Vec<u8>,
    ) -> Result<(), EncodeError> {
        let msg = ev.message.as_ref();
        self.open_value(w, out)?;
        w.field(out, field!(first "op"));
        w.symbol(out, Op::Message.code());
        w.field(out, field!("ts_ms"));
        w.opt_long(out, Some(now_ns.div_euclid(1_000_000)));
        w.field(out, field!("source"));
        self.write_source_unmemoized(w, ev, out)?;
        w.field(out, field!("transaction"));
        source::write_transaction(w, out, ev.tx.as_ref());
        w.field(out, field!("message"));
        w.field(out, field!(first "prefix"));
        w.opt_string(out, msg.map(|m| m.prefix.as_str()));
        w.field(out, field!("content"));
        match msg.map(|m| m.content.as_slice()) {
            Some(c) => {
                w.branch(out, 1);
                let conv = Conv::Bytes(self.config.binary_handling_mode);
                w.value(out, &conv, &Value::Bytes(c.to_vec()), "")
                    .map_err(|reason| EncodeError::Value {
                        table: self.label().to_string(),
                        column: "content".into(),
                        reason,
                    })?;
            }
            None => w.null(out),
        }
        w.end_struct(out);
        w.end_struct(out);
        w.close_value(out);
        Ok(())
    }
}

/// The envelope's `ts_ms`, `ts_us`, `ts_ns`: when the connector processed the event.
#[inline(always)]
fn write_times<W: FormatWriter>(w: &W, o: &mut Vec<u8>, now_ns: i64) {
    for (f, t) in [
        (field!("ts_ms"), now_ns.div_euclid(1_000_000)),
        (field!("ts_us"), now_ns.div_euclid(1_000)),
        (field!("ts_ns"), now_ns),
    ] {
        w.field(o, f);
        w.opt_long(o, Some(t));
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

pub(crate) fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos().min(i64::MAX as u128) as i64)
        .unwrap_or(0)
}
