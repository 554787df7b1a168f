//! The busy-table re-check (see the parent module): the keys that differ after the first
//! pass are read again from the source, at a new position, and from the view once it has
//! caught up with that position, for up to [`ROUNDS`] rounds within the deadline.
//!
//! Invariants: a key leaves the differences only when the source and the view agree on it
//! after the view reached the source's read position; a key that cannot be re-checked
//! (its key types cannot be looked up, or the view's row names no key) stays, with a note
//! saying why; the differences only shrink or keep their keys here (their rows are
//! refreshed).

use std::collections::HashMap;
use std::time::Instant;

use super::compare::{hash_opt, hash_row, Differences, JsonRow};
use super::log_source::VerifyLog;
use super::log_view::{wait_checkpoint, wait_group};
use super::source::SourceSide;
use super::{VerifyError, View};

/// Rounds at most: a key that changes faster than the view follows could differ forever.
pub const ROUNDS: usize = 3;

pub async fn recheck(
    source: &mut SourceSide,
    view: &mut View,
    log: &VerifyLog,
    diffs: &mut Differences,
    deadline: Instant,
) -> Result<(), VerifyError> {
    if !source.can_lookup() {
        for d in diffs.kept.iter_mut() {
            d.note = Some(
                "not re-checked: the table's key types cannot be looked up by their record value"
                    .into(),
            );
        }
        return Ok(());
    }
    for round in 1..=ROUNDS {
        if Instant::now() >= deadline {
            break;
        }
        let keys: Vec<JsonRow> = diffs.kept.iter().filter_map(|d| d.key.clone()).collect();
        if keys.is_empty() {
            break;
        }
        let mark = source.begin().await?;
        let rows = source.lookup(&keys).await?;
        source.end().await?;
        let now: HashMap<u64, JsonRow> = rows
            .into_iter()
            .map(|e| {
                let after = match &*view {
                    View::Sink(sv) => sv.normalize(&e.key, e.after),
                    View::Log(_) => e.after,
                };
                (hash_row(&e.key), after)
            })
            .collect();
        let upto = wait_checkpoint(log, &mark, source.topic(), deadline);
        let mut caught = upto.is_some();
        let view_rows: HashMap<u64, Option<JsonRow>> = match view {
            View::Log(lv) => {
                let wanted = now
                    .keys()
                    .copied()
                    .chain(keys.iter().map(hash_row))
                    .collect();
                lv.rows_of(&wanted, upto.as_deref())
                    .await?
                    .into_iter()
                    .map(|(h, (_, row))| (h, row))
                    .collect()
            }
            View::Sink(sv) => {
                if let Some(hwms) = &upto {
                    caught = wait_group(log, &sv.group, source.topic(), hwms, deadline);
                }
                let got = sv.get(&keys).await?;
                keys.iter().map(hash_row).zip(got).collect()
            }
        };
        tracing::info!(round, keys = keys.len(), position = %mark, caught_up = caught, "verify: re-check");
        diffs.kept.retain_mut(|d| {
            let Some(key) = &d.key else {
                d.note = Some("not re-checked: the view's row does not name its key".into());
                return true;
            };
            let h = hash_row(key);
            let s = now.get(&h);
            let v = view_rows.get(&h).and_then(|r| r.as_ref());
            if hash_opt(s) == hash_opt(v) {
                return false;
            }
            d.source = s.cloned();
            d.view = v.cloned();
            d.note = (!caught).then(|| {
                format!("the view had not caught up with the source position {mark} when --wait-secs ran out")
            });
            true
        });
        if !caught || diffs.kept.is_empty() {
            break;
        }
    }
    Ok(())
}
