//! The configurations `docker/compose.yaml` and `docker/k8s-sidecar.yaml` use load and
//! validate, and name services that exist (the files cannot run here: no container
//! engine).

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

fn docker(file: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../docker")
        .join(file)
}

#[test]
fn the_default_profile_configs_load_and_name_compose_services() {
    let compose = std::fs::read_to_string(docker("compose.yaml")).unwrap();
    for (file, kind, host) in [
        ("cdc.toml", "postgres", "postgres"),
        ("cdc-mariadb.toml", "mysql", "mariadb"),
    ] {
        let c = Config::load(&docker(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(c.log.kind, LogKind::Embedded, "{file}");
        assert_eq!(c.sinks.len(), 1, "{file}: a Redis view");
        let text = std::fs::read_to_string(docker(file)).unwrap();
        assert!(text.contains(&format!("type = \"{kind}\"")), "{file}");
        assert!(text.contains(&format!("@{host}:")), "{file}");
        assert!(
            compose.contains(&format!("./{file}:/etc/cdc/cdc.toml")),
            "{file} mounted"
        );
        assert!(
            !text.contains("password =")
                && !text.contains(":postgres@")
                && !text.contains(":mariadb@"),
            "{file}: no secret in the file"
        );
    }
    for service in ["postgres", "mariadb", "redis", "cdc", "cdc-mariadb"] {
        assert!(
            compose.contains(&format!("\n  {service}:\n")),
            "no service {service}"
        );
    }
}

#[test]
fn the_sidecar_example_probes_the_admin_endpoints_and_its_config_loads() {
    let k8s = std::fs::read_to_string(docker("k8s-sidecar.yaml")).unwrap();
    assert!(k8s.contains("path: /healthz") && k8s.contains("path: /readyz"));
    assert!(
        k8s.contains("mountPath: /var/lib/cdc"),
        "the log on a volume"
    );
    // The config map's cdc.toml, with the token file it mounts made up here.
    let start = k8s.find("cdc.toml: |\n").unwrap() + "cdc.toml: |\n".len();
    let end = k8s[start..].find("---").unwrap() + start;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "t\n").unwrap();
    let text: String = k8s[start..end]
        .lines()
        .map(|l| l.strip_prefix("    ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("/etc/cdc-admin/token", &token.display().to_string());
    let path = dir.path().join("cdc.toml");
    std::fs::write(&path, text).unwrap();
    let c = Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.admin.token().unwrap().expose(), "t");
}
