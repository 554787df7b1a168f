//! The Connect schemas of the records Debezium emits: the change envelope, its `source`
//! and `transaction` blocks, the key and value of Postgres logical decoding messages, and
//! the key and value of the transaction metadata topic's BEGIN/END records.
//!
//! Invariant: field order and names, schema names and versions are Debezium 3.x's and
//! match the order the encoder writes the fields in; a change here is a change of every
//! record's bytes and of the schemas registered for them.

use crate::encode::config::{BinaryHandlingMode, ConnectorKind, EncoderConfig};
use crate::encode::connect::{ConnectField, ConnectSchema, ConnectType};

/// The `source` block's Connect schema (Debezium 3.x field order).
pub fn source_schema(config: &EncoderConfig) -> ConnectSchema {
    use ConnectType as T;
    let s = |t: T| ConnectSchema::of(t);
    let snapshot = ConnectSchema::of(T::String)
        .named("io.debezium.data.Enum", 1)
        .param(
            "allowed",
            "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental",
        )
        .optional();
    let snapshot = ConnectSchema {
        default: Some("false".into()),
        ..snapshot
    };
    let mut fields = vec![
        ConnectField::new("version", s(T::String)),
        ConnectField::new("connector", s(T::String)),
        ConnectField::new("name", s(T::String)),
        ConnectField::new("ts_ms", s(T::Int64)),
        ConnectField::new("snapshot", snapshot),
        ConnectField::new("db", s(T::String)),
        ConnectField::new("sequence", s(T::String).optional()),
        ConnectField::new("ts_us", s(T::Int64).optional()),
        ConnectField::new("ts_ns", s(T::Int64).optional()),
    ];
    match config.source.connector {
        ConnectorKind::Postgres => fields.extend([
            ConnectField::new("schema", s(T::String)),
            ConnectField::new("table", s(T::String)),
            ConnectField::new("txId", s(T::Int64).optional()),
            ConnectField::new("lsn", s(T::Int64).optional()),
            ConnectField::new("xmin", s(T::Int64).optional()),
            ConnectField::new("origin", s(T::String).optional()),
            ConnectField::new("origin_lsn", s(T::Int64).optional()),
        ]),
        ConnectorKind::MySql | ConnectorKind::MariaDb => fields.extend([
            ConnectField::new("table", s(T::String).optional()),
            ConnectField::new("server_id", s(T::Int64)),
            ConnectField::new("gtid", s(T::String).optional()),
            ConnectField::new("file", s(T::String)),
            ConnectField::new("pos", s(T::Int64)),
            ConnectField::new("row", s(T::Int32)),
            ConnectField::new("thread", s(T::Int64).optional()),
            ConnectField::new("query", s(T::String).optional()),
        ]),
    }
    ConnectSchema::strukt(config.source.connector.source_schema_name(), fields).version(1)
}

/// Debezium's `event.block` transaction schema.
pub fn transaction_schema() -> ConnectSchema {
    ConnectSchema::strukt(
        "event.block",
        vec![
            ConnectField::new("id", ConnectSchema::of(ConnectType::String)),
            ConnectField::new("total_order", ConnectSchema::of(ConnectType::Int64)),
            ConnectField::new(
                "data_collection_order",
                ConnectSchema::of(ConnectType::Int64),
            ),
        ],
    )
    .version(1)
    .optional()
}

/// The envelope: before, after, source, transaction, op, ts_ms, ts_us, ts_ns (version 2,
/// as Debezium 3.x emits it).
pub(crate) fn envelope_schema(
    config: &EncoderConfig,
    base: &str,
    row: ConnectSchema,
) -> ConnectSchema {
    let i64o = || ConnectSchema::of(ConnectType::Int64).optional();
    ConnectSchema::strukt(
        format!("{base}.Envelope"),
        vec![
            ConnectField::new("before", row.clone()),
            ConnectField::new("after", row),
            ConnectField::new("source", source_schema(config)),
            ConnectField::new("transaction", transaction_schema()),
            ConnectField::new("op", ConnectSchema::of(ConnectType::String)),
            ConnectField::new("ts_ms", i64o()),
            ConnectField::new("ts_us", i64o()),
            ConnectField::new("ts_ns", i64o()),
        ],
    )
    .version(2)
}

/// The key of a logical decoding message: `{prefix}`.
pub(crate) fn message_key_schema() -> ConnectSchema {
    ConnectSchema::strukt(
        "io.debezium.connector.postgresql.MessageKey",
        vec![ConnectField::new(
            "prefix",
            ConnectSchema::of(ConnectType::String).optional(),
        )],
    )
    .version(1)
}

/// The value of a logical decoding message: `{op, ts_ms, source, transaction, message}`,
/// the content as the binary handling mode has it.
pub(crate) fn message_value_schema(config: &EncoderConfig) -> ConnectSchema {
    let content = match config.binary_handling_mode {
        BinaryHandlingMode::Bytes => ConnectSchema::of(ConnectType::Bytes),
        _ => ConnectSchema::of(ConnectType::String),
    };
    let block = ConnectSchema::strukt(
        "io.debezium.connector.postgresql.Message",
        vec![
            ConnectField::new("prefix", ConnectSchema::of(ConnectType::String).optional()),
            ConnectField::new("content", content.optional()),
        ],
    )
    .version(1);
    ConnectSchema::strukt(
        "io.debezium.connector.postgresql.MessageValue",
        vec![
            ConnectField::new("op", ConnectSchema::of(ConnectType::String)),
            ConnectField::new("ts_ms", ConnectSchema::of(ConnectType::Int64).optional()),
            ConnectField::new("source", source_schema(config)),
            ConnectField::new("transaction", transaction_schema()),
            ConnectField::new("message", block),
        ],
    )
    .version(1)
}

/// The key of a transaction metadata record (`<prefix>.transaction`): `{id}`.
pub(crate) fn transaction_metadata_key_schema() -> ConnectSchema {
    ConnectSchema::strukt(
        "io.debezium.connector.common.TransactionMetadataKey",
        vec![ConnectField::new(
            "id",
            ConnectSchema::of(ConnectType::String),
        )],
    )
    .version(1)
}

/// The value of a transaction metadata record: `{status, id, event_count,
/// data_collections: [{data_collection, event_count}], ts_ms}` (BEGIN: `event_count` and
/// `data_collections` null).
pub(crate) fn transaction_metadata_value_schema() -> ConnectSchema {
    let s = |t: ConnectType| ConnectSchema::of(t);
    let collection = ConnectSchema::strukt(
        "event.collection",
        vec![
            ConnectField::new("data_collection", s(ConnectType::String)),
            ConnectField::new("event_count", s(ConnectType::Int64)),
        ],
    )
    .version(1)
    // Debezium's: the items are optional structs (never null in its records or ours).
    .optional();
    ConnectSchema::strukt(
        "io.debezium.connector.common.TransactionMetadataValue",
        vec![
            ConnectField::new("status", s(ConnectType::String)),
            ConnectField::new("id", s(ConnectType::String)),
            ConnectField::new("event_count", s(ConnectType::Int64).optional()),
            ConnectField::new(
                "data_collections",
                s(ConnectType::Array(Box::new(collection))).optional(),
            ),
            ConnectField::new("ts_ms", s(ConnectType::Int64)),
        ],
    )
    .version(1)
}
