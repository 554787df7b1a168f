//! A host name of the test's own in `/etc/hosts`, pointed at one loopback address and then
//! another: what a DNS name does in a failover (a managed database's endpoint, a
//! Kubernetes Service, a Patroni/Consul name), for tests of a connector that must find
//! its server again at a new address.
//!
//! Invariant: only lines this process added (marked with the name, unique per process)
//! are changed or removed; the entry is removed when dropped. Needs write access to
//! `/etc/hosts` (root); [`HostsEntry::add`] says `None` otherwise, and the test skips
//! loudly. The system resolver reads `/etc/hosts` on every lookup (no cache here), so a
//! change is seen by the next connection.

use std::net::Ipv4Addr;

const HOSTS: &str = "/etc/hosts";

pub struct HostsEntry {
    name: String,
}

impl HostsEntry {
    /// Adds `<ip> <name>` for a name unique to this process (`<prefix>-<pid>.test`).
    pub fn add(prefix: &str, ip: Ipv4Addr) -> Option<HostsEntry> {
        let e = HostsEntry {
            name: format!("{prefix}-{}.test", std::process::id()),
        };
        e.set(ip).ok()?;
        Some(e)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Points the name at `ip`.
    pub fn set(&self, ip: Ipv4Addr) -> std::io::Result<()> {
        let mut text = self.others()?;
        text.push_str(&format!("{ip} {} # cdc-harness\n", self.name));
        replace_hosts(&text)
    }

    /// The file without this entry's lines.
    fn others(&self) -> std::io::Result<String> {
        let text = std::fs::read_to_string(HOSTS)?;
        let mut out = String::with_capacity(text.len());
        for line in text.lines() {
            if !line.split_whitespace().any(|w| w == self.name) {
                out.push_str(line);
                out.push('\n');
            }
        }
        Ok(out)
    }
}

impl Drop for HostsEntry {
    fn drop(&mut self) {
        if let Ok(text) = self.others() {
            let _ = replace_hosts(&text);
        }
    }
}

/// Replaces the file by a rename, so that another test's lookup (`localhost`) never reads
/// it half written; in place where a rename cannot replace it (a bind mount).
fn replace_hosts(text: &str) -> std::io::Result<()> {
    let tmp = format!("{HOSTS}.cdc-harness-{}", std::process::id());
    std::fs::write(&tmp, text)?;
    if std::fs::rename(&tmp, HOSTS).is_err() {
        let _ = std::fs::remove_file(&tmp);
        std::fs::write(HOSTS, text)?;
    }
    Ok(())
}
