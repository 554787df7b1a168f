//! The embedded schema registry served by `cdc registry serve` (the harness package's
//! `cdc-e2e` copy of `cdc`), driven by clients nobody here wrote:
//!
//! - Confluent's Python client (`confluent-kafka[avro,schemaregistry]` 2.16 + fastavro):
//!   `SchemaRegistryClient` calls, an `AvroSerializer`/`AvroDeserializer` round trip, and
//!   the `AvroDeserializer` decoding records produced by *our* encoder (cdc_schemas, Avro
//!   in the Confluent wire format, ids from our registry);
//! - Confluent's Java `KafkaAvroDeserializer` / `CachedSchemaRegistryClient` 7.0.16
//!   decoding the same records (tests/registry-clients/DecodeWithRegistry.java).
//!
//! The clients come from tests/registry-clients/setup-python.sh and setup-java.sh (PyPI;
//! cached under $CDC_TEST_CACHE, default /var/cache/cdc-test). When a setup script fails
//! (no network, no java), that test prints why and passes without running the client.
//!
//! `cargo test -p cdc-harness --test registry`

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use cdc_schemas::encode::{
    ConnectorKind, Encoder, EncoderConfig, RecordFormat, SchemaIds, SourceInfo,
};
use cdc_schemas::{
    ChangeEvent, Column, ColumnType, Lsn, PgPosition, Row, SourcePosition, TableId, TableSchema,
    Value,
};
use serde_json::{json, Value as J};

const BIN: &str = env!("CARGO_BIN_EXE_cdc-e2e");

fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("registry-clients")
}

/// A `cdc registry serve` process; SIGTERM + wait on drop.
struct Server {
    child: Child,
    addr: String,
}

impl Server {
    fn start(data: &Path, extra: &[&str]) -> Server {
        let mut child = Command::new(BIN)
            .args(["registry", "serve", "--listen", "127.0.0.1:0", "--data"])
            .arg(data)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn cdc-e2e registry serve");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("registry did not print its address within 30 s");
        let addr = line
            .trim()
            .strip_prefix("listening on http://")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        Server { child, addr }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// SIGTERM, then the exit status.
    fn stop(mut self) -> std::process::ExitStatus {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let status = self.child.wait().expect("wait");
        std::mem::forget(self);
        status
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let _ = self.child.wait();
    }
}

/// A minimal HTTP/1.1 request (Connection: close); returns status and body.
fn http(addr: &str, method: &str, path: &str, body: Option<&J>) -> (u16, J) {
    http_with(addr, method, path, body, "")
}

/// [`http`] with extra header lines (each ending in `\r\n`).
fn http_with(addr: &str, method: &str, path: &str, body: Option<&J>, headers: &str) -> (u16, J) {
    cdc_harness::http(
        addr,
        method,
        path,
        body,
        &format!("Accept: application/vnd.schemaregistry.v1+json\r\n{headers}"),
    )
}

fn cache_dir() -> PathBuf {
    std::env::var_os("CDC_TEST_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/cdc-test"))
}

/// Runs a setup script; its last stdout line is the path it prepared. `None` (with the
/// reason on stderr) when it fails.
fn setup(script: &str) -> Option<PathBuf> {
    let out = Command::new("bash")
        .arg(clients_dir().join(script))
        .env("CDC_TEST_CACHE", cache_dir())
        .stderr(Stdio::piped())
        .output();
    match out {
        Ok(o) if o.status.success() => {
            let s = String::from_utf8_lossy(&o.stdout);
            s.lines().last().map(|l| PathBuf::from(l.trim()))
        }
        Ok(o) => {
            eprintln!(
                "SKIP: tests/registry-clients/{script} failed ({}), so this client test does not run:\n{}",
                o.status,
                String::from_utf8_lossy(&o.stderr)
            );
            None
        }
        Err(e) => {
            eprintln!("SKIP: cannot run tests/registry-clients/{script}: {e}");
            None
        }
    }
}

fn run_json(cmd: &mut Command) -> String {
    let o = cmd.output().expect("run client");
    assert!(
        o.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&o.stderr),
        String::from_utf8_lossy(&o.stdout)
    );
    String::from_utf8(o.stdout).expect("utf-8")
}

#[test]
fn serve_survives_restart_and_stops_on_sigterm() {
    let tmp = tempfile::tempdir().unwrap();
    let schema = r#"{"type":"record","name":"R","fields":[{"name":"a","type":"int"}]}"#;
    let s = Server::start(tmp.path(), &[]);
    let (st, body) = http(
        &s.addr,
        "POST",
        "/subjects/r-value/versions",
        Some(&json!({ "schema": schema })),
    );
    assert_eq!((st, &body), (200, &json!({"id": 1})));
    let (st, body) = http(&s.addr, "GET", "/healthz", None);
    assert_eq!((st, body), (200, J::String("ok\n".into())));
    let status = s.stop();
    assert!(
        status.success(),
        "SIGTERM should stop it cleanly: {status:?}"
    );

    let s = Server::start(tmp.path(), &[]);
    let (st, body) = http(&s.addr, "GET", "/registry/schemas/ids/1", None);
    assert_eq!((st, &body), (200, &json!({ "schema": schema })));
    let (st, body) = http(&s.addr, "GET", "/subjects/r-value/versions/latest", None);
    assert_eq!(st, 200);
    assert_eq!((&body["version"], &body["id"]), (&json!(1), &json!(1)));
}

#[test]
fn serve_with_basic_auth_file() {
    let tmp = tempfile::tempdir().unwrap();
    let users = tmp.path().join("users");
    std::fs::write(&users, "# registry users\nalice:s3cret\n").unwrap();
    let s = Server::start(
        &tmp.path().join("data"),
        &["--basic-auth-file", users.to_str().unwrap()],
    );
    let (st, body) = http(&s.addr, "GET", "/subjects", None);
    assert_eq!((st, &body["error_code"]), (401, &json!(40101)), "{body}");
    // "alice:s3cret"
    let good = "Authorization: Basic YWxpY2U6czNjcmV0\r\n";
    let bad = "Authorization: Basic YWxpY2U6d3Jvbmc=\r\n";
    assert_eq!(
        http_with(&s.addr, "GET", "/subjects", None, good),
        (200, json!([]))
    );
    assert_eq!(
        http_with(&s.addr, "GET", "/registry/subjects", None, bad).0,
        401
    );
    // Probes and metrics need no credentials.
    assert_eq!(http(&s.addr, "GET", "/healthz", None).0, 200);
    assert_eq!(http(&s.addr, "GET", "/readyz", None).0, 200);
    let (st, metrics) = http(&s.addr, "GET", "/metrics", None);
    assert_eq!(st, 200);
    assert!(
        metrics.as_str().unwrap().contains("cdc_log_flushes_total"),
        "{metrics}"
    );
}

#[test]
fn python_confluent_client_against_our_registry() {
    let Some(python) = setup("setup-python.sh") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start(tmp.path(), &[]);
    let out = run_json(
        Command::new(&python)
            .arg(clients_dir().join("confluent_client.py"))
            .arg(s.url())
            .arg("roundtrip"),
    );
    let v: J = serde_json::from_str(out.trim()).expect("client JSON");
    assert_eq!(v["id1"], json!(1), "{v}");
    assert_eq!(v["id1_again"], json!(1));
    assert_eq!(
        v["lookup"],
        json!({"subject": "py-orders-value", "version": 1, "id": 1})
    );
    assert_eq!(v["by_id_equal"], json!(true));
    assert_eq!(v["compat_v2"], json!(true));
    assert_eq!(v["compat_bad"], json!(false));
    assert_eq!(v["id2"], json!(2));
    assert_eq!(v["latest"], json!({"version": 2, "id": 2}));
    assert_eq!(v["versions"], json!([1, 2]));
    assert_eq!(v["subjects"], json!(["py-orders-value"]));
    assert_eq!(v["get_compat"], json!("FULL"));
    assert_eq!(v["err_incompatible"], json!({"http": 409, "code": 409}));
    assert_eq!(v["err_no_id"], json!({"http": 404, "code": 40403}));
    assert_eq!(v["err_no_subject"], json!({"http": 404, "code": 40401}));
    assert_eq!(v["err_lookup_missing"], json!({"http": 404, "code": 40403}));
    assert_eq!(v["err_invalid"], json!({"http": 422, "code": 42201}));
    assert_eq!(v["wire_magic"], json!(0));
    assert_eq!(v["wire_id"], json!(3));
    assert_eq!(
        v["roundtrip"],
        json!({"id": 42, "name": "widget", "price": {"decimal": "12.34"}, "tags": ["a", "b"]})
    );
    assert_eq!(v["rt_subjects"], json!(["py-orders-value", "py-rt-value"]));
}

const TOPIC: &str = "shop.public.orders";
const PROCESSED_NS: i64 = 1_740_218_269_005_541_665;
const SRC_TS_MS: i64 = 1_740_218_268_541;

/// Registers our encoder's schemas for a small table through the HTTP API and writes one
/// encoded create event (key and value files, Confluent wire format). Returns the files.
fn encode_one(addr: &str, dir: &Path) -> (PathBuf, PathBuf, SchemaIds) {
    let table = Arc::new(
        TableSchema::new(
            TableId::new("public", "orders"),
            vec![
                Column::new("id", ColumnType::Int64, "int8").not_null(),
                Column::new("note", ColumnType::Text { max_len: None }, "text"),
                Column::new("flag", ColumnType::Bool, "bool"),
                Column::new("price", ColumnType::Float64, "float8"),
                Column::new("qty", ColumnType::Int32, "int4"),
            ],
            &["id"],
        )
        .unwrap(),
    );
    let config = EncoderConfig::new(
        SourceInfo::new(ConnectorKind::Postgres, "shop", "inventory"),
        RecordFormat::Avro,
    );
    let mut enc = Encoder::new(&config, &table).unwrap();
    let register = |subject: &str, schema: &str| -> u32 {
        let (st, body) = http(
            addr,
            "POST",
            &format!("/subjects/{subject}/versions"),
            Some(&json!({ "schema": schema, "schemaType": "AVRO" })),
        );
        assert_eq!(st, 200, "register {subject}: {body}");
        body["id"].as_u64().unwrap() as u32
    };
    let key_id = register(&format!("{TOPIC}-key"), enc.avro_key_schema().unwrap());
    let value_id = register(&format!("{TOPIC}-value"), enc.avro_value_schema());
    let ids = SchemaIds {
        key: Some(key_id),
        value: value_id,
    };
    enc.set_schema_ids(ids);
    let row = Row::new(vec![
        Value::Int64(1001),
        Value::Text("hello, registry".into()),
        Value::Bool(true),
        Value::Float64(2.5),
        Value::Int32(-7),
    ]);
    let pos = SourcePosition::Postgres(PgPosition {
        commit_lsn: Lsn(2_078_959_952),
        lsn: Lsn(2_078_978_480),
        tx_id: Some(32_545),
        xmin: None,
    });
    let ev = ChangeEvent::create(table, row, pos, SRC_TS_MS).unwrap();
    let (mut key, mut value) = (Vec::new(), Vec::new());
    assert!(enc.encode_key(&ev, &mut key).unwrap());
    enc.encode_value_at(&ev, PROCESSED_NS, &mut value).unwrap();
    let (kf, vf) = (dir.join("key.bin"), dir.join("value.bin"));
    std::fs::write(&kf, &key).unwrap();
    std::fs::write(&vf, &value).unwrap();
    (kf, vf, ids)
}

fn expected_after() -> J {
    json!({"id": 1001, "note": "hello, registry", "flag": true, "price": 2.5, "qty": -7})
}

/// The parts of a decoded envelope every client must agree on.
fn check_envelope(value: &J) {
    assert_eq!(value["before"], J::Null, "{value}");
    assert_eq!(value["after"], expected_after(), "{value}");
    assert_eq!(value["op"], json!("c"));
    assert_eq!(value["ts_ms"], json!(PROCESSED_NS / 1_000_000));
    let src = &value["source"];
    assert_eq!(src["connector"], json!("postgresql"), "{src}");
    assert_eq!(src["name"], json!("shop"));
    assert_eq!(src["db"], json!("inventory"));
    assert_eq!(src["schema"], json!("public"));
    assert_eq!(src["table"], json!("orders"));
    assert_eq!(src["ts_ms"], json!(SRC_TS_MS));
    assert_eq!(src["lsn"], json!(2_078_978_480i64));
    assert_eq!(src["txId"], json!(32_545));
}

#[test]
fn python_deserializer_decodes_our_encoder_output() {
    let Some(python) = setup("setup-python.sh") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start(&tmp.path().join("data"), &[]);
    let (kf, vf, ids) = encode_one(&s.addr, tmp.path());
    let out = run_json(
        Command::new(&python)
            .arg(clients_dir().join("confluent_client.py"))
            .arg(s.url())
            .args(["decode", TOPIC])
            .arg(&kf)
            .arg(&vf),
    );
    let v: J = serde_json::from_str(out.trim()).expect("client JSON");
    assert_eq!(v["key_id"], json!(ids.key.unwrap()));
    assert_eq!(v["value_id"], json!(ids.value));
    assert_eq!(v["key"], json!({"id": 1001}));
    check_envelope(&v["value"]);
}

#[test]
fn java_deserializer_decodes_our_encoder_output() {
    let Some(java_dir) = setup("setup-java.sh") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start(&tmp.path().join("data"), &[]);
    let (kf, vf, ids) = encode_one(&s.addr, tmp.path());
    let classpath = format!(
        "{}:{}/*",
        java_dir.join("classes").display(),
        java_dir.join("libs").display()
    );
    let out = run_json(
        Command::new("java")
            .args(["-cp", &classpath, "DecodeWithRegistry"])
            .arg(s.url())
            .arg(TOPIC)
            .arg(&kf)
            .arg(&vf)
            .arg(format!("{TOPIC}-value")),
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    let key: J = serde_json::from_str(lines[0]).expect("key JSON");
    let value: J = serde_json::from_str(lines[1]).expect("value JSON");
    assert_eq!(key, json!({"id": 1001}));
    check_envelope(&value);
    assert_eq!(lines[2], format!("1 {}", ids.value));
    assert_eq!(lines[3], format!("{TOPIC}-key,{TOPIC}-value"));
}
