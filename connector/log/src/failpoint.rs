//! Crash points, for the crash tests of multi-step file protocols (the cleaner's swap).
//!
//! With `CDC_LOG_FAILPOINT=<name>` (or `<name>:<n>`) in the environment, the process
//! aborts the first (n-th) time it reaches the point called `<name>`: no destructor, no
//! flush, the files exactly as the steps before left them, as a `SIGKILL` there would.
//! The variable is read once per process; without it a point costs one atomic load. Only
//! a test's child process sets it. The points are listed where they are hit
//! (`compaction.rs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

struct Armed {
    name: String,
    remaining: AtomicU64,
}

fn armed() -> Option<&'static Armed> {
    static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            let spec = std::env::var("CDC_LOG_FAILPOINT").ok()?;
            let (name, n) = match spec.split_once(':') {
                Some((name, n)) => (name.to_string(), n.parse().unwrap_or(1)),
                None => (spec, 1),
            };
            Some(Armed {
                name,
                remaining: AtomicU64::new(n),
            })
        })
        .as_ref()
}

/// True when `name` is the armed point (whatever its count): the caller may prepare the
/// state the crash must see (flush a buffer) before calling [`hit`].
pub(crate) fn is_armed(name: &str) -> bool {
    armed().is_some_and(|a| a.name == name)
}

/// Aborts the process if `name` is armed and this is its n-th hit.
pub(crate) fn hit(name: &str) {
    let Some(a) = armed() else { return };
    if a.name != name {
        return;
    }
    if a.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
        eprintln!("cdc-log: failpoint {name} reached: aborting");
        std::process::abort();
    }
}
