//! A MySQL / MariaDB source writing to Kafka keeps its schema history in Kafka
//! (`<name>.schema-history`), not only on local disk: a connector whose log directory is
//! gone (a sidecar on a fresh volume) resumes from the position in `<name>.offsets` and
//! decodes the rows after a DDL with the table's schema from that topic, without taking a
//! new snapshot. Against MariaDB and noida-db's Kafka API from the harness, read back with
//! Confluent's Python client.

mod kafka_util;
mod my_source_util;

use std::time::Duration;

use cdc_harness::{MariaDbServer, NoidaKafka};
use kafka_util::*;
use my_source_util::*;
use serde_json::Value as Json;

/// The connector's change values in Kafka, in order (one partition).
fn values(python: &std::path::PathBuf, brokers: &str, topic: &str) -> Vec<Json> {
    read_kafka(python, brokers, &[topic])
        .into_iter()
        .map(|(_, _, v)| v)
        .filter(|v| !v.is_null())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_schema_history_is_in_kafka_and_a_connector_without_its_dir_resumes_from_it() {
    let Some(python) = python() else { return };
    let my = MariaDbServer::shared();
    let kafka = NoidaKafka::start().unwrap();
    let db = setup_acct(my, 5).await;
    let (_dir, mut c) = temp_connector(my, &db, "");
    let text = std::fs::read_to_string(&c.config).unwrap().replace(
        "partitions = 3\n",
        &format!(
            "partitions = 1\ntype = \"kafka\"\nbrokers = \"{}\"\nkafka_timeout_ms = 10000\n",
            kafka.brokers()
        ),
    );
    std::fs::write(&c.config, text).unwrap();
    let topic = c.topic.clone();
    c.start();
    let got = wait_kafka(
        &python,
        &kafka.brokers(),
        &topic,
        5,
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(got.len(), 5, "the snapshot\n{}", c.output());

    my.execute(&format!(
        "ALTER TABLE {db}.acct ADD COLUMN note varchar(20) NOT NULL DEFAULT 'n';
         INSERT INTO {db}.acct (id, v, pad, note) VALUES (100, 1, 'x', 'after-ddl');"
    ))
    .await
    .unwrap();
    let got = wait_kafka(
        &python,
        &kafka.brokers(),
        &topic,
        6,
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(got.len(), 6, "{}", c.output());
    assert_eq!(got[5].2["after"]["note"], "after-ddl", "{:?}", got[5].2);
    c.stop();

    // The history is in Kafka: the snapshot's schemas and the DDL.
    let history = read_kafka(&python, &kafka.brokers(), &["t.schema-history"]);
    assert!(history.len() >= 2, "{history:?}");
    assert!(
        history
            .iter()
            .any(|(_, _, v)| v.to_string().contains("ADD COLUMN note")),
        "the DDL is not in the history topic: {history:?}"
    );

    // The local directory is gone (a fresh volume): position and history come from Kafka.
    std::fs::remove_dir_all(c.log_dir()).unwrap();
    c.start();
    my.execute(&format!(
        "INSERT INTO {db}.acct (id, v, pad, note) VALUES (101, 2, 'y', 'second');
         UPDATE {db}.acct SET note = 'u' WHERE id = 1;"
    ))
    .await
    .unwrap();
    let got = wait_kafka(
        &python,
        &kafka.brokers(),
        &topic,
        8,
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(got.len(), 8, "{}", c.output());
    let vals = values(&python, &kafka.brokers(), &topic);
    let ops: Vec<&str> = vals.iter().map(|v| v["op"].as_str().unwrap()).collect();
    assert_eq!(
        ops,
        ["r", "r", "r", "r", "r", "c", "c", "u"],
        "no new snapshot"
    );
    assert_eq!(vals[6]["after"]["note"], "second");
    assert_eq!(vals[7]["after"]["note"], "u");
    assert_eq!(vals[7]["before"]["note"], "n");
    c.stop();
}
