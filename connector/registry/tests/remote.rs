//! `RemoteRegistry` against our embedded registry served over HTTP (a real server): the
//! trait's calls, 404s, 409, retries on 5xx/429 with a server that fails N times, bounded
//! retries, auth failures, caching.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use cdc_registry::remote::{RemoteOptions, RemoteRegistry};
use cdc_schemas::compat::CompatibilityLevel;
use cdc_schemas::registry::{RegistryError, Schema, SchemaRegistry, VersionRef};
use common::{rec, serve, serve_with};

fn fast(url: String) -> RemoteOptions {
    let mut o = RemoteOptions::new(url);
    o.initial_backoff = Duration::from_millis(5);
    o.max_backoff = Duration::from_millis(20);
    o.timeout = Duration::from_secs(5);
    o
}

#[tokio::test]
async fn trait_calls_against_a_real_server() {
    let served = serve().await;
    let r = RemoteRegistry::new(fast(served.url())).unwrap();
    let v1 = Schema::avro(rec(&[("id", "\"int\"", None)]));
    let v2 = Schema::avro(rec(&[
        ("id", "\"int\"", None),
        ("n", "\"string\"", Some("\"\"")),
    ]));
    let bad = Schema::avro(rec(&[("id", "\"string\"", None)]));

    assert_eq!(r.register("t-value", &v1).await.unwrap(), 1);
    assert_eq!(r.register("t-value", &v2).await.unwrap(), 2);
    let found = r.lookup("t-value", &v1).await.unwrap().unwrap();
    assert_eq!(
        (found.subject.as_str(), found.version, found.id),
        ("t-value", 1, 1)
    );
    assert_eq!(found.schema, v1);
    assert!(r.lookup("t-value", &bad).await.unwrap().is_none());
    assert!(r.lookup("nope", &v1).await.unwrap().is_none());
    assert_eq!(r.schema_by_id(2).await.unwrap(), v2);
    assert!(matches!(
        r.schema_by_id(42).await,
        Err(RegistryError::SchemaNotFound { id: 42 })
    ));
    let latest = r.version("t-value", VersionRef::Latest).await.unwrap();
    assert_eq!((latest.version, latest.id), (2, 2));
    assert!(matches!(
        r.version("t-value", VersionRef::Number(9)).await,
        Err(RegistryError::VersionNotFound { .. })
    ));
    assert!(matches!(
        r.version("nope", VersionRef::Latest).await,
        Err(RegistryError::SubjectNotFound { .. })
    ));
    assert_eq!(r.versions("t-value").await.unwrap(), vec![1, 2]);
    assert_eq!(r.subjects().await.unwrap(), vec!["t-value"]);

    // 409, with the subject's level filled in.
    r.set_compatibility(Some("t-value"), CompatibilityLevel::Full)
        .await
        .unwrap();
    assert_eq!(
        r.compatibility(Some("t-value")).await.unwrap(),
        CompatibilityLevel::Full
    );
    assert_eq!(
        r.compatibility(Some("other")).await.unwrap(),
        CompatibilityLevel::Backward
    );
    r.set_compatibility(None, CompatibilityLevel::Forward)
        .await
        .unwrap();
    assert_eq!(
        r.compatibility(None).await.unwrap(),
        CompatibilityLevel::Forward
    );
    assert_eq!(
        r.compatibility(Some("other")).await.unwrap(),
        CompatibilityLevel::Forward
    );
    let (ok, msgs) = r.test_compatibility("t-value", None, &bad).await.unwrap();
    assert!(!ok && !msgs.is_empty());
    match r.register("t-value", &bad).await.unwrap_err() {
        e @ RegistryError::Incompatible { .. } => {
            assert!(!e.is_transient());
            let RegistryError::Incompatible {
                subject,
                level,
                messages,
            } = e
            else {
                unreachable!()
            };
            assert_eq!(
                (subject.as_str(), level),
                ("t-value", CompatibilityLevel::Full)
            );
            assert!(messages[0].contains("incompatible"), "{messages:?}");
        }
        other => panic!("{other:?}"),
    }
    // A subject's own level, apart from the global one it falls back to.
    assert_eq!(
        r.subject_compatibility("t-value").await.unwrap(),
        Some(CompatibilityLevel::Full)
    );
    assert_eq!(r.subject_compatibility("other").await.unwrap(), None);
    r.delete_subject_compatibility("t-value").await.unwrap();
    assert_eq!(r.subject_compatibility("t-value").await.unwrap(), None);
    assert_eq!(
        r.compatibility(Some("t-value")).await.unwrap(),
        CompatibilityLevel::Forward
    );
    // Deleting a level that is not there is not an error.
    r.delete_subject_compatibility("t-value").await.unwrap();
    r.set_compatibility(Some("t-value"), CompatibilityLevel::Full)
        .await
        .unwrap();
    let e = r
        .register("t-value", &Schema::avro("{\"type\":\"nope\"}"))
        .await
        .unwrap_err();
    assert!(matches!(e, RegistryError::InvalidSchema { .. }), "{e:?}");
    // A registry mounted under a path prefix works the same (trailing slash tolerated).
    let r2 = RemoteRegistry::new(fast(format!("{}/", served.url()))).unwrap();
    assert_eq!(r2.register("t-value", &v1).await.unwrap(), 1);
}

/// Counts requests; answers the first `fail` of them with `status`.
fn flaky(
    fail: usize,
    status: StatusCode,
    count: Arc<AtomicUsize>,
) -> impl FnOnce(axum::Router) -> axum::Router {
    move |router: axum::Router| {
        router.layer(middleware::from_fn(move |req: Request, next: Next| {
            let count = count.clone();
            async move {
                let n = count.fetch_add(1, Ordering::SeqCst);
                if n < fail {
                    return (status, "{\"error_code\":50001,\"message\":\"flaky\"}")
                        .into_response();
                }
                next.run(req).await
            }
        }))
    }
}

#[tokio::test]
async fn retries_5xx_and_429_then_succeeds_and_caches() {
    let count = Arc::new(AtomicUsize::new(0));
    let served = serve_with(flaky(3, StatusCode::SERVICE_UNAVAILABLE, count.clone())).await;
    let r = RemoteRegistry::new(fast(served.url())).unwrap();
    let s = Schema::avro(rec(&[("id", "\"int\"", None)]));
    assert_eq!(r.register("t-value", &s).await.unwrap(), 1);
    assert_eq!(count.load(Ordering::SeqCst), 4, "3 failures + 1 success");
    // Cached: no request for the same registration or the id.
    assert_eq!(r.register("t-value", &s).await.unwrap(), 1);
    assert_eq!(r.schema_by_id(1).await.unwrap(), s);
    assert_eq!(count.load(Ordering::SeqCst), 4);

    let count = Arc::new(AtomicUsize::new(0));
    let served = serve_with(flaky(2, StatusCode::TOO_MANY_REQUESTS, count.clone())).await;
    let r = RemoteRegistry::new(fast(served.url())).unwrap();
    assert_eq!(r.register("t-value", &s).await.unwrap(), 1);
    assert_eq!(count.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn retries_are_bounded_and_transient() {
    let count = Arc::new(AtomicUsize::new(0));
    let served = serve_with(flaky(
        usize::MAX,
        StatusCode::INTERNAL_SERVER_ERROR,
        count.clone(),
    ))
    .await;
    let mut o = fast(served.url());
    o.max_attempts = 3;
    let r = RemoteRegistry::new(o).unwrap();
    let e = r
        .register("t-value", &Schema::avro("\"int\""))
        .await
        .unwrap_err();
    assert!(matches!(e, RegistryError::Unavailable { .. }), "{e:?}");
    assert!(e.is_transient());
    assert_eq!(count.load(Ordering::SeqCst), 3);

    // Nothing listening: connect errors are transient, bounded by max_elapsed.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    let mut o = fast(format!("http://{addr}"));
    o.max_attempts = 100;
    o.max_elapsed = Duration::from_millis(300);
    let r = RemoteRegistry::new(o).unwrap();
    let t = Instant::now();
    let e = r.schema_by_id(1).await.unwrap_err();
    assert!(e.is_transient(), "{e:?}");
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
}

fn require(expected: &'static str) -> impl FnOnce(axum::Router) -> axum::Router {
    move |router: axum::Router| {
        router.layer(middleware::from_fn(
            move |req: Request, next: Next| async move {
                let ok = req
                    .headers()
                    .get("authorization")
                    .and_then(|h| h.to_str().ok())
                    == Some(expected);
                if ok {
                    next.run(req).await
                } else {
                    let r: Response = (
                        StatusCode::UNAUTHORIZED,
                        "{\"error_code\":401,\"message\":\"Unauthorized\"}",
                    )
                        .into_response();
                    r
                }
            },
        ))
    }
}

#[tokio::test]
async fn basic_auth_and_bearer_tokens() {
    // "alice:s3cret"
    let served = serve_with(require("Basic YWxpY2U6czNjcmV0")).await;
    let s = Schema::avro("\"string\"");
    let mut o = fast(served.url());
    o.username = Some("alice".into());
    o.password = Some("wrong".into());
    let e = RemoteRegistry::new(o.clone())
        .unwrap()
        .register("a", &s)
        .await
        .unwrap_err();
    assert!(matches!(e, RegistryError::Unauthorized { .. }), "{e:?}");
    assert!(!e.is_transient());
    o.password = Some("s3cret".into());
    assert_eq!(
        RemoteRegistry::new(o)
            .unwrap()
            .register("a", &s)
            .await
            .unwrap(),
        1
    );
    let anon = RemoteRegistry::new(fast(served.url())).unwrap();
    assert!(matches!(
        anon.schema_by_id(1).await,
        Err(RegistryError::Unauthorized { .. })
    ));

    let served = serve_with(require("Bearer tok-123")).await;
    let mut o = fast(served.url());
    o.bearer_token = Some("tok-123".into());
    assert_eq!(
        RemoteRegistry::new(o.clone())
            .unwrap()
            .register("a", &s)
            .await
            .unwrap(),
        1
    );
    o.bearer_token = Some("tok-456".into());
    assert!(matches!(
        RemoteRegistry::new(o).unwrap().register("b", &s).await,
        Err(RegistryError::Unauthorized { .. })
    ));
}

#[tokio::test]
async fn bad_ca_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pem");
    let mut o = RemoteOptions::new("https://localhost:1");
    o.ca_file = Some(missing.clone());
    let e = RemoteRegistry::new(o).unwrap_err();
    assert!(e.to_string().contains("missing.pem"), "{e}");
}
