//! The embedded log's own metrics through `cdc run`: the admin `/metrics` exports the
//! `cdc_log_*` counters, and what an open of the log reported (here: the newest ledger slot
//! damaged, the older one used, acknowledged records cut) is still on `/metrics` while
//! the connector runs on, and the stream goes on.

mod pg_source_util;

use std::time::{Duration, Instant};

use cdc_harness::PgServer;
use pg_source_util::slot::{admin_metrics, gauge};
use pg_source_util::*;

/// Flips one bit in the body of the newest slot of `<log>/ledger` (format: the top of
/// `connector/log/src/ledger.rs`): its checksum fails, the older slot is the fallback.
fn damage_newest_ledger_slot(log_dir: &std::path::Path) {
    let path = log_dir.join("ledger");
    let mut buf = std::fs::read(&path).unwrap();
    let slot = u32::from_be_bytes(buf[8..12].try_into().unwrap()) as usize;
    let seq = |b: &[u8], at: usize| u64::from_be_bytes(b[at..at + 8].try_into().unwrap());
    let (a, b) = (seq(&buf, 4096), seq(&buf, 4096 + slot));
    assert!(a > 0 && b > 0, "both ledger slots written ({a}, {b})");
    let newest = if a > b { 4096 } else { 4096 + slot };
    buf[newest + 20] ^= 1;
    std::fs::write(&path, &buf).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn log_metrics_on_cdc_run_keep_a_ledger_fallback() {
    let pg = PgServer::shared();
    let (db, _dir, mut c) = running_acct(pg, 50, &["public.acct"]).await;
    // A few more flushes, so that both ledger slots hold a checkpoint.
    for i in 1..=5 {
        pg.execute(&db, &format!("UPDATE acct SET v = v + 1 WHERE id = {i}"))
            .await
            .unwrap();
        c.converge(pg, &db, "acct", ACCT_TOPIC, Duration::from_secs(30))
            .await;
    }
    let first = wait_metrics(&c, "cdc_log_appended_records_total").await;
    assert!(
        gauge(&first, "cdc_log_appended_records_total").unwrap() >= 50.0,
        "{first}"
    );
    assert_eq!(
        gauge(&first, "cdc_log_ledger_slot_fallbacks_total"),
        Some(0.0)
    );
    assert_eq!(c.stop(), Some(0), "{}", c.output());

    damage_newest_ledger_slot(&c.log_dir());
    pg.execute(&db, "UPDATE acct SET v = v + 1 WHERE id = 10")
        .await
        .unwrap();
    c.start();
    let m = wait_metrics(&c, "cdc_log_ledger_slot_fallbacks_total 1").await;
    assert!(
        gauge(&m, "cdc_log_ledger_fallback_cut_records_total").is_some(),
        "{m}"
    );
    // The records cut were acknowledged to Postgres (the slot is past them), so they are
    // not streamed again: the truth the error line tells. The stream itself goes on, and
    // once every row changed again the log equals the table.
    pg.execute(&db, "UPDATE acct SET v = v + 100")
        .await
        .unwrap();
    c.converge(pg, &db, "acct", ACCT_TOPIC, Duration::from_secs(30))
        .await;
    let out = c.output();
    assert!(
        out.contains("the newest ledger slot is damaged"),
        "the fallback is logged\n{out}"
    );
    c.stop();
}

/// `/metrics` of the running connector once it contains `needle`.
async fn wait_metrics(c: &Connector, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(m) = admin_metrics(c) {
            if m.contains(needle) {
                return m;
            }
            if Instant::now() > deadline {
                panic!("/metrics never had {needle:?}\n{m}\n{}", c.output());
            }
        } else if Instant::now() > deadline {
            panic!("/metrics never answered\n{}", c.output());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
