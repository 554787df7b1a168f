//! The Postgres source: the connection layer shared by preflight checks and the snapshot
//! and catalog queries ([`conn`]), the streaming-replication client ([`replication`],
//! wire framing in [`protocol`]), the pgoutput decoder ([`pgoutput`]), the relation cache
//! and type mapping ([`relation`]), the text-format value parser ([`values`]) and the
//! on-disk spill of streamed transactions ([`spill`]).

pub mod check;
pub mod config;
pub mod conn;
pub mod decode;
pub mod metrics;
pub mod pgoutput;
pub mod protocol;
pub mod relation;
pub mod replication;
pub mod snapshot;
pub mod snapshot_progress;
pub mod source;
pub mod spill;
pub mod stream_task;

pub use config::{PgSettings, PgSourceConfig};
pub use conn::{PgConnectError, PgEndpoint};
pub use decode::text as values;
pub use pgoutput::{DecodeError, PgOutputDecoder, PgOutputMessage};
pub use relation::{RelationCache, RelationInfo, TypeResolver};
pub use replication::{
    flush_lsn_to_send, CreateSlotOptions, CreatedSlot, FeedbackHandle, FeedbackStatus,
    IdentifySystem, ReplicationConnection, ReplicationError, ReplicationStream, SlotSnapshot,
    StreamOptions,
};
pub use source::{PostgresSource, SlotStatus, SnapshotMode};
