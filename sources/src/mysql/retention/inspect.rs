//! Reading what the server still has ([`inspect`]): `SHOW BINARY LOGS`, the current
//! file/pos, the GTID state, the retention settings and the flavour; and when a binlog
//! file was created ([`file_created_at`]).
//!
//! Invariants: a missing grant is [`RetentionError::Privilege`] naming the grant, a
//! server without binlog [`RetentionError::BinlogOff`]; anything else failing is
//! transient (this is a monitor: its failure alone must not stop the connector). Times
//! are the server's clock.

use std::collections::BTreeMap;

use cdc_schemas::gtid::{GtidSet, MariaGtid};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row};

use super::{BinlogFile, Flavor, RetentionError, RetentionSettings, ServerBinlogs, ServerGtids};

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
pub(super) fn quote_account(account: &str) -> String {
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
pub(super) fn effective_expiry(
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
pub(super) fn max_per_domain(list: &str) -> Result<BTreeMap<u32, MariaGtid>, String> {
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
