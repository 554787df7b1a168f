//! The database's own view of a connector's position, for `cdc status` and `/status`.
//!
//! - Postgres: the replication slot (`pg_replication_slots`): whether it exists and is
//!   active, its `confirmed_flush_lsn` and `restart_lsn`, the WAL it retains, its
//!   `wal_status`, and the lag in bytes (`pg_current_wal_lsn() - confirmed_flush_lsn`).
//! - MySQL / MariaDB: the binlogs the server still has against the position (the margin:
//!   files and bytes before it, when the oldest it needs may be purged) and how far the
//!   position is behind the server's current one.
//!
//! One short-lived connection per call, read-only, with a bounded wait: it serves a page
//! that refreshes itself and a command run by people, never the data path. A failure is
//! reported in the document (`"error"`), not raised: the rest of the status still helps.

use std::time::Duration;

use cdc_schemas::SourcePosition;
use serde_json::{json, Value};

use crate::config::{DbSettings, SourceSpec};
use crate::mysql::MySqlSettings;
use crate::postgres::PgSettings;

/// How long the database may take to answer a status query.
const TIMEOUT: Duration = Duration::from_secs(5);

/// The database's view of `position` (the log's durable one, if any) for the source of
/// `spec`, as a JSON object.
pub async fn database_view(spec: &SourceSpec, position: Option<&SourcePosition>) -> Value {
    let r = tokio::time::timeout(TIMEOUT, async {
        match &spec.source.db {
            DbSettings::Postgres(pg) => postgres(spec, pg).await,
            DbSettings::Mysql(my) => mysql(spec, my, position).await,
        }
    })
    .await;
    match r {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => json!({ "error": e }),
        Err(_) => {
            json!({ "error": format!("the database did not answer within {} s", TIMEOUT.as_secs()) })
        }
    }
}

async fn postgres(spec: &SourceSpec, pg: &PgSettings) -> Result<Value, String> {
    let cfg = crate::postgres::PgSourceConfig::from_spec(spec, pg).map_err(|e| e.to_string())?;
    let client = cfg.endpoint.connect().await.map_err(|e| e.to_string())?;
    let row = client
        .query_opt(
            "SELECT active, confirmed_flush_lsn::text, restart_lsn::text,
                    (pg_current_wal_lsn() - restart_lsn)::int8,
                    (pg_current_wal_lsn() - confirmed_flush_lsn)::int8,
                    to_jsonb(s)->>'wal_status', pg_current_wal_lsn()::text
             FROM pg_replication_slots s WHERE slot_name = $1",
            &[&cfg.slot],
        )
        .await
        .map_err(|e| crate::postgres::conn::error_chain(&e))?;
    let mut slot = json!({ "name": cfg.slot, "exists": row.is_some() });
    if let Some(max) = cfg.max_retained_wal {
        slot["max_retained_wal_bytes"] = json!(max);
    }
    let mut v = json!({});
    if let Some(r) = row {
        let active: bool = r.get(0);
        let confirmed: Option<String> = r.get(1);
        let restart: Option<String> = r.get(2);
        let retained: Option<i64> = r.get(3);
        let lag: Option<i64> = r.get(4);
        let wal_status: Option<String> = r.get(5);
        let current: String = r.get(6);
        slot["active"] = json!(active);
        slot["confirmed_flush_lsn"] = json!(confirmed);
        slot["restart_lsn"] = json!(restart);
        slot["retained_wal_bytes"] = json!(retained.map(|r| r.max(0)));
        slot["wal_status"] = json!(wal_status);
        v["server_wal_lsn"] = json!(current);
        v["lag_bytes"] = json!(lag.map(|l| l.max(0)));
    }
    v["slot"] = slot;
    Ok(v)
}

async fn mysql(
    spec: &SourceSpec,
    my: &MySqlSettings,
    position: Option<&SourcePosition>,
) -> Result<Value, String> {
    use crate::mysql::retention::{inspect, margin, Expiry};
    let cfg = crate::mysql::MySqlSourceConfig::from_spec(spec, my).map_err(|e| e.to_string())?;
    let mut conn = cfg.endpoint.connect().await.map_err(|e| e.to_string())?;
    let server = inspect(&mut conn).await.map_err(|e| e.to_string());
    let _ = conn.disconnect().await;
    let server = server?;
    let mut v = json!({
        "server_binlog": { "file": server.current_file, "pos": server.current_pos },
        "oldest_binlog": server.files.first().map(|f| f.name.clone()),
        "binlog_files": server.files.len(),
        "expire_seconds": server.retention.expire_seconds,
    });
    if let Some(SourcePosition::Mysql(p)) = position {
        let m = margin(&server, p);
        v["lag_bytes"] = json!(m.bytes_ahead);
        v["margin"] = json!({
            "retained": m.retained,
            "files_before": m.files_before,
            "bytes_before": m.bytes_before,
            "expires_in_seconds": match m.expires_in {
                Expiry::In(s) => json!(s),
                Expiry::Never => json!("never"),
                Expiry::Unknown => json!("unknown"),
            },
            "purged": m.purged.map(|p| p.to_string()),
        });
    }
    Ok(v)
}
