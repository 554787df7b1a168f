//! Schema changes on the data path: a compatible change (a nullable column) flows through;
//! an incompatible one (a column's type int → text, rejected under BACKWARD) stops the
//! connector with a definite error that names the table, the rule and the ways out, appends
//! nothing of the change and acknowledges nothing past it — so a restart with
//! `format.schema_change = "force"` delivers the row, exactly once, and leaves the
//! subject's compatibility as it was. `[registry] compatibility` is the embedded
//! registry's default level, and levels set per subject on the admin API are honoured.

mod pg_source_util;

use std::time::{Duration, Instant};

use cdc_harness::PgServer;
use pg_source_util::*;
use serde_json::json;

const VALUE_SUBJECT: &str = "t.public.s-value";

fn records_for_id(log_dir: &std::path::Path, id: i64) -> usize {
    read_topic(log_dir, "t.public.s")
        .iter()
        .filter(|r| r.value.is_some() && r.key.as_ref().is_some_and(|k| k["id"] == id))
        .count()
}

/// Waits until the log holds a record (not a tombstone) for `id`.
async fn wait_for_id(c: &Connector, id: i64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while records_for_id(&c.log_dir(), id) == 0 {
        assert!(
            Instant::now() < deadline,
            "no record for id {id} after 60 s\n{}",
            c.output()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn incompatible_change_stops_and_force_resumes_without_loss() {
    let pg = PgServer::shared();
    let db = database_with(
        pg,
        "SET ROLE cdc; CREATE TABLE s (id int PRIMARY KEY, a int NOT NULL); INSERT INTO s VALUES (1, 10);",
    )
    .await;
    let (_dir, mut c) = temp_connector(pg, &db, &["public.s"], "");
    let admin = c.fixed_admin_port();
    c.start();
    let converge = |c: &Connector| {
        let log_dir = c.log_dir();
        let db = db.clone();
        async move {
            wait_converged(
                pg,
                &db,
                "s",
                &log_dir,
                "t.public.s",
                Duration::from_secs(60),
            )
            .await
        }
    };
    converge(&c)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", c.output()));

    // Compatible: a nullable column is a union with null, default null.
    pg.execute(
        &db,
        "ALTER TABLE s ADD COLUMN note text; INSERT INTO s VALUES (2, 20, 'x');",
    )
    .await
    .unwrap();
    wait_for_id(&c, 2).await;
    c.assert_running();

    // Incompatible under BACKWARD: int cannot be read as string.
    pg.execute(
        &db,
        "ALTER TABLE s ALTER COLUMN a TYPE text; INSERT INTO s VALUES (3, 'thirty', 'y');",
    )
    .await
    .unwrap();
    let out = c
        .wait_definite_error(
            Duration::from_secs(60),
            "connector kept running after an incompatible change",
        )
        .await;
    assert_mentions(
        &out,
        &["public.s", "incompatible", "BACKWARD", "schema_change"],
    );
    assert_eq!(
        records_for_id(&c.log_dir(), 3),
        0,
        "a record of the rejected schema was appended"
    );
    assert_eq!(records_for_id(&c.log_dir(), 2), 1);

    // The operator chooses to force it: the row arrives, once; nothing before it repeats.
    c.edit_config(|text| text + "\n[format]\nschema_change = \"force\"\n");
    c.start();
    wait_for_id(&c, 3).await;
    assert_eq!(
        records_for_id(&c.log_dir(), 3),
        1,
        "the forced row must arrive exactly once"
    );
    assert_eq!(
        records_for_id(&c.log_dir(), 2),
        1,
        "nothing before the change may repeat"
    );
    assert!(
        c.output().contains("force"),
        "forcing must be logged loudly\n{}",
        c.output()
    );
    // The subject had no level of its own before: it has none after (not NONE for good).
    let (status, body) = http(&admin, "GET", &format!("/config/{VALUE_SUBJECT}"), None, "");
    assert_eq!(
        (status, body["error_code"].as_u64()),
        (404, Some(40408)),
        "after a forced change the subject must follow the global level again: {body}"
    );
    // With a level of its own (FULL), a forced change leaves it FULL.
    let (status, body) = http(
        &admin,
        "PUT",
        &format!("/config/{VALUE_SUBJECT}"),
        Some(&json!({"compatibility": "FULL"})),
        "",
    );
    assert_eq!(status, 200, "{body}");
    // bigint, not int: a schema equal to an earlier version is that version again, and is
    // not checked.
    pg.execute(
        &db,
        "ALTER TABLE s ALTER COLUMN a TYPE bigint USING length(a); INSERT INTO s VALUES (4, 40, 'z');",
    )
    .await
    .unwrap();
    wait_for_id(&c, 4).await;
    let (status, body) = http(&admin, "GET", &format!("/config/{VALUE_SUBJECT}"), None, "");
    assert_eq!(
        (status, body["compatibilityLevel"].as_str()),
        (200, Some("FULL")),
        "{body}"
    );
    let (_, versions) = http(
        &admin,
        "GET",
        &format!("/subjects/{VALUE_SUBJECT}/versions"),
        None,
        "",
    );
    assert_eq!(
        versions,
        json!([1, 2, 3, 4]),
        "both forced versions registered"
    );
    let log = std::fs::read_to_string(c.dir.join("connector.log")).unwrap();
    assert_eq!(
        log.matches("FORCED").count(),
        2,
        "two forced changes\n{log}"
    );
    assert_eq!(c.stop(), Some(0), "{}", c.output());
    drop_slot(pg, &db).await;
}

/// `[registry] compatibility = "NONE"` lets an incompatible change through; a level set on
/// the subject through the admin API (BACKWARD) then stops the next one.
#[tokio::test(flavor = "multi_thread")]
async fn configured_default_level_and_subject_levels_are_honoured() {
    let pg = PgServer::shared();
    let db = database_with(
        pg,
        "SET ROLE cdc; CREATE TABLE s (id int PRIMARY KEY, a int NOT NULL); INSERT INTO s VALUES (1, 10);",
    )
    .await;
    let (_dir, mut c) = temp_connector(
        pg,
        &db,
        &["public.s"],
        "[registry]\ncompatibility = \"NONE\"\n",
    );
    let admin = c.fixed_admin_port();
    c.start();
    wait_for_id(&c, 1).await;
    let (_, body) = http(&admin, "GET", "/config", None, "");
    assert_eq!(body["compatibilityLevel"], "NONE", "{body}");

    // Incompatible under BACKWARD, fine under the configured NONE.
    pg.execute(
        &db,
        "ALTER TABLE s ALTER COLUMN a TYPE text; INSERT INTO s VALUES (2, 'twenty');",
    )
    .await
    .unwrap();
    wait_for_id(&c, 2).await;
    c.assert_running();

    // The subject's own level wins over the default.
    let (status, body) = http(
        &admin,
        "PUT",
        &format!("/config/{VALUE_SUBJECT}"),
        Some(&json!({"compatibility": "BACKWARD"})),
        "",
    );
    assert_eq!(status, 200, "{body}");
    // bigint: int would be version 1 again, which is not checked.
    pg.execute(
        &db,
        "ALTER TABLE s ALTER COLUMN a TYPE bigint USING length(a); INSERT INTO s VALUES (3, 30);",
    )
    .await
    .unwrap();
    let out = c
        .wait_definite_error(Duration::from_secs(60), "the connector kept running")
        .await;
    assert_mentions(
        &out,
        &["public.s", "incompatible", "BACKWARD", VALUE_SUBJECT],
    );
    assert_eq!(records_for_id(&c.log_dir(), 3), 0);
    drop_slot(pg, &db).await;
}
