//! Reading Kafka topics back in the Kafka tests: Confluent's Python client
//! (tests/kafka-clients/read_topics.py) and Apache Kafka's Java client
//! (tests/kafka-clients/ReadTopics.java), both `read_committed`, their records as [`Seen`].
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value as Json;

/// Runs tests/registry-clients/`script` (it installs a client, cached) and returns the
/// path it prints last (None: skip that client, saying why).
fn setup(script: &str) -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("registry-clients");
    let out = Command::new("bash").arg(dir.join(script)).output().ok()?;
    if !out.status.success() {
        eprintln!(
            "SKIP: tests/registry-clients/{script} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .map(|l| PathBuf::from(l.trim()))
}

/// The Python with confluent-kafka (None: skip, saying why).
pub fn python() -> Option<PathBuf> {
    setup("setup-python.sh")
}

/// One record as a consumer sees it, the processing time masked.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Seen {
    pub partition: u32,
    pub key: Option<String>,
    pub value: Option<String>,
    pub headers: Vec<(String, String)>,
}

/// The value with what differs between two connectors reading the same changes removed:
/// the envelope's processing time (`ts_ms`, `ts_us`, `ts_ns`), and a snapshot row's
/// source time and LSN.
pub fn masked(v: &Json) -> String {
    let mut v = v.clone();
    let snapshot = v["op"] == "r";
    if let Some(o) = v.as_object_mut() {
        for k in ["ts_ms", "ts_us", "ts_ns"] {
            o.remove(k);
        }
        // Each connector snapshots at its own moment (and LSN).
        if let (true, Some(src)) = (snapshot, o.get_mut("source").and_then(Json::as_object_mut)) {
            for k in ["ts_ms", "ts_us", "ts_ns", "lsn", "sequence"] {
                src.remove(k);
            }
        }
    }
    v.to_string()
}

/// `topics` read back from Kafka with Confluent's client (`read_committed`).
pub fn read_kafka(python: &PathBuf, brokers: &str, topics: &[&str]) -> Vec<(String, Seen, Json)> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("kafka-clients/read_topics.py");
    let out = Command::new(python)
        .arg(script)
        .args(["--brokers", brokers])
        .args(topics)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "read_topics.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    parse_read(&String::from_utf8_lossy(&out.stdout))
}

/// `topics` as read_topics.py prints them (offsets included), `read_uncommitted` when
/// `uncommitted` (aborted and open transactions' records too): for explaining a record a
/// `read_committed` reader did not see.
pub fn read_kafka_raw(
    python: &PathBuf,
    brokers: &str,
    topics: &[&str],
    uncommitted: bool,
) -> Vec<Json> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("kafka-clients/read_topics.py");
    let out = Command::new(python)
        .arg(script)
        .args(["--brokers", brokers])
        .args(uncommitted.then_some("--uncommitted"))
        .args(topics)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The jars and classes of tests/registry-clients/setup-java.sh, with the Java reader
/// (None: skip the Java reading, saying why).
pub fn java_reader() -> Option<PathBuf> {
    setup("setup-java.sh")
}

/// `topics` read back with Apache Kafka's Java client (`read_committed`,
/// tests/kafka-clients/ReadTopics.java).
pub fn read_kafka_java(
    java: &std::path::Path,
    brokers: &str,
    topics: &[&str],
) -> Vec<(String, Seen, Json)> {
    let cp = format!(
        "{}/*:{}",
        java.join("libs").display(),
        java.join("classes").display()
    );
    let out = Command::new("java")
        .args(["-cp", &cp, "ReadTopics", brokers])
        .args(topics)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ReadTopics failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    parse_read(&String::from_utf8_lossy(&out.stdout))
}

/// The JSON lines both readers print.
pub fn parse_read(text: &str) -> Vec<(String, Seen, Json)> {
    text.lines()
        .map(|l| {
            let r: Json = serde_json::from_str(l).unwrap();
            let value: Option<Json> = r["value"]
                .as_str()
                .map(|v| serde_json::from_str(v).unwrap_or_else(|e| panic!("{e}: {l}")));
            let seen = Seen {
                partition: r["partition"].as_u64().unwrap() as u32,
                // JSON keys normalised as the embedded log's reader prints them; others
                // (the position's) as they are.
                key: r["key"].as_str().map(|k| {
                    serde_json::from_str::<Json>(k)
                        .map_or_else(|_| k.to_string(), |j| j.to_string())
                }),
                value: value.as_ref().map(masked),
                headers: r["headers"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|h| {
                        (
                            h[0].as_str().unwrap().to_string(),
                            h[1].as_str().unwrap_or_default().to_string(),
                        )
                    })
                    .collect(),
            };
            (
                r["topic"].as_str().unwrap().to_string(),
                seen,
                value.unwrap_or(Json::Null),
            )
        })
        .collect()
}

/// `topic` read back until it holds `n` records (or the timeout).
pub async fn wait_kafka(
    python: &PathBuf,
    brokers: &str,
    topic: &str,
    n: usize,
    timeout: Duration,
) -> Vec<(String, Seen, Json)> {
    let deadline = Instant::now() + timeout;
    loop {
        let got = read_kafka(python, brokers, &[topic]);
        if got.len() >= n || Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
