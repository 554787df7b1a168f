//! Write-behind for segment stages: a small process-wide pool of background threads that
//! perform a stage's large `O_DIRECT` writes, so the appending thread encodes the next
//! MiB while the device takes the previous one (`stage.rs`, `WriteOut::Chunk`).
//!
//! Owns no data between jobs. A [`Job`] carries its buffer and its file handle; the
//! [`Pending`] handle gives the buffer back with the write's result.
//!
//! # Invariants
//!
//! - A stage has at most one job in flight, and waits for it ([`Pending::wait`]) before it
//!   writes anything else, reports a size as written, is closed, cut or dropped. So no
//!   write outlives the stage that asked for it, writes to one file never overlap in
//!   time, and a flush's `fdatasync` only starts after every byte it covers reached the
//!   file.
//! - The threads live as long as the process and sleep while there is nothing to write.
//!   A thread that died (it cannot: `pwrite` errors are results, not panics) makes its
//!   jobs' [`Pending::wait`] return `None`; the stage then refuses further writes.

use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex, OnceLock};

/// Background writer threads (one device queue rarely wants more; two let two busy
/// partitions write at once).
const THREADS: usize = 2;

/// One write: `buf[range]` at file position `at`.
pub struct Job {
    pub file: Arc<File>,
    pub buf: Vec<u8>,
    pub range: Range<usize>,
    pub at: u64,
}

/// A finished job: its buffer back, and the write's result.
pub struct Done {
    pub buf: Vec<u8>,
    pub result: io::Result<()>,
}

/// The handle of a job in flight.
pub struct Pending {
    rx: Receiver<Done>,
}

impl Pending {
    /// Blocks until the write finished. `None` if the writer thread died (see module docs).
    pub fn wait(self) -> Option<Done> {
        self.rx.recv().ok()
    }
}

type Queue = SyncSender<(Job, SyncSender<Done>)>;

fn queue() -> &'static Queue {
    static QUEUE: OnceLock<Queue> = OnceLock::new();
    QUEUE.get_or_init(|| {
        // Bounded: at most one job per stage is in flight anyway.
        let (tx, rx) = mpsc::sync_channel::<(Job, SyncSender<Done>)>(64);
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..THREADS {
            let rx = rx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("cdc-log-writer-{i}"))
                .spawn(move || run(&rx));
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "could not start a background segment writer");
            }
        }
        tx
    })
}

fn run(rx: &Mutex<Receiver<(Job, SyncSender<Done>)>>) {
    loop {
        // The lock is held only while waiting for the next job, not while writing.
        let next = match rx.lock() {
            Ok(r) => r.recv(),
            Err(p) => p.into_inner().recv(),
        };
        let Ok((job, done)) = next else { return };
        let result = job.file.write_all_at(&job.buf[job.range.clone()], job.at);
        // The stage may be gone only if it broke its invariant; nothing to do then.
        let _ = done.send(Done {
            buf: job.buf,
            result,
        });
    }
}

/// Hands `job` to a writer thread. `Err(job)` if no writer thread runs: the caller writes
/// it itself.
pub fn submit(job: Job) -> Result<Pending, Job> {
    let (tx, rx) = mpsc::sync_channel(1);
    match queue().send((job, tx)) {
        Ok(()) => Ok(Pending { rx }),
        Err(mpsc::SendError((job, _))) => Err(job),
    }
}
