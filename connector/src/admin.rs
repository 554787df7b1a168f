//! The admin HTTP server on `[admin] listen`: liveness, readiness, Prometheus metrics and
//! the schema registry API.
//!
//! | path | answer |
//! |---|---|
//! | `GET /healthz` | 200 `ok` while the process serves (liveness) |
//! | `GET /readyz` | 200 `ready` once [`Readiness::set_ready`]`(true)`, else 503 `not ready` |
//! | `GET /status` | 200, JSON: `{"state": "running"}`, or `{"state": "waiting for disk", "reason": …, "waiting_seconds": …}` while the pipeline waits for disk (it stays ready meanwhile: a restart would not free space); with sinks, `"sinks": {name: {state, error, lag_records, lag_ms, applied, dead_letters, retries}}` |
//! | `GET /metrics` | Prometheus text format 0.0.4: the log's counters, the registry's sizes, and whatever the pipeline registers in [`Metrics`] |
//! | `/…` and `/registry/…` | the Confluent Schema Registry API (`cdc_registry::http`), when an embedded registry is served; with a remote one, 404 naming it |
//!
//! Optional HTTP basic auth ([`AdminOptions::basic_auth`]) guards the registry API (not the
//! probes or metrics, which orchestrators call without credentials).
//!
//! The pipeline: `let admin = admin::serve(AdminOptions::new(listen).registry(r).log(log),
//! shutdown).await?;` then `admin.readiness.set_ready(true)` when streaming, and
//! `admin.metrics.counter("cdc_records_total", "…")` for its own figures.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use cdc_log::{Log, Metrics as LogMetrics, MetricsSnapshot};
use cdc_registry::http::{not_found, routes, ApiError};
use cdc_registry::EmbeddedRegistry;
pub use cdc_schemas::metrics::{Counter, Gauge, Metrics};
use cdc_sinks::metrics::SinkMetrics;
use tokio::task::JoinHandle;

/// Whether the connector is ready to serve (the `/readyz` probe). Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    pub fn new(ready: bool) -> Self {
        Readiness(Arc::new(AtomicBool::new(ready)))
    }
    pub fn set_ready(&self, ready: bool) {
        self.0.store(ready, Ordering::Release);
    }
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// What `/status` reports about the pipeline and the sinks. Cheap to clone.
#[derive(Clone, Default)]
pub struct Status {
    disk_wait: Arc<Mutex<Option<(String, Instant)>>>,
    /// Per sink: its figures and, once it stopped on a definite error, that error.
    sinks: Arc<Mutex<BTreeMap<String, SinkEntry>>>,
}

/// A sink's figures and, once it stopped on a definite error, that error.
type SinkEntry = (SinkMetrics, Option<String>);

impl std::fmt::Debug for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Status")
    }
}

impl Status {
    /// Reports sink `name` (its figures are `metrics`) in `/status` from now on.
    pub fn add_sink(&self, name: &str, metrics: SinkMetrics) {
        let mut g = self.sinks.lock().unwrap_or_else(|p| p.into_inner());
        g.insert(name.to_string(), (metrics, None));
    }

    /// Sink `name` stopped on a definite `error`.
    pub fn sink_stopped(&self, name: &str, error: String) {
        let mut g = self.sinks.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = g.get_mut(name) {
            e.1 = Some(error);
        }
    }

    /// `Some(reason)`: the pipeline waits for disk from now on; `None`: it runs again.
    pub fn set_waiting_for_disk(&self, reason: Option<String>) {
        let mut g = self.disk_wait.lock().unwrap_or_else(|p| p.into_inner());
        match reason {
            Some(r) => {
                let since = g.as_ref().map_or_else(Instant::now, |(_, t)| *t);
                *g = Some((r, since));
            }
            None => *g = None,
        }
    }

    /// The reason and how long the pipeline has waited, while it waits for disk.
    pub fn waiting_for_disk(&self) -> Option<(String, std::time::Duration)> {
        let g = self.disk_wait.lock().unwrap_or_else(|p| p.into_inner());
        g.as_ref().map(|(r, t)| (r.clone(), t.elapsed()))
    }

    /// The `/status` document.
    pub fn to_json(&self) -> serde_json::Value {
        let mut doc = match self.waiting_for_disk() {
            Some((reason, d)) => serde_json::json!({
                "state": "waiting for disk",
                "reason": reason,
                "waiting_seconds": d.as_secs(),
            }),
            None => serde_json::json!({ "state": "running" }),
        };
        let g = self.sinks.lock().unwrap_or_else(|p| p.into_inner());
        if !g.is_empty() {
            let sinks: serde_json::Map<String, serde_json::Value> = g
                .iter()
                .map(|(name, (m, stopped))| {
                    let state = match stopped {
                        Some(_) => "stopped",
                        None if m.up.get() == 1 => "running",
                        None => "retrying",
                    };
                    (
                        name.clone(),
                        serde_json::json!({
                            "state": state,
                            "error": stopped,
                            "lag_records": m.lag_records.get(),
                            "lag_ms": m.lag_ms.get(),
                            "applied": m.applied.get(),
                            "dead_letters": m.dead_letters.get(),
                            "retries": m.retries.get(),
                        }),
                    )
                })
                .collect();
            doc["sinks"] = serde_json::Value::Object(sinks);
        }
        doc
    }
}

fn metric(out: &mut String, name: &str, kind: &str, help: &str, v: u64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
    );
}

/// The log's metrics snapshot in Prometheus text format.
pub fn render_log_metrics(s: &MetricsSnapshot, out: &mut String) {
    let c = "counter";
    let g = "gauge";
    metric(
        out,
        "cdc_log_appended_records_total",
        c,
        "Records appended to the embedded log.",
        s.appended_records,
    );
    metric(
        out,
        "cdc_log_appended_bytes_total",
        c,
        "Bytes appended to the embedded log.",
        s.appended_bytes,
    );
    metric(
        out,
        "cdc_log_appended_batches_total",
        c,
        "Batches appended to the embedded log.",
        s.appended_batches,
    );
    metric(
        out,
        "cdc_log_flushes_total",
        c,
        "Flushes (fsync + ledger) of the embedded log.",
        s.flushes,
    );
    metric(
        out,
        "cdc_log_flush_seconds_total",
        c,
        "Time spent flushing, in nanoseconds / 1e9 (see _nanos).",
        s.flush_nanos / 1_000_000_000,
    );
    metric(
        out,
        "cdc_log_flush_nanoseconds_total",
        c,
        "Time spent flushing, in nanoseconds.",
        s.flush_nanos,
    );
    metric(
        out,
        "cdc_log_recovery_truncated_bytes_total",
        c,
        "Bytes cut off unflushed or torn tails on open.",
        s.recovery_truncated_bytes,
    );
    metric(
        out,
        "cdc_log_recovery_removed_segments_total",
        c,
        "Unflushed segments removed on open.",
        s.recovery_removed_segments,
    );
    metric(
        out,
        "cdc_log_recovery_rebuilt_indexes_total",
        c,
        "Indexes rebuilt on open.",
        s.recovery_rebuilt_indexes,
    );
    metric(
        out,
        "cdc_log_retention_deleted_segments_total",
        c,
        "Segments deleted by retention.",
        s.retention_deleted_segments,
    );
    metric(
        out,
        "cdc_log_retention_deleted_bytes_total",
        c,
        "Bytes deleted by retention.",
        s.retention_deleted_bytes,
    );
    metric(
        out,
        "cdc_log_compaction_runs_total",
        c,
        "Compaction runs.",
        s.compaction_runs,
    );
    metric(
        out,
        "cdc_log_compaction_removed_records_total",
        c,
        "Records removed by compaction.",
        s.compaction_removed_records,
    );
    metric(
        out,
        "cdc_log_compaction_reclaimed_bytes_total",
        c,
        "Bytes reclaimed by compaction.",
        s.compaction_reclaimed_bytes,
    );
    metric(
        out,
        "cdc_log_ledger_slot_fallbacks_total",
        c,
        "Opens that found the newest ledger slot damaged and recovered from the older one (the log's error line says what was cut).",
        s.ledger_slot_fallbacks,
    );
    metric(
        out,
        "cdc_log_ledger_fallback_cut_records_total",
        c,
        "Flushed records cut by such an open, past the older ledger slot's durable ends.",
        s.ledger_fallback_cut_records,
    );
    metric(
        out,
        "cdc_log_budget_exhausted_total",
        c,
        "Times appends hit the disk budget.",
        s.budget_exhausted_total,
    );
    metric(
        out,
        "cdc_log_budget_blocked",
        g,
        "1 while appends wait for the disk budget.",
        u64::from(s.budget_blocked),
    );
    metric(
        out,
        "cdc_log_bytes",
        g,
        "Bytes of all segment files.",
        s.total_bytes,
    );
}

/// `user:password` pairs accepted by the optional basic-auth guard of the registry API.
#[derive(Clone, Default)]
pub struct BasicAuth {
    /// Expected `Authorization` header values (`Basic base64(user:password)`).
    accepted: Vec<String>,
}

impl std::fmt::Debug for BasicAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BasicAuth({} users, ***)", self.accepted.len())
    }
}

impl BasicAuth {
    /// From `user:password` lines (empty lines and `#` comments skipped).
    pub fn from_lines(text: &str) -> Result<BasicAuth, String> {
        use base64::Engine as _;
        let mut accepted = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if !line.contains(':') {
                return Err(format!(
                    "line {}: expected user:password, found no ':'",
                    i + 1
                ));
            }
            accepted.push(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(line)
            ));
        }
        if accepted.is_empty() {
            return Err("no user:password line".into());
        }
        Ok(BasicAuth { accepted })
    }

    fn allows(&self, header: Option<&HeaderValue>) -> bool {
        let Some(h) = header.and_then(|h| h.to_str().ok()) else {
            return false;
        };
        self.accepted
            .iter()
            .any(|a| constant_time_eq(a.as_bytes(), h.as_bytes()))
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn require_auth(State(auth): State<Arc<BasicAuth>>, req: Request, next: Next) -> Response {
    if auth.allows(req.headers().get(header::AUTHORIZATION)) {
        return next.run(req).await;
    }
    let mut r = ApiError::new(
        401,
        40101,
        "Unauthorized: valid basic-auth credentials are required",
    )
    .into_response();
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Basic realm=\"cdc schema registry\""),
    );
    r
}

/// What the admin server serves.
#[derive(Clone)]
pub struct AdminOptions {
    pub listen: SocketAddr,
    pub registry: Option<EmbeddedRegistry>,
    /// The remote registry `cdc run` uses instead (URL without credentials): named in the
    /// 404 answered on registry paths.
    pub remote_registry: Option<String>,
    /// The embedded log's counters and gauges (shared across the log's reopens).
    pub log_metrics: Option<Arc<LogMetrics>>,
    pub basic_auth: Option<BasicAuth>,
    pub readiness: Readiness,
    pub metrics: Metrics,
    pub status: Status,
}

impl AdminOptions {
    /// Serves the probes and metrics on `listen`; ready as soon as it serves.
    pub fn new(listen: SocketAddr) -> Self {
        AdminOptions {
            listen,
            registry: None,
            remote_registry: None,
            log_metrics: None,
            basic_auth: None,
            readiness: Readiness::new(true),
            metrics: Metrics::default(),
            status: Status::default(),
        }
    }
    /// Also serve the registry API at `/` and `/registry/`.
    pub fn registry(mut self, r: EmbeddedRegistry) -> Self {
        self.registry = Some(r);
        self
    }
    /// No registry API here: the connector uses the remote registry at `url`.
    pub fn remote_registry(mut self, url: Option<String>) -> Self {
        self.remote_registry = url;
        self
    }
    /// Export this log's metrics.
    pub fn log(mut self, log: &Log) -> Self {
        self.log_metrics = Some(log.shared_metrics());
        self
    }
    /// Export these log counters: the ones a process passes to every open of its log
    /// (`LogOptions::metrics`), so they outlive a reopen.
    pub fn log_metrics(mut self, m: Arc<LogMetrics>) -> Self {
        self.log_metrics = Some(m);
        self
    }
    /// Start not ready; the caller sets `readiness` when it is.
    pub fn not_ready(self) -> Self {
        self.readiness.set_ready(false);
        self
    }
    pub fn basic_auth(mut self, auth: Option<BasicAuth>) -> Self {
        self.basic_auth = auth;
        self
    }
}

/// A running admin server.
pub struct AdminServer {
    /// The bound address (useful with port 0).
    pub local_addr: SocketAddr,
    pub readiness: Readiness,
    pub metrics: Metrics,
    /// Ends after `shutdown` completes and in-flight requests are answered.
    pub join: JoinHandle<std::io::Result<()>>,
}

/// The admin router (exposed for tests and for embedding).
pub fn router(options: &AdminOptions) -> Router {
    let readiness = options.readiness.clone();
    let metrics = options.metrics.clone();
    let status = options.status.clone();
    let log_metrics = options.log_metrics.clone();
    let registry = options.registry.clone();
    let mut app = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(move || {
                let ready = readiness.is_ready();
                async move {
                    if ready {
                        (StatusCode::OK, "ready\n")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
                    }
                }
            }),
        )
        .route(
            "/status",
            get(move || {
                let body = status.to_json().to_string() + "\n";
                async move {
                    let mut resp = body.into_response();
                    resp.headers_mut().insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    );
                    resp
                }
            }),
        )
        .route(
            "/metrics",
            get(move || {
                let mut out = String::new();
                if let Some(m) = &log_metrics {
                    render_log_metrics(&m.snapshot(), &mut out);
                }
                if let Some(r) = &registry {
                    metric(
                        &mut out,
                        "cdc_registry_subjects",
                        "gauge",
                        "Subjects in the embedded schema registry (live).",
                        r.subjects(false).len() as u64,
                    );
                }
                metrics.render(&mut out);
                async move {
                    let mut resp = out.into_response();
                    resp.headers_mut().insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                    );
                    resp
                }
            }),
        );
    if let Some(r) = &options.registry {
        let mut api = routes(r.clone());
        if let Some(auth) = &options.basic_auth {
            api = api.layer(middleware::from_fn_with_state(
                Arc::new(auth.clone()),
                require_auth,
            ));
        }
        app = app.nest("/registry", api.clone()).merge(api);
    } else if let Some(url) = &options.remote_registry {
        // A client pointed here by habit learns where the schemas are.
        let message = format!(
            "HTTP 404 Not Found: this connector uses the schema registry at {url}; this address serves no registry API"
        );
        return app.fallback(move || {
            let message = message.clone();
            async move { ApiError::new(404, 404, message) }
        });
    }
    app.fallback(not_found)
}

/// Binds `options.listen` and serves until `shutdown` completes (then finishes the
/// requests in flight). Binding errors (address in use) are returned here, not later.
pub async fn serve(
    options: AdminOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<AdminServer> {
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("cannot listen on {} (admin server): {e}", options.listen),
            )
        })?;
    let local_addr = listener.local_addr()?;
    let app = router(&options);
    tracing::info!(%local_addr, registry = options.registry.is_some(), "admin server listening");
    let join = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
    });
    Ok(AdminServer {
        local_addr,
        readiness: options.readiness,
        metrics: options.metrics,
        join,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_render_prometheus_text() {
        let m = Metrics::default();
        m.counter("cdc_records_total{table=\"a\"}", "Records.")
            .add(3);
        m.counter("cdc_records_total{table=\"b\"}", "Records.")
            .inc();
        m.gauge("cdc_lag", "Lag.").set(7);
        m.collector(|out| out.push_str("x 1\n"));
        let mut out = String::new();
        m.render(&mut out);
        assert_eq!(
            out,
            "# HELP cdc_lag Lag.\n# TYPE cdc_lag gauge\ncdc_lag 7\n\
             # HELP cdc_records_total Records.\n# TYPE cdc_records_total counter\n\
             cdc_records_total{table=\"a\"} 3\ncdc_records_total{table=\"b\"} 1\nx 1\n"
        );
    }

    #[test]
    fn log_metrics_include_the_ledger_slot_fallback() {
        let dir = tempfile::tempdir().unwrap();
        {
            let log = Log::open(dir.path(), cdc_log::LogOptions::default()).unwrap();
            let t = log
                .create_topic("t", cdc_log::TopicConfig::default())
                .unwrap();
            t.append(0, &[cdc_log::NewRecord::new(Some(b"k"), Some(b"v"), 0)])
                .unwrap();
            log.flush(Some(b"a")).unwrap();
            t.append(0, &[cdc_log::NewRecord::new(Some(b"k"), Some(b"w"), 1)])
                .unwrap();
            log.flush(Some(b"b")).unwrap();
            log.close().unwrap();
        }
        // Damage the newest of the ledger's two slots (format: `connector/log/src/ledger.rs`).
        let path = dir.path().join("ledger");
        let mut buf = std::fs::read(&path).unwrap();
        let slot = u32::from_be_bytes(buf[8..12].try_into().unwrap()) as usize;
        let seq = |at: usize| u64::from_be_bytes(buf[at..at + 8].try_into().unwrap());
        let newest = if seq(4096) > seq(4096 + slot) {
            4096
        } else {
            4096 + slot
        };
        buf[newest + 20] ^= 1;
        std::fs::write(&path, &buf).unwrap();
        let log = Log::open(dir.path(), cdc_log::LogOptions::default()).unwrap();
        let mut out = String::new();
        render_log_metrics(&log.metrics(), &mut out);
        assert!(
            out.contains("\ncdc_log_ledger_slot_fallbacks_total 1\n"),
            "{out}"
        );
        assert!(
            out.contains("\ncdc_log_ledger_fallback_cut_records_total 1\n"),
            "{out}"
        );
    }

    #[test]
    fn status_says_waiting_for_disk() {
        let s = Status::default();
        assert_eq!(s.to_json()["state"], "running");
        s.set_waiting_for_disk(Some("disk full".into()));
        let j = s.to_json();
        assert_eq!(j["state"], "waiting for disk");
        assert_eq!(j["reason"], "disk full");
        s.set_waiting_for_disk(None);
        assert_eq!(s.to_json()["state"], "running");
    }

    #[test]
    fn basic_auth_lines() {
        let a = BasicAuth::from_lines("# users\nalice:secret\n\n").unwrap();
        assert!(a.allows(Some(&HeaderValue::from_static("Basic YWxpY2U6c2VjcmV0"))));
        assert!(!a.allows(Some(&HeaderValue::from_static("Basic YWxpY2U6d3Jvbmc="))));
        assert!(!a.allows(None));
        assert!(BasicAuth::from_lines("nocolon").is_err());
        assert!(format!("{a:?}").contains("***"));
    }
}
