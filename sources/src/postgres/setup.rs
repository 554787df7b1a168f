//! Set-up of a Postgres source: the publication (created if missing, tables added as the
//! filter finds them) and what is known of the replication slot, from which the source
//! decides where to start (resume, snapshot, or stream from now).
//!
//! Invariants: set-up only creates what the configuration names (the publication
//! `source.publication`, the slot `source.slot`); it never drops a slot that holds a
//! position the log still needs — that decision is the source's, in `source.rs`, and is
//! logged.

use cdc_schemas::{Lsn, TableId};

use super::config::PgSourceConfig;
use super::replication::quote_ident;
use super::source::{definite, sql_err};
use crate::SourceError;

pub(super) struct SlotRow {
    pub(super) plugin: Option<String>,
    pub(super) database: Option<String>,
    pub(super) wal_status: Option<String>,
    /// Where the slot streams from: everything before it was confirmed by a client.
    pub(super) confirmed_flush_lsn: Option<Lsn>,
}

pub(super) async fn slot_row(
    client: &tokio_postgres::Client,
    slot: &str,
) -> Result<Option<SlotRow>, SourceError> {
    let rows = client
        .query(
            "SELECT plugin::text, database::text, to_jsonb(s)->>'wal_status', confirmed_flush_lsn::text FROM pg_replication_slots s WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(|e| sql_err("reading the replication slot", e))?;
    Ok(rows.first().map(|r| SlotRow {
        plugin: r.get(0),
        database: r.get(1),
        wal_status: r.get(2),
        confirmed_flush_lsn: r.get::<_, Option<String>>(3).and_then(|l| l.parse().ok()),
    }))
}

/// Creates the publication if absent, adding the matching tables; adds matching tables
/// missing from an existing publication (when we may). Returns the published, included
/// tables.
pub(super) async fn ensure_publication(
    client: &tokio_postgres::Client,
    cfg: &PgSourceConfig,
) -> Result<Vec<TableId>, SourceError> {
    let candidates: Vec<TableId> = client
        .query(
            "SELECT n.nspname::text, c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
               AND n.nspname NOT LIKE 'pg_toast%' AND n.nspname NOT LIKE 'pg_temp%' ORDER BY 1, 2",
            &[],
        )
        .await
        .map_err(|e| sql_err("listing tables", e))?
        .iter()
        .map(|r| TableId::new(r.get::<_, String>(0), r.get::<_, String>(1)))
        .filter(|t| cfg.filter.includes(t))
        .collect();
    let exists = !client
        .query(
            "SELECT 1 FROM pg_publication WHERE pubname = $1",
            &[&cfg.publication],
        )
        .await
        .map_err(|e| sql_err("reading publications", e))?
        .is_empty();
    let list = |ts: &[TableId]| {
        ts.iter()
            .map(|t| format!("{}.{}", quote_ident(&t.schema), quote_ident(&t.name)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !exists {
        let sql = if candidates.is_empty() {
            format!("CREATE PUBLICATION {}", quote_ident(&cfg.publication))
        } else {
            format!(
                "CREATE PUBLICATION {} FOR TABLE {}",
                quote_ident(&cfg.publication),
                list(&candidates)
            )
        };
        client.batch_execute(&sql).await.map_err(|e| {
            definite(
                format!("creating publication {:?}", cfg.publication),
                super::conn::error_chain(&e),
                "create it as the tables' owner or a superuser (CREATE PUBLICATION … FOR TABLE …), or grant the connector's role ownership of the tables",
            )
        })?;
        tracing::info!(publication = %cfg.publication, tables = candidates.len(), "publication created");
    }
    let mut have = published_tables(client, &cfg.publication)
        .await
        .map_err(|e| sql_err("reading the publication's tables", e))?;
    let missing: Vec<TableId> = candidates
        .iter()
        .filter(|t| !have.contains(t))
        .cloned()
        .collect();
    if exists && !missing.is_empty() {
        let sql = format!(
            "ALTER PUBLICATION {} ADD TABLE {}",
            quote_ident(&cfg.publication),
            list(&missing)
        );
        match client.batch_execute(&sql).await {
            Ok(()) => {
                tracing::info!(publication = %cfg.publication, added = %list(&missing), "tables added to the publication");
                have = published_tables(client, &cfg.publication)
                    .await
                    .map_err(|e| sql_err("reading the publication's tables", e))?;
            }
            Err(e) => tracing::warn!(
                publication = %cfg.publication,
                tables = %list(&missing),
                error = %super::conn::error_chain(&e),
                "tables match source.tables but are not in the publication and could not be added; they are not captured until someone runs ALTER PUBLICATION … ADD TABLE"
            ),
        }
    }
    Ok(have
        .into_iter()
        .filter(|t| cfg.filter.includes(t))
        .collect())
}

pub(super) async fn published_tables(
    client: &tokio_postgres::Client,
    publication: &str,
) -> Result<Vec<TableId>, tokio_postgres::Error> {
    Ok(client
        .query(
            "SELECT schemaname::text, tablename::text FROM pg_publication_tables WHERE pubname = $1",
            &[&publication],
        )
        .await?
        .iter()
        .map(|r| TableId::new(r.get::<_, String>(0), r.get::<_, String>(1)))
        .collect())
}
