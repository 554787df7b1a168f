//! The MySQL / MariaDB schema history: what the source stores in a
//! [`SchemaHistoryStore`] so that, resumed in the middle of the binlog, it knows every
//! captured table's schema *as it was at the resume position* (binlog row events carry no
//! column names, and `information_schema` only tells the schema of now).
//!
//! # Records (serde JSON, one per store record)
//!
//! - [`HistoryRecord::Snapshot`] — the full [`Schemas`] at `position`: written when a
//!   snapshot starts (the position its `End` mark carries, where the stream starts), and
//!   when a stream starts with no history to restore (its start position, with the
//!   schemas loaded from `information_schema` then).
//! - [`HistoryRecord::Ddl`] — one QUERY event that changed the [`Schemas`]
//!   ([`super::ddl::DdlEffect::schemas_changed`]): its default database and SQL, and as
//!   `position` the checkpoint of its event group (the binlog file, the event's end
//!   `log_pos`, and the GTID set *including* the DDL's own GTID) — the position the
//!   stream's commit after the statement carries.
//!
//! # The durability argument
//!
//! The stream appends a DDL's record ([`SchemaHistory::record_ddl`], which returns once it
//! is durable) *before* it emits any batch at or after the DDL. A checkpoint at or after
//! the DDL is durable only after that batch is, so whenever the log's checkpoint is at or
//! past a DDL, the history holds it; [`SchemaHistory::restore`] at that checkpoint gives
//! the schemas after every DDL at or before it, and none after.
//!
//! # Position order ([`compare`])
//!
//! A partial order on [`MySqlPosition`]s of one server's binlog history:
//! - When both positions carry a non-empty GTID set of the same dialect: by set
//!   containment (`a <= b` iff every transaction of `a` is in `b`). MariaDB's sets are
//!   "the last sequence number per replication domain", so containment is per domain
//!   `seq_a <= seq_b` (a domain `a` has and `b` lacks: not contained). Sets neither of
//!   which contains the other are incomparable (`None`): positions of two diverged
//!   histories (a failover to a server that applied the domains in another interleaving).
//!   GTIDs are what stays valid across binlog file renumbering and failover.
//! - Otherwise (GTIDs off, or one side without a set): by (binlog file sequence number,
//!   offset), the number being the digits after the file name's last `.`
//!   (`mysql-bin.000012` → 12; the base name is ignored). When either name has no such
//!   number, positions in the same file compare by offset and others are incomparable.
//!
//! A server's file numbering restarts (`RESET MASTER`, a changed `log_bin` base name, a
//! failover without GTIDs to a server with its own numbering): file positions of before
//! and after no longer compare meaningfully. The source's stored position is then gone
//! from the server, so it takes a new snapshot, whose [`HistoryRecord::Snapshot`] is
//! appended last; [`SchemaHistory::restore`] takes the *last appended* snapshot at or
//! before the resume position, so positions of the new numbering restore from the new
//! snapshot. (A resume position of the old numbering that compares after the new
//! snapshot would restore from it wrongly; it cannot be streamed from anyway — its file
//! is gone — and the source snapshots again.) With GTIDs, containment is unaffected.
//!
//! # Restore and duplicates
//!
//! [`SchemaHistory::restore`]: the last appended Snapshot at or before `resume`, then every
//! Ddl appended after it, at or before `resume`, not at or before the last one applied and
//! not the same statement as one applied (the same transaction GTID, else the same file
//! and offset), re-applied with [`Schemas::apply_ddl`] in append order. So a DDL appended
//! twice (a restart re-read it after its record was durable, or a failed append that
//! became durable later) is applied once, also when its second position's GTID set is
//! larger (another replication domain had moved on in the stored checkpoint).
//! [`SchemaHistory::record_ddl`] skips a statement already recorded since the last
//! snapshot; [`SchemaHistory::record_snapshot`] one equal to the last record.
//! The restored [`Schemas`] keep the captured flags of when they were recorded: the
//! stream calls [`Schemas::refilter`] with its filter if that may have changed.
//!
//! # Use from the source
//!
//! ```text
//! let mut history = SchemaHistory::open(store, &filter)?;      // ctx.history: Some(store)
//! // A snapshot: once its consistent point (the End mark's position) and its schemas are
//! // known, before the Begin batch is sent:
//! history.record_snapshot(&end_position, &schemas)?;
//! // A stream resumed from a stored position:
//! let schemas = match history.restore(&resume)? {
//!     Some(s) => s,
//!     None => { let s = Schemas::load(conn, &filter).await?;  // no history at or before it
//!               history.record_snapshot(&resume, &s)?; s }
//! };
//! // Every QUERY event: after apply_ddl, before the group's commit is sent:
//! if effect.schemas_changed { history.record_ddl(&commit_position, current_db, sql)?; }
//! ```
//!
//! The calls block on an fsync (`tokio::task::block_in_place` in async code); they are
//! made at a snapshot's start and on DDL only. Without a store (`ctx.history` is `None`)
//! the source can only load the schemas of now from `information_schema`.

use std::cmp::Ordering;
use std::sync::Arc;

use cdc_schemas::{GtidSet, MySqlPosition};

use super::schema::Schemas;
use crate::filter::TableFilter;
use crate::history::{HistoryError, SchemaHistoryStore};

/// One record of the MySQL schema history.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum HistoryRecord {
    /// The whole schema state at `position`.
    Snapshot {
        position: MySqlPosition,
        schemas: Schemas,
    },
    /// A DDL statement that changed the schema state; `position` is its group's checkpoint.
    Ddl {
        position: MySqlPosition,
        current_db: Option<String>,
        sql: String,
    },
}

impl HistoryRecord {
    pub fn position(&self) -> &MySqlPosition {
        match self {
            HistoryRecord::Snapshot { position, .. } | HistoryRecord::Ddl { position, .. } => {
                position
            }
        }
    }
}

/// The schema history of one MySQL / MariaDB source over its store (see the module docs).
pub struct SchemaHistory {
    store: Arc<dyn SchemaHistoryStore>,
    filter: TableFilter,
    records: Vec<HistoryRecord>,
}

impl SchemaHistory {
    /// Loads every record of `store`. `filter` is the source's (DDL is re-applied with it).
    /// A record that does not parse is a definite error: skipping it could restore a wrong
    /// schema.
    pub fn open(
        store: Arc<dyn SchemaHistoryStore>,
        filter: &TableFilter,
    ) -> Result<SchemaHistory, HistoryError> {
        let raw = store.load()?;
        let mut records = Vec::with_capacity(raw.len());
        for (i, r) in raw.iter().enumerate() {
            let rec: HistoryRecord = serde_json::from_slice(r).map_err(|e| {
                HistoryError::definite(
                    format!("record {i} of the MySQL schema history is not a history record ({e})"),
                    "the history was written by another tool or version; take a new snapshot (remove the log's checkpoint) so that a new history starts",
                )
                .caused_by(e)
            })?;
            records.push(rec);
        }
        tracing::info!(
            records = records.len(),
            snapshots = records
                .iter()
                .filter(|r| matches!(r, HistoryRecord::Snapshot { .. }))
                .count(),
            "MySQL schema history loaded"
        );
        Ok(SchemaHistory {
            store,
            filter: filter.clone(),
            records,
        })
    }

    /// Every record, in append order.
    pub fn records(&self) -> &[HistoryRecord] {
        &self.records
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The schemas as they were at `resume` (see the module docs); `None` when no snapshot
    /// is at or before it (no history: load them from the server and record a snapshot).
    /// A recorded DDL that no longer applies is a definite error.
    pub fn restore(&self, resume: &MySqlPosition) -> Result<Option<Schemas>, HistoryError> {
        let Some(base) = self.records.iter().rposition(|r| {
            matches!(r, HistoryRecord::Snapshot { .. }) && at_or_before(r.position(), resume)
        }) else {
            return Ok(None);
        };
        let HistoryRecord::Snapshot { position, schemas } = &self.records[base] else {
            unreachable!("rposition found a snapshot");
        };
        let mut schemas = schemas.clone();
        let mut last = position;
        let mut applied = 0usize;
        let mut done: Vec<&MySqlPosition> = Vec::new();
        for r in &self.records[base + 1..] {
            // A later snapshot past `resume` (one that started and never became the
            // log's position) does not end this one's DDL chain.
            let HistoryRecord::Ddl {
                position,
                current_db,
                sql,
            } = r
            else {
                continue;
            };
            if !at_or_before(position, resume)
                || at_or_before(position, last)
                || done.iter().any(|d| same_statement(d, position))
            {
                continue;
            }
            done.push(position);
            schemas
                .apply_ddl(current_db.as_deref(), sql, &self.filter)
                .map_err(|e| {
                    HistoryError::definite(
                        format!(
                            "re-applying the DDL recorded at {}:{} failed: {e}",
                            position.file, position.pos
                        ),
                        "take a new snapshot (remove the log's checkpoint); report this as a bug",
                    )
                })?;
            last = position;
            applied += 1;
        }
        tracing::info!(resume = %format_position(resume), snapshot = %format_position(&self.records[base].position().clone()), ddl = applied, "table schemas restored from the schema history");
        Ok(Some(schemas))
    }

    /// Appends the full state at `position` (a snapshot's start; a stream starting with
    /// no history). Returns once durable. A no-op when the last record is this very
    /// snapshot.
    pub fn record_snapshot(
        &mut self,
        position: &MySqlPosition,
        schemas: &Schemas,
    ) -> Result<(), HistoryError> {
        if let Some(HistoryRecord::Snapshot {
            position: p,
            schemas: s,
        }) = self.records.last()
        {
            if compare(p, position) == Some(Ordering::Equal) && s == schemas {
                return Ok(());
            }
        }
        self.append(HistoryRecord::Snapshot {
            position: position.clone(),
            schemas: schemas.clone(),
        })
    }

    /// Appends a DDL that changed the schemas, at its group's checkpoint `position`, before
    /// anything at or after it is emitted. Returns once durable. A no-op when a DDL at an
    /// equal position is recorded (a restart read it again).
    pub fn record_ddl(
        &mut self,
        position: &MySqlPosition,
        current_db: Option<&str>,
        sql: &str,
    ) -> Result<(), HistoryError> {
        // A restart re-reads DDL whose record was durable before its checkpoint was. The
        // statement is the same, its position's GTID *set* need not be: other replication
        // domains may have moved on in the stored checkpoint. So a DDL is known by its own
        // transaction (`same_statement`), and the records are scanned back to the last
        // snapshot (DDL is rare; the tail since a snapshot is short).
        for r in self.records.iter().rev() {
            match r {
                HistoryRecord::Ddl { position: p, .. } if same_statement(p, position) => {
                    tracing::debug!(position = %format_position(position), "DDL already in the schema history");
                    return Ok(());
                }
                HistoryRecord::Snapshot { .. } => break,
                HistoryRecord::Ddl { .. } => {}
            }
        }
        self.append(HistoryRecord::Ddl {
            position: position.clone(),
            current_db: current_db.map(str::to_string),
            sql: sql.to_string(),
        })
    }

    fn append(&mut self, record: HistoryRecord) -> Result<(), HistoryError> {
        let bytes = serde_json::to_vec(&record).expect("a history record always serialises");
        self.store.append(&bytes)?;
        tracing::debug!(position = %format_position(record.position()), bytes = bytes.len(), snapshot = matches!(record, HistoryRecord::Snapshot { .. }), "schema history record appended");
        self.records.push(record);
        Ok(())
    }
}

/// Whether two DDL positions are the same statement: the same transaction GTID when both
/// have one (`0-1-42`, `uuid:42`), else the same binlog file and offset.
fn same_statement(a: &MySqlPosition, b: &MySqlPosition) -> bool {
    match (&a.gtid, &b.gtid) {
        (Some(x), Some(y)) => x == y,
        _ => a.file == b.file && a.pos == b.pos,
    }
}

fn format_position(p: &MySqlPosition) -> String {
    match &p.gtid_set {
        Some(g) if !g.is_empty() => format!("{}:{} gtid_set {g}", p.file, p.pos),
        _ => format!("{}:{}", p.file, p.pos),
    }
}

/// `a <= b` in the history's order ([`compare`]); incomparable is not.
pub fn at_or_before(a: &MySqlPosition, b: &MySqlPosition) -> bool {
    matches!(compare(a, b), Some(Ordering::Less | Ordering::Equal))
}

/// The history's order of two positions (see the module docs): GTID set containment when
/// both have a non-empty set of one dialect, else (binlog file number, offset). `None`:
/// incomparable.
pub fn compare(a: &MySqlPosition, b: &MySqlPosition) -> Option<Ordering> {
    if let (Some(ga), Some(gb)) = (&a.gtid_set, &b.gtid_set) {
        if !ga.is_empty() && !gb.is_empty() {
            if let (Some(ab), Some(ba)) = (contains(gb, ga), contains(ga, gb)) {
                return match (ab, ba) {
                    (true, true) => Some(Ordering::Equal),
                    (true, false) => Some(Ordering::Less),
                    (false, true) => Some(Ordering::Greater),
                    (false, false) => None,
                };
            }
        }
    }
    match (file_number(&a.file), file_number(&b.file)) {
        (Some(na), Some(nb)) => Some((na, a.pos).cmp(&(nb, b.pos))),
        _ if a.file == b.file => Some(a.pos.cmp(&b.pos)),
        _ => None,
    }
}

/// The sequence number of a binlog file name: the digits after its last `.`.
pub fn file_number(file: &str) -> Option<u64> {
    let (_, ext) = file.rsplit_once('.')?;
    if ext.is_empty() || !ext.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    ext.parse().ok()
}

/// Whether `outer` contains every transaction of `inner`; `None` across dialects.
fn contains(outer: &GtidSet, inner: &GtidSet) -> Option<bool> {
    match (outer, inner) {
        (GtidSet::MariaDb(o), GtidSet::MariaDb(i)) => Some(
            i.iter()
                .all(|(d, g)| o.get(d).is_some_and(|og| og.seq >= g.seq)),
        ),
        (GtidSet::MySql(o), GtidSet::MySql(i)) => Some(i.iter().all(|(k, intervals)| {
            let Some(outer) = o.get(k) else {
                return intervals.is_empty();
            };
            // Both sorted, disjoint and merged: each inner interval lies in one outer one.
            intervals
                .iter()
                .all(|&(s, e)| outer.iter().any(|&(os, oe)| os <= s && e <= oe))
        })),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(file: &str, pos: u64) -> MySqlPosition {
        MySqlPosition {
            file: file.into(),
            pos,
            ..Default::default()
        }
    }

    fn gp(file: &str, pos: u64, set: &str) -> MySqlPosition {
        MySqlPosition {
            gtid_set: Some(set.parse().unwrap()),
            ..fp(file, pos)
        }
    }

    /// Opaque records in memory: the durable store is the embedded log
    /// (connector/src/history.rs, tested there and in tests/tests/my_history.rs).
    #[derive(Default)]
    struct Records(std::sync::Mutex<Vec<Vec<u8>>>);

    impl SchemaHistoryStore for Records {
        fn load(&self) -> Result<Vec<Vec<u8>>, HistoryError> {
            Ok(self.0.lock().unwrap().clone())
        }
        fn append(&self, record: &[u8]) -> Result<(), HistoryError> {
            self.0.lock().unwrap().push(record.to_vec());
            Ok(())
        }
    }

    /// A restart re-reads a DDL whose record was durable; meanwhile another replication
    /// domain moved on in the stored checkpoint, so the re-read position's GTID set is
    /// larger. It is the same statement (same GTID): recorded and re-applied once.
    #[test]
    fn a_ddl_read_again_with_a_larger_gtid_set_is_recorded_and_applied_once() {
        use super::super::schema::Flavor;
        let filter = TableFilter::new(&["d.*".into()], &[]);
        let store = Arc::new(Records::default());
        let mut h = SchemaHistory::open(store.clone(), &filter).unwrap();
        let mut s = Schemas::new(Flavor::MariaDb);
        s.apply_ddl(Some("d"), "CREATE TABLE t (id int PRIMARY KEY)", &filter)
            .unwrap();
        h.record_snapshot(&gp("b.000001", 100, "0-1-5,1-1-7"), &s)
            .unwrap();
        let ddl = "ALTER TABLE t ADD a int";
        let first = MySqlPosition {
            gtid: Some("0-1-6".into()),
            ..gp("b.000001", 300, "0-1-6,1-1-7")
        };
        h.record_ddl(&first, Some("d"), ddl).unwrap();
        let again = MySqlPosition {
            gtid: Some("0-1-6".into()),
            ..gp("b.000001", 300, "0-1-6,1-1-9")
        };
        h.record_ddl(&again, Some("d"), ddl).unwrap();
        assert_eq!(store.0.lock().unwrap().len(), 2, "snapshot + one DDL");
        // A store holding both (written by a version without this check) restores too.
        store.0.lock().unwrap().push(
            serde_json::to_vec(&HistoryRecord::Ddl {
                position: again.clone(),
                current_db: Some("d".into()),
                sql: ddl.into(),
            })
            .unwrap(),
        );
        let h = SchemaHistory::open(store, &filter).unwrap();
        let restored = h
            .restore(&gp("b.000001", 900, "0-1-8,1-1-9"))
            .unwrap()
            .unwrap();
        let cols: Vec<&str> = restored
            .get("d", "t")
            .unwrap()
            .columns
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(cols, ["id", "a"]);
    }

    #[test]
    fn the_history_moves_between_tasks() {
        fn send<T: Send>() {}
        send::<SchemaHistory>();
    }

    #[test]
    fn file_numbers() {
        assert_eq!(file_number("mysql-bin.000012"), Some(12));
        assert_eq!(file_number("mariadb-bin.1000000"), Some(1_000_000));
        assert_eq!(file_number("binlog"), None);
        assert_eq!(file_number("bin.log.x1"), None);
    }

    #[test]
    fn file_positions_order_by_number_then_offset() {
        use Ordering::*;
        assert_eq!(
            compare(&fp("b.000002", 4), &fp("b.000002", 900)),
            Some(Less)
        );
        assert_eq!(
            compare(&fp("b.000003", 4), &fp("b.000002", 900)),
            Some(Greater)
        );
        // Past 999999 the name grows a digit: numbers, not text, order.
        assert_eq!(compare(&fp("b.999999", 9), &fp("b.1000000", 4)), Some(Less));
        assert_eq!(compare(&fp("b.000002", 7), &fp("b.000002", 7)), Some(Equal));
        assert_eq!(compare(&fp("x", 7), &fp("x", 9)), Some(Less));
        assert_eq!(compare(&fp("x", 7), &fp("y", 9)), None);
        assert!(at_or_before(&fp("b.000001", 4), &fp("b.000001", 4)));
        assert!(!at_or_before(&fp("x", 7), &fp("y", 9)));
    }

    #[test]
    fn mariadb_sets_order_by_containment_per_domain() {
        use Ordering::*;
        // The file says the opposite: GTIDs win (a renumbered binlog, a failover).
        let a = gp("b.000009", 100, "0-1-5,1-2-3");
        let b = gp("b.000001", 100, "0-1-6,1-2-3");
        assert_eq!(compare(&a, &b), Some(Less));
        assert_eq!(compare(&b, &a), Some(Greater));
        // Another server id with the same sequence: the same position.
        assert_eq!(
            compare(&a, &gp("b.000009", 200, "0-3-5,1-2-3")),
            Some(Equal)
        );
        // A domain the other lacks: not contained.
        let c = gp("b.000009", 100, "0-1-5");
        assert_eq!(compare(&c, &a), Some(Less));
        assert_eq!(
            compare(&gp("f", 1, "0-1-9"), &gp("f", 2, "0-1-5,1-1-9")),
            None
        );
        // An empty set orders by file: it is what a fresh server's snapshot has.
        let empty = MySqlPosition {
            gtid_set: Some(GtidSet::empty_mariadb()),
            ..fp("b.000001", 330)
        };
        assert_eq!(compare(&empty, &gp("b.000001", 500, "0-1-1")), Some(Less));
    }

    #[test]
    fn mysql_sets_order_by_interval_containment() {
        use Ordering::*;
        const U: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        const V: &str = "4e11fa47-71ca-11e1-9e33-c80aa9429562";
        let a = gp("b.1", 0, &format!("{U}:1-5"));
        let b = gp("b.1", 0, &format!("{U}:1-7,{V}:1-2"));
        assert_eq!(compare(&a, &b), Some(Less));
        let holes = gp("b.1", 0, &format!("{U}:1-3:5-7"));
        assert_eq!(compare(&holes, &b), Some(Less));
        assert_eq!(compare(&a, &holes), None);
        assert_eq!(compare(&b, &b.clone()), Some(Equal));
        // Dialects do not mix: the file decides.
        assert_eq!(compare(&gp("b.000002", 0, "0-1-1"), &b), Some(Greater));
        assert_eq!(compare(&gp("c", 0, "0-1-1"), &b), None);
        assert_eq!(
            compare(
                &gp("b.000002", 0, "0-1-1"),
                &gp("b.000003", 0, &format!("{U}:1"))
            ),
            Some(Less)
        );
    }

    #[test]
    fn records_round_trip_as_tagged_json() {
        let r = HistoryRecord::Ddl {
            position: gp("b.000001", 42, "0-1-3"),
            current_db: Some("app".into()),
            sql: "ALTER TABLE t ADD c INT".into(),
        };
        let json = serde_json::to_string(&r).unwrap();
        assert!(json.contains(r#""kind":"ddl""#), "{json}");
        assert_eq!(serde_json::from_str::<HistoryRecord>(&json).unwrap(), r);
        let s = HistoryRecord::Snapshot {
            position: fp("b.000001", 4),
            schemas: Schemas::default(),
        };
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<HistoryRecord>(&json).unwrap(), s);
    }
}
