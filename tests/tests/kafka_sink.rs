//! Sinks reading Kafka, end to end through the shipped CLI against a real Kafka-protocol
//! broker (tansu: noida-db's Kafka API never expires a SIGKILLed member of a group, so its
//! groups never rebalance after one) and a real Redis: Postgres → `cdc run` with
//! `[log] type = "kafka"` → Kafka → the Redis sink, run twice in one consumer group (inside
//! `cdc run`, and alone as `cdc sink`), so the two processes share the topic's partitions.
//!
//! - With the `cdc sink` member SIGKILLed and restarted several times mid-workload, and
//!   `cdc run` SIGKILLed once, the view equals the table: Kafka's group protocol moves the
//!   partitions between the members, each replays from its group's committed offsets,
//!   and the sink's conditional writes make the replays harmless.
//! - Both members were assigned partitions; the standalone member's lag reaches 0 once
//!   it has applied everything (the transactions' commit markers do not count as lag).
//! - A record the target refuses goes to the dead-letter topic in Kafka, with Kafka
//!   Connect's error headers, and the sink goes on.
//! - Over TLS (the broker behind a TLS proxy): `[log.kafka]`'s `security.protocol` and
//!   `ssl.ca.location` reach both the connector's and the sink's clients.
//! - `cdc verify` on the Kafka configuration: `--log` rebuilds the table from Kafka's
//!   committed records and finds it equal; `--sink` finds the refused row.
//! - `cdc log groups` shows the group caught up; `cdc log reset-group --to-earliest` on
//!   the Kafka configuration moves it back, and the replay leaves the view unchanged.

mod kafka_util;
mod pg_source_util;
mod redis_util;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cdc_harness::{passwords, PgServer, RedisServer, TansuKafka, TlsProxy};
use kafka_util::*;
use pg_source_util::*;
use redis_util::Redis;
use serde_json::Value as Json;

/// `cdc sink --config C --sink NAME` as a child process, its stderr kept in a file.
struct SinkMember {
    config: PathBuf,
    name: String,
    log: PathBuf,
    listen: String,
    child: Option<Child>,
}

impl SinkMember {
    fn new(config: &Path, name: &str, dir: &Path) -> SinkMember {
        SinkMember {
            config: config.to_path_buf(),
            name: name.to_string(),
            log: dir.join(format!("sink-{name}.log")),
            listen: format!("127.0.0.1:{}", free_port()),
            child: None,
        }
    }

    fn start(&mut self) {
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        self.child = Some(
            Command::new(env!("CARGO_BIN_EXE_cdc-e2e"))
                .args(["sink", "--config"])
                .arg(&self.config)
                .args(["--sink", &self.name, "--listen", &self.listen])
                .env("CDC_LOG_LEVEL", "info")
                .stdout(Stdio::null())
                .stderr(stderr)
                .spawn()
                .unwrap(),
        );
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn stop(&mut self) -> Option<i32> {
        let mut c = self.child.take()?;
        // SAFETY: a plain signal to a child this test owns.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        c.wait().ok().and_then(|s| s.code())
    }

    fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `cdc_sink_lag_records` from its metrics, if it answers.
    fn lag(&self) -> Option<u64> {
        let out = Command::new("curl")
            .args(["-sf", &format!("http://{}/metrics", self.listen)])
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find(|l| l.starts_with("cdc_sink_lag_records"))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
    }
}

impl Drop for SinkMember {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `cdc-e2e ARGS` (must succeed): its stdout.
fn cdc(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_cdc-e2e"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cdc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The table as id → row.
async fn rows(pg: &PgServer, db: &str) -> BTreeMap<i64, Json> {
    table_rows(pg, db, "items")
        .await
        .into_values()
        .map(|r| (r["id"].as_i64().unwrap(), r))
        .collect()
}

/// The JSON view (`t:items:<id>`), the refused key by its type.
fn view(port: u16) -> BTreeMap<i64, Json> {
    Redis::connect(port, 0).json_view("t:items:*")
}

/// A connector of `items` writing to the Kafka at `brokers` (`[log.kafka]` gets
/// `kafka_extra` besides the test's short group timeouts), with a Redis sink `cache`.
fn config(
    pg: &PgServer,
    db: &str,
    dir: &Path,
    brokers: &str,
    redis_port: u16,
    kafka_extra: &str,
) -> String {
    let url = format!("{}?sslmode=disable", pg.url("cdc", passwords::PG_CDC, db));
    format!(
        r#"name = "t"

[source]
type = "postgres"
url = "{url}"
tables = ["public.items"]
slot = "{db}"
heartbeat_interval_ms = 1000

[log]
dir = "{log}"
partitions = 3
type = "kafka"
brokers = "{brokers}"
kafka_timeout_ms = 10000

[log.kafka]
# tansu's group joins wait for the session timeout, and a rebalance for members that are
# gone up to the rebalance timeout (max.poll.interval.ms): short ones, so that a SIGKILLed
# member's partitions move on within seconds.
"session.timeout.ms" = "6000"
"max.poll.interval.ms" = "10000"
{kafka_extra}

[admin]
listen = "127.0.0.1:0"

[[sink]]
name = "cache"
type = "redis"
url = "redis://127.0.0.1:{redis_port}/0"
"#,
        log = dir.join("log").display(),
    )
}

async fn workload(pg: &PgServer, db: &str, from: i64, n: i64) {
    let c = pg.superuser_client(db).await.unwrap();
    for i in from..from + n {
        c.batch_execute(&format!(
            "BEGIN;
             INSERT INTO items (id, name, qty) VALUES ({i}, 'item {i}', {i});
             UPDATE items SET qty = qty + 1 WHERE id = {};
             DELETE FROM items WHERE id = {};
             COMMIT;",
            i - 3,
            i - 7
        ))
        .await
        .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sink_group_reading_kafka_keeps_redis_equal_to_the_table_across_kills() {
    let Some(python) = python() else { return };
    let pg = PgServer::shared();
    let kafka = TansuKafka::start().unwrap();
    let redis = RedisServer::start().unwrap();
    let db = database_with(
        pg,
        "SET ROLE cdc; CREATE TABLE items (id int PRIMARY KEY, name text, qty int);
         INSERT INTO items SELECT g, 'seed ' || g, g FROM generate_series(1, 200) g;",
    )
    .await;
    // A key that holds another type: its row is refused into the dead-letter topic.
    let foreign = 150i64;
    Redis::connect(redis.port(), 0).cmd(&["RPUSH", "t:items:150", "not the sink's"]);
    let dir = tempfile::tempdir().unwrap();
    let text = config(pg, &db, dir.path(), &kafka.brokers(), redis.port(), "");
    let mut c = Connector::with_config(dir.path(), &text);
    let mut member = SinkMember::new(&c.config, "cache", dir.path());
    c.start();
    member.start();

    let mut next = 1000;
    for round in 0..4 {
        let w = {
            let db = db.clone();
            tokio::spawn(async move { workload(PgServer::shared(), &db, next, 40).await })
        };
        tokio::time::sleep(Duration::from_millis(800)).await;
        member.kill();
        if round == 2 {
            c.kill();
            c.start();
        }
        member.start();
        w.await.unwrap();
        next += 1000;
    }
    pg.execute(
        &db,
        "UPDATE items SET id = id + 100000 WHERE id = 10;
         UPDATE items SET name = 'renamed' WHERE id % 5 = 0;",
    )
    .await
    .unwrap();

    wait_view(
        pg,
        &db,
        redis.port(),
        &mut c,
        Some(foreign),
        &format!("--- cdc sink\n{}", member.output()),
    )
    .await;

    // Both processes held partitions at some point: the group shared them.
    for (who, out) in [("cdc run", c.output()), ("cdc sink", member.output())] {
        assert!(
            out.contains("partitions assigned"),
            "{who} was never assigned a partition:\n{out}"
        );
    }
    // And at some point they held some each at once (an assignment of fewer than the 3).
    let split = |out: String| {
        out.lines()
            .filter(|l| l.contains("partitions assigned"))
            .any(|l| l.matches("t.public.items[").count() < 3)
    };
    assert!(
        split(c.output()) || split(member.output()),
        "the two members never split the partitions:\n{}\n{}",
        c.output(),
        member.output()
    );
    // Caught up, the standalone member's lag is 0: commit markers are not lag.
    let deadline = Instant::now() + Duration::from_secs(30);
    while member.lag() != Some(0) {
        assert!(
            Instant::now() < deadline,
            "lag {:?}\n{}",
            member.lag(),
            member.output()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // The refused row is in the dead-letter topic in Kafka, with Redis's reason: at least
    // the last rename's (`id % 5 = 0` covers 150), refused after the last kill. The view
    // shows the other rows before the sink has written the dead letter: wait for it.
    let refused = |dlq: &[(String, Seen, Json)]| {
        dlq.iter().any(|(_, seen, _)| {
            seen.key.as_deref() == Some("{\"id\":150}")
                && seen.headers.iter().any(|(k, v)| {
                    k == "__connect.errors.exception.message" && v.contains("WRONGTYPE")
                })
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let dlq = read_kafka(&python, &kafka.brokers(), &["dlq.t.cache"]);
        if refused(&dlq) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no WRONGTYPE dead letter for id 150 in {dlq:?}\n{}",
            member.output()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // Both members stopped, the group is caught up; reset to the earliest offsets and
    // replayed by `cdc run`'s member alone, the view does not change.
    // `cdc verify` on the Kafka configuration: the table rebuilt from Kafka's committed
    // records equals the source; the view differs in the refused row only (its key holds
    // the other application's list), found after the re-check waited for the group.
    let (code, out, err) = c.verify(&["--table", "public.items", "--log"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    let (code, out, err) = c.verify(&[
        "--table",
        "public.items",
        "--sink",
        "cache",
        "--wait-secs",
        "5",
    ]);
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(
        out.contains("key {\"id\":150}") && out.contains("1 key differs"),
        "{out}"
    );

    let whole = |out: String| {
        out.lines()
            .filter(|l| l.contains("partitions assigned"))
            .filter(|l| l.matches("t.public.items[").count() == 3)
            .count()
    };
    let before_leave = whole(c.output());
    assert_eq!(member.stop(), Some(0), "{}", member.output());
    // The group settles on `cdc run`'s member before that one leaves too (tansu can leave
    // a group stuck when its last two members leave within one rebalance).
    let deadline = Instant::now() + Duration::from_secs(60);
    while whole(c.output()) == before_leave {
        assert!(
            Instant::now() < deadline,
            "the partitions never moved to cdc run's member\n{}",
            c.output()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    let before = Redis::connect(redis.port(), 0).dump_views();
    let cfg = c.config.to_str().unwrap().to_string();
    let lags = || -> Vec<u64> {
        let out = cdc(&["log", "--config", &cfg, "groups"]);
        // GROUP TOPIC PARTITION COMMITTED HIGH-WATERMARK LAG PROTECT
        out.lines()
            .filter(|l| l.starts_with("cdc-sink-cache\tt.public.items\t"))
            .map(|l| l.split('\t').nth(5).unwrap().parse().unwrap())
            .collect()
    };
    assert_eq!(lags(), vec![0, 0, 0], "caught up before the reset");
    // `cdc status` on the Kafka configuration, nothing running: the position from
    // `<name>.offsets`, the topics' offsets and the sink group's lag from the cluster.
    let st: Json = serde_json::from_str(&cdc(&["status", "--json", "--config", &cfg])).unwrap();
    assert_eq!(st["running"], false, "{st}");
    assert_eq!(st["log"]["type"], "kafka", "{st}");
    assert!(st["source"]["position"]["lsn"].is_string(), "{st}");
    let items = st["log"]["topics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "t.public.items")
        .unwrap_or_else(|| panic!("{st}"));
    assert_eq!(items["partitions"].as_array().unwrap().len(), 3, "{st}");
    assert_eq!(st["sinks"]["cache"]["group_lag_records"], 0, "{st}");
    assert!(
        st["log"]["topics"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["name"] != "t.offsets"),
        "the offsets topic is not a change topic: {st}"
    );
    let reset = cdc(&[
        "log",
        "--config",
        &cfg,
        "reset-group",
        "cdc-sink-cache",
        "t.public.items",
        "--to-earliest",
    ]);
    assert_eq!(reset.lines().count(), 3, "{reset}");
    assert!(lags().iter().sum::<u64>() > 0, "the reset moved nothing");
    c.start();
    let deadline = Instant::now() + Duration::from_secs(90);
    while lags() != vec![0, 0, 0] {
        assert!(
            Instant::now() < deadline,
            "replay did not finish\n{}",
            c.output()
        );
        c.assert_running();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(
        Redis::connect(redis.port(), 0).dump_views(),
        before,
        "the view after the replay"
    );
    c.stop();
    drop_slot(pg, &db).await;
}

/// Waits until the JSON view equals the table (`foreign`: a refused id, whose key keeps
/// its other type).
async fn wait_view(
    pg: &PgServer,
    db: &str,
    port: u16,
    c: &mut Connector,
    foreign: Option<i64>,
    more: &str,
) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        c.assert_running();
        let mut want = rows(pg, db).await;
        if let Some(f) = foreign {
            want.insert(f, Json::String("<not a string>".into()));
        }
        let got = view(port);
        if got == want {
            return;
        }
        if Instant::now() > deadline {
            let diff: Vec<String> = got
                .keys()
                .chain(want.keys())
                .filter(|k| got.get(k) != want.get(k))
                .take(5)
                .map(|k| format!("{k}: view {:?} table {:?}", got.get(k), want.get(k)))
                .collect();
            panic!(
                "the view differs from the table: {diff:?}\n--- cdc run\n{}\n{more}",
                c.output()
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// `[log.kafka]` security settings take effect: with the broker behind a TLS proxy (its
/// advertised address is the proxy's), `cdc run` writes over TLS and its sink reads over
/// TLS, trusting the proxy's certificate through `ssl.ca.location`; without that setting
/// the certificate is not trusted and nothing reaches Redis.
#[tokio::test(flavor = "multi_thread")]
async fn over_tls_the_connector_writes_and_its_sink_reads() {
    let pg = PgServer::shared();
    let proxy = TlsProxy::new().unwrap();
    let kafka = TansuKafka::start_advertising(Some(proxy.port())).unwrap();
    proxy.forward_to(kafka.port()).unwrap();
    let redis = RedisServer::start().unwrap();
    let db = database_with(
        pg,
        "SET ROLE cdc; CREATE TABLE items (id int PRIMARY KEY, name text, qty int);
         INSERT INTO items SELECT g, 'seed ' || g, g FROM generate_series(1, 50) g;",
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let brokers = format!("127.0.0.1:{}", proxy.port());
    // Not trusting the proxy's self-signed certificate: nothing gets through.
    let untrusted = config(
        pg,
        &db,
        dir.path(),
        &brokers,
        redis.port(),
        "\"security.protocol\" = \"SSL\"",
    );
    let mut c = Connector::with_config(dir.path(), &untrusted);
    c.start();
    // Past kafka_timeout_ms: the connector says why it cannot reach the log.
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert!(
        view(redis.port()).is_empty(),
        "rows reached Redis without a trusted certificate"
    );
    c.kill();
    assert!(
        c.output().contains("certificate verify failed")
            || c.output().contains("SSL handshake failed"),
        "no TLS verification error:\n{}",
        c.output()
    );
    let trusted = config(
        pg,
        &db,
        dir.path(),
        &brokers,
        redis.port(),
        &format!(
            "\"security.protocol\" = \"SSL\"\n\"ssl.ca.location\" = \"{}\"",
            proxy.ca_path().display()
        ),
    );
    std::fs::write(&c.config, trusted).unwrap();
    c.start();
    workload(pg, &db, 1000, 20).await;
    wait_view(pg, &db, redis.port(), &mut c, None, "").await;
    c.stop();
    drop_slot(pg, &db).await;
}
