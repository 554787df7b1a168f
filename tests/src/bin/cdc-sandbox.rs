//! The sandbox behind the README's first command: starts a private Postgres (the harness's
//! own throwaway server, on a free loopback port), creates a small shop database, writes a
//! connector config for it, and runs the connector's preflight checks against it.
//!
//! `cdc-sandbox` runs the checks and stops the server; `cdc-sandbox --keep` leaves it
//! running until Ctrl-C and prints how to reach it.

use std::process::ExitCode;

use anyhow::Context;
use cdc_connector::config::Config;
use cdc_harness::PgServer;

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

fn main() -> ExitCode {
    let keep = std::env::args().any(|a| a == "--keep");
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    match rt.block_on(run(keep)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("sandbox failed: {e:#}");
            ExitCode::from(1)
        }
    }
}

async fn run(keep: bool) -> anyhow::Result<bool> {
    eprintln!("starting a private Postgres (wal_level=logical) on a free loopback port...");
    let pg = PgServer::start(Default::default()).context("starting the sandbox Postgres")?;
    let db = pg.create_database().await?;
    pg.execute(&db, &format!("SET ROLE cdc; {SCHEMA}")).await?;
    let url = pg.url("cdc", cdc_harness::passwords::PG_CDC, &db);
    let log_dir = pg.dir().join("cdc-log");
    let config_text = format!(
        "name = \"shop\"\n\n[source]\ntype = \"postgres\"\nurl = \"{url}\"\ntables = [\"public.customers\", \"public.orders\"]\n\n[log]\ndir = \"{}\"\npartitions = 3\n",
        log_dir.display()
    );
    let config_path = pg.dir().join("cdc.toml");
    std::fs::write(&config_path, &config_text)?;
    eprintln!(
        "Postgres {} is up at 127.0.0.1:{}, database {db:?} with tables public.customers (100 rows) and public.orders (1000 rows).",
        pg.major_version(),
        pg.port()
    );
    eprintln!(
        "connector config ({}):\n\n{}",
        config_path.display(),
        config_text.replace(cdc_harness::passwords::PG_CDC, "***")
    );
    let config = Config::from_parts(&config_path, &config_text, std::iter::empty())?;
    let report = cdc_connector::check::run(&config).await;
    print!("{}", report.render_text());
    if keep {
        eprintln!(
            "\nThe sandbox keeps running until Ctrl-C. Try:\n  cargo run -p cdc-connector --bin cdc -- check --config {}\n  psql 'postgres://postgres:{}@127.0.0.1:{}/{db}'",
            config_path.display(),
            cdc_harness::passwords::PG_SUPERUSER,
            pg.port()
        );
        tokio::signal::ctrl_c().await?;
    }
    eprintln!("stopping the sandbox (its data directory is removed)");
    drop(pg);
    Ok(report.ok())
}
