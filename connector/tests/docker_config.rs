//! The configurations `docker/compose.yaml` mounts load and validate (the compose file
//! itself cannot run here: no container engine). `docker/cdc.toml` is completed by the
//! compose file's environment, so only `docker/cdc-kafka.toml` loads on its own.

use std::path::Path;

use cdc_connector::config::{Config, LogKind};

#[test]
fn the_kafka_profile_config_loads() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docker/cdc-kafka.toml");
    let c = Config::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(c.log.kind, LogKind::Kafka);
    assert_eq!(c.sinks.len(), 1);
    let compose = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docker/compose.yaml"),
    )
    .unwrap();
    // The services the config names are in the compose file.
    for host in ["kafka:9092", "redis://redis:6379", "postgres:5432"] {
        let service = host
            .trim_start_matches("redis://")
            .split(':')
            .next()
            .unwrap();
        assert!(
            compose.contains(&format!("\n  {service}:\n")),
            "no service {service}"
        );
    }
    assert!(compose.contains("./cdc-kafka.toml:/etc/cdc/cdc.toml"));
}
