//! `cdc check` end to end: the real binary against real Postgres and MariaDB servers
//! started by the harness. Each misconfiguration must fail with its own message and fix,
//! and exit non-zero; a correct setup must pass and exit 0.

use std::process::{Command, Output};

use cdc_harness::{MariaDbOptions, MariaDbServer, PgOptions, PgServer};

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn cdc(args: &[&str], config: &str, env: &[(&str, &str)]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cdc.toml");
    std::fs::write(&path, config).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cdc-e2e"));
    cmd.args(args).arg("--config").arg(&path);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().unwrap();
    Run {
        code: status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

fn check(config: &str) -> Run {
    cdc(&["check"], config, &[])
}

fn config(kind: &str, url: &str, tables: &[&str]) -> String {
    let tables: Vec<String> = tables.iter().map(|t| format!("{t:?}")).collect();
    format!(
        "name = \"it\"\n[source]\ntype = \"{kind}\"\nurl = \"{url}\"\ntables = [{}]\n[log]\ndir = \"/tmp/unused\"\n",
        tables.join(", ")
    )
}

/// A fresh database on the shared server with one keyed table, created as `cdc`.
async fn pg_db(pg: &PgServer) -> String {
    let db = pg.create_database().await.unwrap();
    pg.execute(
        &db,
        "SET ROLE cdc; CREATE TABLE public.orders (id bigint PRIMARY KEY, note text)",
    )
    .await
    .unwrap();
    db
}

fn assert_failed(run: &Run, check_name: &str, needles: &[&str]) {
    assert_eq!(
        run.code, 1,
        "exit code\nstdout:\n{}\nstderr:\n{}",
        run.stdout, run.stderr
    );
    let line = run
        .stdout
        .lines()
        .position(|l| {
            l.trim_start().starts_with("FAIL") && l.split_whitespace().nth(1) == Some(check_name)
        })
        .unwrap_or_else(|| panic!("no FAIL line for {check_name}:\n{}", run.stdout));
    // The failure line and its fix lines.
    let block: String = run
        .stdout
        .lines()
        .skip(line)
        .take(10)
        .collect::<Vec<_>>()
        .join("\n");
    for n in needles {
        assert!(
            block.contains(n),
            "{check_name}: missing {n:?} in\n{block}\n\nfull output:\n{}",
            run.stdout
        );
    }
}

#[tokio::test]
async fn postgres_correct_setup_passes() {
    let pg = PgServer::shared();
    let db = pg_db(pg).await;
    let run = check(&config(
        "postgres",
        &pg.url("cdc", "cdc-pw", &db),
        &["public.orders"],
    ));
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("All checks passed"), "{}", run.stdout);
    assert!(run.stdout.contains("has REPLICATION"), "{}", run.stdout);
}

#[tokio::test]
async fn postgres_wal_level_replica_fails() {
    let pg = PgServer::start(PgOptions::default().wal_level("replica")).unwrap();
    let db = pg_db(&pg).await;
    let run = check(&config(
        "postgres",
        &pg.url("cdc", "cdc-pw", &db),
        &["public.orders"],
    ));
    assert_failed(
        &run,
        "wal_level",
        &[
            "\"replica\"",
            "ALTER SYSTEM SET wal_level = logical",
            "restart",
        ],
    );
}

#[tokio::test]
async fn postgres_missing_replication_privilege_fails() {
    let pg = PgServer::shared();
    let db = pg_db(pg).await;
    pg.execute(&db, "GRANT SELECT ON public.orders TO app")
        .await
        .unwrap();
    let run = check(&config(
        "postgres",
        &pg.url("app", "app-pw", &db),
        &["public.orders"],
    ));
    assert_failed(
        &run,
        "replication_privilege",
        &["\"app\"", "ALTER ROLE app WITH REPLICATION;"],
    );
}

#[tokio::test]
async fn postgres_table_without_key_fails() {
    let pg = PgServer::shared();
    let db = pg_db(pg).await;
    pg.execute(
        &db,
        "SET ROLE cdc; CREATE TABLE public.events (at timestamptz, what text)",
    )
    .await
    .unwrap();
    let run = check(&config(
        "postgres",
        &pg.url("cdc", "cdc-pw", &db),
        &["public.*"],
    ));
    assert_failed(
        &run,
        "tables",
        &[
            "public.events has no primary key",
            "ADD PRIMARY KEY",
            "ALTER TABLE public.events REPLICA IDENTITY FULL;",
        ],
    );
    // A table with REPLICA IDENTITY FULL and no key is usable (keyless records): a warning.
    pg.execute(&db, "ALTER TABLE public.events REPLICA IDENTITY FULL")
        .await
        .unwrap();
    let run = check(&config(
        "postgres",
        &pg.url("cdc", "cdc-pw", &db),
        &["public.*"],
    ));
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(
        run.stdout.contains("WARN") && run.stdout.contains("public.events"),
        "{}",
        run.stdout
    );
    // The advice names the setting that gives such a table a key…
    assert!(
        run.stdout
            .contains("source.message_key_columns = [\"public.events:<column>,<column>\"]"),
        "{}",
        run.stdout
    );
    // …and with it the table counts as keyed: no warning, the key is reported.
    let keyed = |entry: &str| {
        config("postgres", &pg.url("cdc", "cdc-pw", &db), &["public.*"]).replace(
            "[log]",
            &format!("message_key_columns = [\"{entry}\"]\n[log]"),
        )
    };
    let run = check(&keyed("public.events:what,at"));
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(!run.stdout.contains("WARN"), "{}", run.stdout);
    assert!(
        run.stdout
            .contains("public.events: records keyed by (what, at) from source.message_key_columns"),
        "{}",
        run.stdout
    );
    // A column the table does not have fails, naming it, the entry and the setting.
    let run = check(&keyed("public.events:at,nope"));
    assert_failed(
        &run,
        "tables",
        &[
            "source.message_key_columns entry \"public.events:at,nope\"",
            "\"nope\"",
            "the columns of public.events: at, what",
        ],
    );
}

#[tokio::test]
async fn postgres_missing_table_fails() {
    let pg = PgServer::shared();
    let db = pg_db(pg).await;
    let run = check(&config(
        "postgres",
        &pg.url("cdc", "cdc-pw", &db),
        &["public.orders", "public.nope"],
    ));
    assert_failed(
        &run,
        "tables",
        &["public.nope does not exist", "source.tables"],
    );
}

#[tokio::test]
async fn postgres_slot_with_wrong_plugin_fails() {
    let pg = PgServer::shared();
    let db = pg_db(pg).await;
    // A slot of the connector's default name (cdc_<name>) that is not a pgoutput slot
    // (physical: every Postgres build has those; test_decoding is not in all of them).
    pg.execute(
        &db,
        "SELECT pg_create_physical_replication_slot('cdc_wrongplugin')",
    )
    .await
    .unwrap();
    let cfg = config(
        "postgres",
        &pg.url("cdc", "cdc-pw", &db),
        &["public.orders"],
    )
    .replace("name = \"it\"", "name = \"wrongplugin\"");
    let run = check(&cfg);
    pg.execute(&db, "SELECT pg_drop_replication_slot('cdc_wrongplugin')")
        .await
        .unwrap();
    assert_failed(
        &run,
        "slot",
        &[
            "a physical slot",
            "pgoutput",
            "pg_drop_replication_slot('cdc_wrongplugin')",
        ],
    );
}

#[tokio::test]
async fn postgres_wrong_password_fails() {
    let pg = PgServer::shared();
    let db = pg_db(pg).await;
    let run = check(&config(
        "postgres",
        &pg.url("cdc", "not-the-password", &db),
        &["public.orders"],
    ));
    assert_failed(
        &run,
        "authentication",
        &[
            "password authentication failed",
            "source.password",
            "CDC_SOURCE__PASSWORD",
        ],
    );
    assert!(!run.stdout.contains("not-the-password") && !run.stderr.contains("not-the-password"));
    assert!(
        run.stdout.contains("skip"),
        "later checks are reported as skipped:\n{}",
        run.stdout
    );
}

#[tokio::test]
async fn postgres_unreachable_host_fails() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("postgres://cdc:cdc-pw@127.0.0.1:{port}/app?connect_timeout=3");
    let run = check(&config("postgres", &url, &["public.orders"]));
    assert_failed(
        &run,
        "connect",
        &[
            "cannot reach Postgres at 127.0.0.1",
            "check the host and port",
        ],
    );
}

#[tokio::test]
async fn postgres_auth_methods_and_tls_modes() {
    let bin_dir = cdc_harness::resolve_pg_bin_dir(None).unwrap();
    if !cdc_harness::pg_supports_ssl(&bin_dir).unwrap() {
        // The Postgres 16 build from PyPI (pgserver) has no SSL support.
        eprintln!("SKIPPED: {} is built without SSL", bin_dir.display());
        return;
    }
    let pg = PgServer::start(PgOptions::default().ssl(true)).unwrap();
    let db = pg_db(&pg).await;
    let ca = pg
        .ca_cert_path()
        .expect("ssl server has a CA")
        .display()
        .to_string();
    let tables = ["public.orders"];
    // Other roles use a publication the table owner made, as a DBA would set it up.
    pg.execute(
        &db,
        "SET ROLE cdc; CREATE PUBLICATION cdc_it FOR TABLE public.orders; GRANT SELECT ON public.orders TO cdc_md5, cdc_trust",
    )
    .await
    .unwrap();
    // md5 and trust authentication.
    for url in [
        pg.url("cdc_md5", "md5-pw", &db),
        format!("postgres://cdc_trust@127.0.0.1:{}/{db}", pg.port()),
    ] {
        let run = check(&config("postgres", &url, &tables));
        assert_eq!(run.code, 0, "{url}\n{}", run.stdout);
    }
    // TLS: require (no verification), verify-ca and verify-full with our CA.
    for mode in ["require", "verify-ca", "verify-full"] {
        let url = format!(
            "{}?sslmode={mode}&sslrootcert={ca}",
            pg.url("cdc", "cdc-pw", &db)
        );
        let run = check(&config("postgres", &url, &tables));
        assert_eq!(run.code, 0, "{mode}\n{}", run.stdout);
        assert!(
            run.stdout.contains(", TLS"),
            "{mode} connected without TLS:\n{}",
            run.stdout
        );
    }
    // disable really is plain.
    let url = format!("{}?sslmode=disable", pg.url("cdc", "cdc-pw", &db));
    let run = check(&config("postgres", &url, &tables));
    assert!(run.stdout.contains("no TLS"), "{}", run.stdout);
    // verify-full against the public roots cannot trust our private CA.
    let url = format!("{}?sslmode=verify-full", pg.url("cdc", "cdc-pw", &db));
    let run = check(&config("postgres", &url, &tables));
    assert_failed(&run, "tls", &["sslmode=verify-full", "sslrootcert"]);
}

#[tokio::test]
async fn secrets_stay_out_of_output_and_debug_logs() {
    let pg = PgServer::shared();
    let db = pg_db(pg).await;
    pg.execute(&db, "INSERT INTO public.orders VALUES (1, 'first')")
        .await
        .unwrap();
    // The password comes from the environment; the URL carries a decoy.
    let url = format!("postgres://cdc:url-decoy-pw@127.0.0.1:{}/{db}", pg.port());
    let work = tempfile::tempdir().unwrap();
    let log_dir = work.path().join("log");
    // Its own name, so its slot (cdc_secrets) cannot confuse the other tests' checks.
    let cfg = config("postgres", &url, &["public.orders"])
        .replace("name = \"it\"", "name = \"secrets\"")
        .replace("/tmp/unused", log_dir.to_str().unwrap());
    let env = [
        ("CDC_SOURCE__PASSWORD", "cdc-pw"),
        ("CDC_LOG_LEVEL", "trace"),
    ];
    let leaked = |all: &str| all.contains("cdc-pw") || all.contains("url-decoy-pw");

    let run = cdc(&["check"], &cfg, &env);
    let all = format!("{}{}", run.stdout, run.stderr);
    assert!(!leaked(&all), "secret leaked by check:\n{all}");
    assert_eq!(run.code, 0, "env password must win over the URL's:\n{all}");

    // `run` streams until SIGTERM; trace logs go to files (a pipe could fill and stall it).
    let path = work.path().join("cdc.toml");
    std::fs::write(&path, &cfg).unwrap();
    let (out, err) = (work.path().join("stdout"), work.path().join("stderr"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_cdc-e2e"))
        .args(["run", "--config"])
        .arg(&path)
        .envs(env)
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let topic = log_dir.join("topics").join("secrets.public.orders");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !topic.exists() && std::time::Instant::now() < deadline {
        assert!(
            child.try_wait().unwrap().is_none(),
            "run exited early:\n{}",
            std::fs::read_to_string(&err).unwrap()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(
        topic.exists(),
        "no records after 60 s:\n{}",
        std::fs::read_to_string(&err).unwrap()
    );
    // A streamed change too, so the streaming path's logging is covered.
    pg.execute(&db, "INSERT INTO public.orders VALUES (2, 'second')")
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    let all = format!(
        "{}{}",
        std::fs::read_to_string(&out).unwrap(),
        std::fs::read_to_string(&err).unwrap()
    );
    pg.execute(&db, "SELECT pg_drop_replication_slot('cdc_secrets')")
        .await
        .unwrap();
    assert!(!leaked(&all), "secret leaked by run:\n{all}");
    assert_eq!(
        status.code(),
        Some(0),
        "SIGTERM must stop run cleanly:\n{all}"
    );
}

#[tokio::test]
async fn bad_config_exits_2_naming_the_key() {
    let run = cdc(
        &["check"],
        "name = \"x\"\n[source]\ntype = \"postgres\"\n",
        &[],
    );
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("`source.url`") && run.stderr.contains("required"),
        "{}",
        run.stderr
    );
    let missing = Command::new(env!("CARGO_BIN_EXE_cdc-e2e"))
        .args(["check", "--config", "/nonexistent/cdc.toml"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/cdc.toml"));
}

#[tokio::test]
async fn json_report() {
    let pg = PgServer::shared();
    let db = pg_db(pg).await;
    let run = cdc(
        &["check", "--json"],
        &config(
            "postgres",
            &pg.url("cdc", "cdc-pw", &db),
            &["public.orders"],
        ),
        &[],
    );
    let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(v["ok"], true);
    assert!(v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["name"] == "wal_level" && c["status"] == "ok"));
}

async fn my_db(my: &MariaDbServer) -> String {
    let db = my.create_database().await.unwrap();
    my.execute(&format!(
        "CREATE TABLE `{db}`.orders (id BIGINT PRIMARY KEY, note TEXT)"
    ))
    .await
    .unwrap();
    db
}

#[tokio::test]
async fn mariadb_correct_setup_passes() {
    let my = MariaDbServer::shared();
    let db = my_db(my).await;
    let run = check(&config(
        "mysql",
        &my.url("cdc", "cdc-pw", &db),
        &[&format!("{db}.orders")],
    ));
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("MariaDB"), "{}", run.stdout);
    assert!(
        run.stdout.contains("binlog_row_metadata  FULL")
            || run.stdout.contains("FULL (column names"),
        "{}",
        run.stdout
    );
    // The read-only cdc user sees the primary key (MariaDB hides TABLE_CONSTRAINTS from it).
    assert!(!run.stdout.contains("no primary key"), "{}", run.stdout);
}

#[tokio::test]
async fn mariadb_statement_binlog_fails() {
    let my = MariaDbServer::start(MariaDbOptions::default().binlog_format("STATEMENT")).unwrap();
    let db = my_db(&my).await;
    let run = check(&config(
        "mysql",
        &my.url("cdc", "cdc-pw", &db),
        &[&format!("{db}.orders")],
    ));
    assert_failed(
        &run,
        "binlog_format",
        &["STATEMENT", "SET GLOBAL binlog_format = 'ROW';", "my.cnf"],
    );
}

#[tokio::test]
async fn mariadb_binlog_off_fails() {
    let my = MariaDbServer::start(MariaDbOptions::default().binlog(false)).unwrap();
    let db = my_db(&my).await;
    let run = check(&config(
        "mysql",
        &my.url("cdc", "cdc-pw", &db),
        &[&format!("{db}.orders")],
    ));
    assert_failed(
        &run,
        "log_bin",
        &["binary log is off", "log_bin = mysql-bin", "restart"],
    );
}

#[tokio::test]
async fn mariadb_missing_privileges_and_wrong_password_fail() {
    let my = MariaDbServer::shared();
    let db = my_db(my).await;
    let tables = [format!("{db}.orders")];
    let tables: Vec<&str> = tables.iter().map(String::as_str).collect();
    let run = check(&config("mysql", &my.url("app", "app-pw", &db), &tables));
    assert_failed(
        &run,
        "privileges",
        &[
            "REPLICATION SLAVE",
            "GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO 'app'@",
        ],
    );
    let run = check(&config("mysql", &my.url("cdc", "wrong", &db), &tables));
    assert_failed(
        &run,
        "authentication",
        &["Access denied", "source.password"],
    );
}

#[test]
fn version_flag() {
    let out = Command::new(env!("CARGO_BIN_EXE_cdc-e2e"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("cdc "));
}
