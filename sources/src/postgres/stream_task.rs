//! The streaming task: what runs on a replication connection after `START_REPLICATION`
//! (CopyBoth), owned by the [`ReplicationStream`] the consumer reads from.
//!
//! It owns the socket from then on: it forwards XLogData to the consumer, answers
//! keepalives, sends standby status updates (feedback) and tracks which forwarded
//! transactions are still in flight ([`InFlightTracker`]) for the idle rule
//! ([`flush_lsn_to_send`]). The connection's start-up and commands are in
//! [`super::replication`].
//!
//! Invariants: the flush position reported never exceeds what the pipeline published as
//! durable except by the idle rule below, and never goes backwards; status updates go
//! out on the task's own timer whatever the consumer does.
//!
//! # Feedback and backpressure
//!
//! The server kills a replication connection that has sent no status update for
//! `wal_sender_timeout` (60 s by default). A client that only answers keepalives inside
//! the consumer's read loop livelocks when the downstream is slow: the consumer waits for
//! capacity, nobody reads the socket, no reply goes out, the server disconnects, the
//! client reconnects and replays the same backlog into the same slow downstream.
//!
//! So [`ReplicationConnection::start`](super::replication::ReplicationConnection::start)
//! hands the socket to a background task owned by the returned [`ReplicationStream`].
//! The task
//! - sends a standby status update every `status_interval` (capped at a third of the
//!   server's `wal_sender_timeout`, queried at start) and immediately when a keepalive
//!   asks for a reply — on its own timer, whether or not the consumer is polling;
//! - forwards XLogData to the consumer through a bounded channel (`buffer` messages).
//!   When the channel is full it stops reading the socket: backpressure reaches the
//!   server through TCP, and the walsender keeps processing our status updates while it
//!   waits to send (it polls for replies in its write loop), so the connection survives
//!   an arbitrarily slow consumer;
//! - reads the flush position to report from the [`Durable`] handle the pipeline
//!   publishes *durable* checkpoints on (mapped to an LSN by [`durable_lsn`]). It never reports more than that, except for the
//!   idle rule below, and never less than it reported before.
//!
//! # A silent server
//!
//! A connection can die without closing: a network partition, a firewall dropping the
//! flow, a black-holed route. The socket then neither reads nor errors, for as long as
//! the kernel's retransmission takes (minutes) or for ever. So while the task is reading
//! (not holding a message for a full channel: that silence is ours), a status update
//! sent after a whole `status_interval` of silence asks the server for a reply (a
//! keepalive comes back at once from a live walsender), and after [`silent_limit`] with
//! nothing at all from the server the connection is presumed dead: a lost connection,
//! retried like any other.
//!
//! # Idle slot care
//!
//! When nothing is in flight the slot should still advance, or a quiet database's slot
//! (one whose changes are all filtered out, or none at all) holds WAL forever. The server's
//! keepalive carries its WAL end: for a logical walsender, how far it has decoded and
//! sent. Everything that committed before that point has already been sent to us. So if
//! every transaction we forwarded is durable and none is open, confirming the keepalive's
//! WAL end loses nothing: [`flush_lsn_to_send`].
//!
//! "In flight" is tracked by the task itself ([`InFlightTracker`]), in socket order,
//! from the first bytes of each pgoutput message it forwards (Begin opens a transaction,
//! Commit closes it and records its end LSN, Stream Start/Commit/Abort track streamed
//! transactions…). Doing it in the consumer would race: a keepalive read by the task
//! could be judged against a consumer state that has not yet seen messages still queued
//! in the channel. Consequence for the pipeline: it must publish the end LSN of *every*
//! transaction it has finished with, including ones it emitted nothing for; otherwise
//! the slot only advances with the next published position (safe, but holds WAL).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use cdc_schemas::Lsn;
use cdc_schemas::SourcePosition;
use postgres_protocol::message::frontend;
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::{mpsc, watch, Notify};

use crate::Durable;
use tokio::task::JoinHandle;

use super::protocol::{
    parse_frame, pg_now_micros, Frame, PgServerError, ReplicationMessage, StandbyStatusUpdate,
    XLogData,
};
use super::replication::{fix_for, log_notice, sqlstate_is_transient, Io, ReplicationError};

/// The flush position to report in a status update.
///
/// The LSN a durable position lets the slot confirm: the end of the last durable commit
/// (or the snapshot's consistent point). A position of another source confirms nothing.
pub fn durable_lsn(p: &SourcePosition) -> Option<Lsn> {
    match p {
        SourcePosition::Postgres(p) => Some(p.lsn),
        _ => None,
    }
}

/// `durable` is what the pipeline has made durable; `in_flight` is true while any
/// forwarded transaction is open or not yet durable; `last_server_wal_end` is the WAL end
/// from the newest keepalive. When idle, the server's WAL end is confirmed so the slot
/// advances on a quiet database (everything that committed before it has been sent, and
/// all of that is durable); otherwise exactly the durable position.
pub fn flush_lsn_to_send(durable: Lsn, in_flight: bool, last_server_wal_end: Lsn) -> Lsn {
    if in_flight {
        durable
    } else {
        durable.max(last_server_wal_end)
    }
}

/// Tracks, in socket order, which forwarded pgoutput transactions are still open and the
/// highest end LSN of those completed, from each message's leading bytes.
#[derive(Clone, Debug, Default)]
pub struct InFlightTracker {
    open_tx: bool,
    in_stream: bool,
    open_streams: HashSet<u32>,
    /// Highest end LSN of a forwarded, completed transaction (or non-transactional
    /// message): the durable position must reach it before the slot is idle.
    needed: Lsn,
}

impl InFlightTracker {
    /// Observes one pgoutput message (an XLogData payload) about to be forwarded.
    pub fn observe(&mut self, msg: &[u8]) {
        let u32_at = |at: usize| -> Option<u32> {
            msg.get(at..at + 4)
                .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        };
        let lsn_at = |at: usize| -> Option<Lsn> {
            msg.get(at..at + 8).map(|b| {
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                Lsn(u64::from_be_bytes(a))
            })
        };
        let mut done = |end: Option<Lsn>| {
            if let Some(end) = end {
                self.needed = self.needed.max(end);
            }
        };
        match msg.first() {
            Some(b'B') | Some(b'b') => self.open_tx = true,
            // Commit / Prepare / Commit Prepared: flags, lsn, end lsn…
            Some(b'C') | Some(b'P') | Some(b'K') => {
                self.open_tx = false;
                done(lsn_at(10));
            }
            // Rollback Prepared: flags, prepare end lsn, rollback end lsn…
            Some(b'r') => done(lsn_at(10)),
            Some(b'S') => {
                self.in_stream = true;
                if let Some(xid) = u32_at(1) {
                    self.open_streams.insert(xid);
                }
            }
            Some(b'E') => self.in_stream = false,
            // Stream Commit: xid, flags, commit lsn, end lsn…
            Some(b'c') => {
                if let Some(xid) = u32_at(1) {
                    self.open_streams.remove(&xid);
                }
                done(lsn_at(14));
            }
            // Stream Abort: xid, subxid (equal for the top-level transaction).
            Some(b'A') => {
                if let (Some(xid), Some(sub)) = (u32_at(1), u32_at(5)) {
                    if xid == sub {
                        self.open_streams.remove(&xid);
                    }
                }
            }
            // Stream Prepare: flags, prepare lsn, end lsn, ts, xid…
            Some(b'p') => {
                if let Some(xid) = u32_at(26) {
                    self.open_streams.remove(&xid);
                }
                done(lsn_at(10));
            }
            // A non-transactional logical message outside any transaction.
            Some(b'M') if !self.open_tx && !self.in_stream && msg.get(1) == Some(&0) => {
                done(lsn_at(2));
            }
            _ => {}
        }
    }

    /// True while a forwarded transaction is open or its end is not yet durable.
    pub fn in_flight(&self, durable: Lsn) -> bool {
        self.open_tx || !self.open_streams.is_empty() || durable < self.needed
    }
}

/// What the feedback task has seen and sent, for monitoring and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FeedbackStatus {
    /// WAL end from the newest keepalive.
    pub last_server_wal_end: Lsn,
    /// Highest WAL position received in XLogData.
    pub received: Lsn,
    /// The last status update sent.
    pub last_sent: Option<StandbyStatusUpdate>,
    pub updates_sent: u64,
    pub keepalives: u64,
    /// Whether a forwarded transaction was open or not yet durable at the last update.
    pub in_flight: bool,
}

struct Shared {
    status: Mutex<FeedbackStatus>,
    send_now: Notify,
}

/// A cheap handle on a stream's feedback: status for monitoring, and a way to push an
/// update out now (e.g. right after a durable position was published at shutdown).
#[derive(Clone)]
pub struct FeedbackHandle {
    shared: Arc<Shared>,
}

impl FeedbackHandle {
    pub fn status(&self) -> FeedbackStatus {
        self.shared
            .status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The WAL end from the newest keepalive.
    pub fn last_server_wal_end(&self) -> Lsn {
        self.status().last_server_wal_end
    }

    /// Asks the task to send a status update now.
    pub fn send_now(&self) {
        self.shared.send_now.notify_one();
    }
}

/// A running logical replication stream. Messages arrive through
/// [`ReplicationStream::next_message`]; feedback is sent by a background task whether or
/// not the consumer polls (see the module doc).
pub struct ReplicationStream {
    rx: mpsc::Receiver<Result<XLogData, ReplicationError>>,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
    proto_version: u32,
    server_version_num: u32,
    status_interval: Duration,
}

/// What a stream task starts from: the connection right after the server's
/// CopyBothResponse, and the settings [`super::replication::ReplicationConnection::start`]
/// negotiated.
pub(super) struct StreamSetup {
    pub io: Io,
    /// Bytes already read past the CopyBothResponse.
    pub rbuf: BytesMut,
    pub wbuf: BytesMut,
    /// The server's address, for errors.
    pub addr: String,
    pub durable: Durable,
    /// The effective status update interval.
    pub interval: Duration,
    /// Where streaming starts: the lowest position ever confirmed.
    pub start_lsn: Lsn,
    /// Messages buffered between the task and the consumer.
    pub buffer: usize,
    pub proto_version: u32,
    pub server_version_num: u32,
}

impl ReplicationStream {
    /// Spawns the task on `s`'s connection and returns the consumer's end.
    pub(super) fn spawn(s: StreamSetup) -> ReplicationStream {
        let shared = Arc::new(Shared {
            status: Mutex::new(FeedbackStatus::default()),
            send_now: Notify::new(),
        });
        let (tx, rx) = mpsc::channel(s.buffer.max(1));
        let (stop_tx, stop_rx) = watch::channel(false);
        let (reader, writer) = tokio::io::split(s.io);
        let task = StreamTask {
            reader,
            writer,
            rbuf: s.rbuf,
            wbuf: s.wbuf,
            addr: s.addr,
            tx,
            durable: s.durable,
            stop: stop_rx,
            shared: shared.clone(),
            interval: s.interval,
            tracker: InFlightTracker::default(),
            floor: s.start_lsn,
            last_flush: Lsn::ZERO,
            received: s.start_lsn,
            last_server_wal_end: Lsn::ZERO,
            pending: None,
            last_heard: Instant::now(),
        };
        let handle = tokio::spawn(task.run());
        ReplicationStream {
            rx,
            shared,
            stop: stop_tx,
            task: Some(handle),
            proto_version: s.proto_version,
            server_version_num: s.server_version_num,
            status_interval: s.interval,
        }
    }

    /// The next XLogData (one pgoutput message); `Ok(None)` when the server ended the
    /// stream. After an error the stream is finished.
    pub async fn next_message(&mut self) -> Result<Option<XLogData>, ReplicationError> {
        match self.rx.recv().await {
            Some(Ok(m)) => Ok(Some(m)),
            Some(Err(e)) => Err(e),
            None => Ok(None),
        }
    }

    pub fn feedback(&self) -> FeedbackHandle {
        FeedbackHandle {
            shared: self.shared.clone(),
        }
    }

    /// The pgoutput protocol version in use.
    pub fn proto_version(&self) -> u32 {
        self.proto_version
    }

    pub fn server_version_num(&self) -> u32 {
        self.server_version_num
    }

    /// The effective status update interval.
    pub fn status_interval(&self) -> Duration {
        self.status_interval
    }

    /// Sends a last status update (with the current durable position), ends the COPY and
    /// closes the connection. Waits at most 10 s for the server.
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
    }
}

impl Drop for ReplicationStream {
    fn drop(&mut self) {
        // The task notices the closed channel, sends a last update and exits.
        let _ = self.stop.send(true);
    }
}

struct StreamTask {
    reader: ReadHalf<Io>,
    writer: WriteHalf<Io>,
    rbuf: BytesMut,
    wbuf: BytesMut,
    addr: String,
    tx: mpsc::Sender<Result<XLogData, ReplicationError>>,
    durable: Durable,
    stop: watch::Receiver<bool>,
    shared: Arc<Shared>,
    interval: Duration,
    tracker: InFlightTracker,
    floor: Lsn,
    last_flush: Lsn,
    received: Lsn,
    last_server_wal_end: Lsn,
    /// A message the consumer has no room for yet.
    pending: Option<XLogData>,
    /// When the server was last heard from (or the task resumed reading after holding a
    /// message): see "A silent server".
    last_heard: Instant,
}

/// How long a server that is being read may stay silent, having been asked for a reply,
/// before the connection is presumed dead: three status intervals, at least 10 s.
pub fn silent_limit(interval: Duration) -> Duration {
    (interval * 3).max(Duration::from_secs(10))
}

enum Wake {
    Stop,
    Feedback,
    Delivered,
    Read(std::io::Result<usize>),
}

enum Step {
    Continue,
    /// The server ended the COPY.
    ServerDone,
}

impl StreamTask {
    fn lost(&self, detail: impl std::fmt::Display) -> ReplicationError {
        ReplicationError::ConnectionLost {
            what: "streaming changes".into(),
            addr: self.addr.clone(),
            detail: detail.to_string(),
        }
    }

    fn protocol(&self, detail: impl std::fmt::Display) -> ReplicationError {
        ReplicationError::Protocol {
            what: "streaming changes".into(),
            addr: self.addr.clone(),
            detail: detail.to_string(),
        }
    }

    async fn run(mut self) {
        match self.run_inner().await {
            Ok(()) => {}
            Err(e) => {
                tracing::warn!(error = %e, "replication stream ended");
                // Deliver the error unless the consumer is gone.
                let _ = self.tx.send(Err(e)).await;
            }
        }
    }

    async fn run_inner(&mut self) -> Result<(), ReplicationError> {
        let mut ticker = tokio::time::interval(self.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let shared = self.shared.clone();
        loop {
            // Handle what is already buffered, as long as the consumer takes it.
            while self.pending.is_none() {
                match parse_frame(&mut self.rbuf).map_err(|e| self.protocol(e))? {
                    Some(frame) => {
                        if let Step::ServerDone = self.handle_frame(frame).await? {
                            return self.finish_after_server_done().await;
                        }
                    }
                    None => break,
                }
            }
            let wake = tokio::select! {
                // Biased, in this order: stopping first (the consumer asked, or is gone);
                // then feedback, so no amount of incoming data or consumer slowness can
                // delay a status update (the wal_sender_timeout livelock); then handing a
                // message to the consumer; reading the socket last and only when nothing
                // is pending — that is the backpressure.
                biased;
                _ = self.stop.changed() => Wake::Stop,
                _ = self.tx.closed() => Wake::Stop,
                _ = ticker.tick() => Wake::Feedback,
                _ = shared.send_now.notified() => Wake::Feedback,
                permit = self.tx.reserve(), if self.pending.is_some() => match permit {
                    Ok(p) => {
                        if let Some(m) = self.pending.take() {
                            p.send(Ok(m));
                        }
                        Wake::Delivered
                    }
                    Err(_) => Wake::Stop,
                },
                n = self.reader.read_buf(&mut self.rbuf), if self.pending.is_none() => Wake::Read(n),
            };
            match wake {
                Wake::Stop => return self.shutdown().await,
                Wake::Feedback => {
                    // Silence counts only while we read: a held message is our own pause.
                    let silent = if self.pending.is_none() {
                        self.last_heard.elapsed()
                    } else {
                        Duration::ZERO
                    };
                    let limit = silent_limit(self.interval);
                    if silent >= limit {
                        return Err(self.lost(format!(
                            "nothing from the server for {} s, not even an answer to a status update that asked for one: the connection is presumed dead (a network partition or a dropped flow)",
                            silent.as_secs()
                        )));
                    }
                    self.send_status(silent >= self.interval).await?
                }
                Wake::Delivered => {
                    if self.pending.is_none() {
                        self.last_heard = Instant::now();
                    }
                }
                Wake::Read(n) => {
                    let n = n.map_err(|e| self.lost(e))?;
                    if n == 0 {
                        return Err(self.lost("the server closed the connection"));
                    }
                    self.last_heard = Instant::now();
                }
            }
        }
    }

    async fn handle_frame(&mut self, frame: Frame) -> Result<Step, ReplicationError> {
        match frame.tag {
            b'd' => match ReplicationMessage::parse(frame.body).map_err(|e| self.protocol(e))? {
                ReplicationMessage::XLogData(x) => {
                    self.tracker.observe(&x.data);
                    self.received = self.received.max(x.wal_start);
                    match self.tx.try_send(Ok(x)) {
                        Ok(()) => {}
                        Err(mpsc::error::TrySendError::Full(Ok(x))) => self.pending = Some(x),
                        Err(_) => {} // consumer gone; the select loop notices
                    }
                }
                ReplicationMessage::Keepalive(k) => {
                    self.last_server_wal_end = self.last_server_wal_end.max(k.wal_end);
                    {
                        let mut s = self.shared.status.lock().unwrap_or_else(|p| p.into_inner());
                        s.keepalives += 1;
                        s.last_server_wal_end = self.last_server_wal_end;
                    }
                    if k.reply_requested {
                        self.send_status(false).await?;
                    }
                }
            },
            // CopyDone; or CommandComplete / ReadyForQuery without one: a walsender told
            // to stop (a fast or smart shutdown) ends the command with CommandComplete
            // alone once it has sent everything (Postgres' WalSndDone). Either way the
            // stream is over and the server is going away: reconnect, not a protocol error.
            b'c' | b'C' | b'Z' => return Ok(Step::ServerDone),
            b'E' => {
                let e = PgServerError::parse(&frame.body);
                return Err(ReplicationError::Server {
                    what: "streaming changes".into(),
                    fix: fix_for(&e.code, ""),
                    transient: sqlstate_is_transient(&e.code),
                    error: Box::new(e),
                });
            }
            b'N' => log_notice(&frame.body),
            b'S' => {}
            other => return Err(self.protocol(format!("unexpected message {:?}", other as char))),
        }
        Ok(Step::Continue)
    }

    fn next_update(&mut self) -> StandbyStatusUpdate {
        let durable = self.durable.position_with(durable_lsn).unwrap_or(Lsn::ZERO);
        let in_flight = self.tracker.in_flight(durable);
        let flush = flush_lsn_to_send(durable, in_flight, self.last_server_wal_end)
            .max(self.floor)
            .max(self.last_flush);
        self.last_flush = flush;
        let u = StandbyStatusUpdate {
            write: self.received.max(flush),
            flush,
            apply: flush,
            client_time: pg_now_micros(),
            reply_requested: false,
        };
        let mut s = self.shared.status.lock().unwrap_or_else(|p| p.into_inner());
        s.last_sent = Some(u);
        s.updates_sent += 1;
        s.in_flight = in_flight;
        s.received = self.received;
        u
    }

    async fn send_status(&mut self, reply_requested: bool) -> Result<(), ReplicationError> {
        let mut u = self.next_update();
        u.reply_requested = reply_requested;
        u.encode(&mut self.wbuf);
        self.write_out().await
    }

    async fn write_out(&mut self) -> Result<(), ReplicationError> {
        let buf = self.wbuf.split();
        let r = async {
            self.writer.write_all(&buf).await?;
            self.writer.flush().await
        }
        .await;
        r.map_err(|e| self.lost(e))
    }

    /// Consumer-initiated end: last update, CopyDone, wait for the server's CopyDone /
    /// ReadyForQuery (bounded), Terminate.
    async fn shutdown(&mut self) -> Result<(), ReplicationError> {
        self.send_status(false).await?;
        frontend::copy_done(&mut self.wbuf);
        self.write_out().await?;
        let drain = async {
            loop {
                while let Some(f) = parse_frame(&mut self.rbuf).map_err(|e| self.protocol(e))? {
                    if f.tag == b'Z' {
                        return Ok::<(), ReplicationError>(());
                    }
                    if f.tag == b'E' {
                        tracing::debug!(error = %PgServerError::parse(&f.body), "error while ending replication");
                    }
                }
                let n = self
                    .reader
                    .read_buf(&mut self.rbuf)
                    .await
                    .map_err(|e| self.lost(e))?;
                if n == 0 {
                    return Ok(());
                }
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(5), drain).await;
        frontend::terminate(&mut self.wbuf);
        let _ = self.write_out().await;
        let _ = self.writer.shutdown().await;
        Ok(())
    }

    /// The server ended the COPY (e.g. it is shutting down): answer CopyDone, report the
    /// end to the consumer as a lost connection so it reconnects.
    async fn finish_after_server_done(&mut self) -> Result<(), ReplicationError> {
        let _ = self.send_status(false).await;
        frontend::copy_done(&mut self.wbuf);
        let _ = self.write_out().await;
        Err(self.lost("the server ended the replication stream"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silent_server_is_dead_after_three_intervals_and_at_least_ten_seconds() {
        assert_eq!(
            silent_limit(Duration::from_secs(10)),
            Duration::from_secs(30)
        );
        assert_eq!(
            silent_limit(Duration::from_millis(50)),
            Duration::from_secs(10)
        );
    }

    #[test]
    fn flush_rule() {
        // In flight: exactly the durable position, whatever the server says.
        assert_eq!(flush_lsn_to_send(Lsn(100), true, Lsn(500)), Lsn(100));
        // Idle: the server's WAL end moves the slot.
        assert_eq!(flush_lsn_to_send(Lsn(100), false, Lsn(500)), Lsn(500));
        // Idle, but no keepalive yet (or an older one): the durable position.
        assert_eq!(flush_lsn_to_send(Lsn(100), false, Lsn(0)), Lsn(100));
        assert_eq!(flush_lsn_to_send(Lsn(100), false, Lsn(50)), Lsn(100));
    }

    fn commit(end: u64) -> Vec<u8> {
        let mut m = vec![b'C', 0];
        m.extend_from_slice(&(end - 8).to_be_bytes());
        m.extend_from_slice(&end.to_be_bytes());
        m.extend_from_slice(&0i64.to_be_bytes());
        m
    }

    #[test]
    fn tracker_follows_transactions() {
        let mut t = InFlightTracker::default();
        assert!(!t.in_flight(Lsn(0)));
        t.observe(b"B........");
        assert!(t.in_flight(Lsn(1000)));
        t.observe(&commit(200));
        assert!(t.in_flight(Lsn(199)), "commit forwarded but not durable");
        assert!(!t.in_flight(Lsn(200)));
        // Streamed transaction 7: open from Stream Start until Stream Commit.
        let mut s = vec![b'S'];
        s.extend_from_slice(&7u32.to_be_bytes());
        s.push(1);
        t.observe(&s);
        t.observe(b"E");
        assert!(t.in_flight(Lsn(200)));
        // A subtransaction abort leaves it open; the top-level abort closes it.
        let mut a = vec![b'A'];
        a.extend_from_slice(&7u32.to_be_bytes());
        a.extend_from_slice(&8u32.to_be_bytes());
        t.observe(&a);
        assert!(t.in_flight(Lsn(200)));
        let mut a = vec![b'A'];
        a.extend_from_slice(&7u32.to_be_bytes());
        a.extend_from_slice(&7u32.to_be_bytes());
        t.observe(&a);
        assert!(!t.in_flight(Lsn(200)));
        // Stream commit records its end.
        t.observe(&s);
        t.observe(b"E");
        let mut c = vec![b'c'];
        c.extend_from_slice(&7u32.to_be_bytes());
        c.push(0);
        c.extend_from_slice(&290u64.to_be_bytes());
        c.extend_from_slice(&300u64.to_be_bytes());
        c.extend_from_slice(&0i64.to_be_bytes());
        t.observe(&c);
        assert!(t.in_flight(Lsn(299)));
        assert!(!t.in_flight(Lsn(300)));
        // A non-transactional message needs its own LSN durable.
        let mut m = vec![b'M', 0];
        m.extend_from_slice(&400u64.to_be_bytes());
        m.extend_from_slice(b"p\0\0\0\0\0");
        t.observe(&m);
        assert!(t.in_flight(Lsn(300)));
        assert!(!t.in_flight(Lsn(400)));
        // Garbage does not panic.
        for g in [&b""[..], b"C", b"c\0", b"A\0\0", b"p", b"M"] {
            t.observe(g);
        }
    }
}
