//! `cdc status --config FILE [--json]`: asks the running connector (`GET /status` on
//! `[admin] listen`, with the admin token when one is set) and, when none answers, builds
//! the same document from the log and the database (`"running": false`).
//!
//! Exit codes: 0 the document was printed (whatever it says); 2 the configuration is
//! invalid.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::config::Config;

/// How long a running connector may take to answer.
const ASK_TIMEOUT: Duration = Duration::from_secs(15);

pub async fn run(config: Config, json: bool) -> ExitCode {
    let config = Arc::new(config);
    let doc = match ask_running(&config).await {
        Some(d) => d,
        None => super::collect::document(&config, None).await,
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    } else {
        print!("{}", super::text::render(&doc));
    }
    ExitCode::SUCCESS
}

/// The running connector's document, if one answers on the admin address.
async fn ask_running(config: &Config) -> Option<Value> {
    let mut addr = config.admin.listen;
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(1))
        .timeout(ASK_TIMEOUT)
        .build()
        .ok()?;
    let mut req = client.get(format!("http://{addr}/status"));
    if let Some(t) = config.admin.token() {
        req = req.bearer_auth(t.expose());
    }
    let resp = req.send().await.ok()?;
    if !resp.status().is_success() {
        if resp.status() == reqwest::StatusCode::UNAUTHORIZED {
            eprintln!("cdc status: the connector at {addr} refused the admin token; showing what the files and the database say");
        }
        return None;
    }
    let doc: Value = resp.json().await.ok()?;
    // Another connector on that address is not this one.
    (doc.get("name").and_then(Value::as_str) == Some(config.name.as_str())).then_some(doc)
}
