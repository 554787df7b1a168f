//! Binlog retention: is the source's position still on the server, and for how long?
//!
//! A Postgres slot makes the server keep WAL for us; a MySQL/MariaDB server keeps its
//! binlogs by its own rules (`binlog_expire_logs_seconds` / `expire_logs_days`, a manual
//! `PURGE BINARY LOGS`) whatever a reader still needs. So the connector watches the risk:
//!
//! - [`inspect`] reads what the server still has: the files of `SHOW BINARY LOGS`, the
//!   current file/pos, the GTID state (MySQL `@@gtid_purged`; MariaDB has no purged set,
//!   so the oldest retained GTID per domain is read from the GTID_LIST event that starts
//!   the oldest file), the retention settings and the flavour.
//! - [`margin`] (pure) places a [`MySqlPosition`] against it: retained or purged (and then
//!   exactly what was lost, [`PurgedDetail`]), how much binlog lies after and before the
//!   position, and when the file holding it may expire.
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

use std::collections::BTreeMap;

use cdc_schemas::gtid::{GtidSet, MariaGtid};
use cdc_schemas::metrics::{Gauge, Metrics};
use cdc_schemas::MySqlPosition;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row};

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
    /// by [`RetentionWatch`] from the rotations it saw, never by [`inspect`].
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

/// What the server still has, read by [`inspect`].
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

/// Why [`inspect`] could not read the server's binlogs.
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

/// When the file holding the position may expire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// The server never purges binlogs by age (`expire_logs_days = 0`).
    Never,
    /// At the earliest in this many seconds (0: it may go at the next rotation, or is
    /// gone). The server purges by age only when it opens a new file, so the real moment
    /// is the first rotation after this.
    In(u64),
    /// The file was closed before the watch started watching: its age is not known.
    Unknown,
}

impl std::fmt::Display for Expiry {
    /// Seconds, or `never` / `unknown` (for logs).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Expiry::Never => f.write_str("never"),
            Expiry::In(s) => write!(f, "{s}"),
            Expiry::Unknown => f.write_str("unknown"),
        }
    }
}

/// Where a position stands against the server's binlogs; see [`margin`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Margin {
    /// The position is still on the server (`purged` is None).
    pub retained: bool,
    /// Files at or after the position's file (its own included).
    pub files_ahead: usize,
    /// Binlog bytes from the position to the server's current position: how far we lag.
    pub bytes_ahead: u64,
    /// Files the server still has before the position's file.
    pub files_before: usize,
    /// Binlog bytes the server still has before the position.
    pub bytes_before: u64,
    pub expires_in: Expiry,
    pub purged: Option<PurgedDetail>,
}

/// What a purged position lost: the definite error the source raises.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the binlog at {position} was purged by the server; the changes between it and {oldest} are lost ({lost}): take a new snapshot (snapshot.mode = \"when_needed\" does it by itself) and raise expire_logs_days / binlog_expire_logs_seconds")]
pub struct PurgedDetail {
    /// Our position, `file:pos` (and its GTID set).
    pub position: String,
    /// The oldest the server still has: its first file (and the GTIDs it starts after).
    pub oldest: String,
    /// What was lost, in words: the files and/or the GTIDs.
    pub lost: String,
    /// The files between ours and the oldest retained one, ours included (when the names
    /// say so).
    pub lost_files: Vec<String>,
    /// The GTIDs purged that the position had not processed (MySQL set difference;
    /// MariaDB `domain-server-seq` ranges per domain).
    pub lost_gtids: Option<String>,
}

fn classify<'a>(
    statement: &'static str,
    account: &'a str,
    flavor: Option<Flavor>,
) -> impl Fn(mysql_async::Error) -> RetentionError + 'a {
    move |e| match &e {
        // ER_SPECIFIC_ACCESS_DENIED_ERROR, ER_DBACCESS_DENIED_ERROR, ER_TABLEACCESS_DENIED_ERROR
        mysql_async::Error::Server(s) if matches!(s.code, 1227 | 1044 | 1142) => {
            RetentionError::Privilege {
                statement,
                grant: match (flavor, statement) {
                    (_, "COM_BINLOG_DUMP") | (Some(Flavor::MySql), "SHOW BINLOG EVENTS") => {
                        "REPLICATION SLAVE"
                    }
                    (Some(Flavor::MySql), _) => "REPLICATION CLIENT",
                    // MariaDB 10.5+: BINLOG MONITOR (REPLICATION CLIENT is its old name).
                    _ => "BINLOG MONITOR",
                },
                account: quote_account(account),
            }
        }
        // ER_NO_BINARY_LOGGING
        mysql_async::Error::Server(s) if s.code == 1381 => RetentionError::BinlogOff,
        // Anything else (I/O, a closed connection, a busy or restarting server) is retried:
        // this is a monitor, its failure alone must not stop the connector.
        _ => RetentionError::Transient {
            statement,
            source: e,
        },
    }
}

/// `cdc@%` → `'cdc'@'%'`.
fn quote_account(account: &str) -> String {
    match account.rsplit_once('@') {
        Some((u, h)) => format!("'{u}'@'{h}'"),
        None if account.is_empty() => "the connector's user".into(),
        None => format!("'{account}'"),
    }
}

/// Reads what the server still has. Five or six short statements, no binlog read beyond
/// the first three events of the oldest file (MariaDB): cheap enough to run every minute.
///
/// Needs REPLICATION CLIENT (MySQL) / BINLOG MONITOR (MariaDB); a missing grant is
/// [`RetentionError::Privilege`], which names it.
pub async fn inspect(conn: &mut Conn) -> Result<ServerBinlogs, RetentionError> {
    const VARS: &str = "SHOW GLOBAL VARIABLES";
    // SHOW VARIABLES (not SELECT @@x) because some of these do not exist on every version.
    let vars: Vec<(String, String)> = conn
        .query(
            "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('version', 'version_comment', 'log_bin', \
             'binlog_expire_logs_seconds', 'expire_logs_days', 'binlog_expire_logs_auto_purge', \
             'max_binlog_size', 'gtid_mode')",
        )
        .await
        .map_err(classify(VARS, "", None))?;
    let var = |n: &str| {
        vars.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.as_str())
    };
    let version = format!(
        "{} {}",
        var("version").unwrap_or(""),
        var("version_comment").unwrap_or("")
    )
    .trim()
    .to_string();
    let flavor = if version.to_ascii_lowercase().contains("mariadb") {
        Flavor::MariaDb
    } else {
        Flavor::MySql
    };
    let on = |v: Option<&str>| v.is_some_and(|v| v.eq_ignore_ascii_case("ON") || v == "1");
    if !on(var("log_bin")) {
        return Err(RetentionError::BinlogOff);
    }
    let retention = RetentionSettings {
        expire_seconds: effective_expiry(
            var("binlog_expire_logs_seconds").and_then(|v| v.parse().ok()),
            var("expire_logs_days").and_then(|v| v.parse().ok()),
            var("binlog_expire_logs_auto_purge").map(|v| on(Some(v))),
        ),
        max_binlog_size: var("max_binlog_size")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
    };

    // SELECT for the GTID sets: SHOW VARIABLES may truncate long values.
    const GTIDS: &str = "SELECT @@GLOBAL.gtid_*";
    let gtid_query = match flavor {
        Flavor::MariaDb => {
            "SELECT CURRENT_USER(), UNIX_TIMESTAMP(), @@GLOBAL.gtid_binlog_state, ''"
        }
        Flavor::MySql => {
            "SELECT CURRENT_USER(), UNIX_TIMESTAMP(), @@GLOBAL.gtid_executed, @@GLOBAL.gtid_purged"
        }
    };
    let row: Option<(String, i64, Option<String>, Option<String>)> = conn
        .query_first(gtid_query)
        .await
        .map_err(classify(GTIDS, "", Some(flavor)))?;
    let (account, now, g1, g2) = row.ok_or_else(|| RetentionError::Unexpected {
        statement: GTIDS,
        detail: "no row".into(),
    })?;
    let acc = account.clone();

    const LOGS: &str = "SHOW BINARY LOGS";
    let rows: Vec<Row> = conn
        .query(LOGS)
        .await
        .map_err(classify(LOGS, &acc, Some(flavor)))?;
    let mut files = Vec::with_capacity(rows.len());
    for r in rows {
        let name: Option<String> = r.get(0);
        let size: Option<u64> = r.get(1);
        match (name, size) {
            (Some(name), Some(size)) => files.push(BinlogFile {
                name,
                size,
                closed_after: None,
            }),
            _ => {
                return Err(RetentionError::Unexpected {
                    statement: LOGS,
                    detail: "a row without Log_name and File_size".into(),
                })
            }
        }
    }
    if files.is_empty() {
        return Err(RetentionError::BinlogOff);
    }

    const STATUS: &str = "SHOW MASTER STATUS";
    // MySQL 8.4 removed SHOW MASTER STATUS for SHOW BINARY LOG STATUS (8.2+); MariaDB
    // knows only the former (and SHOW BINLOG STATUS).
    let status: Option<Row> = match conn.query_first(STATUS).await {
        Ok(r) => r,
        Err(mysql_async::Error::Server(s)) if s.code == 1064 => conn
            .query_first("SHOW BINARY LOG STATUS")
            .await
            .map_err(classify("SHOW BINARY LOG STATUS", &acc, Some(flavor)))?,
        Err(e) => return Err(classify(STATUS, &acc, Some(flavor))(e)),
    };
    let Some(status) = status else {
        return Err(RetentionError::BinlogOff);
    };
    let current_file: String = status.get(0).unwrap_or_default();
    let current_pos: u64 = status.get(1).unwrap_or(0);

    let parse = |statement: &'static str, s: &str| {
        s.parse::<GtidSet>()
            .map_err(|e| RetentionError::Unexpected {
                statement,
                detail: e.to_string(),
            })
    };
    let gtids = match flavor {
        Flavor::MySql if on(var("gtid_mode")) => ServerGtids::MySql {
            executed: parse(GTIDS, g1.as_deref().unwrap_or(""))?,
            purged: parse(GTIDS, g2.as_deref().unwrap_or(""))?,
        },
        Flavor::MySql => ServerGtids::None,
        Flavor::MariaDb => {
            const EVENTS: &str = "SHOW BINLOG EVENTS";
            // The oldest file starts Format_description, Gtid_list, Binlog_checkpoint.
            // `SHOW` cannot be prepared on MariaDB; the name comes from the server itself
            // and is quoted.
            let sql = format!(
                "SHOW BINLOG EVENTS IN '{}' LIMIT 3",
                files[0].name.replace('\\', "\\\\").replace('\'', "''")
            );
            let rows: Vec<Row> =
                conn.query(sql)
                    .await
                    .map_err(classify(EVENTS, &acc, Some(flavor)))?;
            let mut list = None;
            for r in rows {
                let kind: Option<String> = r.get(2);
                if kind.as_deref() == Some("Gtid_list") {
                    list = r.get::<Option<String>, _>(5).flatten();
                    break;
                }
            }
            let list = list.unwrap_or_default();
            let oldest = max_per_domain(list.trim().trim_start_matches('[').trim_end_matches(']'))
                .map_err(|detail| RetentionError::Unexpected {
                    statement: EVENTS,
                    detail,
                })?;
            ServerGtids::MariaDb {
                binlog_state: g1.unwrap_or_default(),
                oldest,
            }
        }
    };

    Ok(ServerBinlogs {
        flavor,
        version,
        account,
        now,
        files,
        current_file,
        current_pos,
        gtids,
        retention,
    })
}

/// When the server created binlog `file`: the header timestamp (server clock) of the
/// file's Format_description event, read by a non-blocking binlog dump from `file:4` on
/// a new connection made with `conn`'s options (so `conn` stays usable). Registers as
/// server id 0, which servers treat as a one-shot reader (no replica is displaced). Needs
/// REPLICATION SLAVE. At most a few events are read; bounded by a 10 s timeout.
pub async fn file_created_at(conn: &Conn, file: &str) -> Result<i64, RetentionError> {
    use futures_util::StreamExt;
    use mysql_async::binlog::EventType;
    const DUMP: &str = "COM_BINLOG_DUMP";
    let opts = conn.opts().clone();
    let work = async {
        let c = Conn::new(opts).await.map_err(classify(DUMP, "", None))?;
        let req = mysql_async::BinlogStreamRequest::new(0)
            .with_filename(file.as_bytes())
            .with_pos(4u64)
            .with_non_blocking();
        let mut stream = c
            .get_binlog_stream(req)
            .await
            .map_err(classify(DUMP, "", None))?;
        let mut found = None;
        // A fake Rotate (timestamp 0) comes first, then the file's own events.
        for _ in 0..4 {
            let Some(ev) = stream.next().await else { break };
            let ev = ev.map_err(classify(DUMP, "", None))?;
            if ev.header().event_type() == Ok(EventType::FORMAT_DESCRIPTION_EVENT) {
                found = Some(ev.header().timestamp() as i64);
                break;
            }
        }
        let _ = stream.close().await;
        found.ok_or_else(|| RetentionError::Unexpected {
            statement: DUMP,
            detail: format!("no Format_description event at the start of {file}"),
        })
    };
    match tokio::time::timeout(std::time::Duration::from_secs(10), work).await {
        Ok(r) => r,
        Err(_) => Err(RetentionError::Unexpected {
            statement: DUMP,
            detail: "no answer within 10 s".into(),
        }),
    }
}

/// MySQL 8.0 and MariaDB 10.6+: `binlog_expire_logs_seconds` wins when set; else
/// `expire_logs_days` (fractional on MariaDB); 0 is "never". MySQL 8.0.29+
/// `binlog_expire_logs_auto_purge = OFF` turns expiry off whatever the period.
fn effective_expiry(
    seconds: Option<u64>,
    days: Option<f64>,
    auto_purge: Option<bool>,
) -> Option<u64> {
    if auto_purge == Some(false) {
        return None;
    }
    match (seconds, days) {
        (Some(s), _) if s > 0 => Some(s),
        (_, Some(d)) if d > 0.0 => Some((d * 86_400.0) as u64),
        _ => None,
    }
}

/// `0-1-5,0-2-7,2-1-3` → the highest sequence per domain (a binlog state has one GTID
/// per domain *and server*; sequence numbers grow within a domain).
fn max_per_domain(list: &str) -> Result<BTreeMap<u32, MariaGtid>, String> {
    let mut m: BTreeMap<u32, MariaGtid> = BTreeMap::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let g: MariaGtid = item
            .parse()
            .map_err(|_| format!("{item:?} is not a MariaDB GTID"))?;
        let e = m.entry(g.domain).or_insert(g);
        if g.seq > e.seq {
            *e = g;
        }
    }
    Ok(m)
}

/// `binlog.000012` → (`binlog`, 12, 6 digits).
fn split_name(name: &str) -> Option<(&str, u64, usize)> {
    let (base, ext) = name.rsplit_once('.')?;
    let n = ext.parse().ok()?;
    Some((base, n, ext.len()))
}

/// `a - b` for MySQL GTID sets (`b` may be a MariaDB set: then nothing is subtracted).
fn mysql_minus(a: &GtidSet, b: &GtidSet) -> GtidSet {
    let GtidSet::MySql(am) = a else {
        return a.clone();
    };
    let empty = BTreeMap::new();
    let bm = match b {
        GtidSet::MySql(m) => m,
        GtidSet::MariaDb(_) => &empty,
    };
    let mut out = GtidSet::empty_mysql();
    for ((uuid, tag), intervals) in am {
        let minus: &[(u64, u64)] = bm.get(&(uuid.clone(), tag.clone())).map_or(&[], |v| v);
        for &(s, e) in intervals {
            // Walk b's intervals (sorted, disjoint) cutting [s, e].
            let mut from = s;
            for &(bs, be) in minus {
                if be < from || bs > e {
                    continue;
                }
                if bs > from {
                    add_range(&mut out, uuid, tag, from, bs - 1);
                }
                from = be.saturating_add(1);
                if from > e {
                    break;
                }
            }
            if from <= e {
                add_range(&mut out, uuid, tag, from, e);
            }
        }
    }
    out
}

fn add_range(set: &mut GtidSet, uuid: &str, tag: &str, a: u64, b: u64) {
    if let GtidSet::MySql(m) = set {
        let v = m.entry((uuid.to_string(), tag.to_string())).or_default();
        // Called in ascending order with disjoint ranges: merge with the last if adjacent.
        match v.last_mut() {
            Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
            _ => v.push((a, b)),
        }
    }
}

/// Places `pos` against the server's binlogs. Pure: no I/O.
///
/// Retained or purged: by GTIDs when both sides have them (MySQL: `gtid_purged` must be
/// within the position's set; MariaDB: in every domain of the oldest file's GTID list the
/// position must be at or past that GTID), by file name otherwise (the position's file
/// must still be listed; an empty GTID set counts as none). Counts are from the position's file and offset; a position
/// retained by GTID whose file is not listed counts every file as ahead.
pub fn margin(server: &ServerBinlogs, pos: &MySqlPosition) -> Margin {
    let total: u64 = server.files.iter().map(|f| file_len(server, f)).sum();
    let index = server.files.iter().position(|f| f.name == pos.file);
    let oldest_file = server.files.first().map_or("", |f| f.name.as_str());

    let lost_files = match index {
        Some(_) => Vec::new(),
        None => lost_files(&pos.file, oldest_file),
    };
    let file_lost = || {
        if index.is_some() {
            None
        } else if pos.file.is_empty() {
            Some("the position names no binlog file".to_string())
        } else if lost_files.is_empty() {
            Some(format!(
                "{} is not among the server's binlogs ({} to {}): the binlog was reset or this is another server",
                pos.file,
                oldest_file,
                server.files.last().map_or("", |f| f.name.as_str())
            ))
        } else {
            Some(lost_files.join(", "))
        }
    };

    // GTIDs decide when both sides have them. An empty set is no GTID position: the
    // stream resumes such a position by file:pos (and "" reads back as an empty MySQL set
    // whatever its dialect was), so the file decides for it too.
    let ours = pos.gtid_set.as_ref().filter(|g| !g.is_empty());
    let by_gtid: Option<(Option<String>, String)> = match (&server.gtids, ours) {
        (ServerGtids::MySql { purged, .. }, Some(ours @ GtidSet::MySql(_))) => {
            let lost = mysql_minus(purged, ours);
            Some((
                (!lost.is_empty()).then(|| lost.to_string()),
                format!("gtid_purged {purged}"),
            ))
        }
        (ServerGtids::MariaDb { oldest, .. }, Some(GtidSet::MariaDb(ours))) => {
            let mut lost = Vec::new();
            for (domain, first) in oldest {
                let have = ours.get(domain).map_or(0, |g| g.seq);
                if have < first.seq {
                    lost.push(format!(
                        "domain {domain} seq {} to {} (up to {first})",
                        have + 1,
                        first.seq
                    ));
                }
            }
            let list: Vec<String> = oldest.values().map(|g| g.to_string()).collect();
            Some((
                (!lost.is_empty()).then(|| lost.join(", ")),
                format!(
                    "the GTIDs after {}",
                    if list.is_empty() {
                        "none".to_string()
                    } else {
                        list.join(",")
                    }
                ),
            ))
        }
        _ => None,
    };

    let purged = match &by_gtid {
        Some((None, _)) => None,
        Some((Some(gtids), oldest_gtids)) => Some(PurgedDetail {
            position: pos_text(pos),
            oldest: format!("{oldest_file} ({oldest_gtids})"),
            lost: match file_lost() {
                Some(f) if !lost_files.is_empty() => format!("{f}; GTIDs {gtids}"),
                _ => format!("GTIDs {gtids}"),
            },
            lost_files: lost_files.clone(),
            lost_gtids: Some(gtids.clone()),
        }),
        None => file_lost().map(|lost| PurgedDetail {
            position: pos_text(pos),
            oldest: format!("{oldest_file}:4"),
            lost,
            lost_files: lost_files.clone(),
            lost_gtids: None,
        }),
    };

    let (files_ahead, bytes_ahead, files_before, bytes_before) = match (&purged, index) {
        (None, Some(i)) => {
            let before: u64 = server.files[..i].iter().map(|f| file_len(server, f)).sum();
            let own = file_len(server, &server.files[i]);
            let into = pos.pos.min(own);
            (
                server.files.len() - i,
                (own - into)
                    + server.files[i + 1..]
                        .iter()
                        .map(|f| file_len(server, f))
                        .sum::<u64>(),
                i,
                before + into,
            )
        }
        _ => (server.files.len(), total, 0, 0),
    };

    let expires_in = if purged.is_some() {
        Expiry::In(0)
    } else {
        match server.retention.expire_seconds {
            None => Expiry::Never,
            Some(expire) => match index {
                Some(i)
                    if server.files[i].name == server.current_file
                        || i + 1 == server.files.len() =>
                {
                    Expiry::In(expire)
                }
                Some(i) => match server.files[i].closed_after {
                    Some(t) => Expiry::In((t + expire as i64 - server.now).max(0) as u64),
                    None => Expiry::Unknown,
                },
                // Retained by GTID, file not listed: the oldest file is the one that goes
                // first, and what we need may be in it.
                None => match server.files.first().and_then(|f| f.closed_after) {
                    Some(t) => Expiry::In((t + expire as i64 - server.now).max(0) as u64),
                    None => Expiry::Unknown,
                },
            },
        }
    };

    Margin {
        retained: purged.is_none(),
        files_ahead,
        bytes_ahead,
        files_before,
        bytes_before,
        expires_in,
        purged,
    }
}

/// A file's length: the current one's is the server's current position.
fn file_len(server: &ServerBinlogs, f: &BinlogFile) -> u64 {
    if f.name == server.current_file && server.current_pos > 0 {
        server.current_pos
    } else {
        f.size
    }
}

fn pos_text(pos: &MySqlPosition) -> String {
    match &pos.gtid_set {
        Some(g) => format!("{}:{} (gtid {})", pos.file, pos.pos, g),
        None => format!("{}:{}", pos.file, pos.pos),
    }
}

/// The files from `ours` up to (not including) `oldest`, when both are `base.N` of the
/// same base and ours is older; empty otherwise.
fn lost_files(ours: &str, oldest: &str) -> Vec<String> {
    match (split_name(ours), split_name(oldest)) {
        (Some((b1, n1, w)), Some((b2, n2, _))) if b1 == b2 && n1 < n2 => {
            // Capped: a list of thousands of names says nothing more than its ends.
            if n2 - n1 > 20 {
                return vec![
                    ours.to_string(),
                    format!("… ({} files) …", n2 - n1 - 2),
                    format!("{b1}.{:0w$}", n2 - 1),
                ];
            }
            (n1..n2).map(|n| format!("{b1}.{n:0w$}")).collect()
        }
        _ => Vec::new(),
    }
}

/// The `cdc_mysql_binlog_*` gauges.
#[derive(Clone, Debug)]
pub struct RetentionMetrics {
    pub margin_seconds: Gauge,
    pub margin_known: Gauge,
    pub margin_alarm: Gauge,
    pub purged: Gauge,
    pub files_retained: Gauge,
    pub retained_bytes: Gauge,
    pub behind_files: Gauge,
    pub behind_bytes: Gauge,
    pub expire_seconds: Gauge,
}

impl RetentionMetrics {
    pub fn register(m: &Metrics) -> RetentionMetrics {
        RetentionMetrics {
            margin_seconds: m.gauge(
                "cdc_mysql_binlog_margin_seconds",
                "seconds at the earliest until the server may purge the binlog file holding the source's position (valid when cdc_mysql_binlog_margin_known is 1)",
            ),
            margin_known: m.gauge(
                "cdc_mysql_binlog_margin_known",
                "1 when cdc_mysql_binlog_margin_seconds is a figure; 0 when the server never expires binlogs or the file's age is not known yet",
            ),
            margin_alarm: m.gauge(
                "cdc_mysql_binlog_margin_alarm",
                "1 while the margin is below the alarm threshold (the smaller of one hour and 10% of the retention), or the position was purged",
            ),
            purged: m.gauge(
                "cdc_mysql_binlog_purged",
                "1 when the server purged the binlog at the source's position",
            ),
            files_retained: m.gauge(
                "cdc_mysql_binlog_files_retained",
                "binlog files the server still has (SHOW BINARY LOGS)",
            ),
            retained_bytes: m.gauge(
                "cdc_mysql_binlog_retained_bytes",
                "bytes of binlog the server still has",
            ),
            behind_files: m.gauge(
                "cdc_mysql_binlog_behind_files",
                "binlog files at or after the source's position (its own included)",
            ),
            behind_bytes: m.gauge(
                "cdc_mysql_binlog_behind_bytes",
                "binlog bytes from the source's position to the server's current position",
            ),
            expire_seconds: m.gauge(
                "cdc_mysql_binlog_expire_seconds",
                "the server's binlog expiry (binlog_expire_logs_seconds / expire_logs_days), 0 when it never expires them",
            ),
        }
    }
}

/// Watches the binlog retention for one source.
///
/// The source calls [`RetentionWatch::check`] once on start and then every minute, on a
/// spare connection (not the binlog stream's, which is busy in a dump). A check is a
/// handful of short statements (see [`inspect`]) and updates the gauges; it logs one
/// `warn` when the margin falls below [`RetentionWatch::threshold_seconds`] (or the
/// position is purged) and one `info` when it recovers, not one per check. A purged
/// position is reported in the returned [`Margin`]; raising the definite error
/// ([`PurgedDetail`]) is the source's call.
///
/// It also tracks rotations between checks: that is how it learns when a file was closed,
/// hence when it may expire (see the module doc). Checking more often than every minute
/// tightens that estimate; checking less often only makes it more conservative.
#[derive(Debug)]
pub struct RetentionWatch {
    pub metrics: RetentionMetrics,
    /// The time alarm's threshold: the smaller of one hour and 10 % of the server's
    /// retention, recomputed at every check; None when the server never expires binlogs
    /// (no time alarm then).
    pub threshold_seconds: Option<u64>,
    /// The current file and the server time at the previous check.
    last_current: Option<(String, i64)>,
    /// Files seen closing: name → server time of the last check at which it was still
    /// the current file (it was closed after that).
    closed_after: BTreeMap<String, i64>,
    alarmed: bool,
    /// The last file whose creation time was read (or tried) by [`file_created_at`].
    probed: Option<String>,
}

impl RetentionWatch {
    pub fn new(metrics: &Metrics) -> RetentionWatch {
        RetentionWatch {
            metrics: RetentionMetrics::register(metrics),
            threshold_seconds: None,
            last_current: None,
            closed_after: BTreeMap::new(),
            alarmed: false,
            probed: None,
        }
    }

    /// The alarm threshold for a retention period.
    pub fn threshold_for(expire_seconds: Option<u64>) -> Option<u64> {
        expire_seconds.map(|e| (e / 10).min(3600))
    }

    /// Reads the server, places `pos` against it, updates the gauges and logs on a
    /// crossing. See the type's doc.
    pub async fn check(
        &mut self,
        conn: &mut Conn,
        pos: &MySqlPosition,
    ) -> Result<Margin, RetentionError> {
        let mut server = inspect(conn).await?;
        self.track(&mut server);
        self.learn_age(conn, &mut server, pos).await;
        let m = margin(&server, pos);
        self.observe(&server, pos, &m);
        Ok(m)
    }

    /// Records rotations since the previous check and fills in `closed_after`.
    pub fn track(&mut self, server: &mut ServerBinlogs) {
        if let Some((prev, t)) = self.last_current.take() {
            if prev != server.current_file {
                // Every file from the previous current one up to (not including) the new
                // current one was closed after the previous check.
                let mut closing = false;
                for f in &server.files {
                    if f.name == prev {
                        closing = true;
                    }
                    if f.name == server.current_file {
                        break;
                    }
                    if closing {
                        self.closed_after.entry(f.name.clone()).or_insert(t);
                    }
                }
            }
        }
        self.closed_after
            .retain(|name, _| server.files.iter().any(|f| &f.name == name));
        for f in &mut server.files {
            if let Some(&t) = self.closed_after.get(&f.name) {
                f.closed_after = Some(t);
            }
        }
        self.last_current = Some((server.current_file.clone(), server.now));
    }

    /// When the file holding `pos` is closed and its close time unknown (it closed before
    /// the watch started), reads its successor's creation time once ([`file_created_at`]).
    /// A failure leaves the age unknown and is retried at the next check.
    async fn learn_age(&mut self, conn: &Conn, server: &mut ServerBinlogs, pos: &MySqlPosition) {
        if server.retention.expire_seconds.is_none() {
            return;
        }
        let Some(i) = server.files.iter().position(|f| f.name == pos.file) else {
            return;
        };
        if server.files[i].closed_after.is_some() || i + 1 >= server.files.len() {
            return;
        }
        let next = server.files[i + 1].name.clone();
        if self.probed.as_deref() == Some(next.as_str()) {
            return; // tried and failed: not every minute
        }
        self.probed = Some(next.clone());
        match file_created_at(conn, &next).await {
            Ok(t) => {
                // One second off: the timestamp has whole seconds, the mtime is finer.
                let t = t - 1;
                self.closed_after.insert(pos.file.clone(), t);
                server.files[i].closed_after = Some(t);
            }
            Err(e) => {
                tracing::debug!(file = %next, error = %e, "cannot read the binlog file's creation time")
            }
        }
    }

    fn observe(&mut self, server: &ServerBinlogs, pos: &MySqlPosition, m: &Margin) {
        let g = &self.metrics;
        self.threshold_seconds = Self::threshold_for(server.retention.expire_seconds);
        g.files_retained.set(server.files.len() as u64);
        g.retained_bytes
            .set(server.files.iter().map(|f| file_len(server, f)).sum());
        g.behind_files.set(m.files_ahead as u64);
        g.behind_bytes.set(m.bytes_ahead);
        g.expire_seconds
            .set(server.retention.expire_seconds.unwrap_or(0));
        g.purged.set(m.purged.is_some() as u64);
        match m.expires_in {
            Expiry::In(s) => {
                g.margin_seconds.set(s);
                g.margin_known.set(1);
            }
            Expiry::Never | Expiry::Unknown => {
                g.margin_seconds.set(0);
                g.margin_known.set(0);
            }
        }
        let low = match (m.expires_in, self.threshold_seconds) {
            _ if m.purged.is_some() => true,
            (Expiry::In(s), Some(t)) => s < t,
            _ => false,
        };
        g.margin_alarm.set(low as u64);
        if low && !self.alarmed {
            match &m.purged {
                Some(p) => {
                    tracing::warn!(error = %p, "binlog retention: the source's position was purged")
                }
                None => tracing::warn!(
                    file = %pos.file,
                    margin_seconds = %m.expires_in,
                    threshold_seconds = ?self.threshold_seconds,
                    expire_seconds = ?server.retention.expire_seconds,
                    behind_bytes = m.bytes_ahead,
                    "binlog retention: the server may purge the binlog file holding the source's position soon; the source must catch up, or raise binlog_expire_logs_seconds / expire_logs_days"
                ),
            }
        } else if !low && self.alarmed {
            tracing::info!(
                file = %pos.file,
                margin_seconds = %m.expires_in,
                "binlog retention: the margin is back above the threshold"
            );
        }
        self.alarmed = low;
        tracing::debug!(
            file = %pos.file,
            pos = pos.pos,
            files_ahead = m.files_ahead,
            bytes_ahead = m.bytes_ahead,
            files_before = m.files_before,
            margin_seconds = %m.expires_in,
            "binlog retention checked"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const U1: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";

    fn server(files: &[(&str, u64)], gtids: ServerGtids, expire: Option<u64>) -> ServerBinlogs {
        let last = files.last().unwrap();
        ServerBinlogs {
            flavor: Flavor::MariaDb,
            version: "10.11.0-MariaDB".into(),
            account: "cdc@%".into(),
            now: 1_000_000,
            files: files
                .iter()
                .map(|&(n, s)| BinlogFile {
                    name: n.into(),
                    size: s,
                    closed_after: None,
                })
                .collect(),
            current_file: last.0.into(),
            current_pos: last.1,
            gtids,
            retention: RetentionSettings {
                expire_seconds: expire,
                max_binlog_size: 1 << 30,
            },
        }
    }

    fn at(file: &str, p: u64, gtid: Option<&str>) -> MySqlPosition {
        MySqlPosition {
            file: file.into(),
            pos: p,
            gtid_set: gtid.map(|g| g.parse().unwrap()),
            ..Default::default()
        }
    }

    const FILES: &[(&str, u64)] = &[("b.000002", 1000), ("b.000003", 2000), ("b.000004", 500)];

    #[test]
    fn retained_by_file_counts_both_sides() {
        let s = server(FILES, ServerGtids::None, None);
        let m = margin(&s, &at("b.000003", 300, None));
        assert!(m.retained && m.purged.is_none());
        assert_eq!((m.files_ahead, m.files_before), (2, 1));
        assert_eq!(m.bytes_ahead, 1700 + 500);
        assert_eq!(m.bytes_before, 1000 + 300);
        assert_eq!(m.expires_in, Expiry::Never);
    }

    #[test]
    fn purged_by_file_names_the_lost_files() {
        let s = server(FILES, ServerGtids::None, Some(86_400));
        let m = margin(&s, &at("b.000000", 4, None));
        let p = m.purged.expect("purged");
        assert!(!m.retained);
        assert_eq!(p.lost_files, vec!["b.000000", "b.000001"]);
        assert_eq!(m.expires_in, Expiry::In(0));
        assert_eq!((m.files_ahead, m.bytes_ahead), (3, 3500));
        let text = p.to_string();
        assert!(
            text.contains("b.000000:4")
                && text.contains("b.000002")
                && text.contains("when_needed"),
            "{text}"
        );
        // A file after the newest: the binlog was reset.
        let m = margin(&s, &at("b.000009", 4, None));
        assert!(m.purged.unwrap().lost.contains("reset"));
    }

    #[test]
    fn mariadb_gtids_decide() {
        let mut oldest = BTreeMap::new();
        oldest.insert(0, "0-1-10".parse().unwrap());
        oldest.insert(2, "2-1-3".parse().unwrap());
        let g = ServerGtids::MariaDb {
            binlog_state: "0-1-20,2-1-5".into(),
            oldest,
        };
        let s = server(FILES, g, None);
        // At or past the oldest GTIDs in both domains: retained, even from a purged file.
        let m = margin(&s, &at("b.000001", 4, Some("0-1-10,2-1-4")));
        assert!(m.retained, "{m:?}");
        assert_eq!(m.files_ahead, 3);
        // Behind in domain 2.
        let m = margin(&s, &at("b.000003", 4, Some("0-1-12,2-1-1")));
        let p = m.purged.expect("purged");
        assert_eq!(
            p.lost_gtids.as_deref(),
            Some("domain 2 seq 2 to 3 (up to 2-1-3)")
        );
        assert!(p.lost_files.is_empty());
        // A domain the position never saw, which the server purged part of.
        let m = margin(&s, &at("b.000003", 4, Some("0-1-12")));
        assert!(m.purged.unwrap().lost.contains("domain 2 seq 1 to 3"));
    }

    #[test]
    fn mysql_gtids_decide() {
        let purged: GtidSet = format!("{U1}:1-10").parse().unwrap();
        let g = ServerGtids::MySql {
            executed: format!("{U1}:1-50").parse().unwrap(),
            purged,
        };
        let s = server(FILES, g, None);
        assert!(margin(&s, &at("b.000003", 4, Some(&format!("{U1}:1-20")))).retained);
        let m = margin(&s, &at("b.000003", 4, Some(&format!("{U1}:1-3:6-7"))));
        assert_eq!(
            m.purged.unwrap().lost_gtids.as_deref(),
            Some(format!("{U1}:4-5:8-10").as_str())
        );
        // A file:pos-only position against a GTID server: by file; an empty set too.
        assert!(margin(&s, &at("b.000003", 4, None)).retained);
        assert!(margin(&s, &at("b.000003", 4, Some(""))).retained);
        assert!(!margin(&s, &at("b.000001", 4, Some(""))).retained);
    }

    #[test]
    fn minus() {
        let a: GtidSet = format!("{U1}:1-10:20-30").parse().unwrap();
        let b: GtidSet = format!("{U1}:1-2:5:9-21:30").parse().unwrap();
        assert_eq!(
            mysql_minus(&a, &b).to_string(),
            format!("{U1}:3-4:6-8:22-29")
        );
        assert!(mysql_minus(&a, &a).is_empty());
        assert_eq!(mysql_minus(&a, &GtidSet::empty_mysql()), a);
    }

    #[test]
    fn expiry_from_tracked_rotations() {
        let mut s = server(FILES, ServerGtids::None, Some(86_400));
        // The current file: a full retention period at least.
        assert_eq!(
            margin(&s, &at("b.000004", 4, None)).expires_in,
            Expiry::In(86_400)
        );
        // A closed file of unknown age.
        assert_eq!(
            margin(&s, &at("b.000003", 4, None)).expires_in,
            Expiry::Unknown
        );

        let metrics = Metrics::default();
        let mut w = RetentionWatch::new(&metrics);
        // First check: b.000004 current. Then two rotations within one interval.
        w.track(&mut s);
        let mut later = server(
            &[
                ("b.000002", 1000),
                ("b.000003", 2000),
                ("b.000004", 700),
                ("b.000005", 10),
                ("b.000006", 5),
            ],
            ServerGtids::None,
            Some(86_400),
        );
        later.now = s.now + 60;
        w.track(&mut later);
        let closed: Vec<Option<i64>> = later.files.iter().map(|f| f.closed_after).collect();
        assert_eq!(closed, vec![None, None, Some(s.now), Some(s.now), None]);
        // Closed after the first check, 60 s ago: 86 400 - 60 left at the earliest.
        assert_eq!(
            margin(&later, &at("b.000004", 4, None)).expires_in,
            Expiry::In(86_340)
        );
        // A day later it may go at any rotation.
        later.now += 86_400;
        assert_eq!(
            margin(&later, &at("b.000004", 4, None)).expires_in,
            Expiry::In(0)
        );
    }

    #[test]
    fn thresholds_and_settings() {
        assert_eq!(RetentionWatch::threshold_for(Some(7 * 86_400)), Some(3600));
        assert_eq!(RetentionWatch::threshold_for(Some(6000)), Some(600));
        assert_eq!(RetentionWatch::threshold_for(None), None);
        assert_eq!(effective_expiry(Some(0), Some(1.0), None), Some(86_400));
        assert_eq!(effective_expiry(Some(60), Some(1.0), None), Some(60));
        assert_eq!(effective_expiry(Some(0), Some(0.0), None), None);
        assert_eq!(effective_expiry(Some(60), None, Some(false)), None);
        assert_eq!(
            max_per_domain("0-1-5, 0-2-7,2-1-3")
                .unwrap()
                .values()
                .map(|g| g.to_string())
                .collect::<Vec<_>>(),
            vec!["0-2-7", "2-1-3"]
        );
        assert!(max_per_domain("").unwrap().is_empty());
        assert_eq!(quote_account("cdc@%"), "'cdc'@'%'");
    }

    #[test]
    fn watch_alarms_once_and_recovers() {
        let metrics = Metrics::default();
        let mut w = RetentionWatch::new(&metrics);
        let s = server(FILES, ServerGtids::None, Some(86_400));
        let purged = margin(&s, &at("b.000001", 4, None));
        w.observe(&s, &at("b.000001", 4, None), &purged);
        assert!(w.alarmed);
        assert_eq!(w.metrics.margin_alarm.get(), 1);
        assert_eq!(w.metrics.purged.get(), 1);
        let ok = margin(&s, &at("b.000004", 4, None));
        w.observe(&s, &at("b.000004", 4, None), &ok);
        assert!(!w.alarmed);
        assert_eq!(w.metrics.margin_seconds.get(), 86_400);
        assert_eq!(w.metrics.behind_bytes.get(), 496);
        assert_eq!(w.metrics.files_retained.get(), 3);
        let mut out = String::new();
        metrics.render(&mut out);
        assert!(
            out.contains("cdc_mysql_binlog_margin_seconds 86400"),
            "{out}"
        );
    }
}
