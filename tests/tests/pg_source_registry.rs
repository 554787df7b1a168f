//! `cdc run` with `[registry] url`: a second process, `cdc registry serve` with basic auth,
//! is the remote registry. Records carry its ids (Avro, Confluent wire format: the id in
//! the 5-byte header), no embedded registry is opened and the admin address serves no
//! registry API; wrong credentials and an unreachable registry stop the start with a
//! message naming the key; a registry that goes away while running delays only what
//! needs a new registration, and every change arrives once it is back.

mod pg_source_util;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use cdc_harness::PgServer;
use cdc_log::{Log, StartAt};
use pg_source_util::*;
use serde_json::json;

const TOPIC: &str = "t.public.s";
/// `cdc:s3cret`, base64.
const AUTH: &str = "Authorization: Basic Y2RjOnMzY3JldA==\r\n";

/// The ids in the Confluent wire format header (magic 0, 4-byte big-endian id).
fn schema_id(bytes: &[u8]) -> u32 {
    assert_eq!(bytes[0], 0, "not the Confluent wire format: {bytes:?}");
    u32::from_be_bytes(bytes[1..5].try_into().unwrap())
}

/// Avro `int` (zigzag varint) at the start of `bytes`.
fn avro_int(bytes: &[u8]) -> i64 {
    let (mut n, mut shift) = (0u64, 0);
    for b in bytes {
        n |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    (n >> 1) as i64 ^ -((n & 1) as i64)
}

/// Per row id (the key's only field): every (key schema id, value schema id) of its
/// records, in log order.
fn records(log_dir: &Path) -> BTreeMap<i64, Vec<(u32, u32)>> {
    let mut out: BTreeMap<i64, Vec<(u32, u32)>> = BTreeMap::new();
    let Ok(log) = Log::open_read_only(log_dir) else {
        return out;
    };
    if !log.topics().iter().any(|t| t == TOPIC) {
        return out;
    }
    let parts = log.describe(TOPIC).unwrap().partitions.len() as u32;
    for p in 0..parts {
        let mut r = log.reader(TOPIC, p, StartAt::Earliest).unwrap();
        loop {
            let batch = r.poll(4 << 20).unwrap();
            if batch.is_empty() {
                break;
            }
            for rec in batch {
                let key = rec.key.expect("a keyed record");
                let value = rec.value.expect("inserts only: no tombstones");
                out.entry(avro_int(&key[5..]))
                    .or_default()
                    .push((schema_id(&key), schema_id(&value)));
            }
        }
    }
    out
}

async fn wait_for_ids(c: &Connector, ids: &[i64]) -> BTreeMap<i64, Vec<(u32, u32)>> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let got = records(&c.log_dir());
        if ids.iter().all(|id| got.contains_key(id)) {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "rows {ids:?} not all in the log after 90 s (have {:?})\n{}",
            got.keys().collect::<Vec<_>>(),
            c.output()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The id of the latest version of `subject` in the remote registry.
fn latest_id(registry: &RegistryServe, subject: &str) -> u32 {
    let (status, body) = http(
        &registry.addr,
        "GET",
        &format!("/subjects/{subject}/versions/latest"),
        None,
        AUTH,
    );
    assert_eq!(status, 200, "{body}");
    body["id"].as_u64().unwrap() as u32
}

fn registry_section(url: &str, password: &str) -> String {
    format!(
        "[format]\nvalue = \"avro\"\n\n[registry]\nurl = \"{url}\"\nusername = \"cdc\"\npassword = \"{password}\"\ntimeout_ms = 2000\n"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn remote_registry_ids_credentials_and_outage() {
    let pg = PgServer::shared();
    let db = database_with(
        pg,
        "SET ROLE cdc; CREATE TABLE s (id int PRIMARY KEY, a int NOT NULL); INSERT INTO s SELECT g, g FROM generate_series(1, 3) g;",
    )
    .await;

    let reg_dir = tempfile::tempdir().unwrap();
    let users = reg_dir.path().join("users");
    std::fs::write(&users, "cdc:s3cret\n").unwrap();
    let mut registry = RegistryServe::start(
        &reg_dir.path().join("data"),
        free_port(),
        &["--basic-auth-file", users.to_str().unwrap()],
    );
    // Schemas of others first, so that this connector's ids differ from the ones a fresh
    // embedded registry would hand out.
    for i in 1..=3 {
        let schema = format!("{{\"type\":\"fixed\",\"name\":\"f{i}\",\"size\":{i}}}");
        let (status, body) = http(
            &registry.addr,
            "POST",
            &format!("/subjects/other-{i}/versions"),
            Some(&json!({ "schema": schema })),
            AUTH,
        );
        assert_eq!(status, 200, "{body}");
    }

    // Wrong credentials: the start fails, naming the keys, never the password.
    let (_dir, mut c) = temp_connector(
        pg,
        &db,
        &["public.s"],
        &registry_section(&registry.url(), "not-the-pass-77"),
    );
    c.start();
    let out = c
        .wait_definite_error(Duration::from_secs(60), "the connector kept running")
        .await;
    assert!(
        out.contains("registry.username / registry.password")
            && out.contains("refused")
            && !out.contains("not-the-pass-77"),
        "{out}"
    );

    // Unreachable: the start fails, naming registry.url and what to do.
    let nobody = format!("http://127.0.0.1:{}", free_port());
    c.edit_config(|text| text.replace(&registry.url(), &nobody));
    c.start();
    let out = c
        .wait_definite_error(Duration::from_secs(60), "the connector kept running")
        .await;
    assert!(
        out.contains("registry.url") && out.contains("unreachable") && out.contains("Fix:"),
        "{out}"
    );

    // The right ones: the records carry the remote's ids.
    c.edit_config(|text| {
        text.replace(&nobody, &registry.url())
            .replace("not-the-pass-77", "s3cret")
    });
    let admin = c.fixed_admin_port();
    c.start();
    let got = wait_for_ids(&c, &[1, 2, 3]).await;
    let key_id = latest_id(&registry, &format!("{TOPIC}-key"));
    let v1_id = latest_id(&registry, &format!("{TOPIC}-value"));
    assert!(key_id > 3 && v1_id > 3, "ids {key_id} {v1_id}");
    for (id, recs) in &got {
        assert_eq!(recs, &vec![(key_id, v1_id)], "row {id}");
    }
    assert!(
        !c.log_dir().join("registry").exists(),
        "an embedded registry was opened beside the remote one"
    );
    // The admin address serves no registry API, and says where it is.
    let (status, body) = http(&admin, "GET", "/subjects", None, "");
    assert_eq!(status, 404, "{body}");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains(&registry.url())),
        "{body}"
    );
    let (status, _) = http(&admin, "GET", "/healthz", None, "");
    assert_eq!(status, 200);

    // The registry goes away. Rows of the known schema still arrive (its ids are cached);
    // a new schema version waits for the registry.
    registry.stop();
    pg.execute(&db, "INSERT INTO s VALUES (4, 4), (5, 5);")
        .await
        .unwrap();
    wait_for_ids(&c, &[4, 5]).await;
    pg.execute(&db, "ALTER TABLE s ADD COLUMN note text;")
        .await
        .unwrap();
    pg.execute(&db, "INSERT INTO s VALUES (6, 6, 'x');")
        .await
        .unwrap();
    pg.execute(&db, "INSERT INTO s VALUES (7, 7, 'y');")
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !c.output().contains("schema registry unavailable") {
        assert!(
            Instant::now() < deadline,
            "no retry of the registry logged\n{}",
            c.output()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    c.assert_running();
    let got = records(&c.log_dir());
    assert!(!got.contains_key(&6) && !got.contains_key(&7), "{got:?}");

    // Back: everything arrives, once, the new rows with the new version's id.
    registry.restart();
    pg.execute(&db, "INSERT INTO s VALUES (8, 8, 'z');")
        .await
        .unwrap();
    let got = wait_for_ids(&c, &[6, 7, 8]).await;
    c.assert_running();
    let v2_id = latest_id(&registry, &format!("{TOPIC}-value"));
    assert_ne!(v2_id, v1_id);
    assert_eq!(
        got.keys().copied().collect::<Vec<_>>(),
        (1..=8).collect::<Vec<_>>()
    );
    for (id, recs) in &got {
        let want = if *id >= 6 { v2_id } else { v1_id };
        assert_eq!(
            recs,
            &vec![(key_id, want)],
            "row {id}: once, with its schema's id"
        );
    }
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    drop_slot(pg, &db).await;
}
