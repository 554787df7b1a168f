//! `/status` and `cdc status` for a MariaDB source, through the binary: the binlog position,
//! the server's binlogs against it (the margin) and the lag in binlog bytes, while running
//! and from the log and the server when stopped; the MySQL gauges the shipped alert rules
//! use are exported.

mod my_source_util;

use std::process::Command;
use std::time::{Duration, Instant};

use cdc_harness::{MariaDbOptions, MariaDbServer};
use my_source_util::*;
use serde_json::Value as Json;

const T: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread")]
async fn status_shows_the_binlog_margin_running_and_stopped() {
    // A server of its own: it expires binlogs (a day), so the margin has an expiry.
    let my = MariaDbServer::start(MariaDbOptions::default().arg("--expire-logs-days=1")).unwrap();
    let db = setup_acct(&my, 5).await;
    let (_dir, mut c) = temp_connector(&my, &db, "");
    c.source_key("binlog_check_interval_ms = 300");
    let addr = c.fixed_admin_port();
    c.start();
    c.wait_streaming(T).await;
    for i in 1..=3 {
        my.execute(&format!("UPDATE {db}.acct SET v = v + 1 WHERE id = {i}"))
            .await
            .unwrap();
    }
    c.converge(&my, &db, T).await;

    let deadline = Instant::now() + T;
    let doc = loop {
        c.assert_running();
        let (code, doc) = cdc_harness::http(&addr, "GET", "/status", None, "");
        assert_eq!(code, 200, "{doc}");
        if doc["source"]["margin"]["retained"] == true {
            break doc;
        }
        assert!(Instant::now() < deadline, "{doc}\n{}", c.output());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let src = &doc["source"];
    assert_eq!(src["type"], "mysql");
    assert!(
        src["lag_bytes"].as_u64().unwrap() < 100_000,
        "caught up: {doc}"
    );
    assert!(src["position"]["file"].is_string(), "{doc}");
    assert!(src["position"]["pos"].is_u64(), "{doc}");
    assert_eq!(
        src["server_binlog"]["file"], src["position"]["file"],
        "{doc}"
    );
    assert!(src["oldest_binlog"].is_string(), "{doc}");
    assert!(src["binlog_files"].as_u64().unwrap() >= 1, "{doc}");
    assert_eq!(src["expire_seconds"], 86_400, "{doc}");
    assert!(
        src["margin"]["expires_in_seconds"].is_u64()
            || src["margin"]["expires_in_seconds"].is_string(),
        "{doc}"
    );
    assert!(src["margin"]["purged"].is_null(), "{doc}");

    // The MySQL series the alert rules and the dashboard use.
    let (_, m) = cdc_harness::http(&addr, "GET", "/metrics", None, "");
    let m = m.as_str().unwrap().to_string();
    let rules = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docker/prometheus-alerts.yaml"),
    )
    .unwrap();
    let dash = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docker/grafana-dashboard.json"),
    )
    .unwrap();
    let used: Vec<&str> = [rules.as_str(), dash.as_str()]
        .iter()
        .flat_map(|t| t.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')))
        .filter(|w| w.starts_with("cdc_mysql_"))
        .collect();
    assert!(used.len() >= 3, "{used:?}");
    for name in used {
        assert!(
            m.contains(&format!("# TYPE {name} ")),
            "{name} on /metrics:\n{m}"
        );
    }
    assert!(
        m.contains("cdc_source_changes_total{table=\"")
            && m.contains("cdc_commit_to_durable_seconds_count"),
        "{m}"
    );

    // Stopped: the margin from the log's position and the server.
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    let out = Command::new(env!("CARGO_BIN_EXE_cdc-e2e"))
        .args(["status", "--json", "--config"])
        .arg(&c.config)
        .env("CDC_LOG_LEVEL", "warn")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let off: Json = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(off["running"], false, "{off}");
    assert_eq!(off["source"]["margin"]["retained"], true, "{off}");
    assert_eq!(
        off["source"]["position"]["file"], src["position"]["file"],
        "{off}"
    );
    let text = Command::new(env!("CARGO_BIN_EXE_cdc-e2e"))
        .args(["status", "--config"])
        .arg(&c.config)
        .env("CDC_LOG_LEVEL", "warn")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("binlog margin"), "{text}");
    assert!(text.contains("not running"), "{text}");
}
