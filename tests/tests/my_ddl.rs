//! The MySQL source's schema knowledge against a real MariaDB: `load_tables` reads what
//! `information_schema` says, and DDL applied to a loaded [`Schemas`] gives exactly what
//! the server reports after executing the same statement (column by column, keys,
//! charsets), including the table swaps of gh-ost and pt-online-schema-change.

use cdc_harness::MariaDbServer;
use cdc_sources::filter::TableFilter;
use cdc_sources::mysql::ddl::{DdlEffect, TableChange};
use cdc_sources::mysql::schema::{load_tables, Flavor, Schemas};
use mysql_async::prelude::Queryable;

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

/// Runs statements on the server and on a [`Schemas`], comparing after each.
struct Run {
    conn: mysql_async::Conn,
    db: String,
    filter: TableFilter,
    s: Schemas,
    failures: Vec<String>,
}

impl Run {
    async fn new(my: &MariaDbServer, filter: impl Fn(&str) -> TableFilter) -> Run {
        let db = my.create_database().await.unwrap();
        let mut conn = my.root_conn().await.unwrap();
        conn.query_drop(format!("USE `{db}`")).await.unwrap();
        let filter = filter(&db);
        let s = Schemas::load(&mut conn, &filter).await.unwrap();
        Run {
            conn,
            db,
            filter,
            s,
            failures: Vec::new(),
        }
    }

    /// `sql` with `%DB%` replaced by the test database's name, run in that database.
    async fn step(&mut self, sql: &str) -> DdlEffect {
        let db = self.db.clone();
        self.step_in(&db, sql).await
    }

    /// `sql` run with default database `current`.
    async fn step_in(&mut self, current: &str, sql: &str) -> DdlEffect {
        let sql = sql.replace("%DB%", &self.db);
        self.conn
            .query_drop(format!("USE `{current}`"))
            .await
            .unwrap();
        if let Err(e) = self.conn.query_drop(&sql).await {
            panic!("the server rejected `{sql}`: {e}");
        }
        let effect = match self.s.apply_ddl(Some(current), &sql, &self.filter) {
            Ok(e) => e,
            Err(e) => {
                self.failures.push(format!("{sql}\n  error: {e}"));
                // Resynchronise so later statements are still checked.
                self.s = Schemas::load(&mut self.conn, &self.filter).await.unwrap();
                return DdlEffect::default();
            }
        };
        let fresh = Schemas::load(&mut self.conn, &self.filter).await.unwrap();
        if let Some(d) = diff(&self.s, &fresh) {
            self.failures.push(format!("{sql}\n{d}"));
            self.s = fresh;
        }
        effect
    }

    fn finish(self) {
        assert!(
            self.failures.is_empty(),
            "{} statement(s) diverged from the server:\n\n{}",
            self.failures.len(),
            self.failures.join("\n\n")
        );
    }
}

/// What differs between the applied and the loaded schemas, or None.
fn diff(applied: &Schemas, loaded: &Schemas) -> Option<String> {
    let mut out = Vec::new();
    let a: Vec<_> = applied.iter().collect();
    let b: Vec<_> = loaded.iter().collect();
    let names = |v: &[&cdc_sources::mysql::table::MyTable]| {
        v.iter().map(|t| t.id().to_string()).collect::<Vec<_>>()
    };
    if names(&a) != names(&b) {
        out.push(format!(
            "  tables: applied {:?}, server {:?}",
            names(&a),
            names(&b)
        ));
    }
    for t in &b {
        let Some(x) = applied.get(&t.database, &t.name) else {
            continue;
        };
        if x.key != t.key {
            out.push(format!(
                "  {}: key applied {:?}, server {:?}",
                t.id(),
                x.key,
                t.key
            ));
        }
        let n = x.columns.len().max(t.columns.len());
        for i in 0..n {
            match (x.columns.get(i), t.columns.get(i)) {
                (Some(p), Some(q)) if p == q => {}
                (p, q) => out.push(format!(
                    "  {} column {i}:\n    applied {p:?}\n    server  {q:?}",
                    t.id()
                )),
            }
        }
        let (ca, cb) = (
            applied.table_charset(&t.database, &t.name),
            loaded.table_charset(&t.database, &t.name),
        );
        if ca != cb {
            out.push(format!(
                "  {}: table charset applied {ca:?}, server {cb:?}",
                t.id()
            ));
        }
    }
    (!out.is_empty()).then(|| out.join("\n"))
}

#[tokio::test]
async fn create_table_matches_the_server() {
    let my = MariaDbServer::shared();
    let mut r = Run::new(my, only).await;
    for sql in [
        "CREATE TABLE t1 (id INT PRIMARY KEY, a VARCHAR(10), b TEXT, c DECIMAL(10,2) NOT NULL DEFAULT 1, \
         d TINYINT(1) DEFAULT TRUE, e BIGINT UNSIGNED, f TIMESTAMP(3) NULL DEFAULT CURRENT_TIMESTAMP(3), \
         g ENUM('a','b') DEFAULT 'a', h SET('x','y'), i DATETIME DEFAULT '2020-01-01', j DATE, k TIME(2), \
         l YEAR, m FLOAT, n DOUBLE(8,3), o BIT(3) DEFAULT b'101', p BLOB, q JSON, \
         r CHAR(3) CHARACTER SET latin1 COLLATE latin1_bin, s INT ZEROFILL, u SMALLINT UNSIGNED NOT NULL, \
         v MEDIUMINT, w BOOL, x NUMERIC(5), y REAL, z VARBINARY(20))",
        "CREATE TABLE `t 2` (`Id` int NOT NULL AUTO_INCREMENT, name varchar(20) COLLATE utf8mb4_bin NOT NULL DEFAULT '', \
         PRIMARY KEY (`id`), KEY idx (name)) ENGINE=InnoDB DEFAULT CHARSET=latin1",
        "CREATE TABLE IF NOT EXISTS t1 (x int)",
        "CREATE TABLE t3 LIKE t1",
        "CREATE TABLE t4 (a int, b int, c varchar(5), PRIMARY KEY (b, a)) CHARACTER SET utf8",
        "CREATE TABLE t5 (a int NOT NULL, b int AS (a*2) VIRTUAL, c int GENERATED ALWAYS AS (a+1) STORED, \
         d varchar(10) DEFAULT 'it''s', e int DEFAULT -5, f double DEFAULT 1.5, \
         g datetime(6) DEFAULT NOW(6) ON UPDATE NOW(6), h uuid, i inet6, j text(100), k tinytext, l longblob, \
         m char, n binary, o varchar(5) BINARY, p national char(2), q serial, r int(5) unsigned DEFAULT '3', \
         s float(30), t time DEFAULT '10:00', u timestamp NULL DEFAULT '2020-01-01 10:00:00', v int4, w int8 DEFAULT 0)",
        "CREATE TABLE %DB%.t6 (id bigint, primary key (id)) PARTITION BY HASH (id) PARTITIONS 4",
        "CREATE TABLE t7 (a varchar(10) CHARACTER SET binary, b text CHARACTER SET binary, c int DEFAULT (1+1), \
         d varchar(36) DEFAULT (uuid()), e date DEFAULT (curdate()), f int DEFAULT (5))",
        "/* leading */ CREATE TABLE -- a comment\n `t8` (a int # another\n, b int) /*!50100 COMMENT 'x' */",
        "CREATE TABLE t9 (a int) ENGINE=InnoDB DEFAULT CHARSET=latin1 COLLATE=latin1_general_ci COMMENT='a, b'",
        "CREATE TABLE t10 (a varchar(3) COLLATE latin1_german1_ci, b mediumtext CHARACTER SET ucs2, c set('a') DEFAULT '')",
        "CREATE OR REPLACE TABLE t7 (a int KEY)",
        "CREATE TABLE t11 (a int, CONSTRAINT pk PRIMARY KEY (a), CONSTRAINT c1 CHECK (a > 0), UNIQUE KEY (a))",
    ] {
        r.step(sql).await;
    }
    r.finish();
}

#[tokio::test]
async fn alter_table_matches_the_server() {
    let my = MariaDbServer::shared();
    let mut r = Run::new(my, only).await;
    for sql in [
        "CREATE TABLE t1 (id INT PRIMARY KEY, a VARCHAR(10) DEFAULT 'z', b TEXT, c DECIMAL(10,2) NOT NULL DEFAULT 1, \
         g ENUM('a','b') DEFAULT 'a', t TINYTEXT) DEFAULT CHARSET=utf8mb4",
        "ALTER TABLE t1 ADD COLUMN aa INT NOT NULL DEFAULT 7 AFTER id",
        "ALTER TABLE t1 ADD bb VARCHAR(5) FIRST, ADD COLUMN IF NOT EXISTS aa INT",
        "ALTER TABLE t1 DROP COLUMN bb, DROP COLUMN IF EXISTS nope",
        "ALTER TABLE t1 MODIFY a VARCHAR(20) NOT NULL",
        "ALTER TABLE t1 CHANGE b b2 MEDIUMTEXT CHARACTER SET latin1",
        "ALTER TABLE t1 RENAME COLUMN b2 TO b3",
        "ALTER TABLE t1 ALTER COLUMN c SET DEFAULT 3.5, ALTER a DROP DEFAULT, ALTER COLUMN g DROP DEFAULT",
        "ALTER TABLE t1 ALTER COLUMN b3 SET DEFAULT 'q'",
        "ALTER TABLE t1 DROP PRIMARY KEY, ADD PRIMARY KEY (id, aa)",
        "ALTER TABLE t1 ENGINE=InnoDB, ROW_FORMAT=DYNAMIC, COMMENT='x, y'",
        "ALTER TABLE t1 CONVERT TO CHARACTER SET latin1",
        "ALTER TABLE t1 CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci",
        "ALTER TABLE t1 DEFAULT CHARACTER SET = latin1",
        "ALTER TABLE t1 ADD zz VARCHAR(3)",
        "ALTER TABLE t1 ADD INDEX ix (a), ADD UNIQUE KEY ux (aa, id), ALGORITHM=INPLACE, LOCK=NONE",
        "ALTER TABLE t1 ADD (c1 INT, c2 CHAR(2))",
        "ALTER TABLE t1 MODIFY COLUMN c1 BIGINT FIRST",
        "ALTER TABLE t1 CHANGE COLUMN c2 c2 CHAR(4) AFTER id",
        "ALTER TABLE t1 MODIFY COLUMN c1 BIGINT AFTER zz",
        "ALTER TABLE t1 ADD CONSTRAINT ck CHECK (aa > 0)",
        "ALTER TABLE t1 MODIFY `ID` int NOT NULL",
        "ALTER TABLE t1 WAIT 5 ADD COLUMN w2 INT UNSIGNED ZEROFILL",
        "ALTER TABLE t1 ADD COLUMN IF NOT EXISTS aa INT",
        "ALTER TABLE t1 DROP CONSTRAINT ck",
        "ALTER TABLE t1 DROP INDEX ux",
        "ALTER TABLE t1 DROP PRIMARY KEY, ADD PRIMARY KEY (id)",
        "ALTER TABLE t1 DROP COLUMN aa",
        "ALTER TABLE t1 ORDER BY id, c1",
        "ALTER TABLE %DB%.t1 ADD COLUMN `sel ect` DATETIME(3) DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3)",
        "CREATE TABLE t6 (id bigint, v int, primary key (id)) PARTITION BY HASH (id) PARTITIONS 4",
        "ALTER TABLE t6 ADD COLUMN x INT, ALGORITHM=COPY",
        "ALTER TABLE t6 COALESCE PARTITION 2",
        "ALTER TABLE t6 REMOVE PARTITIONING",
        "ALTER TABLE t6 DROP PRIMARY KEY",
        "ALTER TABLE t6 ADD PRIMARY KEY (v)",
        "CREATE TABLE t4 (a int, b int)",
        "ALTER TABLE t4 RENAME TO t4b",
        "ALTER TABLE t4b RENAME t4c, ADD COLUMN q int",
        "ALTER TABLE t4c CHARACTER SET latin1, ADD COLUMN s varchar(2)",
        "ALTER TABLE t4c CONVERT TO CHARACTER SET utf8mb4",
        "CREATE TABLE t5 (LIKE t4c)",
        "ALTER TABLE t5 ADD COLUMN c INT /* a comment, with a comma */ AFTER a, ADD COLUMN c2 INT AFTER c",
        "ALTER TABLE t5 DROP COLUMN q, ADD COLUMN q VARCHAR(3) NOT NULL FIRST",
        "ALTER TABLE t5 ADD COLUMN j JSON, ADD COLUMN e ENUM('a','b') NOT NULL, ADD u uuid DEFAULT (uuid())",
        "ALTER TABLE t5 MODIFY s VARCHAR(10) CHARACTER SET latin1 COLLATE latin1_bin NOT NULL",
        "ALTER TABLE t5 ADD COLUMN id INT NOT NULL FIRST, ADD PRIMARY KEY (id)",
        "ALTER TABLE t5 CHANGE COLUMN id id BIGINT NOT NULL AUTO_INCREMENT",
        "ALTER TABLE t5 ALTER COLUMN s SET DEFAULT 'x', ALTER COLUMN e SET DEFAULT 'b'",
        "ALTER TABLE t5 MODIFY COLUMN e ENUM('a','b','c') DEFAULT 'c' AFTER id",
    ] {
        r.step(sql).await;
    }
    r.finish();
}

#[tokio::test]
async fn rename_drop_truncate_and_databases_match_the_server() {
    let my = MariaDbServer::shared();
    let other = format!("{}_other", my.create_database().await.unwrap());
    let o2 = other.clone();
    let mut r = Run::new(my, move |db| {
        TableFilter::new(&[format!("{db}.*"), format!("{o2}.*")], &[])
    })
    .await;
    r.step("CREATE TABLE t1 (id INT PRIMARY KEY, a VARCHAR(10))")
        .await;
    r.step("CREATE TABLE t2 (id INT PRIMARY KEY)").await;
    r.step("CREATE TABLE t3 LIKE t1").await;
    let e = r.step("RENAME TABLE t3 TO t3b, t2 TO `%DB%`.`t2b`").await;
    assert!(
        matches!(
            e.changes[..],
            [TableChange::Renamed { .. }, TableChange::Renamed { .. }]
        ),
        "{e:?}"
    );
    let e = r.step("TRUNCATE TABLE t3b").await;
    assert!(
        matches!(e.changes[..], [TableChange::Truncated(_)]),
        "{e:?}"
    );
    let e = r.step("DROP TABLE IF EXISTS t3b, nope").await;
    assert!(matches!(e.changes[..], [TableChange::Dropped(_)]), "{e:?}");
    r.step(&format!("CREATE DATABASE `{other}` CHARACTER SET latin1"))
        .await;
    r.step(&format!("CREATE TABLE `{other}`.x (a varchar(3))"))
        .await;
    r.step(&format!("ALTER DATABASE `{other}` CHARACTER SET utf8mb4"))
        .await;
    r.step(&format!("CREATE TABLE `{other}`.y (a varchar(3))"))
        .await;
    r.step(&format!("ALTER TABLE `{other}`.x ADD b text")).await;
    r.step(&format!("RENAME TABLE t1 TO `{other}`.t1")).await;
    // Statements run with another default database.
    r.step_in(&other, "ALTER TABLE t1 ADD COLUMN b int").await;
    r.step_in(&other, "CREATE TABLE z LIKE `%DB%`.t2b").await;
    r.step_in(&other, "RENAME TABLE z TO `%DB%`.z").await;
    let e = r.step(&format!("DROP DATABASE `{other}`")).await;
    assert_eq!(e.changes.len(), 3, "{e:?}");
    r.finish();
}

#[tokio::test]
async fn online_schema_change_swaps_match_the_server() {
    let my = MariaDbServer::shared();
    // The tools' shadow and changelog tables are not captured.
    let mut r = Run::new(my, |db| {
        TableFilter::new(&[format!("{db}.*")], &[format!("{db}._*")])
    })
    .await;
    // gh-ost.
    r.step("CREATE TABLE g (id int primary key, v varchar(10))")
        .await;
    r.step("create /* gh-ost */ table `%DB%`.`_g_gho` like `%DB%`.`g`")
        .await;
    r.step("alter /* gh-ost */ table `%DB%`.`_g_gho` add column extra int not null default 0, modify v varchar(20)")
        .await;
    r.step("create /* gh-ost */ table `%DB%`.`_g_ghc` (id bigint auto_increment, last_update timestamp not null DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP, hint varchar(64) charset ascii not null, value varchar(4096) charset ascii not null, primary key(id), unique key hint_uidx(hint)) auto_increment=256")
        .await;
    let e = r
        .step("rename /* gh-ost */ table `%DB%`.`g` to `%DB%`.`_g_del`, `%DB%`.`_g_gho` to `%DB%`.`g`")
        .await;
    match &e.changes[..] {
        [TableChange::Altered(t)] => assert_eq!(t.columns.len(), 3),
        other => panic!("gh-ost swap: {other:?}"),
    }
    r.step("drop /* gh-ost */ table if exists `%DB%`.`_g_del`")
        .await;
    r.step("drop /* gh-ost */ table if exists `%DB%`.`_g_ghc`")
        .await;
    // pt-online-schema-change.
    r.step("CREATE TABLE p (id int primary key, v varchar(10))")
        .await;
    r.step("CREATE TABLE `%DB%`.`_p_new` (\n  `id` int(11) NOT NULL,\n  `v` varchar(10) DEFAULT NULL,\n  PRIMARY KEY (`id`)\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci")
        .await;
    r.step("ALTER TABLE `%DB%`.`_p_new` ADD COLUMN extra int, DROP COLUMN v")
        .await;
    let e = r
        .step("RENAME TABLE `%DB%`.`p` TO `%DB%`.`_p_old`, `%DB%`.`_p_new` TO `%DB%`.`p`")
        .await;
    match &e.changes[..] {
        [TableChange::Altered(t)] => {
            let names: Vec<&str> = t.columns.iter().map(|c| c.name.as_str()).collect();
            assert_eq!(names, ["id", "extra"]);
        }
        other => panic!("pt-osc swap: {other:?}"),
    }
    r.step("DROP TABLE IF EXISTS `%DB%`.`_p_old` /* generated by server */")
        .await;
    // Uncaptured tables in the database are followed quietly.
    let e = r.step("CREATE TABLE _ignored (a int)").await;
    assert!(e.is_none());
    r.finish();
}

#[tokio::test]
async fn types_and_defaults_match_the_server() {
    let my = MariaDbServer::shared();
    let mut r = Run::new(my, only).await;
    for sql in [
        "CREATE TABLE d1 (a enum('x''y','b c ') DEFAULT 'b c', b varchar(5) DEFAULT 5, c int DEFAULT '7', \
         d decimal(6,3) DEFAULT '-1.5', e float DEFAULT 0.1, f double DEFAULT 1e3, g bit DEFAULT 1, \
         h datetime(2) DEFAULT '2020-01-01 10:11:12.34', i date DEFAULT '2021-02-03', \
         j timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP, k year DEFAULT 2024, \
         l char(3) DEFAULT 'a\\\\b', m text DEFAULT 'x', n blob DEFAULT 'b', o tinyint unsigned DEFAULT 255, \
         p varchar(10) DEFAULT NULL, q int NOT NULL, r json DEFAULT '{}', s mediumint(4) zerofill DEFAULT 3, \
         t datetime DEFAULT NOW(), u time(3) DEFAULT '01:02:03.5', v bigint DEFAULT -9223372036854775808)",
        "CREATE TABLE d2 (a varchar(40) DEFAULT (concat('a','b')), b int DEFAULT (length('ab')), \
         c int DEFAULT (2 * 3), d varchar(10) DEFAULT _utf8mb4'x', e int DEFAULT +4, f decimal(4,1) DEFAULT 2)",
        "CREATE TABLE d3 (a long varchar, b long varbinary, c nvarchar(3), d character varying(4), \
         e double precision, f dec(4,1), g fixed(3), h int1, i middleint, j float(5,2) unsigned, k geometry, \
         l point NOT NULL, m text(300) CHARACTER SET latin1, n blob(70000), o char(4) ascii, p varchar(4) unicode, \
         q set('a','b') CHARACTER SET latin1 DEFAULT 'a,b', r bool DEFAULT false, s serial, t inet4, \
         u tinytext CHARACTER SET latin1, w varchar(3) CHARACTER SET utf8 COLLATE utf8_bin)",
        "ALTER TABLE d3 CONVERT TO CHARACTER SET utf8mb4",
        "ALTER TABLE d3 MODIFY a tinytext, CHANGE COLUMN c cc varchar(3) CHARACTER SET latin1 NOT NULL DEFAULT 'x' FIRST",
        "ALTER TABLE d3 ALTER COLUMN r SET DEFAULT true",
        "ALTER TABLE d3 ADD COLUMN z int NOT NULL",
        "ALTER TABLE d1 ALTER COLUMN q SET DEFAULT 4",
        "ALTER TABLE d1 ALTER COLUMN q DROP DEFAULT",
        "ALTER TABLE d1 MODIFY p varchar(10) DEFAULT 'a' NOT NULL",
        "/*!40000 ALTER TABLE d1 DISABLE KEYS */",
        "ALTER TABLE d1 ADD PRIMARY KEY USING BTREE (q)",
        "alter table d1 add column lc int after q, add column `Mixed` Int Unsigned Not Null Default '1'",
        "ALTER TABLE d1 CHANGE q q2 bigint unsigned",
        "ALTER TABLE d1 DROP COLUMN `mixed`",
        "ALTER TABLE d1 MODIFY COLUMN IF EXISTS nope int, DROP COLUMN IF EXISTS nope2",
        "CREATE TABLE d4 (id int unsigned NOT NULL AUTO_INCREMENT PRIMARY KEY, ts timestamp(6) NULL DEFAULT NULL, \
         c char(1) CHARACTER SET binary, b binary(4) DEFAULT 'ab', vb varbinary(8) DEFAULT 0x4142) DEFAULT CHARSET latin1",
        "ALTER TABLE d4 ADD COLUMN v varchar(3), CONVERT TO CHARACTER SET utf8mb3",
    ] {
        r.step(sql).await;
    }
    r.finish();
}

/// MariaDB before 10.10 (and MySQL 5.7) default to `explicit_defaults_for_timestamp = OFF`:
/// TIMESTAMP columns are NOT NULL unless declared NULL, and the first one defaults to the
/// current time.
#[tokio::test]
async fn legacy_timestamp_defaults_match_the_server() {
    let my = MariaDbServer::start(
        cdc_harness::MariaDbOptions::default().arg("--explicit-defaults-for-timestamp=0"),
    )
    .unwrap();
    let mut r = Run::new(&my, only).await;
    for sql in [
        "CREATE TABLE ts1 (id int, a timestamp, b timestamp, c timestamp NULL, d timestamp(3), \
         e timestamp DEFAULT '2020-01-01 00:00:00')",
        "CREATE TABLE ts2 (id int, a timestamp ON UPDATE CURRENT_TIMESTAMP, b timestamp(2))",
        "CREATE TABLE ts3 (id int, c timestamp NULL)",
        "ALTER TABLE ts3 ADD COLUMN a timestamp",
        "ALTER TABLE ts3 ADD COLUMN b timestamp(6) FIRST",
        "ALTER TABLE ts3 MODIFY COLUMN a timestamp",
        "CREATE TABLE ts4 (id int)",
        "ALTER TABLE ts4 ADD COLUMN a timestamp, ADD COLUMN b timestamp",
        "CREATE TABLE ts5 LIKE ts1",
    ] {
        r.step(sql).await;
    }
    r.finish();
    my.stop().unwrap();
}
