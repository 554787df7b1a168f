//! Measures what a Kafka transaction of the connector costs: 40 transactions of 7,300
//! records of 330 bytes through [`cdc_kafka::KafkaLog`], printing the total time and the
//! time spent committing. `cargo run --release -p cdc-kafka --example commit_probe -- HOST:PORT`
//! (a Kafka-protocol broker; it creates topics `probe<pid>.t` and `probe<pid>.offsets`).

use std::time::{Duration, Instant};
fn main() {
    let brokers = std::env::args().nth(1).unwrap();
    let s = cdc_kafka::KafkaSettings {
        brokers,
        transactions: true,
        transactional_id: format!("probe-{}", std::process::id()),
        replication_factor: -1,
        properties: Default::default(),
        timeout: Duration::from_secs(30),
    };
    let name = format!("probe{}", std::process::id());
    let k = cdc_kafka::KafkaLog::connect(s, &name).unwrap();
    let topic = format!("{name}.t");
    k.ensure_topic(
        &topic,
        &cdc_kafka::TopicSpec {
            partitions: 1,
            configs: vec![],
        },
    )
    .unwrap();
    let v = vec![b'x'; 330];
    let t = Instant::now();
    let mut ct = Duration::ZERO;
    for tx in 0..40 {
        for i in 0..7300 {
            let key = format!("{{\"id\":{}}}", tx * 7300 + i);
            k.send(
                &topic,
                0,
                &cdc_kafka::OutRecord {
                    key: Some(key.as_bytes()),
                    value: Some(&v),
                    headers: &[],
                    timestamp_ms: 1,
                },
            )
            .unwrap();
        }
        let c = Instant::now();
        k.commit(b"{}").unwrap();
        ct += c.elapsed();
    }
    println!("total {:?} commits {:?}", t.elapsed(), ct);
}
