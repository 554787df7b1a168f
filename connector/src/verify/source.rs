//! The source side of a verification: the table's rows (read by
//! [`cdc_sources::verify::TableReader`], the values a snapshot would carry) turned into
//! what a sink sees of them — encoded with the connector's encoder settings
//! ([`encoder_config`] of `[format]`, and the table re-keyed by
//! `source.message_key_columns` as the pipeline does) and decoded back by the sinks'
//! decoder into the record's key and after-image as JSON.
//!
//! The rows are encoded as JSON without schemas whatever `[format] value` is: the sinks'
//! decoder turns an Avro record into exactly the JSON Kafka Connect's JsonConverter
//! writes for it, so the JSON is the same value either way, and no registry is needed.
//!
//! Invariants: an [`Entry`]'s key and after-image are what
//! [`cdc_sinks::change::Decoder`] would give for a snapshot record of the row; memory is
//! one chunk's entries, and a chunk is at most `--chunk-rows` rows and, with
//! [`SourceSide::set_chunk_memory`], about that many bytes of decoded rows: the first
//! chunk is small, and each next one is sized by the rows of the one before
//! ([`heap_bytes`]), so wide rows make short chunks.

use std::sync::Arc;

use cdc_schemas::encode::{ConnectorKind, Encoder, RecordFormat};
use cdc_schemas::{
    ChangeEvent, Lsn, MySqlPosition, PgPosition, Row, SourcePosition, TableId, TableSchema,
};
use cdc_sinks::change::{Decoded, Decoder};
use cdc_sinks::view::ColumnMap;
use cdc_sinks::SinkRecord;
use cdc_sources::verify::{ReadMark, TableReader};
use serde_json::Value;

use super::compare::{heap_bytes, JsonRow};
use super::VerifyError;
use crate::config::Config;
use crate::pipeline::run::encoder_config;

/// One source row as its record carries it.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub key: JsonRow,
    pub after: JsonRow,
}

/// The table of the source, read as records.
pub struct SourceSide {
    reader: TableReader,
    schema: Arc<TableSchema>,
    encoder: Encoder,
    decoder: Decoder,
    position: SourcePosition,
    topic: Arc<str>,
    key_buf: Vec<u8>,
    value_buf: Vec<u8>,
    /// A sink's column selection and renames, applied to the after-images.
    columns: Option<ColumnMap>,
    /// The memory a chunk may take (`None`: only `--chunk-rows` bounds it).
    chunk_bytes: Option<usize>,
    /// The memory one row of the last chunk took, on average (estimated).
    row_bytes: Option<usize>,
}

/// Rows of the first chunk when chunks are sized by memory (before any row was seen).
const FIRST_CHUNK_ROWS: usize = 100;

impl SourceSide {
    pub async fn open(config: &Config, table: &TableId) -> Result<SourceSide, VerifyError> {
        let spec = config.source_spec();
        let (kind, database) = match cdc_sources::build(&spec) {
            Ok(s) => (s.connector_kind(), s.database().to_string()),
            Err(e) => return Err(VerifyError::Usage(e.to_string())),
        };
        let reader = TableReader::open(&spec, table)
            .await
            .map_err(VerifyError::from_source)?;
        let described = reader.schema();
        // As the pipeline does: `source.message_key_columns` names the record key.
        let schema = match config.source.common.key_columns().apply(&described) {
            Ok(Some(t)) => Arc::new(t),
            Ok(None) => described,
            Err(e) => return Err(VerifyError::Usage(e.to_string())),
        };
        if !schema.has_key() {
            return Err(VerifyError::Usage(format!(
                "{table}: its records have no key, so rows cannot be matched"
            )));
        }
        let mut enc_config = encoder_config(config, kind, &database);
        enc_config.format = RecordFormat::Json {
            schemas_enable: false,
        };
        let encoder = Encoder::new(&enc_config, &schema)
            .map_err(|e| VerifyError::Usage(format!("{table}: {e}")))?;
        let position = match kind {
            ConnectorKind::Postgres => SourcePosition::Postgres(PgPosition {
                commit_lsn: Lsn::ZERO,
                lsn: Lsn::ZERO,
                tx_id: None,
                xmin: None,
            }),
            _ => SourcePosition::Mysql(MySqlPosition::default()),
        };
        let topic: Arc<str> = config
            .topic_router()
            .map_err(|(k, m)| VerifyError::Usage(format!("{k}: {m}")))?
            .topic_for(table)
            .into();
        Ok(SourceSide {
            reader,
            schema,
            encoder,
            decoder: Decoder::new(None),
            position,
            topic,
            key_buf: Vec::new(),
            value_buf: Vec::new(),
            columns: None,
            chunk_bytes: None,
            row_bytes: None,
        })
    }

    /// Compares with a sink's view: its column selection and renames apply.
    pub fn set_columns(&mut self, columns: ColumnMap) {
        self.columns = Some(columns);
    }

    /// Sizes the chunks to about `bytes` of decoded rows each (still at most the rows
    /// asked for).
    pub fn set_chunk_memory(&mut self, bytes: usize) {
        self.chunk_bytes = Some(bytes.max(1));
    }

    /// The rows of the next chunk: `max` at most, and about what fits its memory at the
    /// size of the last chunk's rows.
    fn chunk_rows(&self, max: usize) -> usize {
        match (self.chunk_bytes, self.row_bytes) {
            (None, _) => max,
            (Some(_), None) => max.min(FIRST_CHUNK_ROWS),
            (Some(b), Some(r)) => (b / r.max(1)).clamp(1, max),
        }
    }

    /// The topic the table's records go to.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The record key's column names, in key order.
    pub fn key_columns(&self) -> Vec<String> {
        self.schema.key_columns().map(|c| c.name.clone()).collect()
    }

    pub fn can_lookup(&self) -> bool {
        self.reader.can_lookup()
    }

    /// Starts a pass over the table (a new consistent read).
    pub async fn begin(&mut self) -> Result<ReadMark, VerifyError> {
        self.reader.begin().await.map_err(VerifyError::from_source)
    }

    pub async fn end(&mut self) -> Result<(), VerifyError> {
        self.reader.end().await.map_err(VerifyError::from_source)
    }

    /// The next chunk of the pass, in key order; empty at its end.
    pub async fn next_chunk(&mut self, rows: usize) -> Result<Vec<Entry>, VerifyError> {
        let rows = self
            .reader
            .next_chunk(self.chunk_rows(rows))
            .await
            .map_err(VerifyError::from_source)?;
        let entries = self.entries(rows).await?;
        if self.chunk_bytes.is_some() && !entries.is_empty() {
            let bytes: usize = entries
                .iter()
                .map(|e| std::mem::size_of::<Entry>() + heap_bytes(&e.key) + heap_bytes(&e.after))
                .sum();
            self.row_bytes = Some(bytes / entries.len());
        }
        Ok(entries)
    }

    /// The rows of these record keys, in the current pass (those that exist).
    pub async fn lookup(&mut self, keys: &[JsonRow]) -> Result<Vec<Entry>, VerifyError> {
        let values: Vec<Vec<Value>> = keys.iter().map(|k| k.values().cloned().collect()).collect();
        let rows = self
            .reader
            .lookup(&values)
            .await
            .map_err(VerifyError::from_source)?;
        self.entries(rows).await
    }

    async fn entries(&mut self, rows: Vec<Row>) -> Result<Vec<Entry>, VerifyError> {
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let ev = ChangeEvent::read(self.schema.clone(), row, self.position.clone(), 0)
                .map_err(|e| VerifyError::Failed(format!("{}: {e}", self.schema.id)))?;
            self.key_buf.clear();
            self.value_buf.clear();
            let encoded = self
                .encoder
                .encode_key(&ev, &mut self.key_buf)
                .and_then(|_| self.encoder.encode_value_at(&ev, 0, &mut self.value_buf));
            if let Err(e) = encoded {
                return Err(VerifyError::Failed(format!(
                    "encoding a row of {} as the connector would: {e}",
                    self.schema.id
                )));
            }
            let record = SinkRecord {
                topic: self.topic.clone(),
                partition: 0,
                offset: 0,
                timestamp_ms: 0,
                key: Some(self.key_buf.clone().into()),
                value: Some(self.value_buf.clone().into()),
                headers: Vec::new(),
            };
            match self.decoder.decode(&record).await {
                Ok(Decoded::Change(mut c)) => {
                    if let Some(m) = &mut self.columns {
                        m.apply(&mut c);
                    }
                    out.push(Entry {
                        key: c.key,
                        after: c.after.unwrap_or_default(),
                    })
                }
                Ok(Decoded::Skip) => {}
                Err(e) => {
                    return Err(VerifyError::Failed(format!(
                        "reading back a record of {}: {e}",
                        self.schema.id
                    )))
                }
            }
        }
        Ok(out)
    }
}
