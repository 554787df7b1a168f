//! The pipeline waiting for disk ([`super::diskwait`]) against a real embedded log with a
//! small disk budget: it waits instead of failing, keeps the flush rule, resumes when a
//! consumer's commits let budget relief free space, and stops at shutdown.

use std::sync::Arc;
use std::time::Duration;

use cdc_log::{Log, LogOptions, Reader, TopicConfig};
use cdc_sources::{ChangeBatch, Durable, DurablePublisher};

use super::tests::{config, ev, finish, pos, send, table};
use super::{queue, DiskWait, Pipeline, PipelineConfig};

/// A log with a small disk budget and segments small enough for budget relief.
fn budget_log(dir: &std::path::Path, budget: u64) -> (Log, cdc_registry::EmbeddedRegistry) {
    let log = Log::open(
        dir.join("log"),
        LogOptions {
            disk_budget_bytes: Some(budget),
            ..LogOptions::default()
        },
    )
    .unwrap();
    log.create_topic("t.public.a", small_segments()).unwrap();
    let reg_log = Log::open(dir.join("registry"), LogOptions::default()).unwrap();
    (log, cdc_registry::EmbeddedRegistry::open(reg_log).unwrap())
}

fn small_segments() -> TopicConfig {
    TopicConfig {
        segment_bytes: 4096,
        ..TopicConfig::default()
    }
}

/// A running pipeline over [`budget_log`] (a 24 KiB budget) that waits for disk, and what a
/// test watches it with.
struct Waiting {
    log: Log,
    /// Group `g` on `t.public.a` from the start.
    c: Reader,
    /// The wait's metrics.
    metrics: cdc_schemas::metrics::Metrics,
    status: crate::admin::Status,
    /// Held so the wait sees no shutdown.
    _stop_tx: tokio::sync::watch::Sender<bool>,
    drx: Durable,
    tx: tokio::sync::mpsc::Sender<ChangeBatch>,
    run: tokio::task::JoinHandle<(super::PipelineStats, Result<(), super::PipelineError>)>,
    /// Table `a` (topic `t.public.a`).
    t: Arc<cdc_schemas::TableSchema>,
}

fn waiting_pipeline(dir: &std::path::Path) -> Waiting {
    let (log, registry) = budget_log(dir, 24 * 1024);
    let c = log
        .consumer("g", "t.public.a", 0, cdc_log::ResetPolicy::Earliest)
        .unwrap();
    let metrics = cdc_schemas::metrics::Metrics::default();
    let status = crate::admin::Status::default();
    let (_stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (dtx, drx) = DurablePublisher::new(None);
    let pipeline = Pipeline::new(
        log.clone(),
        Arc::new(registry),
        PipelineConfig {
            topic_config: small_segments(),
            ..config()
        },
        dtx,
    )
    .with_disk_wait(DiskWait::new(vec![stop_rx], &metrics, status.clone()));
    let (tx, rx) = queue::channel(4 << 20);
    let run = tokio::spawn(pipeline.run(rx));
    Waiting {
        log,
        c,
        metrics,
        status,
        _stop_tx,
        drx,
        tx,
        run,
        t: table("a", false),
    }
}

/// The row ids of what `c` reads in one wait (up to `wait`) and poll (possibly none).
fn read_ids(c: &mut Reader, wait: Duration) -> Vec<i64> {
    let recs = tokio::task::block_in_place(|| {
        c.wait(wait);
        c.poll(1 << 20).unwrap()
    });
    recs.into_iter()
        .map(|r| {
            let v: serde_json::Value = serde_json::from_slice(&r.value.unwrap()).unwrap();
            v["after"]["id"].as_i64().unwrap()
        })
        .collect()
}

/// Waits (bounded) until `status` says the pipeline waits for disk.
async fn until_waiting(status: &crate::admin::Status) {
    for _ in 0..200 {
        if status.waiting_for_disk().is_some() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the pipeline never waited for disk");
}

/// A full disk budget is backpressure: the pipeline waits (gauge, status) instead of
/// failing, makes its complete transactions durable so the consumer can read them,
/// and resumes when the consumer's commits let budget relief free space; every
/// record arrives once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_disk_budget_waits_for_consumers_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let Waiting {
        log,
        mut c,
        metrics,
        status,
        _stop_tx,
        drx,
        tx,
        run,
        t,
    } = waiting_pipeline(dir.path());
    const N: i64 = 300;
    let sender = tokio::spawn(async move {
        for i in 0..N {
            send(&tx, vec![ev(&t, i, 300)], Some(pos(100 + i as u64))).await;
        }
        tx
    });
    until_waiting(&status).await;
    let gauge = metrics.gauge("cdc_pipeline_waiting_for_disk", "");
    assert_eq!(gauge.get(), 1);
    assert!(log.budget_exhausted());
    // Nothing was deleted that the group had not read.
    assert_eq!(
        log.describe("t.public.a").unwrap().partitions[0].log_start_offset,
        0
    );
    // The consumer reads and commits what is durable; relief frees the space.
    let mut seen = Vec::new();
    while (seen.len() as i64) < N {
        seen.extend(read_ids(&mut c, Duration::from_millis(50)));
        c.commit().unwrap();
    }
    assert_eq!(
        seen,
        (0..N).collect::<Vec<_>>(),
        "each record once, in order"
    );
    let tx = sender.await.unwrap();
    let (stats, r) = finish(tx, run).await;
    r.unwrap();
    assert_eq!(stats.records, N as u64);
    assert_eq!(drx.latest(), Some(pos(100 + N as u64 - 1)));
    assert_eq!(gauge.get(), 0);
    assert!(status.waiting_for_disk().is_none());
    assert!(metrics.counter("cdc_pipeline_disk_waits_total", "").get() >= 1);
    assert!(log.describe("t.public.a").unwrap().partitions[0].log_start_offset > 0);
}

/// A wait in the middle of a transaction keeps the flush rule: nothing of the
/// transaction is flushed (visible) while it waits, the complete transactions before
/// it were flushed so the consumer could release them, and after the wait the whole
/// transaction arrives once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_inside_a_transaction_flushes_none_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let Waiting {
        log,
        mut c,
        status,
        _stop_tx,
        drx,
        tx,
        run,
        t,
        ..
    } = waiting_pipeline(dir.path());
    // 20 small transactions (about 15 KiB), then one of 20 events in 4 chunks (as
    // much): the budget (24 KiB) runs out inside the large one, which fits once the
    // small ones are released.
    for i in 0..20i64 {
        send(&tx, vec![ev(&t, i, 300)], Some(pos(100 + i as u64))).await;
    }
    for chunk in 0..4i64 {
        let events = (0..5).map(|k| ev(&t, 20 + chunk * 5 + k, 300)).collect();
        let commit = (chunk == 3).then(|| pos(1000));
        send(&tx, events, commit).await;
    }
    until_waiting(&status).await;
    let p0 = log.describe("t.public.a").unwrap().partitions[0].clone();
    assert!(
        (21..40).contains(&p0.log_end_offset),
        "the wait starts inside the large transaction: {p0:?}"
    );
    let hw = p0.high_watermark;
    assert_eq!(
        hw, 20,
        "the small transactions are flushed, none of the large one"
    );
    assert_eq!(drx.latest(), Some(pos(119)));
    // The consumer releases what it read; the large transaction then fits.
    let mut seen = Vec::new();
    while seen.len() < 40 {
        seen.extend(read_ids(&mut c, Duration::from_millis(50)));
        if seen.len() > 20 {
            // Visible only once its commit is durable: all of it at once.
            assert_eq!(seen.len(), 40, "part of a transaction became visible");
            // The position is published just after the flush that made the records
            // visible (never before): on a loaded machine the reader can be first.
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while drx.latest() != Some(pos(1000)) && std::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert_eq!(drx.latest(), Some(pos(1000)));
        }
        c.commit().unwrap();
    }
    assert_eq!(seen, (0..40).collect::<Vec<_>>());
    let (_, r) = finish(tx, run).await;
    r.unwrap();
}

/// Shutdown ends a wait for disk at once: the run stops cleanly, with every complete
/// transaction appended before the wait durable and published, and nothing past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_a_wait_for_disk() {
    let dir = tempfile::tempdir().unwrap();
    // No consumer group: nothing can free space.
    let (log, registry) = budget_log(dir.path(), 16 * 1024);
    let status = crate::admin::Status::default();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (dtx, drx) = DurablePublisher::new(None);
    let pipeline = Pipeline::new(log.clone(), Arc::new(registry), config(), dtx).with_disk_wait(
        DiskWait::new(vec![stop_rx], &Default::default(), status.clone()),
    );
    let (tx, rx) = queue::channel(4 << 20);
    let run = tokio::spawn(pipeline.run(rx));
    let t = table("a", false);
    let sender = tokio::spawn(async move {
        for i in 0..200i64 {
            if tx
                .send(ChangeBatch {
                    events: vec![ev(&t, i, 300)],
                    commit: Some(pos(100 + i as u64)),
                    approx_bytes: 0,
                    snapshot: None,
                })
                .await
                .is_err()
            {
                break;
            }
        }
    });
    until_waiting(&status).await;
    stop_tx.send(true).unwrap();
    let (stats, r) = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("the wait ends at shutdown")
        .unwrap();
    r.unwrap();
    sender.await.unwrap();
    let durable = drx.latest().expect("something was durable");
    assert_eq!(log.checkpoint(), Some(durable.to_bytes()));
    assert_eq!(stats.last_durable, Some(durable));
    assert!(stats.transactions < 200);
}

/// Transactions spread over several partitions, group commit holding them: the budget
/// may run out inside a transaction (its first partition appended, a later one
/// refused). The complete transactions before it were flushed before it started, so the
/// consumer can read and release them and the wait ends; every record arrives once.
/// Several budgets, so that a refusal falls inside a transaction in some of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_running_out_inside_a_transaction_does_not_hold_the_ones_before() {
    for budget in [20 << 10, 23 << 10, 26 << 10, 29 << 10] {
        let dir = tempfile::tempdir().unwrap();
        let (log, registry) = budget_log(dir.path(), budget);
        let spread = TopicConfig {
            partitions: 3,
            ..small_segments()
        };
        log.create_topic("t.public.b", spread.clone()).unwrap();
        let mut consumers: Vec<_> = (0..3)
            .map(|p| {
                log.consumer("g", "t.public.b", p, cdc_log::ResetPolicy::Earliest)
                    .unwrap()
            })
            .collect();
        let (_stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let status = crate::admin::Status::default();
        let (dtx, drx) = DurablePublisher::new(None);
        let pipeline = Pipeline::new(
            log.clone(),
            Arc::new(registry),
            PipelineConfig {
                topic_config: spread,
                ..config()
            },
            dtx,
        )
        .with_disk_wait(DiskWait::new(vec![stop_rx], &Default::default(), status));
        let (tx, rx) = queue::channel(4 << 20);
        let run = tokio::spawn(pipeline.run(rx));
        let t = table("b", false);
        const TXS: i64 = 40;
        const PER_TX: i64 = 12;
        let sender = tokio::spawn(async move {
            for i in 0..TXS {
                let events = (0..PER_TX).map(|k| ev(&t, i * PER_TX + k, 200)).collect();
                send(&tx, events, Some(pos(100 + i as u64))).await;
            }
            tx
        });
        let mut seen = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while (seen.len() as i64) < TXS * PER_TX {
            assert!(
                std::time::Instant::now() < deadline,
                "budget {budget}: the wait never ended ({} records read)",
                seen.len()
            );
            for c in &mut consumers {
                seen.extend(read_ids(c, Duration::from_millis(20)));
                c.commit().unwrap();
            }
        }
        seen.sort_unstable();
        assert_eq!(
            seen,
            (0..TXS * PER_TX).collect::<Vec<_>>(),
            "each record once"
        );
        let tx = sender.await.unwrap();
        let (_, r) = finish(tx, run).await;
        r.unwrap();
        assert_eq!(drx.latest(), Some(pos(100 + TXS as u64 - 1)));
    }
}
