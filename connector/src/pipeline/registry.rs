//! Which schema registry `cdc run` registers with, from `[registry]`: [`open_registry`].
//!
//! - No `url`: the embedded registry, in its own log at `<log.dir>/registry` (it flushes on
//!   every registration; a flush of the data log in the middle of a transaction would make
//!   part of it durable under the previous checkpoint). Its default level is
//!   `registry.compatibility`; the admin server serves its API.
//! - `url`: the remote registry, with `username`/`password` or `bearer_token`, `ca_file`
//!   and `timeout_ms`. Nothing embedded is opened and the admin server serves no registry
//!   API. One request (`GET /config`) at start proves it reachable, the credentials
//!   accepted and the answer a registry's: a failure there is a definite error naming the
//!   key to fix. Later failures are the client's and the pipeline's business: transient
//!   ones are retried with backoff, so a registry that goes away while running delays
//!   new schema versions but loses nothing.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cdc_log::{Log, LogOptions};
use cdc_registry::remote::RemoteRegistry;
use cdc_registry::{EmbeddedOptions, EmbeddedRegistry};
use cdc_schemas::registry::{RegistryError, SchemaRegistry};

use crate::admin::AdminOptions;
use crate::config::{redact_userinfo, Config, RegistryConfig};

/// The registry `cdc run` uses.
pub struct OpenedRegistry {
    /// What the pipeline registers with.
    pub registry: Arc<dyn SchemaRegistry>,
    /// The embedded registry, whose API the admin server serves; `None` with a remote one.
    pub embedded: Option<EmbeddedRegistry>,
    /// The remote registry's URL (credentials never in it), for messages.
    pub remote_url: Option<String>,
}

impl OpenedRegistry {
    /// The admin server's options on `listen`: the embedded registry's API, or none (the
    /// remote registry is named in the answer to registry paths).
    pub fn admin_options(&self, listen: SocketAddr) -> AdminOptions {
        let mut o = AdminOptions::new(listen).remote_registry(self.remote_url.clone());
        if let Some(r) = &self.embedded {
            o = o.registry(r.clone());
        }
        o
    }
}

/// Why the registry could not be opened. [`OpenRegistryError::exit_code`]: 2 for a
/// configuration the operator must change, 1 otherwise.
#[derive(Debug, thiserror::Error)]
pub enum OpenRegistryError {
    #[error("cannot open the schema registry's log at {}: {source}", path.display())]
    EmbeddedLog {
        path: PathBuf,
        source: cdc_log::LogError,
    },
    #[error("cannot open the embedded schema registry: {0}")]
    Embedded(RegistryError),
    #[error("registry.ca_file: {0}")]
    Client(RegistryError),
    #[error("registry.url: the schema registry at {url} is unreachable ({detail}). Fix: start it, or correct registry.url (without it the embedded registry is used); once running, cdc waits for a registry that goes away")]
    Unreachable { url: String, detail: String },
    #[error("{keys}: the schema registry at {url} refused them: {error}")]
    Unauthorized {
        url: String,
        keys: &'static str,
        error: RegistryError,
    },
    #[error("registry.url / registry.ca_file: {error}. Fix: when the registry's certificate is signed by a private CA, set registry.ca_file to that CA's certificate (PEM); the URL's host must be one the certificate names")]
    Tls { url: String, error: RegistryError },
    #[error("registry.url: {url} does not answer as a Confluent-compatible schema registry (GET /config): {error}. Fix: point registry.url at the registry's API root")]
    NotARegistry { url: String, error: RegistryError },
}

impl OpenRegistryError {
    /// 2: the configuration must change (a CA file that cannot be read); 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            OpenRegistryError::Client(_) => 2,
            _ => 1,
        }
    }
}

/// Opens the registry `[registry]` names: the embedded one, or a client of the remote
/// one checked with one request.
pub async fn open_registry(config: &Config) -> Result<OpenedRegistry, OpenRegistryError> {
    match config.registry.remote_options() {
        None => open_embedded(config),
        Some(options) => open_remote(&config.registry, options).await,
    }
}

fn open_embedded(config: &Config) -> Result<OpenedRegistry, OpenRegistryError> {
    let path = config.log.dir.join("registry");
    // The registry's compacted `_schemas` topic gets the same maintenance as the data.
    let options = LogOptions {
        maintenance_interval: config.log.log_options().maintenance_interval,
        ..LogOptions::default()
    };
    let log = Log::open(&path, options)
        .map_err(|source| OpenRegistryError::EmbeddedLog { path, source })?;
    let default_level = config.registry.compatibility_level();
    let registry = EmbeddedRegistry::open_with(
        log,
        EmbeddedOptions {
            default_compatibility: default_level,
        },
    )
    .map_err(OpenRegistryError::Embedded)?;
    let global = registry.global_compatibility();
    if global != default_level {
        tracing::warn!(configured = %default_level, global = %global, "registry.compatibility is overridden by a global level set with PUT /config (kept in the registry); DELETE /config goes back to the configured one");
    }
    tracing::info!(default_level = %default_level, global = %global, "embedded schema registry opened");
    Ok(OpenedRegistry {
        registry: Arc::new(registry.clone()),
        embedded: Some(registry),
        remote_url: None,
    })
}

async fn open_remote(
    config: &RegistryConfig,
    options: cdc_registry::remote::RemoteOptions,
) -> Result<OpenedRegistry, OpenRegistryError> {
    let url = redact_userinfo(&options.url);
    let auth = if options.bearer_token.is_some() {
        "bearer"
    } else if options.username.is_some() {
        "basic"
    } else {
        "none"
    };
    // The check at start fails fast (a few attempts) where the pipeline's client waits
    // longer for a registry that went away.
    let mut probe_options = options.clone();
    probe_options.max_attempts = 3;
    probe_options.max_elapsed = probe_options.max_elapsed.min(Duration::from_secs(15));
    let probe = RemoteRegistry::new(probe_options).map_err(OpenRegistryError::Client)?;
    let registry = RemoteRegistry::new(options).map_err(OpenRegistryError::Client)?;
    let global = match probe.compatibility(None).await {
        Ok(level) => level,
        Err(error @ RegistryError::Unauthorized { .. }) => {
            let keys = if config.bearer_token.is_some() {
                "registry.bearer_token"
            } else if config.username.is_some() {
                "registry.username / registry.password"
            } else {
                "registry.username / registry.password (or registry.bearer_token) are not set, and they are needed"
            };
            return Err(OpenRegistryError::Unauthorized { url, keys, error });
        }
        Err(error @ RegistryError::Other { status: 0, .. }) => {
            return Err(OpenRegistryError::Tls { url, error })
        }
        Err(RegistryError::Unavailable { detail }) => {
            return Err(OpenRegistryError::Unreachable { url, detail })
        }
        Err(error) => return Err(OpenRegistryError::NotARegistry { url, error }),
    };
    tracing::info!(%url, auth, ca_file = ?config.ca_file, global_level = %global, "using the remote schema registry; the embedded one is not opened");
    Ok(OpenedRegistry {
        registry: Arc::new(registry),
        embedded: None,
        remote_url: Some(url),
    })
}

#[cfg(test)]
mod tests {
    //! `[registry]` keys reaching the registry `cdc run` uses: each test fails if the key
    //! were ignored. (The end-to-end tests with `cdc registry serve` are in the harness:
    //! tests/tests/pg_source_registry.rs.)
    use super::*;
    use std::io::Write as _;
    use std::path::Path;
    use std::time::Instant;

    use axum::extract::Request;
    use axum::http::StatusCode;
    use axum::middleware::{self, Next};
    use axum::response::{IntoResponse, Response};
    use cdc_schemas::compat::CompatibilityLevel;

    fn config(dir: &Path, registry: &str) -> Config {
        let text = format!(
            "name = \"t\"\n[source]\ntype = \"postgres\"\nurl = \"postgres://cdc@127.0.0.1:1/app\"\n[log]\ndir = \"{}\"\n[registry]\n{registry}\n",
            dir.join("log").display()
        );
        Config::from_parts(Path::new("cdc.toml"), &text, std::iter::empty()).unwrap()
    }

    /// An embedded registry served on 127.0.0.1:0 behind `wrap`; stops when dropped.
    async fn serve(
        wrap: impl FnOnce(axum::Router) -> axum::Router,
    ) -> (String, tempfile::TempDir, tokio::sync::oneshot::Sender<()>) {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), LogOptions::default()).unwrap();
        let registry = EmbeddedRegistry::open(log).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = wrap(cdc_registry::http::router(registry));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await
                .unwrap();
        });
        (format!("http://{addr}"), dir, tx)
    }

    fn require_bearer(router: axum::Router) -> axum::Router {
        router.layer(middleware::from_fn(|req: Request, next: Next| async move {
            let auth = req.headers().get("authorization").cloned();
            if auth.as_ref().and_then(|h| h.to_str().ok()) == Some("Bearer tok-1") {
                next.run(req).await
            } else {
                let r: Response = (
                    StatusCode::UNAUTHORIZED,
                    "{\"error_code\":40101,\"message\":\"Unauthorized\"}",
                )
                    .into_response();
                r
            }
        }))
    }

    #[tokio::test]
    async fn embedded_default_level_is_the_configured_one() {
        let dir = tempfile::tempdir().unwrap();
        let r = open_registry(&config(dir.path(), "compatibility = \"FORWARD\""))
            .await
            .unwrap();
        assert!(r.embedded.is_some() && r.remote_url.is_none());
        assert_eq!(
            r.registry.compatibility(Some("x")).await.unwrap(),
            CompatibilityLevel::Forward
        );
        assert!(dir.path().join("log/registry").is_dir());
    }

    #[tokio::test]
    async fn bearer_token_reaches_the_remote() {
        let (url, _dir, _stop) = serve(require_bearer).await;
        let tmp = tempfile::tempdir().unwrap();
        let ok = open_registry(&config(
            tmp.path(),
            &format!("url = \"{url}\"\nbearer_token = \"tok-1\""),
        ))
        .await
        .unwrap();
        assert!(ok.embedded.is_none() && ok.remote_url.as_deref() == Some(url.as_str()));
        assert!(
            !tmp.path().join("log/registry").exists(),
            "no embedded registry with a remote one"
        );
        ok.registry
            .register("s", &cdc_schemas::registry::Schema::avro("\"string\""))
            .await
            .unwrap();
        let e = open_registry(&config(
            tmp.path(),
            &format!("url = \"{url}\"\nbearer_token = \"tok-2\""),
        ))
        .await
        .err()
        .unwrap();
        assert_eq!(e.exit_code(), 1);
        let m = e.to_string();
        assert!(
            m.contains("registry.bearer_token") && !m.contains("tok-2"),
            "{m}"
        );
    }

    #[tokio::test]
    async fn timeout_ms_bounds_each_request() {
        // Accepts connections and never answers.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for s in listener.incoming().flatten().take(20) {
                held.push(s);
            }
        });
        let tmp = tempfile::tempdir().unwrap();
        let started = Instant::now();
        let e = open_registry(&config(
            tmp.path(),
            &format!("url = \"http://{addr}\"\ntimeout_ms = 200"),
        ))
        .await
        .err()
        .unwrap();
        // The default (10 s per request) would take 30 s here.
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        let m = e.to_string();
        assert!(
            m.contains("registry.url") && m.contains("unreachable"),
            "{m}"
        );
    }

    #[tokio::test]
    async fn ca_file_is_trusted_for_tls() {
        // A CA, a certificate for 127.0.0.1 it signed, and a TLS server answering GET /config.
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "cdc test CA");
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let ca_path = tmp.path().join("ca.pem");
        std::fs::File::create(&ca_path)
            .unwrap()
            .write_all(ca.pem().as_bytes())
            .unwrap();

        let server_config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls_pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mut buf = vec![0u8; 4096];
                    let _ = tls.read(&mut buf).await;
                    let body = "{\"compatibilityLevel\":\"FULL\"}";
                    let _ = tls
                        .write_all(
                            format!(
                                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                                body.len()
                            )
                            .as_bytes(),
                        )
                        .await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        let url = format!("https://{addr}");
        let with_ca = format!("url = \"{url}\"\nca_file = \"{}\"", ca_path.display());
        let r = open_registry(&config(tmp.path(), &with_ca)).await.unwrap();
        assert_eq!(
            r.registry.compatibility(None).await.unwrap(),
            CompatibilityLevel::Full
        );
        // Without it the certificate is not trusted: a definite error, not "unreachable".
        let e = open_registry(&config(tmp.path(), &format!("url = \"{url}\"")))
            .await
            .err()
            .unwrap();
        assert!(matches!(e, OpenRegistryError::Tls { .. }), "{e}");
        assert!(e.to_string().contains("registry.ca_file"), "{e}");
        // A CA file that cannot be read is a configuration error naming the key.
        let missing = format!(
            "url = \"{url}\"\nca_file = \"{}\"",
            tmp.path().join("nope.pem").display()
        );
        let e = open_registry(&config(tmp.path(), &missing))
            .await
            .err()
            .unwrap();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("registry.ca_file"), "{e}");
    }
}
