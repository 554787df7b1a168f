//! The admin HTTP server on `[admin] listen`: liveness, readiness, Prometheus metrics and
//! the schema registry API.
//!
//! | path | answer |
//! |---|---|
//! | `GET /healthz` | 200 `ok` while the process serves (liveness) |
//! | `GET /readyz` | 200 `ready` once [`Readiness::set_ready`]`(true)`, else 503 `not ready` |
//! | `GET /` | the status page (HTML, refreshes itself from `/status`) for a browser; with an embedded registry, `{}` (the registry API's root) for any other client |
//! | `GET /status` | 200, JSON: the status document (`crate::status`): state (`running`, or `waiting for disk` with its reason; it stays ready meanwhile: a restart would not free space), source position and the database's view of it, lag, log topics, sinks, last errors |
//! | `GET /metrics` | Prometheus text format 0.0.4: the log's counters, the registry's sizes, and whatever the pipeline registers in [`Metrics`] |
//! | `/…` and `/registry/…` | the Confluent Schema Registry API (`cdc_registry::http`), when an embedded registry is served; with a remote one, 404 naming it |
//!
//! Optional HTTP basic auth ([`AdminOptions::basic_auth`], `cdc registry serve`) guards the
//! registry API. The optional bearer token ([`AdminOptions::token`], `[admin] token`)
//! guards everything but the probes, which orchestrators call without credentials, and the
//! page's HTML, which holds no data and asks for the token.
//!
//! The pipeline: `let admin = admin::serve(AdminOptions::new(listen).registry(r).log(log),
//! shutdown).await?;` then `admin.readiness.set_ready(true)` when streaming, and
//! `admin.metrics.counter("cdc_records_total", "…")` for its own figures.

use std::fmt::Write as _;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use cdc_log::{Log, Metrics as LogMetrics, MetricsSnapshot};
use cdc_registry::http::{api_routes, not_found, routes, ApiError};
use cdc_registry::EmbeddedRegistry;
pub use cdc_schemas::metrics::{Counter, Gauge, Metrics};
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

pub use crate::status::Status;

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
    let _ = writeln!(
        out,
        "# HELP cdc_log_flush_seconds_total Time spent flushing (fsync and ledger).\n# TYPE cdc_log_flush_seconds_total counter\ncdc_log_flush_seconds_total {}",
        s.flush_nanos as f64 / 1e9
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
    metric(
        out,
        "cdc_log_retention_held_segments",
        g,
        "Segments retention kept in its last pass because a consumer group with protect has not read them.",
        s.retention_held_segments,
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
    /// `[admin] token`: required by everything but the probes and the page.
    pub token: Option<cdc_sources::secret::Secret>,
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
            token: None,
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
    /// Require this bearer token (see [`AdminOptions::token`]).
    pub fn token(mut self, token: Option<cdc_sources::secret::Secret>) -> Self {
        self.token = token;
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
    // Probes (orchestrators call them without credentials) and the page (no data in
    // it: it asks for the token when `/status` wants one).
    let mut open = Router::new()
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
        );
    let mut app = Router::new()
        .route(
            "/status",
            get(move || {
                let status = status.clone();
                async move {
                    let doc = match status.config().cloned() {
                        Some(config) => {
                            crate::status::collect::document(&config, Some(&status)).await
                        }
                        None => status.to_json(),
                    };
                    let mut resp = (doc.to_string() + "\n").into_response();
                    resp.headers_mut().insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    );
                    resp.headers_mut()
                        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
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
    // `/`: the status page for a browser; for anything else with an embedded registry,
    // the registry API's root (`{}`, which Confluent clients may probe).
    let with_registry = options.registry.is_some();
    open = open.route(
        "/",
        get(move |headers: axum::http::HeaderMap| async move {
            let html = headers
                .get(header::ACCEPT)
                .and_then(|a| a.to_str().ok())
                .is_some_and(|a| a.contains("text/html"));
            if html || !with_registry {
                let mut resp = crate::status::PAGE.into_response();
                resp.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/html; charset=utf-8"),
                );
                resp
            } else {
                let mut resp = "{}".into_response();
                resp.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/vnd.schemaregistry.v1+json"),
                );
                resp
            }
        }),
    );
    if let Some(r) = &options.registry {
        let mut root_api = api_routes(r.clone());
        let mut api = routes(r.clone());
        if let Some(auth) = &options.basic_auth {
            let auth = Arc::new(auth.clone());
            api = api.layer(middleware::from_fn_with_state(auth.clone(), require_auth));
            root_api = root_api.layer(middleware::from_fn_with_state(auth, require_auth));
        }
        app = app.nest("/registry", api).merge(root_api);
    } else if let Some(url) = &options.remote_registry {
        // A client pointed here by habit learns where the schemas are.
        let message = format!(
            "HTTP 404 Not Found: this connector uses the schema registry at {url}; this address serves no registry API"
        );
        app = app.fallback(move || {
            let message = message.clone();
            async move { ApiError::new(404, 404, message) }
        });
    } else {
        app = app.fallback(not_found);
    }
    if let Some(token) = &options.token {
        let expected = Arc::new(format!("Bearer {}", token.expose()));
        app = app.layer(middleware::from_fn_with_state(expected, require_bearer));
    }
    open.merge(app)
}

/// With `[admin] token` set: everything but the probes and the page needs
/// `Authorization: Bearer <token>`.
async fn require_bearer(State(expected): State<Arc<String>>, req: Request, next: Next) -> Response {
    let ok = req
        .headers()
        .get(header::AUTHORIZATION)
        .is_some_and(|h| constant_time_eq(h.as_bytes(), expected.as_bytes()));
    if ok {
        return next.run(req).await;
    }
    let mut r = (
        StatusCode::UNAUTHORIZED,
        "Unauthorized: this admin address needs the admin token (Authorization: Bearer <token>; [admin] token_file)\n",
    )
        .into_response();
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"cdc admin\""),
    );
    r
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
    fn basic_auth_lines() {
        let a = BasicAuth::from_lines("# users\nalice:secret\n\n").unwrap();
        assert!(a.allows(Some(&HeaderValue::from_static("Basic YWxpY2U6c2VjcmV0"))));
        assert!(!a.allows(Some(&HeaderValue::from_static("Basic YWxpY2U6d3Jvbmc="))));
        assert!(!a.allows(None));
        assert!(BasicAuth::from_lines("nocolon").is_err());
        assert!(format!("{a:?}").contains("***"));
    }
}
