//! Operating `cdc run` as a sidecar, through the binary: `/status` and `cdc status` (while
//! running, and from the files and the database when stopped), the pipeline's figures on
//! `/metrics`, the admin token, the shipped alert rules and dashboard against what
//! `/metrics` really exports (and `promtool`), the status page in headless Chromium, JSON
//! log lines when stderr is not a terminal, and the plain "waiting for the database" line.

mod pg_source_util;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use cdc_harness::{http, passwords, PgServer, RedisServer};
use pg_source_util::*;
use serde_json::Value as Json;

const TOKEN: &str = "s3cret-admin-token";
const BIN: &str = env!("CARGO_BIN_EXE_cdc-e2e");

fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

fn get(addr: &str, path: &str, token: Option<&str>) -> (u16, Json) {
    let h = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    http(addr, "GET", path, None, &h)
}

fn cdc_status(config: &Path, json: bool) -> (Option<i32>, String) {
    let mut cmd = Command::new(BIN);
    cmd.arg("status").arg("--config").arg(config);
    if json {
        cmd.arg("--json");
    }
    let out = cmd.env("CDC_LOG_LEVEL", "warn").output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// The `cdc_*` metric names a PromQL expression uses (histogram series map to the
/// histogram's name).
fn metric_names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let b = expr.as_bytes();
    let mut i = 0;
    while let Some(at) = expr[i..].find("cdc_") {
        let start = i + at;
        let boundary =
            start == 0 || !(b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_');
        let end = expr[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(expr.len(), |e| start + e);
        if boundary {
            out.push(expr[start..end].to_string());
        }
        i = end;
    }
    out
}

fn exported(metrics: &str, name: &str) -> bool {
    metrics.lines().any(|l| {
        l.starts_with(&format!("# TYPE {name} "))
            || l.starts_with(&format!("{name}{{"))
            || l.starts_with(&format!("{name} "))
    })
}

async fn until<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn status_metrics_alerts_and_the_page_of_a_running_connector() {
    let pg = PgServer::shared();
    let redis = RedisServer::shared();
    let db = setup_acct(pg, 20).await;
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("admin.token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let extra = format!(
        "token_file = \"{}\"\n\n[[sink]]\nname = \"cache\"\ntype = \"redis\"\nurl = \"redis://127.0.0.1:{}/0\"\nprefix = \"ops\"\n",
        token_file.display(),
        redis.port()
    );
    let mut c = connector(pg, &db, dir.path(), &["public.acct"], &extra);
    // `extra` lands after `[admin] listen`: the token is in [admin], the sink after it.
    let addr = c.fixed_admin_port();
    c.start();
    c.converge(pg, &db, "acct", ACCT_TOPIC, Duration::from_secs(30))
        .await;
    for i in 1..=5 {
        pg.execute(&db, &format!("UPDATE acct SET v = v + 1 WHERE id = {i}"))
            .await
            .unwrap();
    }
    c.converge(pg, &db, "acct", ACCT_TOPIC, Duration::from_secs(30))
        .await;

    // The token: the probes and the page are open, the rest needs it.
    assert_eq!(get(&addr, "/healthz", None).0, 200);
    assert_eq!(get(&addr, "/readyz", None).0, 200);
    assert_eq!(get(&addr, "/status", None).0, 401);
    assert_eq!(get(&addr, "/metrics", None).0, 401);
    assert_eq!(get(&addr, "/subjects", None).0, 401, "the registry API too");
    assert_eq!(get(&addr, "/status", Some("wrong")).0, 401);

    // /status: the source, the database's view, the log, the sink.
    let doc = until(
        "the slot is active and the sink caught up in /status",
        Duration::from_secs(30),
        || {
            let (code, doc) = get(&addr, "/status", Some(TOKEN));
            assert_eq!(code, 200, "{doc}");
            let ok = doc["source"]["slot"]["active"] == Json::Bool(true)
                && doc["sinks"]["cache"]["lag_records"] == 0
                && doc["sinks"]["cache"]["applied"].as_u64().unwrap_or(0) >= 25;
            ok.then_some(doc)
        },
    )
    .await;
    assert_eq!(doc["name"], "t");
    assert_eq!(doc["running"], true);
    assert_eq!(doc["state"], "running");
    let src = &doc["source"];
    assert_eq!(src["type"], "postgres");
    assert_eq!(src["slot"]["name"], db.as_str());
    assert_eq!(src["slot"]["exists"], true);
    assert!(src["slot"]["confirmed_flush_lsn"].is_string(), "{doc}");
    assert!(src["slot"]["retained_wal_bytes"].is_u64(), "{doc}");
    assert_eq!(src["slot"]["wal_status"], "reserved");
    assert!(
        src["position"]["lsn"].is_string() || src["position"].is_object(),
        "{doc}"
    );
    assert!(
        src["position_text"].as_str().unwrap().starts_with("lsn "),
        "{doc}"
    );
    assert!(
        src["lag_seconds"].is_f64() || src["lag_seconds"].is_u64(),
        "{doc}"
    );
    assert!(src["lag_bytes"].is_u64(), "{doc}");
    assert_eq!(src["snapshot"]["rows"], 20, "{doc}");
    assert_eq!(src["snapshot"]["running"], false, "{doc}");
    let topic = doc["log"]["topics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == ACCT_TOPIC)
        .unwrap_or_else(|| panic!("{doc}"));
    let ends: u64 = topic["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["end"].as_u64().unwrap())
        .sum();
    assert_eq!(ends, 25, "20 snapshot rows and 5 updates\n{doc}");
    assert_eq!(doc["sinks"]["cache"]["state"], "running");
    let text = doc.to_string();
    assert!(
        !text.contains(TOKEN) && !text.contains(passwords::PG_CDC),
        "no secret in /status"
    );

    // /metrics: the pipeline's figures, named as Prometheus wants them.
    let (code, m) = get(&addr, "/metrics", Some(TOKEN));
    assert_eq!(code, 200);
    let m = m.as_str().unwrap().to_string();
    for needle in [
        "cdc_source_changes_total{table=\"public.acct\"} 25",
        "cdc_records_total{topic=\"t.public.acct\"} 25",
        "cdc_record_bytes_total{topic=\"t.public.acct\"}",
        "# TYPE cdc_commit_to_durable_seconds histogram",
        "cdc_commit_to_durable_seconds_bucket{le=\"+Inf\"}",
        "cdc_replication_lag_seconds ",
        "cdc_transactions_total",
        "cdc_restarts_total 0",
        "cdc_pg_slot_active 1",
        "cdc_sink_lag_records{sink=\"cache\"} 0",
    ] {
        assert!(m.contains(needle), "{needle} in\n{m}");
    }
    let streamed = m
        .lines()
        .find_map(|l| l.strip_prefix("cdc_commit_to_durable_seconds_count "))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap();
    assert!(
        streamed >= 5,
        "each streamed transaction observed once: {streamed}"
    );
    // Prometheus' own linter on what we export.
    if let Some(lint) = promtool(&["check", "metrics"], Some(&m)) {
        assert!(lint.0, "promtool check metrics:\n{}", lint.1);
    }

    // The alert rules and the dashboard use only metrics the binary exports.
    let rules = repo_root().join("docker/prometheus-alerts.yaml");
    let rules_text = std::fs::read_to_string(&rules).unwrap();
    let dash = std::fs::read_to_string(repo_root().join("docker/grafana-dashboard.json")).unwrap();
    let dash: Json = serde_json::from_str(&dash).unwrap();
    let mut exprs: Vec<String> = rules_text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("expr:").map(str::to_string))
        .collect();
    assert!(exprs.len() >= 10, "{rules_text}");
    for p in dash["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            exprs.push(t["expr"].as_str().unwrap().to_string());
        }
    }
    // MySQL's gauges are registered by a MySQL source only: checked by name in its suite.
    for e in &exprs {
        for name in metric_names(e) {
            let base = name.strip_suffix("_bucket").unwrap_or(&name).to_string();
            if base.starts_with("cdc_mysql_") {
                continue;
            }
            assert!(
                exported(&m, &base),
                "{base} (in {e}) is not on /metrics:\n{m}"
            );
        }
    }
    if let Some((ok, out)) = promtool(&["check", "rules", rules.to_str().unwrap()], None) {
        assert!(ok, "promtool check rules:\n{out}");
    }

    // cdc status while running: it asks the admin address (with the token).
    let (code, out) = cdc_status(&c.config, false);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("connector t: running"), "{out}");
    assert!(
        out.contains(&format!("slot          {db}: active")),
        "{out}"
    );
    assert!(out.contains(ACCT_TOPIC), "{out}");
    assert!(out.contains("cache"), "{out}");

    // The page, as a browser shows it (the token from the URL's fragment).
    if let Some(dom) = chromium_dom(&format!("http://{addr}/#token={TOKEN}")) {
        for needle in ["running", ACCT_TOPIC, db.as_str(), "cache", "reserved"] {
            assert!(dom.contains(needle), "the page shows {needle}:\n{dom}");
        }
        let without = chromium_dom(&format!("http://{addr}/")).unwrap();
        assert!(without.contains("needs its token"), "{without}");
        // The script people use for a picture of it.
        let png = dir.path().join("status.png");
        let shot = Command::new(repo_root().join("scripts/status-screenshot.sh"))
            .arg(&addr)
            .arg(&png)
            .env("CDC_ADMIN_TOKEN", TOKEN)
            .output()
            .unwrap();
        assert!(
            shot.status.success(),
            "{}",
            String::from_utf8_lossy(&shot.stderr)
        );
        let bytes = std::fs::read(&png).unwrap();
        assert!(
            bytes.starts_with(b"\x89PNG") && bytes.len() > 10_000,
            "a picture"
        );
        if let Some(keep) = std::env::var_os("CDC_TEST_KEEP_SCREENSHOT") {
            std::fs::copy(&png, keep).unwrap();
        }
    }

    // JSON log lines: stderr is a file.
    let log = std::fs::read_to_string(c.dir.join("connector.log")).unwrap();
    let line = log
        .lines()
        .find(|l| l.contains("admin server listening"))
        .unwrap_or_else(|| panic!("{log}"));
    let v: Json = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(v["level"], "INFO");
    assert!(!log.contains('\x1b'), "no terminal colours in a file");
    assert!(!log.contains(TOKEN) && !log.contains(passwords::PG_CDC));

    // Stopped: the same document from the files and the database.
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    let (code, out) = cdc_status(&c.config, true);
    assert_eq!(code, Some(0), "{out}");
    let off: Json = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(off["running"], false);
    assert_eq!(off["source"]["slot"]["exists"], true);
    assert_eq!(off["source"]["slot"]["active"], false, "{off}");
    assert!(
        lsn(&off["source"]["position"]["lsn"]) >= lsn(&doc["source"]["position"]["lsn"]),
        "the stored position is at least what /status said: {off}"
    );
    assert_eq!(off["sinks"]["cache"]["group_lag_records"], 0, "{off}");
    assert_eq!(off["sinks"]["cache"]["state"], "not running");
    drop_slot(pg, &db).await;
}

/// `"0/1949D60"` as a number.
fn lsn(v: &Json) -> u64 {
    let s = v.as_str().unwrap_or_else(|| panic!("an LSN: {v}"));
    let (hi, lo) = s.split_once('/').unwrap();
    (u64::from_str_radix(hi, 16).unwrap() << 32) | u64::from_str_radix(lo, 16).unwrap()
}

/// `promtool ARGS` (stdin `input`): (success, output); None when promtool is missing
/// unless CDC_TEST_REQUIRE_OPS_TOOLS is set (CI; `scripts/install-deps.sh` installs it).
fn promtool(args: &[&str], input: Option<&str>) -> Option<(bool, String)> {
    use std::io::Write;
    let mut child = match Command::new("promtool")
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            assert!(
                std::env::var_os("CDC_TEST_REQUIRE_OPS_TOOLS").is_none(),
                "promtool: {e}"
            );
            eprintln!("SKIP promtool: {e} (scripts/install-deps.sh installs it)");
            return None;
        }
    };
    if let Some(i) = input {
        child.stdin.take().unwrap().write_all(i.as_bytes()).unwrap();
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    Some((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    ))
}

/// The page's DOM after its scripts ran, from headless Chromium; None when Chromium is
/// missing outside CI.
fn chromium_dom(url: &str) -> Option<String> {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--virtual-time-budget=5000",
            "--window-size=390,844",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(url)
        .output();
    match out {
        Ok(o) => {
            assert!(
                o.status.success(),
                "chromium: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            Some(String::from_utf8_lossy(&o.stdout).into_owned())
        }
        Err(e) => {
            assert!(
                std::env::var_os("CDC_TEST_REQUIRE_OPS_TOOLS").is_none(),
                "chromium: {e}"
            );
            eprintln!("SKIP chromium: {e} (scripts/install-deps.sh installs it)");
            None
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_connector_before_its_database_says_it_is_waiting_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let text = format!(
        "name = \"t\"\n[source]\ntype = \"postgres\"\nurl = \"postgres://cdc:pw@127.0.0.1:{port}/app?sslmode=disable&connect_timeout=2\"\ntables = [\"public.acct\"]\n[log]\ndir = \"{}\"\n[admin]\nlisten = \"127.0.0.1:0\"\n",
        dir.path().join("log").display()
    );
    let mut c = Connector::with_config(dir.path(), &text);
    c.start();
    until("the waiting line", Duration::from_secs(30), || {
        c.output()
            .contains("waiting for the source database")
            .then_some(())
    })
    .await;
    let out = c.output();
    assert!(out.contains("Stop with Ctrl-C"), "{out}");
    assert_eq!(
        out.matches("waiting for the source database").count(),
        1,
        "said once, not at every retry\n{out}"
    );
    assert_eq!(c.stop(), Some(0), "{}", c.output());
}

/// A connector stuck connecting (a listener that accepts and never answers, a long
/// connect timeout): SIGTERM cannot complete, so `shutdown_timeout_ms` ends the process
/// (exit 1); a second signal ends it at once (exit 130).
#[tokio::test(flavor = "multi_thread")]
async fn the_shutdown_deadline_and_a_second_signal_end_a_stuck_stop() {
    let hole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = hole.local_addr().unwrap().port();
    // Accepted connections are kept open and never answered.
    let _keep = std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in hole.incoming() {
            held.push(s);
        }
    });
    for (timeout_ms, second, want) in [(1500u64, false, 1), (60_000, true, 130)] {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "name = \"t\"\nshutdown_timeout_ms = {timeout_ms}\n[source]\ntype = \"postgres\"\nurl = \"postgres://cdc:pw@127.0.0.1:{port}/app?sslmode=disable&connect_timeout=120\"\ntables = [\"public.acct\"]\n[log]\ndir = \"{}\"\n[admin]\nlisten = \"127.0.0.1:0\"\n",
            dir.path().join("log").display()
        );
        let mut c = Connector::with_config(dir.path(), &text);
        c.start();
        until("the admin server", Duration::from_secs(30), || {
            c.output().contains("admin server listening").then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let pid = c.child.as_ref().unwrap().id() as i32;
        let started = Instant::now();
        unsafe { libc::kill(pid, libc::SIGTERM) };
        if second {
            tokio::time::sleep(Duration::from_millis(300)).await;
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let code = c
            .wait_exit(Duration::from_secs(30), "the stuck stop ends")
            .await;
        let out = c.output();
        assert_eq!(code, Some(want), "{out}");
        if second {
            assert!(out.contains("second signal"), "{out}");
            assert!(started.elapsed() < Duration::from_secs(10), "at once");
        } else {
            assert!(
                out.contains("did not stop within shutdown_timeout_ms"),
                "{out}"
            );
        }
    }
}
