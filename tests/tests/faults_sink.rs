//! A sink's target down for a long while (the fault suite, `tests/faults/run.sh`): `cdc run`
//! on the Postgres version-chain workload with a Redis `[[sink]]`, and again with a
//! Typesense one; the target is stopped for `CDC_TEST_SINK_OUTAGE_SECS` (default 10; the
//! long form 600) while the source keeps writing. The outage must not hold the database
//! back — the log buffers, so the WAL the slot retains stays at what one status interval
//! covers, whatever the outage's length — the sink's lag shows in `/status`, and once the
//! target is back every change reaches it: `cdc verify --sink` says the view equals the
//! table, and the log's key histories are exactly the committed versions. (The
//! Elasticsearch sink shares the search sinks' delivery code with Typesense; its target
//! here is an emulator, whose restart would prove nothing about Elasticsearch.)

mod pg_source_util;

use std::time::{Duration, Instant};

use cdc_harness::{passwords, PgServer, RedisOptions, RedisServer, TypesenseServer};
use pg_source_util::*;

fn outage() -> Duration {
    Duration::from_secs(
        std::env::var("CDC_TEST_SINK_OUTAGE_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(10),
    )
}

/// WAL written since `from` (`pg_current_wal_lsn() - from`), and the current LSN.
async fn wal_since(pg: &PgServer, from: Option<&str>) -> (i64, String) {
    let c = pg.superuser_client("postgres").await.unwrap();
    let row = c
        .query_one(
            "SELECT pg_current_wal_lsn()::text, (pg_current_wal_lsn() - coalesce($1::text, pg_current_wal_lsn()::text)::pg_lsn)::int8",
            &[&from],
        )
        .await
        .unwrap();
    (row.get(1), row.get(0))
}

/// The sink's target: stopped and started again by the scenario.
enum Target {
    Redis(RedisServer),
    Typesense(TypesenseServer),
}

impl Target {
    fn name(&self) -> &'static str {
        match self {
            Target::Redis(_) => "Redis",
            Target::Typesense(_) => "Typesense",
        }
    }

    /// The `[[sink]]` named `cache` writing to it (`dir`: for the API key file).
    fn sink(&self, dir: &std::path::Path) -> String {
        match self {
            Target::Redis(r) => format!(
                "[[sink]]\nname = \"cache\"\ntype = \"redis\"\nurl = \"redis://127.0.0.1:{}/0\"\n",
                r.port()
            ),
            Target::Typesense(ts) => {
                let key = dir.join("typesense.key");
                std::fs::write(&key, format!("{}\n", ts.api_key())).unwrap();
                format!(
                    "[[sink]]\nname = \"cache\"\ntype = \"typesense\"\nurl = \"{}\"\napi_key_file = \"{}\"\ncollection = \"{{schema}}_{{table}}\"\n",
                    ts.url(),
                    key.display()
                )
            }
        }
    }

    fn stop(&self) {
        match self {
            Target::Redis(r) => r.stop_for_now().unwrap(),
            Target::Typesense(ts) => ts.stop_for_now().unwrap(),
        }
    }

    fn start_again(&self) {
        match self {
            Target::Redis(r) => r.start_again().unwrap(),
            Target::Typesense(ts) => ts.start_again().unwrap(),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_down_for_long_holds_no_wal_and_the_view_catches_up() {
    let redis = RedisServer::start_with(RedisOptions {
        appendonly: true,
        ..RedisOptions::default()
    })
    .unwrap();
    target_down_for_long(Target::Redis(redis)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn typesense_down_for_long_holds_no_wal_and_the_view_catches_up() {
    if let Err(e) = cdc_harness::typesense_bin() {
        eprintln!("SKIP: no Typesense binary: {e:#}");
        return;
    }
    target_down_for_long(Target::Typesense(TypesenseServer::start().unwrap())).await;
}

async fn target_down_for_long(target: Target) {
    let down = outage();
    let what = target.name();
    let pg = PgServer::shared();
    let db = setup_acct(pg, 200).await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("{}?sslmode=disable", pg.url("cdc", passwords::PG_CDC, &db));
    let text = format!(
        "name = \"t\"\n[source]\ntype = \"postgres\"\nurl = \"{url}\"\ntables = [\"public.acct\"]\nslot = \"{db}\"\nheartbeat_interval_ms = 1000\nstatus_interval_ms = 1000\n[log]\ndir = \"{}\"\npartitions = 3\n[admin]\nlisten = \"127.0.0.1:0\"\n{}",
        dir.path().join("log").display(),
        target.sink(dir.path())
    );
    let mut c = Connector::with_config(dir.path(), &text);
    let admin = c.fixed_admin_port();
    c.start();
    c.converge(pg, &db, "acct", ACCT_TOPIC, Duration::from_secs(60))
        .await;
    let w = Running::start(pg, &db, 200, 0x6a09e667f3bcc909);
    tokio::time::sleep(Duration::from_secs(1)).await;
    target.stop();
    let (_, lsn_at_stop) = wal_since(pg, None).await;
    let went = Instant::now();
    let mut max_retained = 0i64;
    let mut lag_seen = false;
    while went.elapsed() < down {
        tokio::time::sleep(Duration::from_secs(1)).await;
        c.assert_running();
        max_retained = max_retained.max(retained_wal(pg, &db).await.unwrap_or(0));
        if !lag_seen {
            let (_, status) = http(&admin, "GET", "/status", None, "");
            lag_seen = status["sinks"]["cache"]["lag_records"]
                .as_u64()
                .unwrap_or(0)
                > 0;
        }
    }
    let (written, _) = wal_since(pg, Some(&lsn_at_stop)).await;
    target.start_again();
    let back = Instant::now();
    let transactions = w.finish().await;
    c.converge(pg, &db, "acct", ACCT_TOPIC, Duration::from_secs(60))
        .await;
    // Caught up: the sink delivers again (after its backoff) and its group has no lag.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, status) = http(&admin, "GET", "/status", None, "");
        let sink = &status["sinks"]["cache"];
        if sink["state"] == "running" && sink["group_lag_records"] == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the sink did not catch up: {sink}\n{}",
            c.output()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let recovered = back.elapsed();
    let (code, out, err) = c.verify(&["--table", "public.acct", "--sink", "cache"]);
    assert_eq!(code, Some(0), "{out}\n{err}\n{}", c.output());
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    eprintln!(
        "{what} down {} s: {} transactions, {written} bytes of WAL written meanwhile, at most {max_retained} retained; caught up {:.1} s after {what} came back",
        down.as_secs(),
        transactions,
        recovered.as_secs_f64()
    );
    assert!(lag_seen, "/status showed the sink's lag during the outage");
    // The slot follows the log, not the sink: what it retains is bounded by the status
    // interval's worth of WAL (plus Postgres's own checkpoint rhythm), not by the outage.
    assert!(
        max_retained < 16 << 20,
        "the slot retained {max_retained} bytes while {what} was down"
    );
    let recs = read_topic(&c.log_dir(), ACCT_TOPIC);
    cdc_harness::faults::Run {
        scenario: format!(
            "Postgres → {what} sink: {what} down {} s while the source writes (`cdc verify --sink` equal after)",
            down.as_secs()
        ),
        faults: 1,
        transactions: Some(transactions),
        tally: tally(&recs),
        max_retained_wal_bytes: Some(max_retained),
        recovery: recovered,
        ..Default::default()
    }
    .report_and_check();
    drop_slot(pg, &db).await;
}
