//! Real-server test harness: throwaway Postgres, MariaDB, Redis and Typesense servers (and
//! the noida-db emulator's Elasticsearch API, with a basic-authentication proxy to put in
//! front of it) started from the installed binaries, on free loopback ports, in temporary
//! directories, configured for change data capture. See `tests/README.md` for usage and environment variables.
//!
//! This crate owns the lifecycle of those servers and their directories. Invariants:
//! - A server never outlives its test process: a dropped server is stopped and its
//!   directory deleted; the shared per-process servers (statics, never dropped) are
//!   stopped by an `atexit` hook; if the process is SIGKILLed, every server gets SIGKILL
//!   from the kernel (`PR_SET_PDEATHSIG`, armed from one long-lived spawner thread so that
//!   test threads ending do not trigger it); directories left by such a process are swept
//!   by the next harness start in any process.
//! - Nothing touches the machine's own servers: only 127.0.0.1, only ports the kernel
//!   handed out as free, only directories the harness created (`cdc-harness-<pid>.<start>-…`),
//!   `--no-defaults` for MariaDB, a private config for Postgres.
//! - When run as root, Postgres runs as the OS user `postgres` and MariaDB as `mysql`
//!   (spawned with that uid directly; nothing runs through `su`/`pg_ctl`), so the harness
//!   is the servers' parent and can wait for them.

#[cfg(feature = "e2e")]
mod auth_proxy;
mod faultproxy;
pub mod faults;
#[cfg(feature = "e2e")]
pub mod golden;
mod hosts;
#[cfg(feature = "e2e")]
mod http;
mod mariadb;
mod noida;
mod pg;
mod process;
mod redis;
mod tansu;
mod typesense;
mod valkey;

#[cfg(feature = "e2e")]
pub use auth_proxy::{BasicAuthProxy, ProxiedRequest};
pub use faultproxy::FaultProxy;
pub use hosts::HostsEntry;
#[cfg(feature = "e2e")]
pub use http::http;
pub use mariadb::{MariaDbOptions, MariaDbServer};
pub use noida::{noida_bin, NoidaElasticsearch, NoidaKafka};
pub use pg::{
    resolve_bin_dir as resolve_pg_bin_dir, supports_ssl as pg_supports_ssl, PgOptions, PgServer,
};
pub use process::{instance_root, pid_is_running, server_processes_in, sweep_stale};
pub use redis::{RedisOptions, RedisServer};
pub use tansu::{tansu_bin, TansuKafka, TlsProxy};
pub use typesense::{search_http, typesense_bin, TypesenseServer, TYPESENSE_API_KEY};
pub use valkey::{start_valkey, valkey_binary};

/// Passwords of the test accounts.
pub mod passwords {
    pub use crate::mariadb::{
        APP_PASSWORD as MARIADB_APP, CDC_PASSWORD as MARIADB_CDC, ROOT_PASSWORD as MARIADB_ROOT,
    };
    pub use crate::pg::{
        APP_PASSWORD as PG_APP, CDC_MD5_PASSWORD as PG_CDC_MD5, CDC_PASSWORD as PG_CDC,
        SUPERUSER_PASSWORD as PG_SUPERUSER,
    };
}
