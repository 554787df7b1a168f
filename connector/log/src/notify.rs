//! Wake-ups for tailing readers, usable from threads and from async code without tying
//! the crate to a runtime. Owns [`Notifier`] (one per partition, and one for the disk
//! budget) and the [`Notified`] future.
//!
//! Invariant: a waiter first records the sequence number (or registers its waker), then
//! re-checks its condition, then sleeps; `notify_all` bumps the sequence under the mutex
//! and wakes everyone. So a notification between the check and the sleep is never lost.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
struct Inner {
    seq: u64,
    wakers: Vec<Waker>,
}

/// A broadcast "something changed" signal with a blocking and an async side.
#[derive(Debug, Default)]
pub struct Notifier {
    inner: Mutex<Inner>,
    cond: Condvar,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Notifier {
    pub fn notify_all(&self) {
        let wakers = {
            let mut g = lock(&self.inner);
            g.seq = g.seq.wrapping_add(1);
            std::mem::take(&mut g.wakers)
        };
        self.cond.notify_all();
        for w in wakers {
            w.wake();
        }
    }

    /// Blocks until `ready()` is true or `timeout` passes; returns the last `ready()`.
    pub fn wait_until(&self, timeout: Duration, mut ready: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        let mut g = lock(&self.inner);
        loop {
            if ready() {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            let seq = g.seq;
            while g.seq == seq {
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                g = self
                    .cond
                    .wait_timeout(g, deadline - now)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
        }
    }

    /// Registers `waker` to be woken by the next `notify_all`, unless `ready()` already
    /// holds (checked under the lock, so no notification can slip between).
    pub fn register(&self, waker: &Waker, ready: impl FnOnce() -> bool) -> bool {
        let mut g = lock(&self.inner);
        if ready() {
            return true;
        }
        if !g.wakers.iter().any(|w| w.will_wake(waker)) {
            g.wakers.push(waker.clone());
        }
        false
    }
}

/// Future that completes when its condition holds; re-checks after every notification.
/// Drop it to stop waiting (the registered waker is then simply woken once for nothing).
pub struct Notified<F: FnMut() -> bool + Unpin> {
    pub(crate) notifier: Arc<NotifierHandle>,
    pub(crate) ready: F,
}

/// Anything that owns a [`Notifier`] (a partition, the budget).
pub trait HasNotifier: Send + Sync {
    fn notifier(&self) -> &Notifier;
}

pub(crate) type NotifierHandle = dyn HasNotifier;

impl<F: FnMut() -> bool + Unpin> Future for Notified<F> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let ready = &mut this.ready;
        if this.notifier.notifier().register(cx.waker(), ready) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}
