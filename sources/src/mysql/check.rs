//! Preflight checks of a MySQL or MariaDB source: connection and authentication, the
//! binlog (`log_bin`, `binlog_format = ROW`, `binlog_row_image = FULL`,
//! `binlog_row_metadata`), `server_id`, GTIDs, privileges (REPLICATION SLAVE, REPLICATION
//! CLIENT / BINLOG MONITOR, SELECT), binlog retention, and the captured tables.

use cdc_schemas::TableId;
use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use super::config::MySqlSettings;
use super::conn::{MySqlConnectErrorKind, MySqlEndpoint};
use crate::check::{my_ident, CheckReport};
use crate::config::SourceSpec;
use crate::filter::{glob, is_pattern};

const LATER: &[&str] = &[
    "log_bin",
    "binlog_format",
    "binlog_row_image",
    "binlog_row_metadata",
    "server_id",
    "gtid",
    "privileges",
    "binlog_retention",
    "tables",
];

pub async fn check(spec: &SourceSpec, my: &MySqlSettings) -> CheckReport {
    let common = &spec.source.common;
    let endpoint = match MySqlEndpoint::from_url(common.url.expose(), common.password.as_ref()) {
        Ok(ep) => ep,
        Err(e) => {
            let mut r = CheckReport::new(format!("mysql source {}", common.url));
            r.fail("connect", e.message, e.fix);
            r.skip(LATER, "not checked: the source URL is invalid");
            return r;
        }
    };
    let mut r = CheckReport::new(format!("mysql source {}", endpoint.redacted));
    let mut conn = match endpoint.connect().await {
        Ok(c) => c,
        Err(e) => {
            let name = match e.kind {
                MySqlConnectErrorKind::Auth => "authentication",
                MySqlConnectErrorKind::Tls => "tls",
                _ => "connect",
            };
            r.fail(name, e.message, e.fix);
            r.skip(LATER, "not checked: no connection");
            return r;
        }
    };
    if let Err(e) = checks(spec, my, &endpoint, &mut conn, &mut r).await {
        r.fail(
            "query",
            format!("a server query failed: {e}"),
            "check that the user may read server variables and information_schema",
        );
    }
    let _ = conn.disconnect().await;
    r
}

async fn var(conn: &mut Conn, name: &str) -> Result<Option<String>, mysql_async::Error> {
    // SHOW VARIABLES answers for variables that do not exist in this server version with
    // no row, where SELECT @@x would be an error.
    // `SHOW` cannot be a prepared statement on MariaDB; `name` is always one of our own
    // constants, never user input.
    debug_assert!(name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'));
    let row: Option<(String, Option<String>)> = conn
        .query_first(format!("SHOW GLOBAL VARIABLES LIKE '{name}'"))
        .await?;
    Ok(row.and_then(|(_, v)| v))
}

async fn checks(
    spec: &SourceSpec,
    my: &MySqlSettings,
    ep: &MySqlEndpoint,
    conn: &mut Conn,
    r: &mut CheckReport,
) -> Result<(), mysql_async::Error> {
    let (version, user): (String, String) = conn
        .query_first("SELECT VERSION(), CURRENT_USER()")
        .await?
        .unwrap_or_default();
    let mariadb = version.to_ascii_lowercase().contains("mariadb");
    let flavor = if mariadb { "MariaDB" } else { "MySQL" };
    let cfg = if mariadb {
        "the [mariadb] or [mysqld] section of the server's my.cnf"
    } else {
        "the [mysqld] section of my.cnf"
    };
    r.pass(
        "connect",
        format!("{flavor} {version} at {} as {user}", ep.address()),
    );

    let log_bin = var(conn, "log_bin").await?.unwrap_or_default();
    let binlog_on = log_bin.eq_ignore_ascii_case("ON") || log_bin == "1";
    if binlog_on {
        r.pass("log_bin", "ON");
    } else {
        r.fail(
            "log_bin",
            format!("the binary log is off (log_bin = {log_bin}): there is nothing to read changes from"),
            format!("add to {cfg}:\n  log_bin = mysql-bin\n  binlog_format = ROW\n  binlog_row_image = FULL\n  server_id = 1\nthen restart the server (log_bin cannot be changed at run time)"),
        );
    }

    let format = var(conn, "binlog_format").await?.unwrap_or_default();
    if format.eq_ignore_ascii_case("ROW") {
        r.pass("binlog_format", "ROW");
    } else {
        r.fail(
            "binlog_format",
            format!("binlog_format is {format}; row changes are only in the binlog with ROW"),
            format!("SET GLOBAL binlog_format = 'ROW';  and add binlog_format = ROW to {cfg} so it survives a restart\n(sessions already open keep the old format until they reconnect)"),
        );
    }

    let image = var(conn, "binlog_row_image").await?.unwrap_or_default();
    if image.eq_ignore_ascii_case("FULL") {
        r.pass("binlog_row_image", "FULL");
    } else {
        r.fail(
            "binlog_row_image",
            format!("binlog_row_image is {image}; `before` and `after` need every column (FULL)"),
            format!(
                "SET GLOBAL binlog_row_image = 'FULL';  and add binlog_row_image = FULL to {cfg}"
            ),
        );
    }

    match var(conn, "binlog_row_metadata").await? {
        Some(m) if m.eq_ignore_ascii_case("FULL") => r.pass("binlog_row_metadata", "FULL (column names and types travel with each row event)"),
        Some(m) => r.info(
            "binlog_row_metadata",
            format!("binlog_row_metadata is {m}: the connector tracks column names from DDL instead (FULL is more robust: SET GLOBAL binlog_row_metadata = 'FULL')"),
        ),
        None => r.info("binlog_row_metadata", format!("{flavor} {version} has no binlog_row_metadata: column names come from DDL tracking")),
    }

    let server_id: u64 = var(conn, "server_id")
        .await?
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let ours = my.server_id() as u64;
    if server_id == 0 {
        r.fail(
            "server_id",
            "server_id is 0: the server cannot serve replicas",
            format!("SET GLOBAL server_id = 1;  and add server_id = 1 to {cfg}"),
        );
    } else if server_id == ours {
        r.fail(
            "server_id",
            format!("the server's server_id {server_id} equals the connector's replica server_id"),
            "set source.server_id to a number no server in the topology uses",
        );
    } else {
        r.pass(
            "server_id",
            format!("server {server_id}; the connector connects as replica {ours}"),
        );
    }

    if mariadb {
        let domain = var(conn, "gtid_domain_id").await?.unwrap_or_default();
        let pos = var(conn, "gtid_current_pos").await?.unwrap_or_default();
        let strict = var(conn, "gtid_strict_mode").await?.unwrap_or_default();
        r.info(
            "gtid",
            format!(
                "gtid_domain_id = {domain}, gtid_current_pos = {:?}, gtid_strict_mode = {strict} (MariaDB GTIDs are always on; the connector records them with each position)",
                pos
            ),
        );
    } else {
        let mode = var(conn, "gtid_mode")
            .await?
            .unwrap_or_else(|| "OFF".into());
        if mode.eq_ignore_ascii_case("ON") {
            r.pass("gtid", "gtid_mode = ON");
        } else {
            r.warn(
                "gtid",
                format!("gtid_mode = {mode}: positions are binlog file + offset, which do not survive a failover to another server"),
                "enable GTIDs: SET GLOBAL enforce_gtid_consistency = ON; then step gtid_mode OFF_PERMISSIVE -> ON_PERMISSIVE -> ON (see the MySQL manual, 'Enabling GTID Transactions Online')",
            );
        }
    }

    // Privileges, from SHOW GRANTS (what the server itself will enforce).
    let grants: Vec<String> = conn.query("SHOW GRANTS FOR CURRENT_USER()").await?;
    let global: Vec<String> = grants
        .iter()
        .filter(|g| g.contains(" ON *.* "))
        .map(|g| g.to_ascii_uppercase())
        .collect();
    let has = |p: &str| {
        global
            .iter()
            .any(|g| g.contains("ALL PRIVILEGES") || g.contains(p))
    };
    let mut missing = Vec::new();
    if !has("REPLICATION SLAVE") && !has("REPLICATION REPLICA") {
        missing.push("REPLICATION SLAVE");
    }
    if !has("REPLICATION CLIENT") && !has("BINLOG MONITOR") && !has("SUPER") {
        missing.push("REPLICATION CLIENT");
    }
    let global_select = has("SELECT");
    if missing.is_empty() {
        r.pass(
            "privileges",
            format!(
                "{user} has {}",
                if has("ALL PRIVILEGES") {
                    "ALL PRIVILEGES"
                } else {
                    "REPLICATION SLAVE and REPLICATION CLIENT"
                }
            ),
        );
    } else {
        let account = user
            .split_once('@')
            .map(|(u, h)| format!("'{u}'@'{h}'"))
            .unwrap_or_else(|| user.clone());
        r.fail(
            "privileges",
            format!(
                "{user} lacks {}: it cannot read the binlog",
                missing.join(" and ")
            ),
            format!("GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO {account};"),
        );
    }

    // Retention.
    let seconds: Option<u64> = var(conn, "binlog_expire_logs_seconds")
        .await?
        .and_then(|v| v.parse().ok());
    let days: Option<f64> = var(conn, "expire_logs_days")
        .await?
        .and_then(|v| v.parse().ok());
    let retention = match (seconds, days) {
        (Some(s), _) if s > 0 => Some(s),
        (_, Some(d)) if d > 0.0 => Some((d * 86_400.0) as u64),
        _ => None,
    };
    match retention {
        None => r.info("binlog_retention", "binlogs are never purged automatically (binlog_expire_logs_seconds = 0): purge them yourself, or set a retention"),
        Some(s) if s < 86_400 => r.warn(
            "binlog_retention",
            format!("binlogs are purged after {}: a connector stopped longer than that loses its position and must snapshot again", human_secs(s)),
            "SET GLOBAL binlog_expire_logs_seconds = 604800;  (7 days) and persist it in my.cnf",
        ),
        Some(s) => r.info("binlog_retention", format!("binlogs are kept {}", human_secs(s))),
    }

    // Tables. The primary key from STATISTICS: MariaDB shows TABLE_CONSTRAINTS rows only to
    // a user with more than SELECT on the table (a read-only cdc user saw every table as
    // keyless).
    let rows: Vec<(String, String, String, i64)> = conn
        .query(
            "SELECT t.TABLE_SCHEMA, t.TABLE_NAME, t.TABLE_TYPE, \
                    (SELECT COUNT(*) FROM information_schema.STATISTICS c \
                     WHERE c.TABLE_SCHEMA = t.TABLE_SCHEMA AND c.TABLE_NAME = t.TABLE_NAME AND c.INDEX_NAME = 'PRIMARY') \
             FROM information_schema.TABLES t \
             WHERE t.TABLE_SCHEMA NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys') \
             ORDER BY 1, 2",
        )
        .await?;
    let filter = spec.source.common.filter();
    let key_columns = spec.source.common.key_columns();
    let mut captured = Vec::new();
    let mut keyless = Vec::new();
    let mut failed = false;
    for (schema, name, kind, pks) in rows {
        let id = TableId::new(schema, name);
        if kind != "BASE TABLE" || !filter.includes(&id) {
            continue;
        }
        if pks == 0 && key_columns.for_table(&id).is_none() {
            keyless.push(id.to_string());
        }
        captured.push(id);
    }
    for pattern in filter.include_patterns() {
        if !captured.iter().any(|t| glob(pattern, &t.to_string())) {
            if is_pattern(pattern) {
                r.warn(
                    "tables",
                    format!("pattern {pattern:?} matches no table"),
                    "fix the pattern in source.tables, or create the tables",
                );
            } else {
                failed = true;
                r.fail(
                    "tables",
                    format!("table {pattern} does not exist, or {user} cannot see it"),
                    format!(
                        "fix source.tables (database.table), or: GRANT SELECT ON {} TO <user>;",
                        pattern
                            .split_once('.')
                            .map(|(d, t)| format!("{}.{}", my_ident(d), my_ident(t)))
                            .unwrap_or_default()
                    ),
                );
            }
        }
    }
    if captured.is_empty() && !failed {
        failed = true;
        r.fail(
            "tables",
            "no table matches source.tables",
            "list the tables to capture in source.tables as database.table",
        );
    }
    if !failed {
        r.pass("tables", format!("{} table(s) to capture", captured.len()));
        if !global_select {
            r.info("tables", "no global SELECT: the snapshot needs SELECT on each captured table (GRANT SELECT ON db.* TO ...)");
        }
    }
    if !keyless.is_empty() {
        r.warn(
            "tables",
            format!(
                "no primary key: {} — their records will have no key",
                keyless.join(", ")
            ),
            format!(
                "add a primary key, or name their key columns in {}, e.g. {} = [\"{}:<column>,<column>\"]",
                crate::keys::KEY,
                crate::keys::KEY,
                keyless[0]
            ),
        );
    }
    Ok(())
}

fn human_secs(s: u64) -> String {
    if s % 86_400 == 0 {
        format!("{} day(s)", s / 86_400)
    } else if s % 3600 == 0 {
        format!("{} hour(s)", s / 3600)
    } else {
        format!("{s} s")
    }
}
