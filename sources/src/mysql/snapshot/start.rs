//! Opening the snapshot readers at one consistent point (see the parent module's
//! "Consistency"): MariaDB's aligned `binlog_snapshot_*` positions, the brief-lock
//! fallback, MySQL's locked start, and the binlog position where the stream takes over.

use super::*;

/// How often the MariaDB readers start their transactions together before the fallback.
pub const ALIGN_ATTEMPTS: usize = 5;

pub(super) const START_TX: &str = "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY";

/// A new reader: connected, UTC session, repeatable read.
pub(super) async fn reader(cfg: &MySqlSourceConfig) -> Result<Conn, SourceError> {
    let mut conn = cfg.endpoint.connect().await.map_err(connect_err)?;
    conn.query_drop(
        "SET SESSION time_zone = '+00:00'; SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
    )
    .await
    .map_err(sql_err("preparing the snapshot session"))?;
    Ok(conn)
}

/// MariaDB: starts the snapshot transaction on `conn`; returns its binlog file and offset.
pub(super) async fn maria_start(conn: &mut Conn) -> Result<(String, u64), SourceError> {
    conn.query_drop(START_TX)
        .await
        .map_err(sql_err("starting the snapshot transaction"))?;
    maria_start_pos(conn).await
}

/// MariaDB: the stream's start at a snapshot's binlog position (with its GTID state).
pub(super) async fn maria_start_at(
    conn: &mut Conn,
    (file, pos): (String, u64),
) -> Result<BinlogStart, SourceError> {
    let gtid: Option<Option<String>> = conn
        .exec_first("SELECT BINLOG_GTID_POS(?, ?)", (file.as_str(), pos))
        .await
        .map_err(sql_err("reading the snapshot's GTID position"))?;
    let gtid_set = gtid_set_of(gtid.flatten().as_deref())?;
    Ok(BinlogStart {
        file,
        pos,
        gtid_set: Some(gtid_set),
    })
}

/// Starts every reader's transaction together (MariaDB); their positions, in order.
pub(super) async fn maria_start_all(conns: &mut [Conn]) -> Result<Vec<(String, u64)>, SourceError> {
    futures_util::future::try_join_all(conns.iter_mut().map(maria_start)).await
}

pub(super) async fn rollback_all(conns: &mut [Conn]) -> Result<(), SourceError> {
    futures_util::future::try_join_all(conns.iter_mut().map(|c| c.query_drop("ROLLBACK")))
        .await
        .map_err(sql_err("restarting the snapshot transactions"))?;
    Ok(())
}

/// The indexes of the largest group of equal positions.
pub(super) fn largest_group(positions: &[(String, u64)]) -> Vec<usize> {
    let mut best: Vec<usize> = Vec::new();
    for p in positions {
        let group: Vec<usize> = (0..positions.len())
            .filter(|&i| &positions[i] == p)
            .collect();
        if group.len() > best.len() {
            best = group;
        }
    }
    best
}

/// Opens `n` readers (at least one) whose transactions share one snapshot; returns them and
/// where the stream starts (see the module documentation).
pub(super) async fn open_readers(
    cfg: &MySqlSourceConfig,
    flavor: Flavor,
    n: usize,
) -> Result<(Vec<Conn>, BinlogStart), SourceError> {
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n.max(1) {
        conns.push(reader(cfg).await?);
    }
    if flavor == Flavor::MySql {
        let start = locked_start(&mut conns, flavor).await?;
        return Ok((conns, start));
    }
    if conns.len() == 1 {
        let p = maria_start(&mut conns[0]).await?;
        let start = maria_start_at(&mut conns[0], p).await?;
        return Ok((conns, start));
    }
    for attempt in 1..=ALIGN_ATTEMPTS {
        let positions = maria_start_all(&mut conns).await?;
        if positions.iter().all(|p| *p == positions[0]) {
            let start = maria_start_at(&mut conns[0], positions[0].clone()).await?;
            return Ok((conns, start));
        }
        tracing::debug!(
            attempt,
            "the snapshot readers' transactions started at different binlog positions (a commit fell between them); starting them again"
        );
        rollback_all(&mut conns).await?;
    }
    match locked_start(&mut conns, flavor).await {
        Ok(start) => {
            tracing::info!(
                readers = conns.len(),
                attempts = ALIGN_ATTEMPTS,
                "the snapshot readers could not start at one binlog position under the concurrent writes: started them under a brief FLUSH TABLES WITH READ LOCK"
            );
            Ok((conns, start))
        }
        Err(e) => {
            // Without RELOAD: as many readers as agree (one always does).
            let positions = maria_start_all(&mut conns).await?;
            let keep = largest_group(&positions);
            let mut kept = Vec::with_capacity(keep.len());
            for (i, c) in conns.into_iter().enumerate() {
                if keep.contains(&i) {
                    kept.push(c);
                } else {
                    let _ = c.disconnect().await;
                }
            }
            tracing::warn!(
                readers = kept.len(),
                wanted = n,
                error = %e,
                "the snapshot readers could not start at one binlog position and the brief read lock was refused: reading with fewer connections. Fix: GRANT RELOAD ON *.* to the connector's user"
            );
            let start = maria_start_at(&mut kept[0], positions[keep[0]].clone()).await?;
            Ok((kept, start))
        }
    }
}

/// Starts every reader's transaction under `FLUSH TABLES WITH READ LOCK` (nothing commits
/// meanwhile), reads the position, and releases the lock.
pub(super) async fn locked_start(
    conns: &mut [Conn],
    flavor: Flavor,
) -> Result<BinlogStart, SourceError> {
    conns[0]
        .query_drop("FLUSH TABLES WITH READ LOCK")
        .await
        .map_err(sql_err(
            "locking the tables to read the binlog position (needs RELOAD)",
        ))?;
    let result = async {
        for c in conns.iter_mut() {
            c.query_drop(START_TX)
                .await
                .map_err(sql_err("starting the snapshot transaction"))?;
        }
        match flavor {
            Flavor::MariaDb => Ok(Ok(maria_start_pos(&mut conns[0]).await?)),
            Flavor::MySql => {
                let c = &mut conns[0];
                let row: Option<mysql_async::Row> =
                    match c.query_first("SHOW BINARY LOG STATUS").await {
                        Ok(r) => r,
                        Err(_) => c
                            .query_first("SHOW MASTER STATUS")
                            .await
                            .map_err(sql_err("reading the binlog position"))?,
                    };
                Ok(Err(row))
            }
        }
    }
    .await;
    let unlock = conns[0].query_drop("UNLOCK TABLES").await;
    let got: Result<Result<(String, u64), Option<mysql_async::Row>>, SourceError> = result;
    let got = got?;
    unlock.map_err(sql_err("releasing the snapshot's read lock"))?;
    match got {
        Ok(p) => maria_start_at(&mut conns[0], p).await,
        Err(row) => {
            let Some(row) = row else {
                return Err(SourceError::definite(
                    "starting the snapshot",
                    "the binary log is off (SHOW MASTER STATUS is empty)",
                    "enable the binary log (log_bin, binlog_format = ROW) and restart the server",
                ));
            };
            let file: String = row.get(0).unwrap_or_default();
            let pos: u64 = row.get(1).unwrap_or(4);
            let executed: Option<String> = row.get(4);
            let gtid_set = match executed.as_deref().map(str::trim) {
                Some(s) if !s.is_empty() => Some(gtid_set_of(Some(s))?),
                _ => None,
            };
            Ok(BinlogStart {
                file,
                pos,
                gtid_set,
            })
        }
    }
}

/// MariaDB, in a session whose snapshot transaction is open: its binlog position.
pub(super) async fn maria_start_pos(conn: &mut Conn) -> Result<(String, u64), SourceError> {
    let rows: Vec<(String, String)> = conn
        .query("SHOW STATUS LIKE 'binlog_snapshot_%'")
        .await
        .map_err(sql_err("reading the snapshot's binlog position"))?;
    let get = |n: &str| {
        rows.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.clone())
    };
    match (get("binlog_snapshot_file"), get("binlog_snapshot_position")) {
        (Some(file), Some(pos)) if !file.is_empty() => Ok((file, pos.parse().unwrap_or(4))),
        _ => Err(SourceError::definite(
            "starting the snapshot",
            "the server reports no binlog_snapshot_file / binlog_snapshot_position",
            "enable the binary log: log_bin = mysql-bin, binlog_format = ROW, binlog_row_image = FULL in my.cnf, then restart the server",
        )),
    }
}

pub(super) fn gtid_set_of(text: Option<&str>) -> Result<GtidSet, SourceError> {
    match text.map(str::trim) {
        None | Some("") => Ok(GtidSet::empty_mariadb()),
        Some(t) => t.parse().map_err(|e: cdc_schemas::gtid::ParseGtidError| {
            SourceError::definite(
                "reading the snapshot's GTID position",
                e.to_string(),
                "report this as a bug",
            )
        }),
    }
}

/// The current binlog position (for `snapshot.mode = "never"`).
pub async fn current_position(conn: &mut Conn, flavor: Flavor) -> Result<BinlogStart, SourceError> {
    let row: Option<mysql_async::Row> = match conn.query_first("SHOW BINARY LOG STATUS").await {
        Ok(r) => r,
        Err(_) => conn
            .query_first("SHOW MASTER STATUS")
            .await
            .map_err(sql_err("reading the binlog position"))?,
    };
    let Some(row) = row else {
        return Err(SourceError::definite(
            "reading the binlog position",
            "the binary log is off",
            "enable the binary log (log_bin, binlog_format = ROW) and restart the server",
        ));
    };
    let file: String = row.get(0).unwrap_or_default();
    let pos: u64 = row.get(1).unwrap_or(4);
    let gtid_set = match flavor {
        Flavor::MariaDb => {
            let g: Option<Option<String>> = conn
                .exec_first("SELECT BINLOG_GTID_POS(?, ?)", (file.as_str(), pos))
                .await
                .map_err(sql_err("reading the GTID position"))?;
            Some(gtid_set_of(g.flatten().as_deref())?)
        }
        Flavor::MySql => None,
    };
    Ok(BinlogStart {
        file,
        pos,
        gtid_set,
    })
}
