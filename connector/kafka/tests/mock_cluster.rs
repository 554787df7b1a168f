//! [`KafkaLog`] against librdkafka's mock cluster, with broker errors injected: what
//! librdkafka retries by itself (a leader moving, timeouts, too few replicas) leaves a
//! commit whole and each record once; records that fail for good fail the commit and
//! store no position, and a new producer resumes from the stored one; a fenced producer is
//! a definite error; a duplicate sequence counts as delivered.
//!
//! The mock has no CreateTopics (the topics are made on the cluster first), and it does
//! not model what an injected error would have meant on a real broker: a batch it calls a
//! duplicate was never stored, and a transaction whose EndTxn it refused is not aborted
//! when the next producer fences it. Those two tests check the outcome the connector
//! sees (the error and its class, the commit), not the records; the records' exactly-once
//! outcome across kills and fencing is tested against a broker in tests/tests/kafka_log.rs.

use std::time::{Duration, Instant};

use cdc_kafka::{KafkaLog, KafkaLogError, KafkaSettings, OutRecord};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::mocking::MockCluster;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use rdkafka::{Message, Offset, TopicPartitionList};

fn settings(brokers: &str, tid: &str) -> KafkaSettings {
    KafkaSettings {
        brokers: brokers.to_string(),
        transactions: true,
        transactional_id: tid.to_string(),
        replication_factor: -1,
        properties: Default::default(),
        timeout: Duration::from_secs(10),
    }
}

fn cluster() -> MockCluster<'static, rdkafka::producer::DefaultProducerContext> {
    let mc = MockCluster::new(3).unwrap();
    mc.create_topic("m.offsets", 1, 3).unwrap();
    mc.create_topic("m.t", 3, 3).unwrap();
    mc
}

fn send_n(k: &KafkaLog, from: u32, n: u32) {
    for i in from..from + n {
        let key = format!("{{\"id\":{i}}}");
        k.send(
            "m.t",
            i % 3,
            &OutRecord {
                key: Some(key.as_bytes()),
                value: Some(b"{}"),
                headers: &[],
                timestamp_ms: 1,
            },
        )
        .unwrap();
    }
}

/// The keys of `m.t` a `read_committed` consumer reads, in order per partition.
fn committed_keys(brokers: &str) -> Vec<String> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "mock-reader")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..3 {
        tpl.add_partition_offset("m.t", p, Offset::Beginning)
            .unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut eof = 0;
    let mut keys = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while eof < 3 {
        assert!(
            Instant::now() < deadline,
            "not at the end of m.t after 20 s"
        );
        match c.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => keys.push(String::from_utf8(m.key().unwrap().to_vec()).unwrap()),
            Some(Err(KafkaError::PartitionEOF(_))) => eof += 1,
            Some(Err(e)) => panic!("{e}"),
            None => {}
        }
    }
    keys
}

#[test]
fn leader_moves_and_timeouts_are_retried_and_leave_each_record_once() {
    let mc = cluster();
    let b = mc.bootstrap_servers();
    let k = KafkaLog::connect(settings(&b, "m1"), "m").unwrap();
    mc.request_errors(
        RDKafkaApiKey::Produce,
        &[
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
        ],
    );
    send_n(&k, 0, 300);
    k.commit(b"{\"at\":1}").unwrap();
    send_n(&k, 300, 300);
    k.commit(b"{\"at\":2}").unwrap();
    assert_eq!(k.checkpoint().unwrap().as_deref(), Some(&b"{\"at\":2}"[..]));
    let mut keys = committed_keys(&b);
    let n = keys.len();
    keys.sort();
    keys.dedup();
    assert_eq!((n, keys.len()), (600, 600), "each record once");
}

#[test]
fn a_fenced_producer_fails_its_commit_for_good() {
    let mc = cluster();
    let b = mc.bootstrap_servers();
    let k = KafkaLog::connect(settings(&b, "m2"), "m").unwrap();
    send_n(&k, 0, 10);
    k.commit(b"{\"at\":1}").unwrap();
    send_n(&k, 10, 10);
    // The coordinator says another producer with this transactional id took over.
    mc.request_errors(
        RDKafkaApiKey::EndTxn,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_PRODUCER_FENCED],
    );
    let e = k.commit(b"{\"at\":2}").unwrap_err();
    assert!(
        matches!(e, KafkaLogError::Fenced { .. }) && !e.is_transient(),
        "{e:?}"
    );
    assert!(e.to_string().contains("another `cdc` process"), "{e}");
}

#[test]
fn a_duplicate_sequence_counts_as_delivered() {
    let mc = cluster();
    let b = mc.bootstrap_servers();
    let k = KafkaLog::connect(settings(&b, "m4"), "m").unwrap();
    send_n(&k, 0, 10);
    k.commit(b"{\"at\":1}").unwrap();
    // The broker says it has the batch already (a retry of one it stored): librdkafka
    // takes it as delivered, and the commit goes through.
    mc.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_DUPLICATE_SEQUENCE_NUMBER],
    );
    send_n(&k, 10, 10);
    k.commit(b"{\"at\":2}").unwrap();
}

#[test]
fn records_refused_for_good_fail_the_commit_store_no_position_and_a_new_producer_resumes() {
    let mc = cluster();
    let b = mc.bootstrap_servers();
    let k = KafkaLog::connect(settings(&b, "m3"), "m").unwrap();
    send_n(&k, 0, 10);
    k.commit(b"{\"at\":1}").unwrap();
    send_n(&k, 10, 10);
    // The records fail for good (as a topic the principal may not write would).
    mc.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED; 8],
    );
    let e = k.commit(b"{\"at\":2}").unwrap_err();
    // Definite: the operator fixes the ACLs, then the connector starts again.
    assert!(
        matches!(e, KafkaLogError::Refused { .. }) && !e.is_transient(),
        "{e:?}"
    );
    assert!(e.to_string().contains("ACLs"), "{e}");
    drop(k);
    mc.clear_request_errors(RDKafkaApiKey::Produce);
    // What a restarted pipeline does: connect again, read the position back.
    let k = KafkaLog::connect(settings(&b, "m3"), "m").unwrap();
    assert_eq!(k.checkpoint().unwrap().as_deref(), Some(&b"{\"at\":1}"[..]));
    send_n(&k, 10, 10);
    k.commit(b"{\"at\":2}").unwrap();
    let mut keys = committed_keys(&b);
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 20);
}
