//! Preflight checks of a Postgres source: connection and authentication, `wal_level`,
//! slot and WAL-sender capacity, the role's REPLICATION attribute, the captured tables
//! (exist, readable, keyed or with a usable REPLICA IDENTITY), the publication, the slot
//! (pgoutput, same database, not invalidated) and WAL retention settings.

use cdc_schemas::TableId;
use tokio_postgres::Client;

use super::config::PgSettings;
use super::conn::{PgConnectErrorKind, PgEndpoint};
use crate::check::{pg_ident, CheckReport};
use crate::config::SourceSpec;
use crate::filter::is_pattern;

const LATER: &[&str] = &[
    "server_version",
    "wal_level",
    "replication_slots",
    "wal_senders",
    "replication_privilege",
    "tables",
    "publication",
    "slot",
    "wal_retention",
];

pub async fn check(spec: &SourceSpec, pg: &PgSettings) -> CheckReport {
    let common = &spec.source.common;
    let endpoint = match PgEndpoint::from_url(common.url.expose(), common.password.as_ref()) {
        Ok(ep) => ep,
        Err(e) => {
            let mut r = CheckReport::new(format!("postgres source {}", common.url));
            r.fail("connect", e.message, e.fix);
            r.skip(LATER, "not checked: the source URL is invalid");
            return r;
        }
    };
    let mut r = CheckReport::new(format!("postgres source {}", endpoint.redacted));
    let client = match endpoint.connect().await {
        Ok(c) => c,
        Err(e) => {
            let name = match e.kind {
                PgConnectErrorKind::Auth => "authentication",
                PgConnectErrorKind::Tls => "tls",
                _ => "connect",
            };
            r.fail(name, e.message, e.fix);
            r.skip(LATER, "not checked: no connection");
            return r;
        }
    };
    if let Err(e) = checks(spec, pg, &endpoint, &client, &mut r).await {
        r.fail(
            "query",
            format!("a catalog query failed: {}", super::conn::error_chain(&e)),
            "check that the user may read the system catalogs (pg_catalog) of this database",
        );
    }
    r
}

async fn checks(
    spec: &SourceSpec,
    pg: &PgSettings,
    ep: &PgEndpoint,
    c: &Client,
    r: &mut CheckReport,
) -> Result<(), tokio_postgres::Error> {
    let row = c
        .query_one(
            "SELECT current_setting('server_version'), current_setting('server_version_num')::int, \
             current_user::text, current_database()::text, \
             coalesce((SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()), false)",
            &[],
        )
        .await?;
    let version: String = row.get(0);
    let version_num: i32 = row.get(1);
    let user: String = row.get(2);
    let db: String = row.get(3);
    let ssl: bool = row.get(4);
    r.pass(
        "connect",
        format!(
            "PostgreSQL {version} at {} as {user:?}, database {db:?}, {}",
            ep.address(),
            if ssl { "TLS" } else { "no TLS" }
        ),
    );
    if version_num < 100_000 {
        r.fail(
            "server_version",
            format!("PostgreSQL {version} has no pgoutput plugin"),
            "upgrade to PostgreSQL 10 or later (14 or later for streaming of large transactions)",
        );
    } else if version_num < 140_000 {
        r.warn(
            "server_version",
            format!("PostgreSQL {version}: large transactions are decoded only after commit (streaming needs 14+)"),
            "upgrade to PostgreSQL 14 or later to stream large transactions while they are open",
        );
    } else {
        r.pass(
            "server_version",
            format!(
                "PostgreSQL {version} (pgoutput protocol {})",
                if version_num >= 160_000 {
                    4
                } else if version_num >= 150_000 {
                    3
                } else {
                    2
                }
            ),
        );
    }

    // wal_level
    let wal_level: String = c
        .query_one("SELECT current_setting('wal_level')", &[])
        .await?
        .get(0);
    if wal_level == "logical" {
        r.pass("wal_level", "logical");
    } else {
        r.fail(
            "wal_level",
            format!("wal_level is {wal_level:?}; logical decoding needs \"logical\""),
            "ALTER SYSTEM SET wal_level = logical;\nthen restart Postgres (a reload is not enough)",
        );
    }

    // Slot and sender capacity. Our own slot, if it exists, already holds its place.
    let slot = pg.slot().to_string();
    let row = c
        .query_one(
            "SELECT current_setting('max_replication_slots')::int, \
                    (SELECT count(*)::int FROM pg_replication_slots), \
                    EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1), \
                    current_setting('max_wal_senders')::int, \
                    (SELECT count(*)::int FROM pg_stat_replication)",
            &[&slot],
        )
        .await?;
    let (max_slots, used_slots, slot_exists, max_senders, used_senders): (
        i32,
        i32,
        bool,
        i32,
        i32,
    ) = (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
    if slot_exists || used_slots < max_slots {
        r.pass(
            "replication_slots",
            format!("{used_slots} of max_replication_slots = {max_slots} in use"),
        );
    } else {
        r.fail(
            "replication_slots",
            format!("all {max_slots} replication slots are in use and slot {slot:?} does not exist yet"),
            format!(
                "ALTER SYSTEM SET max_replication_slots = {};\nthen restart Postgres; or drop an unused slot: SELECT pg_drop_replication_slot('<name>');",
                max_slots.max(used_slots) + 4
            ),
        );
    }
    if used_senders < max_senders {
        r.pass(
            "wal_senders",
            format!("{used_senders} of max_wal_senders = {max_senders} in use"),
        );
    } else {
        r.fail(
            "wal_senders",
            format!("all {max_senders} WAL senders are in use (max_wal_senders = {max_senders})"),
            format!(
                "ALTER SYSTEM SET max_wal_senders = {};\nthen restart Postgres",
                max_senders.max(used_senders) + 4
            ),
        );
    }

    // Role privileges.
    let row = c
        .query_one(
            "SELECT rolreplication, rolsuper FROM pg_roles WHERE rolname = current_user",
            &[],
        )
        .await?;
    let (replication, superuser): (bool, bool) = (row.get(0), row.get(1));
    if superuser || replication {
        r.pass(
            "replication_privilege",
            if superuser {
                format!("{user:?} is a superuser")
            } else {
                format!("{user:?} has REPLICATION")
            },
        );
    } else {
        r.fail(
            "replication_privilege",
            format!("role {user:?} has neither REPLICATION nor SUPERUSER, so it cannot open a replication connection"),
            format!(
                "ALTER ROLE {} WITH REPLICATION;\n(on Amazon RDS / Aurora: GRANT rds_replication TO {};)",
                pg_ident(&user),
                pg_ident(&user)
            ),
        );
    }

    // Tables.
    let rows = c
        .query(
            "SELECT n.nspname::text, c.relname::text, c.relreplident::text, \
                    EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary), \
                    EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisreplident), \
                    has_table_privilege(c.oid, 'SELECT'), \
                    pg_has_role(c.relowner, 'USAGE') \
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition \
               AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_toast%' \
               AND n.nspname NOT LIKE 'pg\\_temp%' \
             ORDER BY 1, 2",
            &[],
        )
        .await?;
    let filter = spec.source.common.filter();
    let key_columns = spec.source.common.key_columns();
    let mut captured: Vec<TableId> = Vec::new();
    let mut problems: Vec<(String, String)> = Vec::new();
    let mut not_owned: Vec<TableId> = Vec::new();
    let mut keyless_full = Vec::new();
    for row in &rows {
        let id = TableId::new(row.get::<_, String>(0), row.get::<_, String>(1));
        if !filter.includes(&id) {
            continue;
        }
        let replident: String = row.get(2);
        let (has_pk, has_ri_index, can_select, owns): (bool, bool, bool, bool) =
            (row.get(3), row.get(4), row.get(5), row.get(6));
        let qualified = format!("{}.{}", pg_ident(&id.schema), pg_ident(&id.name));
        match replident.as_str() {
            "d" if !has_pk => problems.push((
                format!("{id} has no primary key and REPLICA IDENTITY DEFAULT: its UPDATEs and DELETEs cannot be captured (Postgres rejects them once the table is published)"),
                format!("ALTER TABLE {qualified} ADD PRIMARY KEY (<key columns>);\nor: ALTER TABLE {qualified} REPLICA IDENTITY FULL;"),
            )),
            "n" => problems.push((
                format!("{id} has REPLICA IDENTITY NOTHING: its UPDATEs and DELETEs cannot be captured"),
                format!("ALTER TABLE {qualified} REPLICA IDENTITY DEFAULT;  (with a primary key)\nor: ALTER TABLE {qualified} REPLICA IDENTITY FULL;"),
            )),
            "i" if !has_ri_index => problems.push((
                format!("{id} has REPLICA IDENTITY USING INDEX but the index is gone"),
                format!("ALTER TABLE {qualified} REPLICA IDENTITY USING INDEX <unique index>;  or REPLICA IDENTITY FULL"),
            )),
            "f" if !has_pk && key_columns.for_table(&id).is_none() => {
                keyless_full.push(id.to_string())
            }
            _ => {}
        }
        if !can_select {
            problems.push((
                format!("{user:?} may not SELECT from {id}, so the snapshot cannot read it"),
                format!("GRANT SELECT ON {qualified} TO {};", pg_ident(&user)),
            ));
        }
        if !owns && !superuser {
            not_owned.push(id.clone());
        }
        captured.push(id);
    }
    for pattern in filter.include_patterns() {
        let matched = captured
            .iter()
            .any(|t| crate::filter::glob(pattern, &t.to_string()));
        if !matched {
            if is_pattern(pattern) {
                r.warn(
                    "tables",
                    format!("pattern {pattern:?} matches no table in database {db:?}"),
                    "fix the pattern in source.tables, or create the tables",
                );
            } else {
                problems.push((
                    format!("table {pattern} does not exist in database {db:?} (or is a view or partition)"),
                    "fix source.tables (names are case-sensitive: schema.table), or create the table".into(),
                ));
            }
        }
    }
    let tables_failed = !problems.is_empty() || captured.is_empty();
    if captured.is_empty() && problems.is_empty() {
        r.fail(
            "tables",
            format!("no table in database {db:?} matches source.tables"),
            "list the tables to capture in source.tables as schema.table",
        );
    }
    for (detail, fix) in problems {
        r.fail("tables", detail, fix);
    }
    if !tables_failed {
        r.pass(
            "tables",
            format!(
                "{} table(s) to capture: {}",
                captured.len(),
                summarize(&captured)
            ),
        );
    }
    if !keyless_full.is_empty() {
        r.warn(
            "tables",
            format!("no primary key, REPLICA IDENTITY FULL: {} — their records will have no key (null key, no per-row ordering across partitions)", keyless_full.join(", ")),
            format!(
                "add a primary key, or name their key columns in {}, e.g. {} = [\"{}:<column>,<column>\"]",
                crate::keys::KEY,
                crate::keys::KEY,
                keyless_full[0]
            ),
        );
    }
    check_key_columns(c, &key_columns, &captured, r).await?;

    // Publication.
    let publication = pg.publication().to_string();
    let row = c
        .query_opt(
            "SELECT puballtables FROM pg_publication WHERE pubname = $1",
            &[&publication],
        )
        .await?;
    match row {
        Some(row) => {
            let all: bool = row.get(0);
            if all {
                r.pass(
                    "publication",
                    format!("{publication:?} exists (FOR ALL TABLES)"),
                );
            } else {
                let published: Vec<TableId> = c
                    .query("SELECT schemaname::text, tablename::text FROM pg_publication_tables WHERE pubname = $1", &[&publication])
                    .await?
                    .iter()
                    .map(|row| TableId::new(row.get::<_, String>(0), row.get::<_, String>(1)))
                    .collect();
                let missing: Vec<&TableId> =
                    captured.iter().filter(|t| !published.contains(t)).collect();
                if missing.is_empty() {
                    r.pass(
                        "publication",
                        format!("{publication:?} exists and publishes every captured table"),
                    );
                } else if !not_owned.iter().any(|t| missing.contains(&t)) || superuser {
                    r.info(
                        "publication",
                        format!(
                            "{publication:?} exists; the connector will add {} table(s) to it",
                            missing.len()
                        ),
                    );
                } else {
                    r.fail(
                        "publication",
                        format!("publication {publication:?} lacks {} and {user:?} does not own them, so it cannot add them", summarize_refs(&missing)),
                        format!(
                            "as the tables' owner: ALTER PUBLICATION {} ADD TABLE {};",
                            pg_ident(&publication),
                            missing.iter().map(|t| format!("{}.{}", pg_ident(&t.schema), pg_ident(&t.name))).collect::<Vec<_>>().join(", ")
                        ),
                    );
                }
            }
        }
        None => {
            let can_create: bool = c
                .query_one(
                    "SELECT has_database_privilege(current_database(), 'CREATE')",
                    &[],
                )
                .await?
                .get(0);
            let tables_sql = captured
                .iter()
                .map(|t| format!("{}.{}", pg_ident(&t.schema), pg_ident(&t.name)))
                .collect::<Vec<_>>()
                .join(", ");
            if superuser || (can_create && not_owned.is_empty()) {
                r.info(
                    "publication",
                    format!("{publication:?} does not exist yet; the connector will create it"),
                );
            } else {
                let why = if !can_create {
                    format!("{user:?} lacks CREATE on database {db:?}")
                } else {
                    format!("{user:?} does not own {}", summarize(&not_owned))
                };
                r.fail(
                    "publication",
                    format!("publication {publication:?} does not exist and the connector cannot create it: {why}"),
                    format!("as the tables' owner or a superuser: CREATE PUBLICATION {} FOR TABLE {tables_sql};", pg_ident(&publication)),
                );
            }
        }
    }

    // Slot.
    let slot_row = if version_num >= 130_000 {
        c.query_opt(
            "SELECT plugin::text, database::text, active, active_pid, coalesce(wal_status, ''), \
                    pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn))::text, slot_type::text \
             FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await?
    } else {
        c.query_opt(
            "SELECT plugin::text, database::text, active, active_pid, ''::text, \
                    pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn))::text, slot_type::text \
             FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await?
    };
    match slot_row {
        None => r.info(
            "slot",
            format!("slot {slot:?} does not exist yet; the connector will create it (pgoutput)"),
        ),
        Some(row) => {
            let plugin: Option<String> = row.get(0);
            let database: Option<String> = row.get(1);
            let active: bool = row.get(2);
            let active_pid: Option<i32> = row.get(3);
            let wal_status: String = row.get(4);
            let retained: Option<String> = row.get(5);
            let slot_type: String = row.get(6);
            let drop_fix = format!(
                "SELECT pg_drop_replication_slot('{slot}');  (or set source.slot to another name)"
            );
            if slot_type != "logical" || plugin.as_deref() != Some("pgoutput") {
                r.fail(
                    "slot",
                    format!("slot {slot:?} exists but is a {slot_type} slot with plugin {:?}; the connector needs a logical pgoutput slot", plugin.unwrap_or_default()),
                    drop_fix,
                );
            } else if database.as_deref() != Some(db.as_str()) {
                r.fail(
                    "slot",
                    format!(
                        "slot {slot:?} belongs to database {:?}, not {db:?}",
                        database.unwrap_or_default()
                    ),
                    drop_fix,
                );
            } else if wal_status == "lost" {
                r.fail(
                    "slot",
                    format!("slot {slot:?} is invalidated (wal_status = lost): the WAL it needed was removed, so changes were missed"),
                    format!("{drop_fix}\nthen run the connector with a new snapshot (snapshot mode initial or when_needed)"),
                );
            } else {
                let retained = retained.unwrap_or_else(|| "?".into());
                if active {
                    r.warn(
                        "slot",
                        format!(
                            "slot {slot:?} is in use by another connection (pid {})",
                            active_pid.unwrap_or(0)
                        ),
                        format!(
                            "stop the other consumer, or: SELECT pg_terminate_backend({});",
                            active_pid.unwrap_or(0)
                        ),
                    );
                } else if wal_status == "unreserved" {
                    r.warn(
                        "slot",
                        format!("slot {slot:?} retains {retained} of WAL and is about to be invalidated (wal_status = unreserved)"),
                        "start the connector now, or raise max_slot_wal_keep_size",
                    );
                } else {
                    r.pass(
                        "slot",
                        format!(
                            "slot {slot:?} (pgoutput) exists, retains {retained} of WAL{}",
                            if wal_status.is_empty() {
                                String::new()
                            } else {
                                format!(", wal_status = {wal_status}")
                            }
                        ),
                    );
                }
            }
        }
    }

    // Retention.
    if version_num >= 130_000 {
        let keep: String = c
            .query_one("SELECT current_setting('max_slot_wal_keep_size')", &[])
            .await?
            .get(0);
        if keep == "-1" {
            r.info(
                "wal_retention",
                "max_slot_wal_keep_size = -1: a slot may retain WAL without limit (the connector keeps its slot moving; a stopped connector does not)",
            );
        } else {
            r.info(
                "wal_retention",
                format!("max_slot_wal_keep_size = {keep}: a connector stopped long enough to fall further behind loses its slot and needs a new snapshot"),
            );
        }
    } else {
        r.info(
            "wal_retention",
            "PostgreSQL before 13 cannot cap the WAL a slot retains",
        );
    }
    Ok(())
}

/// `source.message_key_columns` against the captured tables: every configured column
/// exists, and the replica identity carries it (else deletes have nulls in their keys).
async fn check_key_columns(
    c: &Client,
    keys: &crate::keys::MessageKeyColumns,
    captured: &[TableId],
    r: &mut CheckReport,
) -> Result<(), tokio_postgres::Error> {
    use crate::keys::KEY;
    for rule in keys.rules() {
        if !captured
            .iter()
            .any(|t| crate::filter::glob(&rule.pattern, &t.to_string()))
        {
            r.warn(
                "tables",
                format!("{KEY} entry {:?} matches no captured table", rule.entry()),
                format!("fix the table pattern of the entry, or remove it from {KEY}"),
            );
        }
    }
    for id in captured {
        let Some(rule) = keys.for_table(id) else {
            continue;
        };
        // Each column, and whether the old row of an update or delete carries it.
        let rows = c
            .query(
                "SELECT a.attname::text, \
                        CASE c.relreplident \
                          WHEN 'f' THEN true \
                          WHEN 'd' THEN EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary AND a.attnum = ANY(i.indkey)) \
                          WHEN 'i' THEN EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisreplident AND a.attnum = ANY(i.indkey)) \
                          ELSE false END \
                 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                 JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped \
                 WHERE n.nspname = $1 AND c.relname = $2 ORDER BY a.attnum",
                &[&id.schema, &id.name],
            )
            .await?;
        let columns: Vec<(String, bool)> =
            rows.iter().map(|row| (row.get(0), row.get(1))).collect();
        let unknown: Vec<&String> = rule
            .columns
            .iter()
            .filter(|k| !columns.iter().any(|(n, _)| n == *k))
            .collect();
        let qualified = format!("{}.{}", pg_ident(&id.schema), pg_ident(&id.name));
        if !unknown.is_empty() {
            r.fail(
                "tables",
                format!(
                    "{KEY} entry {:?} names column(s) {} that {id} does not have; the connector would stop at its first change",
                    rule.entry(),
                    unknown.iter().map(|u| format!("{u:?}")).collect::<Vec<_>>().join(", ")
                ),
                format!(
                    "fix the entry in {KEY} (names are case-sensitive); the columns of {id}: {}",
                    columns.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
                ),
            );
            continue;
        }
        let outside: Vec<&String> = rule
            .columns
            .iter()
            .filter(|k| {
                columns
                    .iter()
                    .any(|(n, in_identity)| n == *k && !in_identity)
            })
            .collect();
        if outside.is_empty() {
            r.info(
                "tables",
                format!(
                    "{id}: records keyed by ({}) from {KEY}",
                    rule.columns.join(", ")
                ),
            );
        } else {
            r.warn(
                "tables",
                format!(
                    "{id} is keyed by ({}) from {KEY}, but its REPLICA IDENTITY does not carry {}: the keys of its deletes would have null there",
                    rule.columns.join(", "),
                    outside.iter().map(|u| u.as_str()).collect::<Vec<_>>().join(", ")
                ),
                format!("ALTER TABLE {qualified} REPLICA IDENTITY FULL;  (or key it by its replica identity's columns)"),
            );
        }
    }
    Ok(())
}

fn summarize(t: &[TableId]) -> String {
    summarize_refs(&t.iter().collect::<Vec<_>>())
}

fn summarize_refs(t: &[&TableId]) -> String {
    let names: Vec<String> = t.iter().take(10).map(|t| t.to_string()).collect();
    if t.len() > 10 {
        format!("{} and {} more", names.join(", "), t.len() - 10)
    } else {
        names.join(", ")
    }
}
