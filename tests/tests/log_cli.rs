//! `cdc log …` end to end: runs the real binary (the harness package's `cdc-e2e` copy of
//! `cdc`) as a process against a temporary log directory. No database needed.
//!
//! `cargo test -p cdc-harness --test log_cli`

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_cdc-e2e");

fn cdc(dir: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.arg("log")
        .args(args)
        .arg("--data-dir")
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn cdc");
    {
        let mut i = child.stdin.take().expect("stdin");
        if let Some(s) = stdin {
            i.write_all(s.as_bytes()).expect("write stdin");
        }
    }
    child.wait_with_output().expect("wait cdc")
}

fn ok(dir: &Path, args: &[&str], stdin: Option<&str>) -> String {
    let o = cdc(dir, args, stdin);
    assert!(
        o.status.success(),
        "cdc log {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&o.stderr),
        String::from_utf8_lossy(&o.stdout)
    );
    String::from_utf8(o.stdout).expect("utf-8 stdout")
}

fn fails(dir: &Path, args: &[&str]) -> String {
    let o = cdc(dir, args, None);
    assert!(!o.status.success(), "cdc log {args:?} should fail");
    String::from_utf8_lossy(&o.stderr).to_string()
}

/// Writes a config to `cfg` whose log is in `log_dir`, with `log_settings` (lines) in `[log]`.
fn write_log_config(cfg: &Path, log_dir: &Path, log_settings: &str) {
    std::fs::write(
        cfg,
        format!(
            "name = \"t\"\n[source]\ntype = \"postgres\"\nurl = \"postgres://u@127.0.0.1/d\"\n[log]\ndir = {:?}\n{log_settings}",
            log_dir.display().to_string()
        ),
    )
    .unwrap();
}

fn lines(out: &str) -> Vec<Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect()
}

#[test]
fn log_cli_end_to_end() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");

    // produce: plain values keyed by a field, an envelope with headers, binary via base64.
    let input = [
        r#"{"id": 1, "name": "a"}"#,
        r#"{"id": 2, "name": "b"}"#,
        r#"{"id": 3, "name": "c"}"#,
        r#"{"key": "k-utf8", "value": "plain text", "headers": {"h": "v"}, "timestamp": 1000}"#,
        r#"{"key": {"base64": "/wA="}, "value": {"base64": "/wD+"}, "timestamp": 2000}"#,
    ]
    .join("\n");
    let out = ok(
        &dir,
        &[
            "produce",
            "orders",
            "--partitions",
            "2",
            "--key-field",
            "id",
        ],
        Some(&input),
    );
    assert!(out.contains("appended 5 records"), "{out}");

    // topics
    assert_eq!(ok(&dir, &["topics"], None).trim(), "orders\t2");

    // tail from the beginning, all partitions: every record once, decoded.
    let all = lines(&ok(&dir, &["tail", "orders", "--from-beginning"], None));
    assert_eq!(all.len(), 5);
    let find = |pred: &dyn Fn(&Value) -> bool| all.iter().find(|v| pred(v)).cloned().unwrap();
    let json_rec = find(&|v| v["value"]["id"] == 2);
    assert_eq!(json_rec["key"], 2);
    assert_eq!(json_rec["value"]["name"], "b");
    let text = find(&|v| v["key"] == "k-utf8");
    assert_eq!(text["value"], "plain text");
    assert_eq!(text["headers"]["h"], "v");
    assert_eq!(text["timestamp"], 1000);
    let bin = find(&|v| v["timestamp"] == 2000);
    assert_eq!(bin["key"]["base64"], "/wA=");
    assert_eq!(bin["value"]["base64"], "/wD+");
    for v in &all {
        for f in [
            "partition",
            "offset",
            "timestamp",
            "key",
            "value",
            "headers",
        ] {
            assert!(v.get(f).is_some(), "{v} lacks {f}");
        }
    }

    // partition filter + offset + max
    let p0: Vec<Value> = all
        .iter()
        .filter(|v| v["partition"] == 0)
        .cloned()
        .collect();
    let p1: Vec<Value> = all
        .iter()
        .filter(|v| v["partition"] == 1)
        .cloned()
        .collect();
    assert_eq!(p0.len() + p1.len(), 5);
    let big = if p0.len() >= 2 { 0 } else { 1 };
    let only = lines(&ok(
        &dir,
        &["tail", "orders", "--partition", &big.to_string()],
        None,
    ));
    assert!(only.iter().all(|v| v["partition"] == big));
    let from1 = lines(&ok(
        &dir,
        &[
            "tail",
            "orders",
            "--partition",
            &big.to_string(),
            "--offset",
            "1",
        ],
        None,
    ));
    assert_eq!(from1.len(), only.len() - 1);
    assert_eq!(from1[0]["offset"], 1);
    let one = lines(&ok(&dir, &["tail", "orders", "--max", "1"], None));
    assert_eq!(one.len(), 1);

    // since: RFC 3339, epoch millis, relative; the first offset with timestamp >= TIME.
    let timed = "{\"key\":\"a\",\"value\":1,\"timestamp\":1000}\n{\"key\":\"b\",\"value\":2,\"timestamp\":2000}\n{\"key\":\"c\",\"value\":3,\"timestamp\":3000}\n";
    ok(&dir, &["produce", "timed"], Some(timed));
    let since = lines(&ok(&dir, &["tail", "timed", "--since", "1500"], None));
    assert_eq!(
        since.iter().map(|v| v["value"].clone()).collect::<Vec<_>>(),
        [2, 3]
    );
    let rfc = lines(&ok(
        &dir,
        &["tail", "timed", "--since", "1970-01-01T00:00:02.500Z"],
        None,
    ));
    assert_eq!(rfc.len(), 1);
    assert_eq!(rfc[0]["value"], 3);
    assert!(ok(&dir, &["tail", "timed", "--since", "1h"], None).is_empty());
    // (Reading continues from the first match, so older records after it print too.)
    assert_eq!(
        lines(&ok(&dir, &["tail", "orders", "--since", "1d"], None)).len(),
        5
    );

    // describe
    let d = ok(&dir, &["describe", "orders"], None);
    assert!(
        d.contains("PARTITION") && d.contains("HIGH-WATERMARK"),
        "{d}"
    );
    assert!(d.contains("cleanup.policy=delete"), "{d}");

    // reset-group, each variant; groups shows them.
    let r = ok(
        &dir,
        &["reset-group", "search", "orders", "--to-earliest"],
        None,
    );
    assert!(r.contains("- -> 0"), "{r}");
    let r = ok(
        &dir,
        &["reset-group", "search", "orders", "--to-latest"],
        None,
    );
    assert!(r.contains("0 -> "), "{r}");
    let r = ok(
        &dir,
        &[
            "reset-group",
            "search",
            "orders",
            "--to-offset",
            "1",
            "--partition",
            &big.to_string(),
        ],
        None,
    );
    assert!(r.lines().count() == 1 && r.contains(" -> 1"), "{r}");
    let r = ok(
        &dir,
        &["reset-group", "search", "orders", "--to-time", "1500"],
        None,
    );
    assert_eq!(r.lines().count(), 2, "{r}");
    let g = ok(&dir, &["groups"], None);
    assert!(g.lines().next().unwrap().contains("LAG"));
    assert_eq!(
        g.lines()
            .filter(|l| l.starts_with("search\torders"))
            .count(),
        2,
        "{g}"
    );
    let d = ok(&dir, &["describe", "orders"], None);
    assert!(d.contains("search"), "{d}");

    // error paths
    let e = fails(&dir, &["tail", "nope"]);
    assert!(e.contains("nope") && e.contains("does not exist"), "{e}");
    let e = fails(&dir, &["describe", "nope"]);
    assert!(e.contains("does not exist"), "{e}");
    let e = fails(
        &dir,
        &["tail", "orders", "--partition", "0", "--offset", "999"],
    );
    assert!(e.contains("OFFSET_OUT_OF_RANGE"), "{e}");
    let e = fails(&dir, &["reset-group", "g", "orders"]);
    assert!(!e.is_empty());
    let e = fails(&tmp.path().join("missing"), &["topics"]);
    assert!(e.contains("not a cdc log directory"), "{e}");
}

#[test]
fn offset_below_log_start_is_out_of_range() {
    // Topics created by `produce --config` take the `[log]` settings; produce applies
    // retention once at the end. Old timestamps + 1 KiB segments: the closed segments go.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let cfg = tmp.path().join("cdc.toml");
    write_log_config(&cfg, &dir, "segment_bytes = 1024\nretention_ms = 60000\n");
    let input: String = (0..50)
        .map(|i| {
            format!(
                "{{\"key\":\"k{i}\",\"value\":\"{}\",\"timestamp\":1}}\n",
                "x".repeat(400)
            )
        })
        .collect();
    let o = with_config(&cfg, &["produce", "t", "--flush-every", "5"], &input);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let d = ok(&dir, &["describe", "t"], None);
    let row = d.lines().find(|l| l.starts_with("0\t")).unwrap();
    let log_start: u64 = row.split('\t').nth(1).unwrap().parse().unwrap();
    assert!(log_start > 0, "retention did not run: {d}");
    let e = fails(&dir, &["tail", "t", "--offset", "0"]);
    assert!(e.contains("OFFSET_OUT_OF_RANGE"), "{e}");
    // (segment.ms also rolled the active segment, its first record being older than 7
    // days, so retention may have dropped everything.)
    let rest = lines(&ok(&dir, &["tail", "t", "--from-beginning"], None));
    if let Some(first) = rest.first() {
        assert_eq!(first["offset"], log_start);
    }
}

#[test]
fn follow_sees_new_records_and_writer_lock_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    ok(
        &dir,
        &["produce", "live", "--partitions", "1"],
        Some("{\"n\": 0}\n"),
    );

    let mut tail = Command::new(BIN)
        .args(["log", "tail", "live", "--follow", "--data-dir"])
        .arg(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tail");
    let mut out = BufReader::new(tail.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&line).unwrap()["value"]["n"],
        0
    );

    // A second writer while produce holds the lock: simulate with a long-running produce
    // (stdin kept open) and a reset-group that needs the lock.
    let mut holder = Command::new(BIN)
        .args(["log", "produce", "live", "--flush-every", "1", "--data-dir"])
        .arg(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn produce");
    let mut stdin = holder.stdin.take().unwrap();
    writeln!(stdin, "{{\"n\": 1}}").unwrap();
    stdin.flush().unwrap();

    // The follower sees the record flushed by the other process.
    let t0 = Instant::now();
    line.clear();
    out.read_line(&mut line).unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&line).unwrap()["value"]["n"],
        1,
        "{line}"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(4),
        "follow took {:?}",
        t0.elapsed()
    );

    // The lock is held by `holder` now: writing commands fail clearly, reading ones work.
    let e = fails(&dir, &["reset-group", "g", "live", "--to-earliest"]);
    assert!(
        e.contains("in use by another process") && e.contains(&format!("pid {}", holder.id())),
        "{e}"
    );
    assert!(ok(&dir, &["topics"], None).contains("live"));
    assert_eq!(lines(&ok(&dir, &["tail", "live"], None)).len(), 2);

    drop(stdin);
    let o = holder.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    tail.kill().unwrap();
    tail.wait().unwrap();
}

/// `cdc log … --config FILE` with the arguments `args`, stdin `input`.
fn with_config(cfg: &Path, args: &[&str], input: &str) -> Output {
    let mut child = Command::new(BIN)
        .arg("log")
        .args(args)
        .arg("--config")
        .arg(cfg)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn produce_with_config_creates_topics_with_the_log_settings() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let cfg = tmp.path().join("cdc.toml");
    write_log_config(
        &cfg,
        &dir,
        "partitions = 3\nsegment_bytes = 4096\ncleanup_policy = \"compact\"\ncompression = \"zstd\"\nretention_ms = -1\ndelete_retention_ms = 5000\n",
    );
    let input: String = (0..30).map(|i| format!("{{\"id\":{i}}}\n")).collect();
    // Without --partitions: `[log] partitions`, and the other topic settings.
    let o = with_config(&cfg, &["produce", "a", "--key-field", "id"], &input);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // --partitions wins over the file.
    let o = with_config(
        &cfg,
        &["produce", "b", "--partitions", "2", "--key-field", "id"],
        &input,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(ok(&dir, &["topics"], None).trim(), "a\t3\nb\t2");
    let d = ok(&dir, &["describe", "a"], None);
    for line in [
        "partitions=3",
        "segment.bytes=4096",
        "cleanup.policy=compact",
        "compression.type=zstd",
        "retention.ms=-1",
        "delete.retention.ms=5000",
    ] {
        assert!(d.lines().any(|l| l.trim() == line), "{line} missing:\n{d}");
    }
    // Keyed records spread over the 3 partitions.
    let recs = lines(&ok(&dir, &["tail", "a", "--from-beginning"], None));
    assert_eq!(recs.len(), 30);
    let mut parts: Vec<u64> = recs
        .iter()
        .map(|r| r["partition"].as_u64().unwrap())
        .collect();
    parts.sort_unstable();
    parts.dedup();
    assert_eq!(parts, [0, 1, 2]);
}

#[test]
fn removed_flush_settings_are_a_config_error() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("cdc.toml");
    for key in ["flush_interval_ms", "flush_bytes"] {
        write_log_config(&cfg, &tmp.path().join("log"), &format!("{key} = 1000\n"));
        let o = with_config(&cfg, &["topics"], "");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(
            err.contains(&format!("`log.{key}`"))
                && err.contains("source.group_commit_ms")
                && err.contains("source.group_commit_bytes"),
            "{err}"
        );
    }
}
