//! Opening a replication connection: TCP or Unix socket, TLS negotiation per `sslmode`,
//! the `replication=database` start-up packet with the session settings pgoutput's
//! output depends on, and authentication (trust, cleartext, md5, SCRAM-SHA-256).
//!
//! Invariants: the whole sequence is bounded by the endpoint's `connect_timeout`; a
//! failure is a [`PgConnectError`] with the same kinds and fixes the catalog connection
//! gives (unreachable, TLS, authentication), so `cdc check` and the source say the same.

use super::*;

fn connect_error(kind: PgConnectErrorKind, message: String, fix: &str) -> PgConnectError {
    PgConnectError {
        kind,
        message,
        fix: fix.to_string(),
    }
}

fn unreachable_error(ep: &PgEndpoint, detail: impl std::fmt::Display) -> PgConnectError {
    connect_error(
        PgConnectErrorKind::Unreachable,
        format!("cannot reach Postgres at {} for replication: {detail}", ep.address()),
        "check the host and port in source.url, that Postgres is running, and that listen_addresses and any firewall let this host in",
    )
}

fn tls_error(ep: &PgEndpoint, detail: impl std::fmt::Display) -> PgConnectError {
    let fix = match ep.tls {
        TlsMode::VerifyCa | TlsMode::VerifyFull => {
            "make sslrootcert point at the CA that signed the server certificate (and for verify-full, connect by a host name or IP the certificate names), or lower sslmode"
        }
        _ => "enable TLS on the server (ssl = on with ssl_cert_file/ssl_key_file) or use sslmode=prefer/disable",
    };
    connect_error(
        PgConnectErrorKind::Tls,
        format!(
            "TLS with Postgres at {} failed (sslmode={}): {detail}",
            ep.address(),
            ep.tls.as_str()
        ),
        fix,
    )
}

/// Classifies an ErrorResponse received during start-up.
fn startup_error(ep: &PgEndpoint, e: &PgServerError) -> PgConnectError {
    let (kind, fix) = match e.code.as_str() {
        "28P01" => (
            PgConnectErrorKind::Auth,
            format!(
                "check the password of role {:?} (source.password, or CDC_SOURCE__PASSWORD); to set it: ALTER ROLE \"{}\" PASSWORD '...'",
                ep.user, ep.user
            ),
        ),
        "28000" => (
            PgConnectErrorKind::Auth,
            format!(
                "add a pg_hba.conf line that lets role {:?} open replication connections to database {:?} from this host (e.g. 'host {} {} <client-ip>/32 scram-sha-256' — for replication=database the database column is matched like a normal connection), then SELECT pg_reload_conf()",
                ep.user, ep.dbname, ep.dbname, ep.user
            ),
        ),
        "42501" => (
            PgConnectErrorKind::Auth,
            format!("grant the replication privilege: ALTER ROLE \"{}\" REPLICATION", ep.user),
        ),
        "3D000" => (
            PgConnectErrorKind::NoDatabase,
            format!(
                "create the database (CREATE DATABASE \"{}\") or fix the database name in source.url",
                ep.dbname
            ),
        ),
        c if sqlstate_is_transient(c) => (
            PgConnectErrorKind::Unreachable,
            "wait for the server to accept connections, or raise max_connections / max_wal_senders".into(),
        ),
        "53400" => (
            PgConnectErrorKind::Other,
            "raise max_wal_senders (restart needed) or stop other replication connections".into(),
        ),
        _ => (PgConnectErrorKind::Other, "see the server's message".into()),
    };
    PgConnectError {
        kind,
        message: format!(
            "Postgres at {} refused the replication connection as {:?}: {e}",
            ep.address(),
            ep.user
        ),
        fix,
    }
}

impl ReplicationConnection {
    /// Connects, negotiates TLS per `ep.tls`, starts a `replication=database` session and
    /// authenticates. The whole sequence is bounded by `ep.connect_timeout`.
    pub async fn connect(ep: &PgEndpoint) -> Result<ReplicationConnection, ReplicationError> {
        match tokio::time::timeout(ep.connect_timeout, Self::connect_inner(ep)).await {
            Ok(r) => r,
            Err(_) => Err(unreachable_error(
                ep,
                format!(
                    "no complete start-up within connect_timeout ({:?})",
                    ep.connect_timeout
                ),
            )
            .into()),
        }
    }

    async fn connect_inner(ep: &PgEndpoint) -> Result<ReplicationConnection, ReplicationError> {
        let (io, tls) = if ep.host.starts_with('/') {
            let path = ep.address();
            let s = tokio::net::UnixStream::connect(&path)
                .await
                .map_err(|e| unreachable_error(ep, e))?;
            (Box::new(s) as Io, false)
        } else {
            let mut tcp = tokio::net::TcpStream::connect((ep.host.as_str(), ep.port))
                .await
                .map_err(|e| unreachable_error(ep, e))?;
            let _ = tcp.set_nodelay(true);
            if ep.tls == TlsMode::Disable {
                (Box::new(tcp) as Io, false)
            } else {
                let mut req = BytesMut::new();
                frontend::ssl_request(&mut req);
                tcp.write_all(&req)
                    .await
                    .map_err(|e| unreachable_error(ep, e))?;
                let answer = tcp.read_u8().await.map_err(|e| unreachable_error(ep, e))?;
                match answer {
                    b'S' => {
                        let config = client_config(ep.tls, ep.root_cert.as_deref())
                            .map_err(|e| tls_error(ep, e))?;
                        let name = rustls_pki_types::ServerName::try_from(ep.host.clone())
                            .map_err(|e| {
                                tls_error(ep, format!("invalid server name {:?}: {e}", ep.host))
                            })?;
                        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
                        let s = connector
                            .connect(name, tcp)
                            .await
                            .map_err(|e| tls_error(ep, e))?;
                        (Box::new(s) as Io, true)
                    }
                    b'N' if ep.tls == TlsMode::Prefer => (Box::new(tcp) as Io, false),
                    b'N' => {
                        return Err(
                            tls_error(ep, "the server does not accept TLS connections").into()
                        )
                    }
                    other => {
                        return Err(ReplicationError::Protocol {
                            what: "TLS negotiation".into(),
                            addr: ep.address(),
                            detail: format!("answer {:?} to SSLRequest", other as char),
                        })
                    }
                }
            }
        };
        let mut conn = ReplicationConnection {
            io,
            rbuf: BytesMut::with_capacity(64 * 1024),
            wbuf: BytesMut::with_capacity(1024),
            endpoint: ep.clone(),
            params: HashMap::new(),
            server_version_num: 0,
            backend_pid: 0,
            tls,
        };
        conn.startup().await?;
        Ok(conn)
    }

    async fn startup(&mut self) -> Result<(), ReplicationError> {
        let ep = self.endpoint.clone();
        let params = [
            ("user", ep.user.as_str()),
            ("database", ep.dbname.as_str()),
            ("replication", "database"),
            ("application_name", ep.application_name.as_str()),
            ("client_encoding", "UTF8"),
            ("options", SESSION_OPTIONS),
        ];
        frontend::startup_message(params, &mut self.wbuf)
            .map_err(|e| self.protocol("start-up", e))?;
        self.flush("start-up").await?;

        let mut scram: Option<ScramSha256> = None;
        let password = || {
            ep.password.as_ref().map(|p| p.expose().to_string()).ok_or_else(|| {
                ReplicationError::from(connect_error(
                    PgConnectErrorKind::Auth,
                    format!(
                        "Postgres at {} asks for a password for {:?} and none is configured",
                        ep.address(),
                        ep.user
                    ),
                    "put the password into source.url or source.password (env CDC_SOURCE__PASSWORD)",
                ))
            })
        };
        // Authentication.
        loop {
            let f = self.read_frame("authentication").await?;
            match f.tag {
                b'R' => {
                    let code = be_i32(&f.body, 0).ok_or_else(|| {
                        self.protocol("authentication", "short authentication request")
                    })?;
                    match code {
                        0 => break,
                        3 => {
                            let pw = password()?;
                            frontend::password_message(pw.as_bytes(), &mut self.wbuf)
                                .map_err(|e| self.protocol("authentication", e))?;
                            self.flush("authentication").await?;
                        }
                        5 => {
                            let salt: [u8; 4] = f
                                .body
                                .get(4..8)
                                .and_then(|s| s.try_into().ok())
                                .ok_or_else(|| self.protocol("authentication", "short md5 salt"))?;
                            let pw = password()?;
                            let hash = md5_hash(ep.user.as_bytes(), pw.as_bytes(), salt);
                            frontend::password_message(hash.as_bytes(), &mut self.wbuf)
                                .map_err(|e| self.protocol("authentication", e))?;
                            self.flush("authentication").await?;
                        }
                        10 => {
                            let mechanisms: Vec<&[u8]> = f.body[4..]
                                .split(|&b| b == 0)
                                .filter(|m| !m.is_empty())
                                .collect();
                            if !mechanisms.contains(&SCRAM_SHA_256.as_bytes()) {
                                return Err(connect_error(
                                    PgConnectErrorKind::Auth,
                                    format!(
                                        "Postgres at {} offers SASL mechanisms {:?}, none of which this client supports",
                                        ep.address(),
                                        mechanisms.iter().map(|m| String::from_utf8_lossy(m)).collect::<Vec<_>>()
                                    ),
                                    "allow scram-sha-256 (or md5) for this role in pg_hba.conf",
                                )
                                .into());
                            }
                            let pw = password()?;
                            // Channel binding (SCRAM-SHA-256-PLUS) is not implemented: say
                            // so ("n"), which a server offering -PLUS accepts.
                            let s = ScramSha256::new(pw.as_bytes(), ChannelBinding::unsupported());
                            frontend::sasl_initial_response(SCRAM_SHA_256, s.message(), &mut self.wbuf)
                                .map_err(|e| self.protocol("authentication", e))?;
                            scram = Some(s);
                            self.flush("authentication").await?;
                        }
                        11 => {
                            let s = scram.as_mut().ok_or_else(|| {
                                self.protocol("authentication", "SASL continue without SASL start")
                            })?;
                            s.update(&f.body[4..]).map_err(|e| {
                                connect_error(
                                    PgConnectErrorKind::Auth,
                                    format!("SCRAM exchange with Postgres at {} failed: {e}", ep.address()),
                                    "check the password of the role",
                                )
                            })?;
                            let msg = s.message().to_vec();
                            frontend::sasl_response(&msg, &mut self.wbuf)
                                .map_err(|e| self.protocol("authentication", e))?;
                            self.flush("authentication").await?;
                        }
                        12 => {
                            let s = scram.as_mut().ok_or_else(|| {
                                self.protocol("authentication", "SASL final without SASL start")
                            })?;
                            s.finish(&f.body[4..]).map_err(|e| {
                                connect_error(
                                    PgConnectErrorKind::Auth,
                                    format!(
                                        "Postgres at {} failed SCRAM server verification: {e}",
                                        ep.address()
                                    ),
                                    "make sure source.url points at the intended server",
                                )
                            })?;
                        }
                        other => {
                            return Err(connect_error(
                                PgConnectErrorKind::Auth,
                                format!(
                                    "Postgres at {} asks for authentication method {other} (Kerberos/GSS/SSPI), which this client does not support",
                                    ep.address()
                                ),
                                "allow scram-sha-256, md5, password or trust for this role in pg_hba.conf",
                            )
                            .into())
                        }
                    }
                }
                b'E' => return Err(startup_error(&ep, &PgServerError::parse(&f.body)).into()),
                b'N' => log_notice(&f.body),
                other => {
                    return Err(self.protocol(
                        "authentication",
                        format!("unexpected message {:?}", other as char),
                    ))
                }
            }
        }
        // Parameters until ReadyForQuery.
        loop {
            let f = self.read_frame("start-up").await?;
            match f.tag {
                b'S' => self.parameter_status(&f.body),
                b'K' => self.backend_pid = be_i32(&f.body, 0).unwrap_or(0),
                b'Z' => break,
                b'E' => return Err(startup_error(&ep, &PgServerError::parse(&f.body)).into()),
                b'N' => log_notice(&f.body),
                other => {
                    return Err(self.protocol(
                        "start-up",
                        format!("unexpected message {:?}", other as char),
                    ))
                }
            }
        }
        if self.server_version_num == 0 {
            let r = self.simple_query("SHOW server_version_num").await?;
            self.server_version_num = r
                .first()
                .and_then(|r| r.get(0, "server_version_num"))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
        }
        tracing::debug!(
            server = %ep.address(),
            version = self.server_version_num,
            tls = self.tls,
            pid = self.backend_pid,
            "replication connection ready"
        );
        Ok(())
    }

    pub(super) fn parameter_status(&mut self, body: &[u8]) {
        let mut parts = body.split(|&b| b == 0);
        let name = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
        let value = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
        if name == "server_version" {
            if let Some(v) = parse_server_version(&value) {
                self.server_version_num = v;
            }
        }
        self.params.insert(name, value);
    }
}
