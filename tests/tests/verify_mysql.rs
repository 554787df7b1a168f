//! `cdc verify --log` on a MariaDB source, through the shipped CLI: the source-side reader
//! (key-ordered chunks over the snapshot's select list and decoder) gives the values the
//! records carry, so a streamed table verifies equal; a row changed and one deleted while
//! the connector is stopped are found with both sides; after a restart the re-check waits
//! for the binlog position and the table is equal again.

mod my_source_util;

use std::process::Command;
use std::time::Duration;

use cdc_harness::MariaDbServer;
use my_source_util::*;

const T: Duration = Duration::from_secs(60);

fn verify(c: &Connector, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cdc-e2e"))
        .arg("verify")
        .arg("--config")
        .arg(&c.config)
        .args(args)
        .env("CDC_LOG_LEVEL", "warn")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_log_on_mariadb() {
    let my = MariaDbServer::shared();
    let db = my.create_database().await.unwrap();
    my.execute(&format!(
        "CREATE TABLE {db}.item (id int PRIMARY KEY, name varchar(20) NOT NULL, price decimal(10,2), at datetime(3), flag tinyint(1)) ENGINE=InnoDB;
         CREATE TABLE {db}.pair (a int NOT NULL, b varchar(10) NOT NULL, v bigint, PRIMARY KEY (a, b)) ENGINE=InnoDB;
         INSERT INTO {db}.item VALUES (1, 'one', 1.50, '2024-01-01 10:00:00.123', 1), (2, 'two', NULL, NULL, 0), (3, 'three', 3.25, '2024-03-03 03:03:03', 1);
         INSERT INTO {db}.pair VALUES (1, 'x', 10), (1, 'y', 11), (2, 'x', 20);"
    ))
    .await
    .unwrap();
    let (_dir, mut c) = temp_connector_tables(my, &db, &["item", "pair"], "");
    c.start();
    c.wait_streaming(T).await;
    my.execute(&format!(
        "INSERT INTO {db}.item VALUES (4, 'four', 4, '2024-04-04 04:04:04', 0);
         UPDATE {db}.item SET price = 9.99 WHERE id = 1;
         DELETE FROM {db}.pair WHERE a = 1 AND b = 'y';"
    ))
    .await
    .unwrap();
    let item = format!("{db}.item");
    let pair = format!("{db}.pair");
    for t in [&item, &pair] {
        let (code, out, err) = verify(&c, &["--table", t, "--log", "--chunk-rows", "2"]);
        assert_eq!(code, Some(0), "{t}\n{out}\n{err}\n{}", c.output());
    }
    assert_eq!(c.stop(), Some(0), "{}", c.output());

    my.execute(&format!(
        "UPDATE {db}.item SET name = 'changed' WHERE id = 2;
         DELETE FROM {db}.pair WHERE a = 2 AND b = 'x';"
    ))
    .await
    .unwrap();
    let (code, out, err) = verify(
        &c,
        &[
            "--table",
            &item,
            "--log",
            "--chunk-rows",
            "2",
            "--wait-secs",
            "1",
        ],
    );
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(
        out.contains("differs: key {\"id\":2}\n  source: {\"id\":2,\"name\":\"changed\""),
        "{out}"
    );
    assert!(
        out.contains("  view:   {\"id\":2,\"name\":\"two\""),
        "{out}"
    );
    let (code, out, err) = verify(&c, &["--table", &pair, "--log", "--wait-secs", "1"]);
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(
        out.contains("missing in the source: key {\"a\":2,\"b\":\"x\"}"),
        "{out}"
    );

    c.start();
    for t in [&item, &pair] {
        let (code, out, err) = verify(&c, &["--table", t, "--log", "--wait-secs", "60"]);
        assert_eq!(code, Some(0), "{t}\n{out}\n{err}\n{}", c.output());
    }
    assert_eq!(c.stop(), Some(0), "{}", c.output());
}
