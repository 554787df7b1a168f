//! Binlog retention: is the source's position still on the server, and for how long?
//!
//! A Postgres slot makes the server keep WAL for us; a MySQL/MariaDB server keeps its
//! binlogs by its own rules (`binlog_expire_logs_seconds` / `expire_logs_days`, a manual
//! `PURGE BINARY LOGS`) whatever a reader still needs. So the connector watches the risk:
//!
//! - [`inspect`](fn@inspect) reads what the server still has: the files of
//!   `SHOW BINARY LOGS`, the current file/pos, the GTID state (MySQL `@@gtid_purged`;
//!   MariaDB has no purged set, so the oldest retained GTID per domain is read from the
//!   GTID_LIST event that starts the oldest file), the retention settings and the flavour.
//! - [`margin`](fn@margin) (pure) places a
//!   [`MySqlPosition`](cdc_schemas::MySqlPosition) against it: retained or purged (and
//!   then exactly what was lost, [`PurgedDetail`]), how much binlog lies after and before
//!   the position, and when the file holding it may expire.
//! - [`RetentionWatch`] runs both on a spare connection, owns the `cdc_mysql_binlog_*`
//!   gauges and logs once when the margin falls below its threshold and once when it
//!   recovers.
//!
//! Invariants and choices:
//! - GTIDs decide when both the position and the server have them (the source resumes by
//!   GTID, so a position is usable as long as its transactions' successors are retained,
//!   whatever the files are called); file:pos decides otherwise.
//! - A MariaDB GTID position means "everything up to this sequence number in each domain
//!   it names, nothing of a domain it does not name" (what `BINLOG_GTID_POS` and the
//!   stream record). A domain the oldest file's GTID list names but the position does not
//!   was therefore (partly) purged before we read it.
//! - File age: the server purges a file by its modification time, i.e. when it was
//!   closed (rotated), which is when its successor was created. `SHOW BINLOG EVENTS` has
//!   no timestamp column, so [`RetentionWatch`] learns it two ways: it *tracks* rotations
//!   (a file seen as the current one at a check and closed at the next is taken as closed
//!   at the earlier check, the conservative end), and for the file holding the position,
//!   when it was already closed before the watch started, it reads the header timestamp
//!   of its successor's Format_description event once, through a short non-blocking
//!   binlog dump on a connection of its own ([`file_created_at`]; needs REPLICATION
//!   SLAVE, which the source has anyway). Without either the age is [`Expiry::Unknown`].
//!   The current file expires no sooner than one full retention period from now.
//! - Every time is the server's clock (`UNIX_TIMESTAMP()`), the clock it purges by.
//!
//! Layout: this module holds what the server has ([`ServerBinlogs`] and its parts) and
//! [`RetentionError`]; `inspect` reads them, `margin` places a position against them,
//! `watch` holds [`RetentionWatch`] and its gauges, `task` holds [`RetentionTask`], the
//! watch as the source runs it (on start, then every `source.binlog_check_interval_ms`
//! against the durable position).

mod inspect;
mod margin;
mod task;
#[cfg(test)]
mod tests;
mod watch;

pub use inspect::{file_created_at, inspect};
pub use margin::{margin, Expiry, Margin, PurgedDetail};
pub use task::RetentionTask;
pub use watch::{RetentionMetrics, RetentionWatch};

use std::collections::BTreeMap;

use cdc_schemas::gtid::{GtidSet, MariaGtid};

/// Which server dialect answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    MySql,
    MariaDb,
}

/// One binlog file the server still has, as `SHOW BINARY LOGS` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BinlogFile {
    pub name: String,
    pub size: u64,
    /// Server time (unix seconds) at or before which the file was closed, when known: set
    /// by [`RetentionWatch`] from the rotations it saw, never by [`inspect`](fn@inspect).
    pub closed_after: Option<i64>,
}

/// The server's GTID state, as far as retention is concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerGtids {
    /// MySQL with `gtid_mode` other than ON: positions are file:pos only.
    None,
    /// MySQL: every GTID executed and every GTID whose binlog was purged.
    MySql { executed: GtidSet, purged: GtidSet },
    /// MariaDB.
    MariaDb {
        /// `@@gtid_binlog_state` as the server prints it (one GTID per domain and server).
        binlog_state: String,
        /// Per domain, the newest GTID *before* the oldest retained file (from its
        /// GTID_LIST event): every transaction of the domain with a higher sequence number
        /// is still on the server. A domain absent here is retained from its first GTID.
        oldest: BTreeMap<u32, MariaGtid>,
    },
}

/// How long the server keeps binlogs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetentionSettings {
    /// The effective expiry in seconds (`binlog_expire_logs_seconds`, else
    /// `expire_logs_days`); None: never purged automatically.
    pub expire_seconds: Option<u64>,
    /// `max_binlog_size`: the server rotates to a new file at about this size.
    pub max_binlog_size: u64,
}

/// What the server still has, read by [`inspect`](fn@inspect).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerBinlogs {
    pub flavor: Flavor,
    /// `@@version` (and `@@version_comment` after it).
    pub version: String,
    /// The account the connection is, `user@host` (for the fix of a missing grant).
    pub account: String,
    /// The server's clock when it answered (unix seconds).
    pub now: i64,
    /// Oldest first, as the server lists them; the last is the current one.
    pub files: Vec<BinlogFile>,
    /// The current file and position (`SHOW MASTER STATUS`).
    pub current_file: String,
    pub current_pos: u64,
    pub gtids: ServerGtids,
    pub retention: RetentionSettings,
}

/// Why [`inspect`](fn@inspect) could not read the server's binlogs.
#[derive(Debug, thiserror::Error)]
pub enum RetentionError {
    /// The connection failed or the server was busy: retried at the next check.
    #[error("reading the server's binlogs ({statement}) failed: {source}; the next check retries")]
    Transient {
        statement: &'static str,
        source: mysql_async::Error,
    },
    /// The account lacks the privilege to list binlogs.
    #[error("{account} may not run {statement}: it needs the {grant} privilege to watch binlog retention. Fix: GRANT {grant} ON *.* TO {account};")]
    Privilege {
        statement: &'static str,
        grant: &'static str,
        account: String,
    },
    /// The server writes no binlog at all.
    #[error("the server has no binary log (log_bin is off): there is nothing to read changes from. Fix: set log_bin = mysql-bin, binlog_format = ROW, binlog_row_image = FULL in my.cnf and restart the server")]
    BinlogOff,
    /// The server answered something this module does not understand.
    #[error(
        "unexpected answer to {statement}: {detail}. Fix: report this with the server's version"
    )]
    Unexpected {
        statement: &'static str,
        detail: String,
    },
}

impl RetentionError {
    /// True when the same check may succeed later (connection trouble); false when it
    /// needs the operator (a grant, the binlog on).
    pub fn is_transient(&self) -> bool {
        matches!(self, RetentionError::Transient { .. })
    }
}
