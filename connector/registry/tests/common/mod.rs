//! Shared by the HTTP tests: an embedded registry served over a real socket.
#![allow(dead_code)]

use std::net::SocketAddr;

use cdc_log::{Log, LogOptions};
use cdc_registry::EmbeddedRegistry;

pub struct Served {
    pub addr: SocketAddr,
    pub registry: EmbeddedRegistry,
    pub _dir: tempfile::TempDir,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Served {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// Serves `router` on 127.0.0.1:0 until the returned guard drops.
pub async fn serve_router(router: axum::Router) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async {
                let _ = rx.await;
            })
            .await
            .unwrap();
    });
    (addr, tx)
}

/// A fresh embedded registry served with `cdc_registry::http::router`, optionally wrapped.
pub async fn serve_with(wrap: impl FnOnce(axum::Router) -> axum::Router) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    let registry = EmbeddedRegistry::open(log).unwrap();
    let (addr, stop) = serve_router(wrap(cdc_registry::http::router(registry.clone()))).await;
    Served {
        addr,
        registry,
        _dir: dir,
        stop: Some(stop),
    }
}

pub async fn serve() -> Served {
    serve_with(|r| r).await
}

/// A record schema `app.Value` with `(name, type, default)` fields.
pub fn rec(fields: &[(&str, &str, Option<&str>)]) -> String {
    let fs: Vec<String> = fields
        .iter()
        .map(|(n, t, d)| match d {
            Some(d) => format!(r#"{{"name":"{n}","type":{t},"default":{d}}}"#),
            None => format!(r#"{{"name":"{n}","type":{t}}}"#),
        })
        .collect();
    format!(
        r#"{{"type":"record","name":"Value","namespace":"app","fields":[{}]}}"#,
        fs.join(",")
    )
}
