//! The status document as a few lines and tables for people (`cdc status` without
//! `--json`). Every figure shown is in the JSON too; this only arranges it.

use std::fmt::Write as _;

use serde_json::Value;

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_string(),
        v => v.to_string(),
    }
}

/// `1.5 MiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn duration(secs: u64) -> String {
    if secs >= 86_400 {
        format!("{}d{:02}h", secs / 86_400, secs % 86_400 / 3600)
    } else if secs >= 3600 {
        format!("{}h{:02}m", secs / 3600, secs % 3600 / 60)
    } else if secs >= 60 {
        format!("{}m{:02}s", secs / 60, secs % 60)
    } else {
        format!("{secs}s")
    }
}

/// Columns padded to their widest cell.
fn table(out: &mut String, rows: &[Vec<String>]) {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|x| x.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for r in rows {
        let mut line = String::from("  ");
        for (i, cell) in r.iter().enumerate() {
            if i + 1 == r.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<w$}  ", w = widths[i]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

pub fn render(doc: &Value) -> String {
    let mut out = String::new();
    let name = s(&doc["name"]);
    let state = s(&doc["state"]);
    if doc["running"] == Value::Bool(true) {
        let _ = writeln!(
            out,
            "connector {name}: {state} (up {}, {} restarts)",
            duration(doc["uptime_seconds"].as_u64().unwrap_or(0)),
            doc["restarts"].as_u64().unwrap_or(0)
        );
        if let Some(r) = doc.get("reason") {
            let _ = writeln!(out, "  {}", s(r));
        }
    } else {
        let _ = writeln!(
            out,
            "connector {name}: not running (no answer on the admin address; from the log and the database)"
        );
    }
    let src = &doc["source"];
    let _ = writeln!(out, "\nsource ({})", s(&src["type"]));
    let _ = writeln!(out, "  position      {}", s(&src["position_text"]));
    if let Some(at) = src.get("durable_at") {
        let _ = writeln!(out, "  durable at    {}", s(at));
    }
    if let Some(at) = src.get("last_durable_commit_at") {
        let _ = writeln!(out, "  last commit   {} (committed in the database)", s(at));
    }
    if let Some(l) = src.get("lag_seconds").and_then(Value::as_f64) {
        let _ = writeln!(out, "  lag           {l:.3} s");
    }
    if let Some(l) = src.get("lag_bytes").and_then(Value::as_u64) {
        let _ = writeln!(out, "  lag (bytes)   {}", bytes(l));
    }
    if let Some(slot) = src.get("slot") {
        if slot["exists"] == Value::Bool(false) {
            let _ = writeln!(out, "  slot          {}: does not exist", s(&slot["name"]));
        } else {
            let _ = writeln!(
                out,
                "  slot          {}: {}, confirmed_flush {}, wal_status {}",
                s(&slot["name"]),
                if slot["active"] == Value::Bool(true) {
                    "active"
                } else {
                    "inactive"
                },
                s(&slot["confirmed_flush_lsn"]),
                s(&slot["wal_status"])
            );
            let retained = slot["retained_wal_bytes"].as_u64().unwrap_or(0);
            let limit = slot
                .get("max_retained_wal_bytes")
                .and_then(Value::as_u64)
                .map(|m| format!(" (alarm above {})", bytes(m)))
                .unwrap_or_default();
            let _ = writeln!(out, "  retained WAL  {}{limit}", bytes(retained));
        }
    }
    if let Some(m) = src.get("margin") {
        let _ = writeln!(
            out,
            "  binlog margin {} files / {} before the position; oldest {} expires in {}{}",
            s(&m["files_before"]),
            bytes(m["bytes_before"].as_u64().unwrap_or(0)),
            s(&src["oldest_binlog"]),
            match &m["expires_in_seconds"] {
                Value::Number(n) => duration(n.as_u64().unwrap_or(0)),
                v => s(v),
            },
            m.get("purged")
                .filter(|p| !p.is_null())
                .map(|p| format!("; PURGED: {}", s(p)))
                .unwrap_or_default()
        );
    }
    if let Some(snap) = src.get("snapshot") {
        let _ = writeln!(
            out,
            "  snapshot      {} rows of ~{}, tables {}/{}{}",
            s(&snap["rows"]),
            s(&snap["rows_estimated"]),
            s(&snap["tables_done"]),
            s(&snap["tables"]),
            if snap["running"] == Value::Bool(true) {
                " (running)"
            } else {
                " (done)"
            }
        );
    }
    if let Some(e) = src.get("error") {
        let _ = writeln!(out, "  database      cannot read its view: {}", s(e));
    }
    let log = &doc["log"];
    let place = log
        .get("dir")
        .or_else(|| log.get("brokers"))
        .map(s)
        .unwrap_or_default();
    let size = log
        .get("bytes")
        .and_then(Value::as_u64)
        .map(|b| {
            let budget = log
                .get("disk_budget_bytes")
                .and_then(Value::as_u64)
                .map(|m| format!(" of a {} budget", bytes(m)))
                .unwrap_or_default();
            format!(", {}{budget}", bytes(b))
        })
        .unwrap_or_default();
    let _ = writeln!(out, "\nlog ({} {place}{size})", s(&log["type"]));
    if let Some(e) = log.get("error") {
        let _ = writeln!(out, "  error: {}", s(e));
    }
    if let Some(topics) = log.get("topics").and_then(Value::as_array) {
        let mut rows = vec![vec![
            "TOPIC".to_string(),
            "PARTITION".into(),
            "START".into(),
            "END".into(),
            "BYTES".into(),
        ]];
        for t in topics {
            for p in t["partitions"].as_array().into_iter().flatten() {
                rows.push(vec![
                    s(&t["name"]),
                    s(&p["partition"]),
                    s(&p["start"]),
                    s(&p["end"]),
                    p.get("bytes")
                        .and_then(Value::as_u64)
                        .map(bytes)
                        .unwrap_or_else(|| "-".into()),
                ]);
            }
        }
        table(&mut out, &rows);
    }
    if let Some(sinks) = doc.get("sinks").and_then(Value::as_object) {
        let _ = writeln!(out, "\nsinks");
        let mut rows = vec![vec![
            "NAME".to_string(),
            "STATE".into(),
            "LAG".into(),
            "APPLIED".into(),
            "DEAD-LETTERS".into(),
            "ERROR".into(),
        ]];
        for (name, v) in sinks {
            let lag = v
                .get("lag_records")
                .or_else(|| v.get("group_lag_records"))
                .map(s)
                .unwrap_or_else(|| "-".into());
            rows.push(vec![
                name.clone(),
                s(&v["state"]),
                lag,
                v.get("applied").map(s).unwrap_or_else(|| "-".into()),
                v.get("dead_letters").map(s).unwrap_or_else(|| "-".into()),
                v.get("error").map(s).unwrap_or_else(|| "-".into()),
            ]);
        }
        table(&mut out, &rows);
    }
    if let Some(errors) = doc.get("errors").and_then(Value::as_object) {
        if !errors.is_empty() {
            let _ = writeln!(out, "\nlast errors");
            let mut rows = vec![vec![
                "KIND".to_string(),
                "COUNT".into(),
                "AT".into(),
                "MESSAGE".into(),
            ]];
            for (k, e) in errors {
                rows.push(vec![
                    k.clone(),
                    s(&e["count"]),
                    s(&e["at"]),
                    s(&e["message"]),
                ]);
            }
            table(&mut out, &rows);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_a_running_postgres_connector() {
        let doc = serde_json::json!({
            "name": "inv", "running": true, "state": "running", "uptime_seconds": 3700,
            "restarts": 1,
            "source": {"type": "postgres", "position_text": "lsn 0/16 (commit 0/15)",
                "lag_seconds": 0.004, "lag_bytes": 0,
                "slot": {"name": "cdc_inv", "exists": true, "active": true,
                    "confirmed_flush_lsn": "0/16", "wal_status": "reserved",
                    "retained_wal_bytes": 2048}},
            "log": {"type": "embedded", "dir": "/data", "bytes": 1536,
                "topics": [{"name": "inv.public.t", "partitions": [{"partition": 0, "start": 0, "end": 7, "bytes": 1536}]}]},
            "sinks": {"cache": {"state": "running", "lag_records": 0, "applied": 7, "dead_letters": 0}},
            "errors": {"source.transient": {"count": 1, "at": "2026-12-07T13:05:00.000Z", "message": "connection reset"}}
        });
        let t = render(&doc);
        assert!(
            t.contains("connector inv: running (up 1h01m, 1 restarts)"),
            "{t}"
        );
        assert!(
            t.contains("slot          cdc_inv: active, confirmed_flush 0/16, wal_status reserved"),
            "{t}"
        );
        assert!(t.contains("retained WAL  2.0 KiB"), "{t}");
        assert!(
            t.contains("inv.public.t  0          0      7    1.5 KiB"),
            "{t}"
        );
        assert!(t.contains("cache  running  0    7"), "{t}");
        assert!(t.contains("source.transient  1"), "{t}");
    }
}
