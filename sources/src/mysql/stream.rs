//! The binlog stream of a MySQL / MariaDB source: row events into transactions, handed
//! to the pipeline in commit order with their positions.
//!
//! # Transactions
//!
//! An event group starts at a GTID event (MariaDB's own, or MySQL's) or a `BEGIN` query
//! and ends at its `XID` event or a `COMMIT` (or `ROLLBACK`) query; a MariaDB GTID event
//! flagged standalone is followed by one statement (DDL) and no end event; a prepared XA
//! transaction's group ends at its `XA_PREPARE` event (or `XA PREPARE` query): its changes
//! are emitted then, and a later `XA ROLLBACK` of it is not undone. The row events
//! between (`WRITE`/`UPDATE`/`DELETE`, v1 and v2) are decoded with the table map and the
//! table's [`MyTable`] into create / update / delete events, one [`ChangeBatch`] per
//! transaction, in chunks of `max_batch_events` of which only the last carries the
//! commit checkpoint.
//!
//! # Positions and resume
//!
//! A commit's checkpoint is `MySqlPosition { file, pos }` of the event after the group's
//! last one (the end event's `log_pos`), with the GTID of the group and, on MariaDB, the
//! domain → last GTID state after it. A record's position is the group's first event
//! (`pos`) and its index within its rows event (`row`), as Debezium's. Resume is by GTID
//! state when there is one (`@slave_connect_state`: the server sends only the groups
//! after it, in every domain), by file and offset otherwise; a group the state already
//! contains is skipped if the server sends it anyway. Transactions whose changes are all
//! filtered out move the position too: their checkpoint goes in an empty batch, at most
//! every second or 256 such transactions, and at every heartbeat.
//!
//! # Schema changes
//!
//! Every query event outside a transaction's row events goes through
//! [`Schemas::apply_ddl`], which follows DDL on captured tables at its place in the
//! binlog. A statement that changed the schemas is recorded in the schema history
//! ([`SchemaHistory::record_ddl`]: its default database and SQL at its group's checkpoint,
//! GTID included) and durable there before any batch at or after it is sent, so a resume
//! from any durable checkpoint restores the schemas of its place (see
//! [`super::history`]). A table it changed
//! gets a new [`Captured`] (a new `Arc<TableSchema>`, which the
//! pipeline registers as a new schema version) at its next table map; a change that
//! leaves the table as it was keeps the old schema. A DDL the model cannot follow is a
//! definite error (naming the statement); a row event whose column count does not match
//! the model is one too.
//!
//! # Failures
//!
//! A lost connection, a server restart or a read silent for three heartbeat periods is
//! [`SourceError::Transient`]: the supervisor restarts the source from the last durable
//! checkpoint with backoff. A position the server no longer has (error 1236) ends the
//! stream with [`StreamEnd::Purged`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cdc_schemas::gtid::MariaGtid;
use cdc_schemas::{
    ChangeEvent, Checkpoint, GtidSet, MySqlPosition, Op, Row, SourcePosition, TableId, TableSchema,
    TransactionInfo,
};
use mysql_async::binlog::events::{
    BinlogEventHeader, Event, EventData, OptionalMetadataField, RowsEventData, TableMapEvent,
};
use mysql_async::binlog::value::BinlogValue;
use mysql_async::binlog::EventType;

use super::binlog::{self, BinlogConn, BinlogStart, Flavor, Next};
use super::config::MySqlSourceConfig;
use super::ddl::TableChange;
use super::decode::{DecodeOptions, TableDecoder};
use super::history::SchemaHistory;
use super::metrics::MyMetrics;
use super::schema::Schemas;
use super::source::{now_ms, send};
use super::table::MyTable;
use crate::{ChangeBatch, SourceContext, SourceError};

/// How a stream ended.
#[derive(Debug)]
pub enum StreamEnd {
    /// Shutdown was requested, or the pipeline stopped.
    Stopped,
    /// The server no longer has the binlog from the requested position.
    Purged(SourceError),
    Failed(SourceError),
}

impl From<SourceError> for StreamEnd {
    fn from(e: SourceError) -> Self {
        StreamEnd::Failed(e)
    }
}

/// A captured table as the stream decodes it.
pub(super) struct Captured {
    pub my: MyTable,
    pub schema: Arc<TableSchema>,
    /// Per column: `UNSIGNED` (the binlog encodes integers without their sign).
    pub unsigned: Vec<bool>,
    /// The columns resolved once per table version: decoding a value allocates nothing
    /// for its type (ENUM/SET members, charset, precision).
    pub decoder: TableDecoder,
}

impl Captured {
    pub fn new(my: MyTable) -> Result<Captured, SourceError> {
        let schema = my.schema().map_err(|e| {
            SourceError::definite(
                format!("table {}.{}", my.database, my.name),
                e.to_string(),
                "report this as a bug, with the table's definition",
            )
        })?;
        let unsigned = my.columns.iter().map(|c| c.unsigned()).collect();
        let decoder = TableDecoder::new(&my);
        Ok(Captured {
            my,
            schema,
            unsigned,
            decoder,
        })
    }
}

/// The open event group.
struct Tx {
    /// The group's GTID, as text (Debezium's `source.gtid`, the transaction id).
    gtid: Option<Arc<str>>,
    maria: Option<MariaGtid>,
    /// A MySQL GTID: (uuid, gno).
    mysql_gtid: Option<(String, u64)>,
    standalone: bool,
    skip: bool,
    file: Arc<str>,
    start_pos: u64,
    server_id: u32,
    ts_ms: i64,
    events: Vec<ChangeEvent>,
    bytes: u64,
    /// A chunk of this transaction went to the pipeline (without a commit).
    chunked: bool,
    total: u64,
    per_table: HashMap<TableId, u64>,
    id: Option<Arc<str>>,
}

impl Tx {
    /// The transaction id of the group's records: its GTID, or its place in the binlog.
    fn id(&mut self) -> Arc<str> {
        self.id
            .get_or_insert_with(|| match &self.gtid {
                Some(g) => g.clone(),
                None => format!("file={},pos={}", self.file, self.start_pos).into(),
            })
            .clone()
    }
}

struct State<'a> {
    cfg: &'a MySqlSourceConfig,
    schemas: Schemas,
    /// Where each DDL that changed `schemas` is recorded (None: no store).
    history: Option<&'a mut SchemaHistory>,
    batches: tokio::sync::mpsc::Sender<ChangeBatch>,
    metrics: MyMetrics,
    opts: DecodeOptions,
    file: Arc<str>,
    /// The offset after the last event processed.
    next_pos: u64,
    gtid_set: Option<GtidSet>,
    tx: Option<Tx>,
    /// table id → the table it maps and its captured state (None: not captured). A
    /// table keeps its id across transactions until DDL or a table cache eviction, so
    /// the lookup by name is made once per id, not once per transaction; cleared when
    /// DDL changes any captured table.
    maps: HashMap<u64, (TableId, Option<Arc<Captured>>)>,
    /// The decoding state of each captured table seen so far (dropped when DDL changes
    /// the table's schema).
    by_name: HashMap<TableId, Arc<Captured>>,
    /// The checkpoint of filtered-out transactions not sent yet.
    pending: Option<MySqlPosition>,
    pending_count: u32,
    last_sent: Instant,
    /// A format description was read (see [`BinlogConn::checksum`]).
    seen_fde: bool,
}

/// Streams from `start` until shutdown or an error; `schemas` are the ones valid at
/// `start`, `history` records the DDL that follows.
pub(super) async fn stream(
    cfg: &MySqlSourceConfig,
    flavor: Flavor,
    start: BinlogStart,
    schemas: Schemas,
    ctx: &mut SourceContext,
    metrics: MyMetrics,
    history: Option<&mut SchemaHistory>,
) -> StreamEnd {
    let mut conn = match binlog::open(
        &cfg.endpoint,
        cfg.server_id,
        flavor,
        &start,
        cfg.heartbeat_interval,
    )
    .await
    {
        Ok(c) => c,
        Err(e) => return StreamEnd::Failed(e),
    };
    tracing::info!(file = %start.file, pos = start.pos, gtid_set = ?start.gtid_state().map(|g| g.to_string()), "binlog stream started");
    let mut st = State {
        cfg,
        schemas,
        history,
        batches: ctx.batches.clone(),
        metrics,
        opts: cfg.decode.clone(),
        file: start.file.as_str().into(),
        next_pos: start.pos,
        gtid_set: match flavor {
            Flavor::MariaDb => Some(
                start
                    .gtid_set
                    .clone()
                    .unwrap_or_else(GtidSet::empty_mariadb),
            ),
            Flavor::MySql => start.gtid_set.clone(),
        },
        tx: None,
        maps: HashMap::new(),
        by_name: HashMap::new(),
        pending: None,
        pending_count: 0,
        last_sent: Instant::now(),
        seen_fde: false,
    };
    let mut shutdown = ctx.shutdown.clone();
    let mut first = true;
    let end = loop {
        let next = tokio::select! {
            biased;
            _ = shutdown.changed() => break StreamEnd::Stopped,
            n = conn.next() => n,
        };
        let ev = match next {
            Ok(Next::Event(ev)) => ev,
            Ok(Next::End) => {
                break StreamEnd::Failed(SourceError::transient(
                    "binlog stream",
                    "the server ended the stream (shutting down?)",
                ))
            }
            Err(e) if binlog::is_purged(&e) => {
                break StreamEnd::Purged(binlog::my_err("reading the binlog", e))
            }
            Err(e) => break StreamEnd::Failed(binlog::my_err("reading the binlog", e)),
        };
        if first {
            first = false;
            tracing::debug!("binlog: first event received");
        }
        match st.event(&conn, ev).await {
            Ok(true) => {}
            Ok(false) => break StreamEnd::Stopped,
            Err(e) => break StreamEnd::Failed(e),
        }
    };
    let _ = conn.stream.close().await;
    end
}

/// An `XA PREPARE` / `XA COMMIT` / `XA ROLLBACK` query ends its event group (a prepared
/// XA transaction's changes are emitted at its prepare; the completion is a group of
/// its own, without changes).
fn ends_xa_group(sql: &str) -> bool {
    let mut w = sql.split_ascii_whitespace();
    matches!(
        (w.next(), w.next()),
        (Some(a), Some(b)) if a.eq_ignore_ascii_case("XA")
            && ["PREPARE", "COMMIT", "ROLLBACK"].iter().any(|k| b.eq_ignore_ascii_case(k))
    )
}

fn uuid_text(sid: &[u8; 16]) -> String {
    let h: String = sid.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

impl State<'_> {
    /// Handles one event. `Ok(false)`: the pipeline stopped.
    async fn event(&mut self, conn: &BinlogConn, ev: Event) -> Result<bool, SourceError> {
        let h = ev.header();
        let ty = h.event_type_raw();
        self.metrics.events_read.inc();
        if h.timestamp() != 0 {
            let now = now_ms() / 1000;
            self.metrics
                .seconds_behind
                .set((now - h.timestamp() as i64).max(0) as u64);
        }
        let log_pos = h.log_pos() as u64;
        // A format description resent at the stream's start and fake events carry 0 (or
        // the file's own header position): they do not move the stream.
        let moves = log_pos != 0 && ty != EventType::FORMAT_DESCRIPTION_EVENT as u8;
        if ty == EventType::FORMAT_DESCRIPTION_EVENT as u8 {
            self.seen_fde = true;
        }
        match ty {
            binlog::MARIADB_GTID_EVENT => {
                let g = binlog::parse_gtid_event(ev.data(), h.server_id()).map_err(|e| {
                    SourceError::definite(
                        "reading the binlog",
                        e.to_string(),
                        "report this as a bug",
                    )
                })?;
                let skip = self
                    .gtid_set
                    .as_ref()
                    .is_some_and(|s| s.contains_mariadb(&g.gtid));
                if skip {
                    tracing::debug!(gtid = %g.gtid, "skipping a transaction already in the stored GTID state");
                }
                let mut tx = self.open_tx_at(&h);
                tx.gtid = Some(g.gtid.to_string().into());
                tx.maria = Some(g.gtid);
                tx.standalone = g.standalone();
                tx.skip = skip;
                self.tx = Some(tx);
            }
            binlog::FIRST_COMPRESSED_EVENT..=binlog::LAST_COMPRESSED_EVENT => {
                return Err(SourceError::definite(
                    "reading the binlog",
                    format!("the binlog holds compressed events (type {ty}), which this connector does not decode"),
                    "SET GLOBAL log_bin_compress = OFF (and in my.cnf); the compressed part of the binlog cannot be captured: take a new snapshot after it",
                ));
            }
            binlog::TRANSACTION_PAYLOAD_EVENT => {
                // Never handed to mysql_common's parser, which panics on a short one.
                return Err(binlog::transaction_payload_refused());
            }
            binlog::START_ENCRYPTION_EVENT => {
                return Err(SourceError::definite(
                    "reading the binlog",
                    "the server sent a START_ENCRYPTION event: binlog encryption is not supported over replication by this connector",
                    "turn off encrypt_binlog",
                ));
            }
            binlog::GTID_LIST_EVENT
            | binlog::BINLOG_CHECKPOINT_EVENT
            | binlog::ANNOTATE_ROWS_EVENT => {}
            _ => {
                if binlog::is_rows_event(ty) {
                    binlog::check_rows_event(ty, ev.data()).map_err(|e| {
                        SourceError::definite(
                            "decoding a binlog event",
                            format!("event type {ty} at {}:{}: {e}", self.file, self.next_pos),
                            "report this as a bug",
                        )
                    })?;
                }
                let data = ev.read_data().map_err(|e| {
                    SourceError::definite(
                        "decoding a binlog event",
                        format!("event type {ty} at {}:{}: {e}", self.file, self.next_pos),
                        "report this as a bug",
                    )
                })?;
                match data {
                    Some(EventData::RotateEvent(r)) => {
                        let mut name = r.name_raw();
                        if conn.checksum && !self.seen_fde && name.len() > 4 {
                            name = &name[..name.len() - 4];
                        }
                        self.file = String::from_utf8_lossy(name).as_ref().into();
                        self.next_pos = r.position();
                        self.metrics.position(&self.file, self.next_pos);
                        return Ok(true);
                    }
                    Some(EventData::QueryEvent(q)) => {
                        let sql = q.query();
                        let sql = sql.trim();
                        if sql.eq_ignore_ascii_case("BEGIN") {
                            match self.tx.as_mut() {
                                // A MySQL GTID is followed by BEGIN for a transaction.
                                Some(t) => t.standalone = false,
                                None => self.tx = Some(self.open_tx_at(&h)),
                            }
                        } else if sql.eq_ignore_ascii_case("COMMIT")
                            || sql.eq_ignore_ascii_case("ROLLBACK")
                            || ends_xa_group(sql)
                        {
                            self.advance(moves, log_pos);
                            return self.commit().await;
                        } else {
                            let db = q.schema();
                            let db = (!db.is_empty()).then_some(db.as_ref());
                            // A group the stored state already holds was applied to the
                            // schemas already.
                            if !self.tx.as_ref().is_some_and(|t| t.skip) {
                                for id in self.ddl(db, sql, log_pos)? {
                                    self.truncate(&h, &id)?;
                                }
                            }
                            let in_group = self.tx.as_ref().map(|t| !t.standalone);
                            if in_group == Some(true) {
                                // A statement inside a transaction: not row-based.
                                tracing::debug!("a statement-based event inside a transaction is ignored (binlog_format must be ROW)");
                            } else {
                                self.advance(moves, log_pos);
                                return self.commit().await;
                            }
                        }
                    }
                    // XA_PREPARE ends the group of a prepared XA transaction (its
                    // changes are emitted at the prepare).
                    Some(EventData::XidEvent(_)) | Some(EventData::XaPrepareLogEvent(_)) => {
                        self.advance(moves, log_pos);
                        return self.commit().await;
                    }
                    Some(EventData::GtidEvent(g)) => {
                        let uuid = uuid_text(&g.sid());
                        let skip = self
                            .gtid_set
                            .as_ref()
                            .is_some_and(|s| s.contains_mysql(&uuid, "", g.gno()));
                        let mut tx = self.open_tx_at(&h);
                        tx.gtid = Some(format!("{uuid}:{}", g.gno()).into());
                        tx.mysql_gtid = Some((uuid, g.gno()));
                        // Until a BEGIN says otherwise, the group is one statement (DDL).
                        tx.standalone = true;
                        tx.skip = skip;
                        self.tx = Some(tx);
                    }
                    Some(EventData::TableMapEvent(t)) => {
                        let id = t.table_id();
                        let known = self.maps.get(&id).is_some_and(|(n, _)| {
                            n.schema.as_bytes() == t.database_name_raw()
                                && n.name.as_bytes() == t.table_name_raw()
                        });
                        if !known {
                            let name = TableId::new(t.database_name(), t.table_name());
                            let c = self.resolve(&name)?;
                            if let Some(c) = &c {
                                cross_check(&t, &c.my)?;
                            }
                            self.maps.insert(id, (name, c));
                        }
                    }
                    Some(EventData::RowsEvent(r)) if !self.rows(conn, &r).await? => {
                        return Ok(false);
                    }
                    Some(EventData::HeartbeatEvent) => {
                        self.metrics.seconds_behind.set(0);
                        return self.flush_pending().await;
                    }
                    _ => {}
                }
            }
        }
        self.advance(moves, log_pos);
        Ok(true)
    }

    fn advance(&mut self, moves: bool, log_pos: u64) {
        if moves {
            self.next_pos = log_pos;
            self.metrics.position(&self.file, log_pos);
        }
    }

    /// Opens a group at the event whose header is `h` (its own offset is the group's
    /// position: `log_pos` is the end of the event).
    fn open_tx_at(&mut self, h: &BinlogEventHeader) -> Tx {
        let mut tx = self.open_tx(h.server_id(), h.timestamp());
        if h.log_pos() != 0 {
            tx.start_pos = (h.log_pos() as u64).saturating_sub(h.event_size() as u64);
        }
        tx
    }

    fn open_tx(&mut self, server_id: u32, ts: u32) -> Tx {
        if let Some(t) = self.tx.take() {
            if !t.events.is_empty() {
                tracing::warn!(gtid = ?t.gtid, "a transaction without an end event was followed by another one; its changes are dropped");
            }
        }
        Tx {
            gtid: None,
            maria: None,
            mysql_gtid: None,
            standalone: false,
            skip: false,
            file: self.file.clone(),
            start_pos: self.next_pos,
            server_id,
            ts_ms: ts as i64 * 1000,
            events: Vec::new(),
            bytes: 0,
            chunked: false,
            total: 0,
            per_table: HashMap::new(),
            id: None,
        }
    }

    /// The captured table `name` is (None: not captured).
    fn resolve(&mut self, name: &TableId) -> Result<Option<Arc<Captured>>, SourceError> {
        if let Some(c) = self.by_name.get(name) {
            return Ok(Some(c.clone()));
        }
        if !self.cfg.filter.includes(name) {
            return Ok(None);
        }
        let Some(my) = self.schemas.get_id(name) else {
            tracing::warn!(table = %name, "row events of a captured table the schema model does not know; they are skipped (was it created before the stored position without a snapshot?)");
            return Ok(None);
        };
        let c = Arc::new(Captured::new(my.clone())?);
        self.by_name.insert(name.clone(), c.clone());
        Ok(Some(c))
    }

    /// Follows a statement on the schema model; a changed table gets a new schema at its
    /// next table map (an unchanged one keeps its schema).
    /// `end`: the offset after the statement's event.
    /// Returns the tables the statement truncated.
    fn ddl(&mut self, db: Option<&str>, sql: &str, end: u64) -> Result<Vec<TableId>, SourceError> {
        let effect = match self.schemas.apply_ddl(db, sql, &self.cfg.filter) {
            Ok(effect) => effect,
            Err(e) if self.cfg.skip_unparseable_ddl => {
                // The schemas stay as they were (apply_ddl changes nothing on error); a
                // later row event that no longer matches them is a definite error then.
                tracing::warn!(table = ?e.table.as_ref().map(|t| t.to_string()), statement = %e.statement, reason = %e.reason, "source.skip_unparseable_ddl: a DDL statement this source cannot follow was skipped");
                self.metrics.ddl_skipped.inc();
                return Ok(Vec::new());
            }
            Err(e) => {
                return Err(SourceError::definite(
                    "following a DDL statement",
                    e.to_string(),
                    e.fix.clone(),
                ))
            }
        };
        if effect.schemas_changed {
            let position = self.ddl_position(end);
            if let Some(h) = self.history.as_deref_mut() {
                // Durable before this group's commit (or anything after it) is sent: a
                // resume from a checkpoint at or after the DDL finds it.
                tokio::task::block_in_place(|| h.record_ddl(&position, db, sql))?;
            }
        }
        if !effect.changes.is_empty() {
            self.maps.clear();
        }
        let mut truncated = Vec::new();
        for change in effect.changes {
            let (gone, now) = match change {
                TableChange::Created(t) | TableChange::Altered(t) => (None, Some(t)),
                TableChange::Renamed { from, table, .. } => (Some(from), Some(table)),
                TableChange::Dropped(id) => (Some(id), None),
                TableChange::Truncated(id) => {
                    truncated.push(id);
                    (None, None)
                }
                TableChange::PartitionRows { table, operation } => {
                    // The server removes (or moves) those rows without row events: the
                    // log keeps them. Debezium does the same; say so, once per statement.
                    tracing::warn!(table = %table, operation = %operation, "a partition statement changed rows of a captured table without row events: the log still holds them (a new snapshot makes it equal the table)");
                    (None, None)
                }
            };
            if let Some(id) = gone {
                self.by_name.remove(&id);
                tracing::info!(table = %id, "captured table dropped or renamed away");
            }
            if let Some(t) = now {
                let id = t.id();
                let same = self.by_name.get(&id).is_some_and(|c| c.my == t);
                if !same {
                    self.by_name.remove(&id);
                    tracing::info!(table = %id, columns = t.columns.len(), "captured table's schema changed by DDL");
                }
            }
        }
        Ok(truncated)
    }

    /// A `TRUNCATE TABLE` of a captured table: a truncate record (`op = t`, as the
    /// Postgres source writes one, and Debezium with `skipped.operations = none`), the only
    /// change of the statement's group. The server
    /// writes no row events for it, so without this record a view of the table would keep
    /// the rows the table lost.
    fn truncate(&mut self, h: &BinlogEventHeader, id: &TableId) -> Result<(), SourceError> {
        let Some(table) = self.resolve(id)? else {
            return Ok(());
        };
        if self.tx.is_none() {
            // A binlog without GTIDs: the statement is its own group.
            let mut tx = self.open_tx_at(h);
            tx.standalone = true;
            self.tx = Some(tx);
        }
        let tx = self.tx.as_mut().expect("opened");
        let pos = SourcePosition::Mysql(MySqlPosition {
            file: tx.file.to_string(),
            pos: tx.start_pos,
            row: 0,
            event: 0,
            gtid: tx.gtid.as_deref().map(str::to_string),
            gtid_set: None,
            server_id: tx.server_id,
            thread: None,
        });
        // No `transaction` block, as Debezium's MySQL connector writes it: so no BEGIN/END
        // records around it either.
        let ev = ChangeEvent::truncate(table.schema.clone(), pos, tx.ts_ms);
        tx.bytes += ev.approx_size() as u64;
        tx.events.push(ev);
        Ok(())
    }

    /// The checkpoint of the open group whose statement ends at `end`, as [`Self::commit`]
    /// will send it (a standalone DDL's group ends there): the GTID state includes the
    /// group's own GTID. A statement inside a longer group gets its own offset, which
    /// orders it before the group's commit by file and equal to it by GTID state.
    fn ddl_position(&self, end: u64) -> MySqlPosition {
        let tx = self.tx.as_ref();
        let mut gtid_set = self.gtid_set.clone();
        if let (Some(set), Some(g)) = (gtid_set.as_mut(), tx.and_then(|t| t.maria)) {
            set.add_mariadb(g);
        }
        if let (Some(set), Some((u, n))) =
            (gtid_set.as_mut(), tx.and_then(|t| t.mysql_gtid.as_ref()))
        {
            set.add_mysql(u, "", *n);
        }
        MySqlPosition {
            file: self.file.to_string(),
            pos: end,
            row: 0,
            event: 0,
            gtid: tx.and_then(|t| t.gtid.as_deref()).map(str::to_string),
            gtid_set,
            server_id: tx.map_or(0, |t| t.server_id),
            thread: None,
        }
    }

    /// Decodes one rows event into the open transaction. `Ok(false)`: the pipeline stopped.
    async fn rows(
        &mut self,
        conn: &BinlogConn,
        r: &RowsEventData<'_>,
    ) -> Result<bool, SourceError> {
        let table_id = r.table_id();
        let Some((_, Some(table))) = self.maps.get(&table_id) else {
            return Ok(true);
        };
        let table = table.clone();
        if self.tx.is_none() {
            // Row events outside BEGIN … COMMIT (a non-transactional table without
            // GTIDs): their own group, ending at the statement.
            self.tx = Some(self.open_tx(0, 0));
        }
        let Some(tme) = conn.stream.get_tme(table_id) else {
            return Err(SourceError::definite(
                "decoding a rows event",
                format!("no table map for table id {table_id}"),
                "report this as a bug",
            ));
        };
        let tx = self.tx.as_mut().expect("open");
        if tx.skip {
            return Ok(true);
        }
        let kind = match r {
            RowsEventData::WriteRowsEvent(_) | RowsEventData::WriteRowsEventV1(_) => Op::Create,
            RowsEventData::UpdateRowsEvent(_)
            | RowsEventData::UpdateRowsEventV1(_)
            | RowsEventData::PartialUpdateRowsEvent(_) => Op::Update,
            RowsEventData::DeleteRowsEvent(_) | RowsEventData::DeleteRowsEventV1(_) => Op::Delete,
        };
        let cols = &table.my.columns;
        let bad = |what: String| {
            SourceError::definite(
                format!("decoding a change of {}", table.schema.id),
                what,
                "check that binlog_row_image = FULL; if the table was altered while the schema history (<log.dir>/history) was missing or while the connector ran without one, start over with an empty log dir (a new snapshot); otherwise report this with the table's definition",
            )
        };
        if r.num_columns() as usize != cols.len() {
            return Err(bad(format!(
                "the row event has {} columns, the table's definition {}",
                r.num_columns(),
                cols.len()
            )));
        }
        let opts = &self.opts;
        let decoders = table.decoder.columns();
        let decode_row = |image: &[Option<BinlogValue<'_>>]| -> Result<Row, SourceError> {
            let mut values = Vec::with_capacity(cols.len());
            for ((c, d), v) in cols.iter().zip(decoders).zip(image) {
                values.push(match v {
                    Some(v) => d.binlog(v, opts),
                    None => {
                        return Err(bad(format!(
                            "column {} is not in the row image (binlog_row_image must be FULL)",
                            c.name
                        )))
                    }
                });
            }
            Ok(Row::new(values))
        };
        // Shared by the event's records: one allocation per rows event, not per row.
        let gtid: Option<String> = tx.gtid.as_deref().map(str::to_string);
        let file = tx.file.to_string();
        let (server_id, start_pos, ts) = (tx.server_id, tx.start_pos, tx.ts_ms);
        let id = tx.id();
        // One rows event is one table: its counter is looked up once.
        let n = match tx.per_table.get_mut(&table.schema.id) {
            Some(n) => n,
            None => tx.per_table.entry(table.schema.id.clone()).or_insert(0),
        };
        let mut before = Vec::with_capacity(cols.len());
        let mut after = Vec::with_capacity(cols.len());
        binlog::for_each_row(
            r,
            tme,
            &table.unsigned,
            &mut before,
            &mut after,
            |index, b, a| {
                let pos = SourcePosition::Mysql(MySqlPosition {
                    file: file.clone(),
                    pos: start_pos,
                    row: index,
                    event: 0,
                    gtid: gtid.clone(),
                    gtid_set: None,
                    server_id,
                    thread: None,
                });
                let schema = table.schema.clone();
                let ev = match (kind, b, a) {
                    (Op::Create, _, Some(a)) => {
                        ChangeEvent::create(schema, decode_row(a)?, pos, ts)
                    }
                    (Op::Update, b, Some(a)) => {
                        let b = b.map(&decode_row).transpose()?;
                        ChangeEvent::update(schema, b, decode_row(a)?, pos, ts)
                    }
                    (Op::Delete, Some(b), _) => {
                        ChangeEvent::delete(schema, decode_row(b)?, pos, ts)
                    }
                    _ => return Err(bad("a rows event without the image its kind needs".into())),
                };
                let mut ev = ev.map_err(|e| bad(e.to_string()))?;
                tx.total += 1;
                *n += 1;
                ev.tx = Some(TransactionInfo {
                    id: id.clone(),
                    total_order: tx.total,
                    data_collection_order: *n,
                });
                if ev.changes_key() {
                    tx.total += 1;
                    *n += 1;
                }
                tx.bytes += ev.approx_size() as u64;
                tx.events.push(ev);
                Ok(())
            },
        )?;
        if tx.events.len() >= self.cfg.max_batch_events {
            tx.chunked = true;
            let events = std::mem::take(&mut tx.events);
            let bytes = std::mem::take(&mut tx.bytes);
            let b = ChangeBatch {
                events,
                commit: None,
                approx_bytes: bytes,
                snapshot: None,
            };
            if send(&self.batches, b).await.is_err() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Ends the open group (or a statement outside one) at `next_pos`.
    async fn commit(&mut self) -> Result<bool, SourceError> {
        let tx = self.tx.take();
        // `nothing`: no record to send, only the position to move (coalesced).
        let (gtid, server_id, nothing, events, bytes) = match tx {
            Some(mut t) => {
                if let (Some(set), Some(g)) = (self.gtid_set.as_mut(), t.maria) {
                    set.add_mariadb(g);
                }
                if let (Some(set), Some((u, n))) = (self.gtid_set.as_mut(), t.mysql_gtid.as_ref()) {
                    set.add_mysql(u, "", *n);
                }
                let events = std::mem::take(&mut t.events);
                (
                    t.gtid.map(|g| g.to_string()),
                    t.server_id,
                    // A transaction whose chunks went out must end with its commit now.
                    t.skip || (events.is_empty() && !t.chunked),
                    events,
                    t.bytes,
                )
            }
            None => (None, 0, true, Vec::new(), 0),
        };
        let pos = MySqlPosition {
            file: self.file.to_string(),
            pos: self.next_pos,
            row: 0,
            event: 0,
            gtid,
            gtid_set: self.gtid_set.clone(),
            server_id,
            thread: None,
        };
        if nothing {
            self.pending = Some(pos);
            self.pending_count += 1;
            if self.pending_count >= 256 || self.last_sent.elapsed() >= Duration::from_secs(1) {
                return self.flush_pending().await;
            }
            return Ok(true);
        }
        self.pending = None;
        self.pending_count = 0;
        self.last_sent = Instant::now();
        let b = ChangeBatch {
            events,
            commit: Some(Checkpoint::At(SourcePosition::Mysql(pos))),
            approx_bytes: bytes,
            snapshot: None,
        };
        Ok(send(&self.batches, b).await.is_ok())
    }

    /// Sends the checkpoint of the filtered-out transactions seen since the last batch.
    async fn flush_pending(&mut self) -> Result<bool, SourceError> {
        let Some(pos) = self.pending.take() else {
            return Ok(true);
        };
        self.pending_count = 0;
        self.last_sent = Instant::now();
        let b = ChangeBatch {
            events: Vec::new(),
            commit: Some(Checkpoint::At(SourcePosition::Mysql(pos))),
            approx_bytes: 0,
            snapshot: None,
        };
        Ok(send(&self.batches, b).await.is_ok())
    }
}

/// With `binlog_row_metadata = FULL` (MySQL 8.0.1+, MariaDB 10.5+) a table map carries the
/// column names: they must be the names the schema model holds for the table, else the
/// model missed a DDL (one run with `sql_log_bin = 0`, or skipped by
/// `source.skip_unparseable_ddl`) and every record would carry wrong field names. That is
/// a definite error naming both lists; without the names there is nothing to check.
fn cross_check(t: &TableMapEvent<'_>, table: &MyTable) -> Result<(), SourceError> {
    let mut names: Option<Vec<String>> = None;
    for field in t.iter_optional_meta() {
        // A field this mysql_common version cannot parse says nothing about names.
        if let Ok(OptionalMetadataField::ColumnName(n)) = field {
            names = Some(
                n.iter_names()
                    .filter_map(|r| r.ok().map(|c| c.name().into_owned()))
                    .collect(),
            );
        }
    }
    let Some(names) = names else {
        return Ok(());
    };
    match column_names_differ(&names, table) {
        None => Ok(()),
        Some(detail) => Err(SourceError::definite(
            format!("table {}.{}", table.database, table.name),
            format!("the binlog's table map names the columns {names:?}, the schema model {detail}: a DDL on this table did not reach the model (run with sql_log_bin = 0, or skipped)"),
            "take a new snapshot of the table: stop the connector, remove the log directory (or set snapshot.mode = \"when_needed\" after removing its checkpoint) and start again",
        )),
    }
}

/// `None` when `names` (a table map's, in column order) are the model's columns, else the
/// model's list as text.
fn column_names_differ(names: &[String], table: &MyTable) -> Option<String> {
    let same = names.len() == table.columns.len()
        && names
            .iter()
            .zip(&table.columns)
            .all(|(a, c)| a.eq_ignore_ascii_case(&c.name));
    (!same).then(|| {
        let model: Vec<&str> = table.columns.iter().map(|c| c.name.as_str()).collect();
        format!("{model:?}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xa_group_ends() {
        assert!(ends_xa_group("XA PREPARE X'1234',X'',1"));
        assert!(ends_xa_group("xa commit 'x'"));
        assert!(!ends_xa_group("XA START 'x'"));
        assert!(!ends_xa_group("XA END 'x'"));
        assert!(!ends_xa_group("COMMIT"));
    }

    #[test]
    fn uuids() {
        let sid = [
            0x3e, 0x11, 0xfa, 0x47, 0x71, 0xca, 0x11, 0xe1, 0x9e, 0x33, 0xc8, 0x0a, 0xa9, 0x42,
            0x95, 0x62,
        ];
        assert_eq!(uuid_text(&sid), "3e11fa47-71ca-11e1-9e33-c80aa9429562");
    }
}
