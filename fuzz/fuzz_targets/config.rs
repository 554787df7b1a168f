//! Fuzz target `config`: the connector's configuration parser (`connector/src/config.rs`,
//! `Config::from_parts`, what `Config::load` runs on the file's text): TOML syntax, every
//! section's keys and types (`[source]` of either database, `[log]` embedded or Kafka,
//! `[registry]`, `[format]`, `[[routing]]`, `[[sink]]` of every target), the environment
//! overrides and validation; then what the pipeline derives from a loaded configuration.
//!
//! The input is the file's text, optionally followed by a NUL byte and environment
//! overrides, one `KEY=value` per line (`CDC_` is put before each key, so `SOURCE__URL=x`
//! is `CDC_SOURCE__URL`). Seeds: the repository's example configurations
//! (`docker/*.toml`, the README's examples; `fuzz/seeds.sh`).
#![no_main]

use std::path::Path;

use cdc_connector::config::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (text, env) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    let env: Vec<(String, String)> = String::from_utf8_lossy(env)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (format!("CDC_{k}"), v.to_string()))
        .collect();
    let Ok(c) = Config::from_parts(Path::new("cdc.toml"), text, env) else {
        return;
    };
    let _ = format!("{c:?}");
    let _ = c.topic_router();
    let _ = c.source_spec();
    let _ = c.log.topic_config();
    let _ = c.log.kafka_settings(&c.name);
    let _ = c.log.log_options();
    let _ = c.registry.remote_options();
    let _ = c.registry.compatibility_level();
});
