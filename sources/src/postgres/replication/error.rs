//! Failures of the replication connection, classified once for the commands and the
//! stream alike: transient (retry with backoff) or definite, with the operator's fix.
//!
//! Classification goes by SQLSTATE and by what broke (connection, protocol), never by
//! the text of a server message, which `lc_messages` translates.

use super::super::conn::PgConnectError;
use super::super::protocol::PgServerError;
use crate::SourceError;

/// A failure on the replication connection.
#[derive(Debug, thiserror::Error)]
pub enum ReplicationError {
    /// Could not connect or authenticate.
    #[error(transparent)]
    Connect(#[from] PgConnectError),
    /// The server answered a command with an ErrorResponse.
    #[error("{what}: Postgres answered {error}. Fix: {fix}")]
    Server {
        what: String,
        error: Box<PgServerError>,
        fix: String,
        transient: bool,
    },
    /// The connection broke (reset, EOF, timeout): retry.
    #[error("{what}: the connection to Postgres at {addr} broke: {detail} (will retry)")]
    ConnectionLost {
        what: String,
        addr: String,
        detail: String,
    },
    /// The server sent something this client does not understand.
    #[error("{what}: unexpected data from Postgres at {addr}: {detail}. Fix: check that source.url points at a PostgreSQL server (10 or newer); if it does, report this as a bug")]
    Protocol {
        what: String,
        addr: String,
        detail: String,
    },
    /// A request the server cannot serve (e.g. an option its version lacks).
    #[error("{what}: {detail}. Fix: {fix}")]
    Unsupported {
        what: String,
        detail: String,
        fix: String,
    },
}

impl ReplicationError {
    /// True when retrying (after a backoff) may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            ReplicationError::Connect(e) => e.is_transient(),
            ReplicationError::Server { transient, .. } => *transient,
            ReplicationError::ConnectionLost { .. } => true,
            ReplicationError::Protocol { .. } | ReplicationError::Unsupported { .. } => false,
        }
    }

    /// The SQLSTATE when the server reported the error.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            ReplicationError::Server { error, .. } => Some(&error.code),
            _ => None,
        }
    }
}

impl From<ReplicationError> for SourceError {
    fn from(e: ReplicationError) -> SourceError {
        if e.is_transient() {
            return SourceError::transient("postgres replication", e.to_string()).caused_by(e);
        }
        let (what, detail, fix) = match &e {
            ReplicationError::Connect(c) => (
                "connecting for replication".to_string(),
                c.message.clone(),
                c.fix.clone(),
            ),
            ReplicationError::Server {
                what, error, fix, ..
            } => (what.clone(), error.to_string(), fix.clone()),
            ReplicationError::Unsupported { what, detail, fix } => {
                (what.clone(), detail.clone(), fix.clone())
            }
            other => (
                "postgres replication".into(),
                other.to_string(),
                "see the message".into(),
            ),
        };
        SourceError::definite(what, detail, fix).caused_by(e)
    }
}

/// SQLSTATEs after which a retry can succeed.
pub(in crate::postgres) fn sqlstate_is_transient(code: &str) -> bool {
    code.starts_with("08") // connection exception
        || matches!(
            code,
            "57P01" // admin_shutdown
                | "57P02" // crash_shutdown
                | "57P03" // cannot_connect_now
                | "53300" // too_many_connections
                | "55006" // object_in_use: the slot is active for another process
                | "40001"
                | "40P01"
        )
}

/// What the operator can do about a server error on a replication command.
pub(in crate::postgres) fn fix_for(code: &str, user: &str) -> String {
    match code {
        "42704" => "the slot or publication does not exist: create it (the connector creates its slot on first start), or fix slot.name / publication names in the config".into(),
        "42710" => "a replication slot of that name already exists: reuse it, pick another slot name, or drop it with SELECT pg_drop_replication_slot('<name>')".into(),
        "55006" => "another connection is streaming from this slot: stop the other consumer (see pg_stat_replication) or wait for it to go away".into(),
        "55000" => "the server is not configured for logical decoding: set wal_level = logical in postgresql.conf and restart Postgres".into(),
        "53400" => "the server ran out of replication slots or WAL senders: raise max_replication_slots / max_wal_senders (restart needed) or drop unused slots".into(),
        "42501" => format!("grant the replication privilege: ALTER ROLE \"{user}\" REPLICATION"),
        "42601" => "the server rejected the command syntax: check the server version (PostgreSQL 10 or newer is needed)".into(),
        c if sqlstate_is_transient(c) => "wait for the server to become available; the connector retries".into(),
        _ => "see the server's message".into(),
    }
}
