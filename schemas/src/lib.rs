//! The data model every crate of the connector speaks.
//!
//! - [`TableSchema`]: a captured table's columns, their types, nullability and key columns.
//! - [`Value`]: one column value, typed and lossless (arbitrary-precision numerics,
//!   timestamps with and without zone, NaN and ±infinity, bytes, JSON, arrays, and the
//!   difference between NULL and "the source did not send this value").
//! - [`ChangeEvent`]: one committed change (create, update, delete, snapshot read,
//!   truncate, logical message) with its source position and transaction metadata.
//! - [`SourcePosition`]: where in the source's own log a change sits (Postgres LSNs,
//!   MySQL/MariaDB GTID set and binlog file + position).
//!
//! Invariants this crate keeps: a [`Row`] always has exactly one value per column of
//! the [`TableSchema`] it belongs to, in column order; a position's textual form parses
//! back to the same position.
//!
//! Encodings live in [`encode`] (Debezium-compatible JSON and Avro records, topic
//! routing) and [`compat`] (Avro schema compatibility levels).
//!
//! This crate has no I/O and no database driver: sources translate into it, encoders and
//! sinks translate out of it.

pub mod compat;
pub mod config_keys;
pub mod decimal;
pub mod encode;
pub mod event;
pub mod failure;
pub mod filter;
pub mod gtid;
pub mod metrics;
pub mod position;
pub mod registry;
pub mod table;
pub mod value;

pub use decimal::Decimal;
pub use event::{ChangeEvent, LogicalMessage, Op, SnapshotMarker, TransactionInfo};
pub use gtid::{GtidSet, MariaGtid};
pub use position::{Checkpoint, Lsn, MySqlPosition, PgPosition, SourcePosition};
pub use table::{Column, ColumnType, TableId, TableSchema};
pub use value::{RawValue, Row, Value};
