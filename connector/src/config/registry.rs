//! `[registry]`: which schema registry the pipeline registers schemas with — the embedded
//! one (its default compatibility level) or a remote Confluent-compatible one (URL,
//! credentials, CA, timeout). Invariant after `validate`: the keys of the other kind are
//! absent, so no key is parsed and then ignored.

use std::path::PathBuf;

use serde::Deserialize;

use cdc_sources::Secret;

/// `[registry]`: which schema registry the pipeline registers schemas with.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryConfig {
    /// A Confluent-compatible registry (`https://host:8081`); absent = the embedded one.
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub password: Option<Secret>,
    #[serde(default)]
    pub bearer_token: Option<Secret>,
    /// Extra CA certificates (PEM) to trust for the remote registry's TLS.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Per-request timeout for the remote registry (ms); default 10000.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Default compatibility level of the embedded registry (subjects without their own
    /// and no `PUT /config`); default BACKWARD. An error with `url`: a remote registry's
    /// levels are its own.
    #[serde(default)]
    pub compatibility: Option<String>,
}

impl RegistryConfig {
    /// The embedded registry's default level.
    pub fn compatibility_level(&self) -> cdc_schemas::compat::CompatibilityLevel {
        self.compatibility
            .as_deref()
            .and_then(|s| s.parse().ok())
            .unwrap_or_default()
    }

    /// Options for `cdc_registry::remote::RemoteRegistry`, when `url` is set.
    pub fn remote_options(&self) -> Option<cdc_registry::remote::RemoteOptions> {
        let url = self.url.as_ref()?;
        let mut o = cdc_registry::remote::RemoteOptions::new(url.clone());
        o.username = self.username.clone();
        o.password = self.password.as_ref().map(|p| p.expose().to_string());
        o.bearer_token = self.bearer_token.as_ref().map(|t| t.expose().to_string());
        o.ca_file = self.ca_file.clone();
        if let Some(ms) = self.timeout_ms {
            o.timeout = std::time::Duration::from_millis(ms);
        }
        Some(o)
    }

    pub(super) fn validate(&self) -> Result<(), (String, String)> {
        if let Some(l) = &self.compatibility {
            if let Err(e) = l.parse::<cdc_schemas::compat::CompatibilityLevel>() {
                return Err(("registry.compatibility".into(), e.to_string()));
            }
        }
        if let Some(u) = &self.url {
            let parsed = url::Url::parse(u)
                .ok()
                .filter(|p| matches!(p.scheme(), "http" | "https") && p.has_host());
            let Some(parsed) = parsed else {
                return Err((
                    "registry.url".into(),
                    format!("{:?}: use an http:// or https:// URL", redact_userinfo(u)),
                ));
            };
            if !parsed.username().is_empty() || parsed.password().is_some() {
                return Err((
                    "registry.url".into(),
                    format!(
                        "{:?} holds credentials: put them in registry.username and registry.password (better: CDC_REGISTRY__PASSWORD), or registry.bearer_token",
                        redact_userinfo(u)
                    ),
                ));
            }
            if self.compatibility.is_some() {
                return Err((
                    "registry.compatibility".into(),
                    "sets the embedded registry's default level, and registry.url is set: the remote registry's own levels apply (set them there: PUT /config, PUT /config/<subject>). Remove the key".into(),
                ));
            }
        } else {
            let remote_only = [
                ("registry.username", self.username.is_some()),
                ("registry.password", self.password.is_some()),
                ("registry.bearer_token", self.bearer_token.is_some()),
                ("registry.ca_file", self.ca_file.is_some()),
                ("registry.timeout_ms", self.timeout_ms.is_some()),
            ];
            if let Some((key, _)) = remote_only.iter().find(|(_, set)| *set) {
                return Err((
                    key.to_string(),
                    "is only used with a remote registry, and registry.url is not set (the embedded registry is used): set registry.url, or remove the key".into(),
                ));
            }
        }
        if self.timeout_ms == Some(0) {
            return Err(("registry.timeout_ms".into(), "must be > 0".into()));
        }
        if self.password.is_some() && self.username.is_none() {
            return Err((
                "registry.password".into(),
                "set registry.username too (basic auth)".into(),
            ));
        }
        if self.bearer_token.is_some() && self.username.is_some() {
            return Err((
                "registry.bearer_token".into(),
                "use either bearer_token or username/password, not both".into(),
            ));
        }
        Ok(())
    }
}

/// `url` with any `user:password@` replaced by `***@`, for messages.
pub fn redact_userinfo(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
        None => url.to_string(),
    }
}
