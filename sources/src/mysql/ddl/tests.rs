use super::lex::lex;
use super::*;
use crate::mysql::schema::Flavor;
use crate::mysql::table::MyColumn;

fn filter() -> TableFilter {
    TableFilter::new(&["d.*".into()], &["d._*".into()])
}

fn schemas(flavor: Flavor) -> Schemas {
    let mut s = Schemas::new(flavor);
    s.set_default_charset("d", "utf8mb4");
    s.apply_ddl(
        Some("d"),
        "CREATE TABLE t (id int PRIMARY KEY, v varchar(10))",
        &filter(),
    )
    .unwrap();
    s
}

fn col<'a>(s: &'a Schemas, t: &str, c: &str) -> &'a MyColumn {
    s.get("d", t)
        .unwrap()
        .columns
        .iter()
        .find(|x| x.name == c)
        .unwrap()
}

#[test]
fn statements_that_are_not_ddl_on_a_captured_table_are_ignored() {
    for sql in [
        "BEGIN",
        "COMMIT",
        "SAVEPOINT a",
        "ROLLBACK TO SAVEPOINT a",
        "XA START 'x'",
        "GRANT SELECT ON *.* TO 'u'@'%'",
        "CREATE USER 'u'@'%' IDENTIFIED BY 'p'",
        "ALTER USER 'u'@'%' IDENTIFIED BY 'q'",
        "SET @a = 1",
        "FLUSH TABLES",
        "ANALYZE TABLE t",
        "CREATE VIEW v AS SELECT 1",
        "CREATE DEFINER=`root`@`%` VIEW v2 AS SELECT * FROM t",
        "ALTER VIEW v AS SELECT 2",
        "CREATE TRIGGER trg BEFORE INSERT ON t FOR EACH ROW SET @x = 1",
        "CREATE PROCEDURE p() BEGIN SELECT 1; END",
        "CREATE INDEX i ON t (v)",
        "DROP INDEX i ON t",
        "DROP VIEW v",
        "CREATE TEMPORARY TABLE tmp (a int)",
        "DROP TEMPORARY TABLE IF EXISTS tmp",
        "CREATE TABLE other.x (a int)",
        "ALTER TABLE other.x ADD b int",
        "DROP TABLE other.x",
        "",
        "# only a comment",
        "/* only a comment */",
    ] {
        let mut s = schemas(Flavor::MariaDb);
        let before = s.clone();
        let e = s.apply_ddl(Some("d"), sql, &filter()).unwrap();
        assert!(e.is_none(), "{sql}: {e:?}");
        assert!(!e.schemas_changed, "{sql}");
        assert_eq!(s, before, "{sql}");
    }
}

#[test]
fn first_keyword_test_is_cheap_and_right() {
    assert!(!may_be_ddl("BEGIN"));
    assert!(!may_be_ddl("  /* x */ COMMIT"));
    assert!(may_be_ddl("/* x */ alter table t add c int"));
    assert!(may_be_ddl("-- c\nDROP TABLE t"));
    assert!(may_be_ddl("/*!40000 ALTER TABLE t DISABLE KEYS */"));
    assert!(!may_be_ddl("CREATED"));
}

#[test]
fn mariadb_printing() {
    let mut s = schemas(Flavor::MariaDb);
    s.apply_ddl(
        Some("d"),
        "ALTER TABLE `d`.`t` ADD COLUMN a INT UNSIGNED NOT NULL DEFAULT '5' FIRST, \
         ADD b TIMESTAMP(3) NULL DEFAULT CURRENT_TIMESTAMP(3), ADD c ENUM('x','y''z'), \
         ADD e BOOL DEFAULT TRUE, ADD f DECIMAL(8,2) DEFAULT 1, ADD g YEAR",
        &filter(),
    )
    .unwrap();
    let t = s.get("d", "t").unwrap();
    let names: Vec<&str> = t.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["a", "id", "v", "b", "c", "e", "f", "g"]);
    assert_eq!(col(&s, "t", "a").column_type, "int(10) unsigned");
    assert_eq!(col(&s, "t", "a").default.as_deref(), Some("5"));
    assert!(!col(&s, "t", "a").nullable);
    assert_eq!(
        col(&s, "t", "b").default.as_deref(),
        Some("current_timestamp(3)")
    );
    assert_eq!(col(&s, "t", "c").column_type, "enum('x','y''z')");
    assert_eq!(col(&s, "t", "c").charset.as_deref(), Some("utf8mb4"));
    assert_eq!(col(&s, "t", "c").default.as_deref(), Some("NULL"));
    assert_eq!(col(&s, "t", "e").column_type, "tinyint(1)");
    assert_eq!(col(&s, "t", "e").default.as_deref(), Some("1"));
    assert_eq!(col(&s, "t", "f").default.as_deref(), Some("1.00"));
    assert_eq!(col(&s, "t", "g").column_type, "year(4)");
    assert_eq!(col(&s, "t", "id").default, None);
    assert!(!col(&s, "t", "id").nullable);
}

#[test]
fn mysql8_printing() {
    let mut s = schemas(Flavor::MySql8);
    s.apply_ddl(
        Some("d"),
        "ALTER TABLE t ADD a INT UNSIGNED DEFAULT 5, ADD b TINYINT(1), ADD c INT(10) ZEROFILL, \
         ADD e YEAR, ADF",
        &filter(),
    )
    .unwrap_err();
    s.apply_ddl(
        Some("d"),
        "ALTER TABLE t ADD a INT UNSIGNED DEFAULT 5, ADD b TINYINT(1), ADD c INT(10) ZEROFILL, \
         ADD e YEAR, ADD f JSON, ADD g VARCHAR(3) DEFAULT 'x', ADD h DATETIME DEFAULT NOW()",
        &filter(),
    )
    .unwrap();
    assert_eq!(col(&s, "t", "id").column_type, "int");
    assert_eq!(col(&s, "t", "a").column_type, "int unsigned");
    assert_eq!(col(&s, "t", "a").default.as_deref(), Some("5"));
    assert_eq!(col(&s, "t", "b").column_type, "tinyint(1)");
    assert_eq!(col(&s, "t", "b").default, None);
    assert_eq!(col(&s, "t", "c").column_type, "int(10) unsigned zerofill");
    assert_eq!(col(&s, "t", "e").column_type, "year");
    assert_eq!(col(&s, "t", "f").data_type, "json");
    assert_eq!(col(&s, "t", "f").charset, None);
    assert_eq!(col(&s, "t", "g").default.as_deref(), Some("x"));
    assert_eq!(
        col(&s, "t", "h").default.as_deref(),
        Some("CURRENT_TIMESTAMP")
    );
}

#[test]
fn a_statement_not_understood_is_an_error_naming_it_and_changes_nothing() {
    let mut s = schemas(Flavor::MariaDb);
    let before = s.clone();
    let e = s
        .apply_ddl(Some("d"), "ALTER TABLE t ADD x INT, FROBNICATE", &filter())
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("ALTER TABLE t ADD x INT, FROBNICATE"),
        "{e}"
    );
    assert_eq!(e.table, Some(TableId::new("d", "t")));
    assert!(!e.is_transient());
    assert_eq!(s, before);
    let e = s
        .apply_ddl(Some("d"), "ALTER TABLE t ADD y GEOGRAPHY", &filter())
        .unwrap_err();
    assert!(e.reason.contains("geography"), "{e}");
    // A rename of a table of unknown schema onto a captured name.
    let e = s
        .apply_ddl(None, "RENAME TABLE other.x TO d.t2", &filter())
        .unwrap_err();
    assert!(e.reason.contains("unknown"), "{e}");
    // No database for an unqualified name.
    assert!(s.apply_ddl(None, "DROP TABLE t", &filter()).is_err());
    assert_eq!(s, before);
}

#[test]
fn shadow_swaps_are_alterations() {
    let mut s = schemas(Flavor::MariaDb);
    let f = filter();
    let e = s
        .apply_ddl(Some("d"), "CREATE TABLE _t_gho LIKE t", &f)
        .unwrap();
    assert!(e.is_none() && e.schemas_changed);
    s.apply_ddl(Some("d"), "ALTER TABLE _t_gho ADD COLUMN z int", &f)
        .unwrap();
    let e = s
        .apply_ddl(Some("d"), "RENAME TABLE t TO _t_del, _t_gho TO t", &f)
        .unwrap();
    match &e.changes[..] {
        [TableChange::Altered(t)] => assert_eq!(t.columns.len(), 3),
        other => panic!("{other:?}"),
    }
    assert_eq!(s.get("d", "t").unwrap().columns.len(), 3);
    let e = s.apply_ddl(Some("d"), "DROP TABLE _t_del", &f).unwrap();
    assert!(e.is_none() && e.schemas_changed);
    // A plain rename between captured names, and back out of the captured set.
    let e = s.apply_ddl(Some("d"), "RENAME TABLE t TO u", &f).unwrap();
    assert!(
        matches!(&e.changes[..], [TableChange::Renamed { .. }]),
        "{e:?}"
    );
    let e = s
        .apply_ddl(Some("d"), "ALTER TABLE u RENAME TO _u_old", &f)
        .unwrap();
    assert!(matches!(&e.changes[..], [TableChange::Dropped(_)]), "{e:?}");
    assert!(s.is_empty());
    // The state survives the schema history's serialisation.
    let back: Schemas = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    assert_eq!(back, s);
}

#[test]
fn versioned_comments_partitions_and_if_not_exists() {
    let mut s = schemas(Flavor::MariaDb);
    let f = filter();
    let e = s
        .apply_ddl(
            Some("d"),
            "CREATE TABLE p (a int NOT NULL, PRIMARY KEY (a)) ENGINE=InnoDB /*!50100 PARTITION BY HASH (a) PARTITIONS 4 */",
            &f,
        )
        .unwrap();
    assert!(matches!(&e.changes[..], [TableChange::Created(t)] if t.key == ["a"]));
    let e = s
        .apply_ddl(Some("d"), "CREATE TABLE IF NOT EXISTS p (b int)", &f)
        .unwrap();
    assert!(e.is_none());
    let e = s
        .apply_ddl(
            Some("d"),
            "ALTER TABLE p ADD c int, DROP PARTITION p1, p2",
            &f,
        )
        .unwrap();
    assert!(
        matches!(&e.changes[..], [TableChange::Altered(t), TableChange::PartitionRows { operation, .. }]
            if t.columns.len() == 2 && operation == "DROP PARTITION"),
        "{e:?}"
    );
    s.apply_ddl(Some("d"), "CREATE TABLE x LIKE p", &f).unwrap();
    let e = s
        .apply_ddl(
            Some("d"),
            "ALTER TABLE p EXCHANGE PARTITION p0 WITH TABLE x",
            &f,
        )
        .unwrap();
    assert_eq!(e.changes.len(), 2, "{e:?}");
    let e = s
        .apply_ddl(
            Some("d"),
            "ALTER TABLE p CONVERT PARTITION p0 TO TABLE y",
            &f,
        )
        .unwrap();
    assert!(
        matches!(&e.changes[..], [TableChange::PartitionRows { .. }, TableChange::Created(y)] if y.name == "y" && y.columns.len() == 2),
        "{e:?}"
    );
    let e = s
        .apply_ddl(Some("d"), "ALTER TABLE p COALESCE PARTITION 2", &f)
        .unwrap();
    assert!(e.is_none() && !e.schemas_changed, "{e:?}");
    let e = s.apply_ddl(Some("d"), "TRUNCATE p", &f).unwrap();
    assert!(matches!(&e.changes[..], [TableChange::Truncated(_)]));
    let e = s
        .apply_ddl(Some("d"), "CREATE OR REPLACE TABLE p (z int)", &f)
        .unwrap();
    assert!(
        matches!(
            &e.changes[..],
            [TableChange::Dropped(_), TableChange::Created(_)]
        ),
        "{e:?}"
    );
}

#[test]
fn lexing() {
    let t = lex("a `b``c` 'd''e\\n' \"f\" 1.5e3 x'4142' b'01' -- x\n /*!50100 g */ #h").unwrap();
    let texts: Vec<&str> = t.iter().map(|t| t.text.as_str()).collect();
    assert_eq!(
        texts,
        ["a", "b`c", "d'e\n", "f", "1.5e3", "4142", "01", "g"]
    );
    assert!(lex("'open").is_err());
}

#[test]
fn mariadb_spatial_reference_id() {
    let mut s = schemas(Flavor::MariaDb);
    s.apply_ddl(
        Some("d"),
        "ALTER TABLE t ADD COLUMN p POINT REF_SYSTEM_ID=4326, ADD q GEOMETRY REF_SYSTEM_ID 0",
        &filter(),
    )
    .unwrap();
    assert_eq!(col(&s, "t", "p").data_type, "point");
    assert_eq!(col(&s, "t", "q").data_type, "geometry");
}

/// Found by the `binlog` fuzz target: a `CHECK` not followed by `(` made the group skipper
/// count a `)` below depth 0 (an overflow panic with overflow checks; without them, the
/// rest of the statement swallowed).
#[test]
fn check_without_its_expression_is_an_error_not_a_panic() {
    for sql in [
        "CREATE TABLE c1 (a int CHECK)",
        "CREATE TABLE c2 (a int CHECK ), b int)",
        "ALTER TABLE t ADD COLUMN w int CHECK )",
    ] {
        let mut s = schemas(Flavor::MariaDb);
        let before = s.clone();
        let e = s.apply_ddl(Some("d"), sql, &filter()).unwrap_err();
        assert!(e.reason.contains("CHECK"), "{sql}: {e}");
        assert_eq!(s, before, "{sql}: a failed statement changes nothing");
    }
    // A CHECK with its expression still parses.
    let mut s = schemas(Flavor::MariaDb);
    s.apply_ddl(
        Some("d"),
        "CREATE TABLE c3 (a int CHECK (a > 0))",
        &filter(),
    )
    .unwrap();
    assert_eq!(col(&s, "c3", "a").data_type, "int");
}
