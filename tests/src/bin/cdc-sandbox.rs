//! The sandbox behind the README's first command: starts a private Postgres (the harness's
//! own throwaway server, on a free loopback port), creates a small shop database, writes a
//! connector config for it, and runs the connector's preflight checks against it.
//!
//! Then it runs the connector (the same code as `cdc run`) into an embedded log in the
//! sandbox directory while a small live workload inserts and updates orders every few
//! hundred milliseconds, and prints the change records as they arrive in the log:
//! first the snapshot (`op r`), then the live changes (`c`, `u`).
//!
//! Beside the log, a `[[sink]]` named `cache` keeps a private Redis (also the harness's
//! own) equal to the tables, one JSON key per row (`shop:orders:<id>`); at the end the
//! sandbox shows a few of those keys and runs `cdc verify --sink cache` on the orders
//! table, which compares the whole table with Redis while the workload has just stopped.
//!
//! `cdc-sandbox` runs for 20 seconds (`--seconds N` to change) and stops the server;
//! `cdc-sandbox --keep` keeps everything running until Ctrl-C and prints how to reach it.
//! `--mariadb` does the same with a private MariaDB (row binlog) and a `type = "mysql"`
//! source instead of Postgres.

use std::process::ExitCode;

use anyhow::Context;
use cdc_connector::config::Config;
use cdc_harness::{MariaDbServer, PgServer, RedisServer};

const SCHEMA: &str = "
CREATE TABLE public.customers (
    id         bigserial PRIMARY KEY,
    name       text NOT NULL,
    email      text UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE public.orders (
    id          bigserial PRIMARY KEY,
    customer_id bigint NOT NULL REFERENCES public.customers(id),
    status      text NOT NULL DEFAULT 'new',
    amount      numeric(12,2) NOT NULL,
    placed_at   timestamptz NOT NULL DEFAULT now()
);
INSERT INTO public.customers (name, email)
    SELECT 'customer ' || g, 'c' || g || '@example.com' FROM generate_series(1, 100) g;
INSERT INTO public.orders (customer_id, status, amount)
    SELECT 1 + g % 100, (ARRAY['new','paid','shipped'])[1 + g % 3], (g * 7.31)::numeric(12,2)
    FROM generate_series(1, 1000) g;
";

/// The same shop for MariaDB (run in the sandbox's database).
const MY_SCHEMA: &str = "
CREATE TABLE customers (
    id         bigint AUTO_INCREMENT PRIMARY KEY,
    name       varchar(100) NOT NULL,
    email      varchar(100) UNIQUE,
    created_at timestamp(6) NOT NULL DEFAULT current_timestamp(6)
) ENGINE=InnoDB;
CREATE TABLE orders (
    id          bigint AUTO_INCREMENT PRIMARY KEY,
    customer_id bigint NOT NULL REFERENCES customers(id),
    status      varchar(20) NOT NULL DEFAULT 'new',
    amount      decimal(12,2) NOT NULL,
    placed_at   timestamp(6) NOT NULL DEFAULT current_timestamp(6)
) ENGINE=InnoDB;
INSERT INTO customers (name, email)
    SELECT concat('customer ', seq), concat('c', seq, '@example.com') FROM seq_1_to_100;
INSERT INTO orders (customer_id, status, amount)
    SELECT 1 + seq % 100, elt(1 + seq % 3, 'new', 'paid', 'shipped'), seq * 7.31 FROM seq_1_to_1000;
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let keep = args.iter().any(|a| a == "--keep");
    let mariadb = args.iter().any(|a| a == "--mariadb");
    let seconds: u64 = args
        .iter()
        .position(|a| a == "--seconds")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let result = if mariadb {
        rt.block_on(run_mariadb(keep, seconds))
    } else {
        rt.block_on(run(keep, seconds))
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("sandbox failed: {e:#}");
            ExitCode::from(1)
        }
    }
}

async fn run(keep: bool, seconds: u64) -> anyhow::Result<bool> {
    eprintln!("starting a private Postgres (wal_level=logical) on a free loopback port...");
    let pg = PgServer::start(Default::default()).context("starting the sandbox Postgres")?;
    let db = pg.create_database().await?;
    pg.execute(&db, &format!("SET ROLE cdc; {SCHEMA}")).await?;
    eprintln!(
        "Postgres {} is up at 127.0.0.1:{}, database {db:?} with tables public.customers (100 rows) and public.orders (1000 rows).",
        pg.major_version(),
        pg.port()
    );
    let url = pg.url("cdc", cdc_harness::passwords::PG_CDC, &db);
    let ok = serve(
        Shop {
            dir: pg.dir().to_path_buf(),
            source: format!("type = \"postgres\"\nurl = \"{url}\"\ntables = [\"public.customers\", \"public.orders\"]"),
            secret: cdc_harness::passwords::PG_CDC,
            namespace: "public".into(),
            client: format!(
                "psql 'postgres://postgres:{}@127.0.0.1:{}/{db}'",
                cdc_harness::passwords::PG_SUPERUSER,
                pg.port()
            ),
        },
        workload(url),
        keep,
        seconds,
    )
    .await?;
    drop(pg);
    Ok(ok)
}

/// The MariaDB variant of [`run`]: the same shop, workload and printing.
async fn run_mariadb(keep: bool, seconds: u64) -> anyhow::Result<bool> {
    eprintln!("starting a private MariaDB (row binlog) on a free loopback port...");
    let my = MariaDbServer::start(Default::default()).context("starting the sandbox MariaDB")?;
    let db = my.create_database().await?;
    my.execute(&format!("USE {db}; {MY_SCHEMA}")).await?;
    eprintln!(
        "MariaDB is up at 127.0.0.1:{}, database {db:?} with tables customers (100 rows) and orders (1000 rows).",
        my.port()
    );
    let url = my.url("cdc", cdc_harness::passwords::MARIADB_CDC, &db);
    let ok = serve(
        Shop {
            dir: my.dir().to_path_buf(),
            source: format!("type = \"mysql\"\nurl = \"{url}?sslmode=disable\"\ntables = [\"{db}.customers\", \"{db}.orders\"]"),
            secret: cdc_harness::passwords::MARIADB_CDC,
            namespace: db.clone(),
            client: format!(
                "mariadb -h 127.0.0.1 -P {} -u root -p{} {db}",
                my.port(),
                cdc_harness::passwords::MARIADB_ROOT
            ),
        },
        // The connector's user may only read; the shop writes as root.
        my_workload(my.url("root", cdc_harness::passwords::MARIADB_ROOT, &db)),
        keep,
        seconds,
    )
    .await?;
    drop(my);
    Ok(ok)
}

/// A sandbox database with the shop in it, as [`serve`] needs it.
struct Shop {
    /// The server's directory: the config and the log go there.
    dir: std::path::PathBuf,
    /// The `[source]` keys.
    source: String,
    /// The connector's password, masked when the config is printed.
    secret: &'static str,
    /// The schema (Postgres) or database (MariaDB) of the shop's tables.
    namespace: String,
    /// How to reach the database by hand (printed with `--keep`).
    client: String,
}

/// Writes the config, runs the preflight checks, then the connector (as `cdc run`) with
/// `workload` running beside it, prints the change records until the time is up (or
/// Ctrl-C), and stops the connector like SIGTERM.
async fn serve(
    shop: Shop,
    workload: impl std::future::Future<Output = ()> + Send + 'static,
    keep: bool,
    seconds: u64,
) -> anyhow::Result<bool> {
    let log_dir = shop.dir.join("cdc-log");
    eprintln!("starting a private Redis on a free loopback port, for the cache sink...");
    let redis = RedisServer::start().context("starting the sandbox Redis")?;
    let config_text = format!(
        "name = \"shop\"\n\n[source]\n{}\n\n[log]\ndir = \"{}\"\npartitions = 3\n\n[format]\ndecimal_handling_mode = \"string\"\n\n[admin]\nlisten = \"127.0.0.1:0\"\n\n[[sink]]\nname = \"cache\"\ntype = \"redis\"\nurl = \"redis://127.0.0.1:{}/0\"\n",
        shop.source,
        log_dir.display(),
        redis.port()
    );
    let config_path = shop.dir.join("cdc.toml");
    std::fs::write(&config_path, &config_text)?;
    eprintln!(
        "connector config ({}):\n\n{}",
        config_path.display(),
        config_text.replace(shop.secret, "***")
    );
    let config = Config::from_parts(&config_path, &config_text, std::iter::empty())?;
    let report = cdc_sources::check(&config.source_spec()).await;
    print!("{}", report.render_text());
    if !report.ok() {
        eprintln!("the preflight checks failed; not starting the connector");
        return Ok(false);
    }
    eprintln!(
        "\nstarting the connector (as `cdc run --config {}`), with a live workload on {}.orders...\n",
        config_path.display(),
        shop.namespace
    );
    let connector = tokio::spawn(cdc_connector::pipeline::run::run(config));
    let workload = tokio::spawn(workload);
    let stop_printer = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let printer = std::thread::spawn({
        let dir = log_dir.clone();
        let stop = stop_printer.clone();
        let topics = vec![
            format!("shop.{}.customers", shop.namespace),
            format!("shop.{}.orders", shop.namespace),
        ];
        move || print_changes(&dir, &topics, &stop)
    });
    if keep {
        eprintln!(
            "The sandbox keeps running until Ctrl-C. Try, in another terminal:\n  cargo run -p cdc-connector --bin cdc -- log --data-dir {} topics\n  cargo run -p cdc-connector --bin cdc -- verify --config {} --table {}.orders --sink cache\n  redis-cli -p {} get shop:orders:1\n  {}\n",
            log_dir.display(),
            config_path.display(),
            shop.namespace,
            redis.port(),
            shop.client
        );
        tokio::signal::ctrl_c().await?;
    } else {
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_secs(seconds)) => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    workload.abort();
    stop_printer.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = printer.join();
    show_cache(&redis);
    eprintln!(
        "\ncomparing {}.orders with the Redis view (as `cdc verify --config {} --table {}.orders --sink cache`):",
        shop.namespace,
        config_path.display(),
        shop.namespace
    );
    let verified = cdc_connector::verify::run(cdc_connector::verify::VerifyArgs {
        config: config_path.clone(),
        table: format!("{}.orders", shop.namespace),
        sink: Some("cache".into()),
        log: false,
        chunk_rows: 10_000,
        wait_secs: 30,
        max_report: 20,
        memory_mb: 64,
        spill_dir: None,
        spill_keys: None,
    })
    .await;
    // The connector stops on the same Ctrl-C; when the time is up, stop it like SIGTERM.
    unsafe {
        libc::kill(std::process::id() as i32, libc::SIGTERM);
    }
    let _ = tokio::time::timeout(std::time::Duration::from_secs(15), connector).await;
    eprintln!("stopping the sandbox (its data directory is removed)");
    drop(redis);
    Ok(report.ok() && verified == ExitCode::SUCCESS)
}

/// Prints how many keys the cache sink wrote and two of its order rows, through
/// `redis-cli` when it is installed (it comes with redis-server).
fn show_cache(redis: &RedisServer) {
    let cli = |args: &[&str]| -> Option<String> {
        let out = std::process::Command::new("redis-cli")
            .arg("-p")
            .arg(redis.port().to_string())
            .args(args)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let Some(keys) = cli(&["dbsize"]) else {
        return;
    };
    eprintln!("\nthe cache sink's Redis holds {keys} keys (a row each, and the sink's own: offsets and a set of row keys per table), for example:");
    for key in ["shop:orders:1", "shop:customers:1"] {
        if let Some(v) = cli(&["get", key]) {
            eprintln!("  GET {key}  ->  {v}");
        }
    }
}

/// [`workload`] for MariaDB.
async fn my_workload(url: String) {
    use mysql_async::prelude::Queryable;
    let Ok(opts) = mysql_async::Opts::from_url(&url) else {
        return;
    };
    let Ok(mut conn) = mysql_async::Conn::new(opts).await else {
        return;
    };
    let mut i: i64 = 0;
    loop {
        i += 1;
        let _ = conn
            .query_drop(format!(
                "BEGIN;
                 INSERT INTO orders (customer_id, amount) VALUES ({}, {}.99);
                 UPDATE orders SET status = 'shipped' WHERE id = {};
                 COMMIT;",
                1 + i % 100,
                10 + i % 90,
                1 + (i * 37) % 1000
            ))
            .await;
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
}

/// Inserts an order and updates another one's status every 300 ms.
async fn workload(url: String) {
    let Ok((client, conn)) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await else {
        return;
    };
    tokio::spawn(conn);
    let mut i: i64 = 0;
    loop {
        i += 1;
        let _ = client
            .batch_execute(&format!(
                "BEGIN;
                 INSERT INTO public.orders (customer_id, amount) VALUES ({}, {}.99);
                 UPDATE public.orders SET status = 'shipped' WHERE id = {};
                 COMMIT;",
                1 + i % 100,
                10 + i % 90,
                1 + (i * 37) % 1000
            ))
            .await;
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
}

/// Tails the log's order and customer topics, printing one line per change record.
fn print_changes(dir: &std::path::Path, topics: &[String], stop: &std::sync::atomic::AtomicBool) {
    use cdc_log::{Log, StartAt};
    let mut readers = Vec::new();
    let mut shown_snapshot = 0u64;
    let mut holder: Option<Log> = None;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        if readers.is_empty() {
            if let Ok(log) = Log::open_read_only(dir) {
                for t in topics {
                    let t = t.as_str();
                    if let Ok(d) = log.describe(t) {
                        for p in 0..d.partitions.len() as u32 {
                            if let Ok(r) = log.reader(t, p, StartAt::Earliest) {
                                readers.push((t, r));
                            }
                        }
                    }
                }
                if readers.len() < 3 * topics.len() {
                    readers.clear();
                } else {
                    holder = Some(log);
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(300));
            continue;
        }
        let mut any = false;
        if let Some(l) = &holder {
            let _ = l.refresh();
        }
        for (topic, r) in readers.iter_mut() {
            let Ok(batch) = r.poll(1 << 20) else { continue };
            for rec in batch {
                any = true;
                let Some(v) = rec.value else { continue };
                let Ok(v) = serde_json::from_slice::<serde_json::Value>(&v) else {
                    continue;
                };
                let op = v["op"].as_str().unwrap_or("?");
                if op == "r" {
                    shown_snapshot += 1;
                    if shown_snapshot <= 3 || shown_snapshot % 250 == 0 {
                        println!(
                            "{topic:<24} op=r  snapshot row {shown_snapshot:>5}  {}",
                            v["after"]
                        );
                    }
                    continue;
                }
                let key = rec
                    .key
                    .map(|k| String::from_utf8_lossy(&k).into_owned())
                    .unwrap_or_default();
                println!("{topic:<24} op={op}  key={key}  after={}", v["after"]);
            }
        }
        if !any {
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }
}
