//! The Redis (and Valkey) sink: each row of the tables read is a key (`key` template),
//! holding its after-image as a JSON string or a hash; `mode = "invalidate"` deletes the
//! key on every change instead (cache-aside).
//!
//! Exactly-once effect ([`apply`]): a change is applied only when its version (offset + 1)
//! is above the offset of its topic partition stored in Redis, checked under WATCH and
//! written with the effects in one MULTI/EXEC. Replays (a restart from older offsets, a
//! group reset) therefore change nothing, and an older change never overwrites a newer
//! one. A set per table holds the keys of its rows, for truncates and `cdc verify`.
//!
//! Delivery ([`deliver`]): a batch is cut into chunks of up to [`CALL_CHANGES`] changes,
//! each one MULTI/EXEC, pipelined: a chunk's reads go out behind the EXEC of the chunk
//! before, and the last EXEC of a call is left in flight (`Delivered::in_flight`) for
//! Redis to apply while the driver prepares the next batch. A change counts as delivered
//! once Redis answered its EXEC (durability is Redis's: with persistence off, a Redis
//! restart loses the view).
//! Transactional sinks ([`tx`]) deliver only whole transactions, each inside one chunk.
//!
//! Failures: a connection that fails, a Redis that is loading, read-only, out of memory
//! or busy is transient (the driver retries the batch; what applied is then stale and
//! ignored); a change the target refuses (the key holds another type) is
//! `Delivered::rejected` and the rest applies; a refused password or database stops the
//! sink.
//!
//! A refused change's dead letter survives a crash between the EXEC that passed it and
//! the dead letter's write: see "Refusals and crashes" in [`apply`].

pub mod apply;
pub mod config;
pub mod conn;
pub(crate) mod deliver;
pub mod tx;
pub mod view_read;

use std::time::Duration;

use cdc_schemas::config_keys::KeyError;
use cdc_schemas::metrics::{Counter, Metrics};

use crate::config::SinkSpec;
use crate::{Change, Delivered, Sink, SinkError};
use config::Resolved;
use conn::Conn;

/// Changes per MULTI/EXEC (more when a transaction is bigger): big enough to amortize
/// its round trips, small enough that one EXEC holds Redis for a few milliseconds only.
pub const CALL_CHANGES: usize = 5000;
/// About this many bytes of changes per MULTI/EXEC at most.
pub const CALL_BYTES: usize = 4 << 20;
/// Bound on one round trip (a pipeline of calls).
pub const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// Checks the target keys.
pub fn check(spec: &SinkSpec) -> Result<(), KeyError> {
    config::resolve(spec).map(|_| ())
}

/// Whether the sink reads transaction END records.
pub fn wants_tx_ends(spec: &SinkSpec) -> bool {
    config::resolve(spec).is_ok_and(|r| r.transactional)
}

/// Whether the sink stores rows as the record's JSON text (`value = "json"`) or needs no
/// columns at all (`mode = "invalidate"`): then the decoder keeps the after-image as text
/// instead of parsing it.
pub fn wants_after_json(spec: &SinkSpec) -> bool {
    config::resolve(spec)
        .is_ok_and(|r| r.value == config::ValueKind::Json || r.mode == config::Mode::Invalidate)
}

/// Redis-specific figures, labelled `sink="<name>"`.
#[derive(Clone)]
struct RedisMetrics {
    stale: Counter,
    forced: Counter,
    execs: Counter,
    conflicts: Counter,
}

impl RedisMetrics {
    fn new(m: &Metrics, sink: &str) -> Self {
        let l = |name: &str| format!("{name}{{sink=\"{sink}\"}}");
        RedisMetrics {
            stale: m.counter(
                &l("cdc_redis_stale_changes_total"),
                "Changes a Redis sink ignored because the view already holds a newer version (replays)",
            ),
            forced: m.counter(
                &l("cdc_redis_transactions_forced_total"),
                "Source transactions a transactional Redis sink applied non-atomically (END missing or too large)",
            ),
            execs: m.counter(
                &l("cdc_redis_exec_total"),
                "MULTI/EXEC blocks a Redis sink sent (one per chunk of changes)",
            ),
            conflicts: m.counter(
                &l("cdc_redis_watch_conflicts_total"),
                "Chunks a Redis sink planned again because another client changed a watched key",
            ),
        }
    }
}

/// The sink.
pub struct RedisSink {
    name: String,
    cfg: Resolved,
    conn: Option<Conn>,
    planner: Option<tx::TxPlanner>,
    metrics: RedisMetrics,
    /// Whether the sweeps left unfinished were looked for on this connection.
    sweeps_checked: bool,
    /// The chunk whose EXEC was sent last and whose replies are not read yet (only while
    /// `conn` is the connection it was sent on).
    in_flight: Option<deliver::Sent>,
    /// Refused hash fields of the refusals the last `deliver` reported (their dead letters
    /// are durable when the driver calls again): the next chunk's block deletes them.
    forget_refused: Vec<String>,
}

impl RedisSink {
    /// Reads the sink's keys and connects. A Redis that cannot be reached yet is not an
    /// error here (the first delivery retries); a refused password is.
    pub async fn connect(spec: &SinkSpec, metrics: &Metrics) -> Result<RedisSink, SinkError> {
        let cfg = config::resolve(spec).map_err(|(k, m)| {
            SinkError::definite("sink configuration", format!("{k}: {m}"), "fix the key")
        })?;
        let planner = cfg
            .transactional
            .then(|| tx::TxPlanner::new(spec.name(), spec.table_filter()));
        let mut sink = RedisSink {
            name: spec.name().to_string(),
            cfg,
            conn: None,
            planner,
            metrics: RedisMetrics::new(metrics, spec.name()),
            sweeps_checked: false,
            in_flight: None,
            forget_refused: Vec::new(),
        };
        match sink.connected().await {
            Ok(_) => {}
            Err(e) if e.is_transient() => {
                tracing::warn!(sink = %sink.name, error = %e, "sink: Redis not reachable yet; will retry");
            }
            Err(e) => return Err(e),
        }
        tracing::info!(
            sink = %sink.name,
            address = ?sink.cfg.address,
            transactional = sink.cfg.transactional,
            "Redis sink ready"
        );
        Ok(sink)
    }

    /// The connection, made if there is none.
    async fn connected(&mut self) -> Result<&mut Conn, SinkError> {
        if self.conn.is_none() {
            self.conn = Some(Conn::connect(&self.cfg.address, IO_TIMEOUT).await?);
            self.sweeps_checked = false;
        }
        Ok(self.conn.as_mut().expect("just connected"))
    }

    /// Transactional planning's wait for a missing END (tests shorten it).
    pub fn set_tx_wait(&mut self, wait: Duration) {
        if let Some(p) = &mut self.planner {
            p.wait = wait;
        }
    }
}

impl Sink for RedisSink {
    async fn deliver(&mut self, changes: &[Change]) -> Result<Delivered, SinkError> {
        // The changes in flight since the last call are at the front: plan what follows.
        let from = self
            .in_flight
            .as_ref()
            .map_or(0, |s| s.end)
            .min(changes.len());
        let new = &changes[from..];
        let plan = match &mut self.planner {
            Some(p) => p.plan(new, std::time::Instant::now()),
            None => tx::Plan::all(new.len()),
        };
        if plan.forced > 0 {
            self.metrics.forced.add(plan.forced as u64);
        }
        if plan.upto == 0 && self.in_flight.is_none() {
            return Ok(Delivered::default());
        }
        let cuts: Vec<usize> = plan.cuts.iter().map(|c| c + from).collect();
        match self.apply(changes, from, from + plan.upto, &cuts).await {
            Ok(d) => Ok(d),
            Err(e) => {
                // What was in flight is delivered again, from scratch, on a fresh
                // connection (the one it was sent on may be out of step or gone).
                self.in_flight = None;
                self.conn = None;
                Err(e)
            }
        }
    }

    fn must_progress(&mut self) {
        if let Some(p) = &mut self.planner {
            p.force_next = true;
        }
    }
}
