//! The retention watch as `cdc run` uses it ([`RetentionTask`]): one check when the
//! stream is about to open, against the position it opens at (so a purged position is
//! reported with what was lost, before any dump), then a check every
//! `source.binlog_check_interval_ms` against the newest *durable* position: the one a
//! restart resumes from, hence the one whose binlog must still be on the server (the
//! position merely read is ahead of it and would understate the risk).
//!
//! Invariants: the task owns its connection (the stream's is busy in a dump) and the
//! [`RetentionWatch`], whose rotation tracking spans the whole run. A failing check never
//! stops the source: it is logged with backoff, the gauges keep their last values and a
//! later check retries (a missing grant included: the stream itself does not need it).
//! Only the start check's verdict "purged" reaches the source, as a definite error.

use crate::mysql::binlog::PURGED_FIX;
use std::time::Duration;

use cdc_schemas::metrics::Metrics;
use cdc_schemas::{MySqlPosition, SourcePosition};
use mysql_async::Conn;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Instrument;

use super::{Margin, PurgedDetail, RetentionError, RetentionWatch};
use crate::mysql::binlog::BinlogStart;
use crate::mysql::conn::MySqlEndpoint;
use crate::{Durable, SourceError};

/// One check may take this long (a connect, a handful of statements, perhaps the short
/// dump that reads a file's age) before it counts as failed: a hung server must neither
/// hold the source's start nor stall the periodic checks for good.
const CHECK_TIMEOUT: Duration = Duration::from_secs(30);

/// After failures, the next check waits the interval times 2, 4, then 8 (at most).
const MAX_BACKOFF_SHIFT: u32 = 3;

/// The running watch of one source run; stopped by [`RetentionTask::stop`] (or aborted
/// when dropped, e.g. when the run returns early with an error).
pub struct RetentionTask {
    requests: Option<mpsc::Sender<StartCheck>>,
    handle: Option<JoinHandle<()>>,
}

/// "The stream opens at `at`": check it now, reply whether it was purged, and watch
/// from there.
struct StartCheck {
    at: MySqlPosition,
    reply: oneshot::Sender<Option<PurgedDetail>>,
}

impl RetentionTask {
    /// Spawns the watch (task span `mysql_binlog_retention`). It checks nothing until the
    /// first [`RetentionTask::check_start`]: there is no position to watch during a first
    /// snapshot.
    pub fn spawn(
        endpoint: MySqlEndpoint,
        interval: Duration,
        metrics: &Metrics,
        durable: Durable,
        shutdown: watch::Receiver<bool>,
    ) -> RetentionTask {
        let (tx, rx) = mpsc::channel(1);
        let watcher = Watcher {
            endpoint,
            interval,
            watch: RetentionWatch::new(metrics),
            conn: None,
            failures: 0,
        };
        let handle = tokio::spawn(
            watcher
                .run(durable, rx, shutdown)
                .instrument(tracing::info_span!("mysql_binlog_retention")),
        );
        RetentionTask {
            requests: Some(tx),
            handle: Some(handle),
        }
    }

    /// Checks the position the stream is about to open at; `Some`: the server purged it,
    /// and the error names what was lost and the fix. A check that fails says nothing
    /// (`None`, logged): the dump then tells.
    pub async fn check_start(&self, start: &BinlogStart) -> Option<SourceError> {
        let (reply, answer) = oneshot::channel();
        let at = MySqlPosition {
            file: start.file.clone(),
            pos: start.pos,
            gtid_set: start.gtid_set.clone(),
            ..Default::default()
        };
        let tx = self.requests.as_ref()?;
        tx.send(StartCheck { at, reply }).await.ok()?;
        let purged = answer.await.ok()??;
        Some(
            SourceError::definite(
                "checking the stored binlog position",
                format!(
                    "the binlog at {} was purged by the server; the changes between it and {} are lost ({})",
                    purged.position, purged.oldest, purged.lost
                ),
                PURGED_FIX,
            ),
        )
    }

    /// Stops the watch (a check in flight is abandoned: it only reads).
    pub async fn stop(mut self) {
        self.requests = None;
        if let Some(h) = self.handle.take() {
            h.abort();
            let _ = h.await;
        }
    }
}

impl Drop for RetentionTask {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.abort();
        }
    }
}

struct Watcher {
    endpoint: MySqlEndpoint,
    interval: Duration,
    watch: RetentionWatch,
    conn: Option<Conn>,
    /// Checks failed in a row (for the backoff and to log recovery once).
    failures: u32,
}

impl Watcher {
    /// Runs until stopped or shutdown, whichever comes first: a check in flight (up to
    /// [`CHECK_TIMEOUT`] on a hung server) must not hold the connector's shutdown, and a
    /// start check abandoned so answers "not purged" (the stream then sees the shutdown).
    async fn run(
        self,
        durable: Durable,
        requests: mpsc::Receiver<StartCheck>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let shut = async {
            if shutdown.wait_for(|s| *s).await.is_err() {
                // The connector dropped its shutdown switch: only stop() ends the watch.
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            _ = shut => {}
            _ = self.check_loop(durable, requests) => {}
        }
    }

    async fn check_loop(mut self, durable: Durable, mut requests: mpsc::Receiver<StartCheck>) {
        // The position the stream opened at: watched until a MySQL position is durable
        // (and after a new snapshot's start, until its end is).
        let mut floor: Option<MySqlPosition> = None;
        let mut next = Instant::now();
        loop {
            let start = tokio::select! {
                r = requests.recv() => match r {
                    Some(r) => Some(r),
                    None => return,
                },
                _ = tokio::time::sleep_until(next), if floor.is_some() => None,
            };
            let (at, reply) = match start {
                Some(StartCheck { at, reply }) => (at, Some(reply)),
                None => {
                    let durable = durable.position_with(|p| match p {
                        SourcePosition::Mysql(m) => Some(m.clone()),
                        _ => None,
                    });
                    match durable.or_else(|| floor.clone()) {
                        Some(at) => (at, None),
                        None => continue,
                    }
                }
            };
            let margin = self.check(&at).await;
            next = Instant::now() + self.delay();
            if let Some(reply) = reply {
                if margin.is_none() {
                    tracing::warn!(file = %at.file, pos = at.pos, "the binlog retention check on start failed; opening the binlog stream anyway (it reports a purged position itself)");
                }
                let _ = reply.send(margin.and_then(|m| m.purged));
                floor = Some(at);
            }
        }
    }

    /// The wait before the next check: the interval, longer after failures.
    fn delay(&self) -> Duration {
        let shift = self.failures.min(MAX_BACKOFF_SHIFT + 1).saturating_sub(1);
        self.interval * (1u32 << shift)
    }

    /// One check of `at`; None when it failed (logged, gauges untouched).
    async fn check(&mut self, at: &MySqlPosition) -> Option<Margin> {
        let result = tokio::time::timeout(CHECK_TIMEOUT, self.try_check(at)).await;
        let error = match result {
            Ok(Ok(m)) => {
                if self.failures > 0 {
                    tracing::info!(
                        failures = self.failures,
                        "binlog retention check works again"
                    );
                }
                self.failures = 0;
                return Some(m);
            }
            Ok(Err(e)) => e,
            Err(_) => {
                self.conn = None;
                format!("no answer within {CHECK_TIMEOUT:?}")
            }
        };
        self.failures += 1;
        // Once, then at the 2nd, 4th, 8th… failure in a row: a server down for an hour
        // must not fill the log with one line per check.
        if self.failures.is_power_of_two() {
            tracing::warn!(failures = self.failures, error = %error, "binlog retention check failed; the gauges keep their last values and a later check retries");
        } else {
            tracing::debug!(failures = self.failures, error = %error, "binlog retention check failed");
        }
        None
    }

    async fn try_check(&mut self, at: &MySqlPosition) -> Result<Margin, String> {
        if self.conn.is_none() {
            let c = self.endpoint.connect().await.map_err(|e| e.to_string())?;
            self.conn = Some(c);
        }
        let conn = self.conn.as_mut().expect("connected above");
        match self.watch.check(conn, at).await {
            Ok(m) => Ok(m),
            Err(e) => {
                if matches!(e, RetentionError::Transient { .. }) {
                    // The connection may be what failed: a new one next time.
                    self.conn = None;
                }
                Err(e.to_string())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_back_off_to_eight_intervals() {
        let mut w = Watcher {
            endpoint: MySqlEndpoint::from_url("mysql://u@h/d", None).unwrap(),
            interval: Duration::from_secs(60),
            watch: RetentionWatch::new(&Metrics::default()),
            conn: None,
            failures: 0,
        };
        let waits: Vec<u64> = (0..7)
            .map(|f| {
                w.failures = f;
                w.delay().as_secs()
            })
            .collect();
        assert_eq!(waits, [60, 60, 120, 240, 480, 480, 480]);
    }
}
