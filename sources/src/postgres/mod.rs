//! The Postgres source, in the file set every source has:
//!
//! | file | owns |
//! |---|---|
//! | [`config`] | its keys of `[source]` and the resolved [`PgSourceConfig`] |
//! | [`check`] | the read-only preflight checks behind `cdc check` |
//! | [`setup`] | the publication and the replication slot, and where to start: resume, snapshot or not |
//! | [`snapshot`] | the initial snapshot on the slot's exported snapshot, handed off at its consistent point |
//! | [`stream`] | the replication stream: pgoutput messages into transactions, in commit order, with their positions |
//! | [`decode`] | the one type table, text and binary value decoding |
//! | [`metrics`] | the slot's and the acknowledgement path's gauges |
//!
//! Beside them, what only Postgres needs: the connection layer ([`conn`]), the
//! streaming-replication client ([`replication`], its socket task [`stream_task`], wire
//! framing in [`protocol`]), the pgoutput decoder ([`pgoutput`]), the relation cache
//! ([`relation`]), the spill of streamed transactions ([`spill`]), and [`source`], which
//! ties setup, snapshot and stream into the [`crate::Source`] the factory builds.

pub mod check;
pub mod config;
pub mod conn;
pub mod decode;
pub mod metrics;
pub mod pgoutput;
pub mod protocol;
pub mod relation;
pub mod replication;
pub mod setup;
pub mod snapshot;
pub mod source;
pub mod spill;
pub mod stream;
pub mod stream_task;
pub mod verify;

pub use config::{PgSettings, PgSourceConfig};
pub use conn::{PgConnectError, PgEndpoint};
pub use metrics::SlotStatus;
pub use pgoutput::{DecodeError, PgOutputDecoder, PgOutputMessage};
pub use relation::{RelationCache, RelationInfo, TypeResolver};
pub use replication::{
    flush_lsn_to_send, CreateSlotOptions, CreatedSlot, FeedbackHandle, FeedbackStatus,
    IdentifySystem, ReplicationConnection, ReplicationError, ReplicationStream, SlotSnapshot,
    StreamOptions,
};
pub use source::{PostgresSource, SnapshotMode};
