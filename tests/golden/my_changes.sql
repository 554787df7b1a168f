-- Debezium golden test for the MySQL source: the streamed changes (see README.md,
-- "MySQL / MariaDB"). Run after my_schema.sql, once the initial snapshot has been read.
-- Fixed values only (no NOW(), no RAND()), so every run writes the same rows; autocommit,
-- one transaction per statement unless a step says otherwise.
SET NAMES utf8mb4;
SET time_zone = '+00:00';
USE golden;

-- 1. Typical values: one transaction over three tables.
BEGIN;
INSERT INTO types (id, c_tinyint, c_tinyint_u, c_bool, c_smallint, c_smallint_u, c_mediumint,
    c_mediumint_u, c_int, c_int_u, c_bigint, c_bigint_u, c_decimal, c_decimal_big, c_float,
    c_double, c_bit1, c_bit10, c_bit64, c_date, c_datetime, c_datetime3, c_datetime6, c_ts,
    c_ts6, c_time, c_time6, c_year, c_char, c_varchar, c_text, c_char_l1, c_varchar_l1,
    c_text_l1, c_varchar_bin, c_binary, c_varbinary, c_blob, c_enum, c_set, c_json,
    c_geometry, c_point)
VALUES (11, 12, 200, 1, -1234, 60000, -8000000, 16000000, -2000000000, 4000000000,
     -9007199254740993, 9007199254740993, 12345.67,
     12345678901234567890.123456789012345678901234567890, 1.5, 3.141592653589793,
     b'1', b'1010000001', b'1000000000000000000000000000000000000000000000000000000000000001',
     '2024-02-29', '2024-01-02 03:04:05', '2024-01-02 03:04:05.678', '2024-01-02 03:04:05.678901',
     '2024-06-01 12:00:00', '2024-06-01 12:00:00.250000', '13:14:15', '13:14:15.123456', 2024,
     'ab', 'varchar é ✓ 😀', 'tab	newline
quote'' back\\slash', 'café', 'latin1 àéîõü', 'Grüße ©', 'BinCase',
     x'0102', x'00ff10deadbeef', x'000102fffe', 'it''s', 'r,w''x', '{"a": [1, 2.5, null], "b": "x\\"y"}',
     ST_GeomFromText('LINESTRING(0 0, 1 1, 2 0.5)'), ST_GeomFromText('POINT(-1.5 2.25)'));
INSERT INTO no_pk VALUES (2, 'two');
INSERT INTO composite VALUES (40, 'c', 3);
COMMIT;

-- 2. Edge values (the snapshot rows 2..5 of my_schema.sql again, now from the binlog).
INSERT INTO types (id, c_tinyint, c_tinyint_u, c_bool, c_smallint, c_smallint_u, c_mediumint,
    c_mediumint_u, c_int, c_int_u, c_bigint, c_bigint_u, c_decimal, c_decimal_big, c_float,
    c_double, c_bit1, c_bit10, c_bit64, c_date, c_datetime, c_datetime3, c_datetime6, c_ts,
    c_ts6, c_time, c_time6, c_year, c_char, c_varchar, c_text, c_char_l1, c_varchar_l1,
    c_text_l1, c_varchar_bin, c_binary, c_varbinary, c_blob, c_enum, c_set, c_json,
    c_geometry, c_point)
VALUES
    -- minimums
    (12, -128, 0, 0, -32768, 0, -8388608, 0, -2147483648, 0,
     -9223372036854775808, 0, -99999999.99,
     -99999999999999999999999999999999999.999999999999999999999999999999, -3.4e38, -1.7976931348623157e308,
     b'0', b'0', b'0', '0001-01-01', '0001-01-01 00:00:00', '0001-01-01 00:00:00.000',
     '0001-01-01 00:00:00.000000', '1970-01-01 00:00:01', '1970-01-01 00:00:01.000000',
     '-838:59:59', '-838:59:59.000000', 1901, '', '', '', '', '', '', '',
     x'', x'', x'', 'small', '', '[]', ST_GeomFromText('POINT(0 0)', 4326), ST_GeomFromText('POINT(0 0)')),
    -- maximums
    (13, 127, 255, 127, 32767, 65535, 8388607, 16777215, 2147483647, 4294967295,
     9223372036854775807, 18446744073709551615, 99999999.99,
     99999999999999999999999999999999999.999999999999999999999999999999, 3.4e38, 1.7976931348623157e308,
     b'1', b'1111111111', b'1111111111111111111111111111111111111111111111111111111111111111',
     '9999-12-31', '9999-12-31 23:59:59', '9999-12-31 23:59:59.999', '9999-12-31 23:59:59.999999',
     '2038-01-19 03:14:07', '2038-01-19 03:14:07.999999', '838:59:59', '838:59:59.000000', 2155,
     'zzzz', REPEAT('x', 20), REPEAT('y', 300), 'ÿÿÿÿ', REPEAT('ÿ', 20), 'latin1 ÿ', 'ZZ',
     x'ffffffff', x'ffffffffffffffffffffffffffffffffffffffff', x'ff', 'a,b', 'r,w''x,e f', '"just a string"',
     ST_GeomFromText('POLYGON((0 0, 4 0, 4 4, 0 4, 0 0), (1 1, 2 1, 2 2, 1 1))'),
     ST_GeomFromText('POINT(1e300 -1e-300)')),
    -- small values of the time types
    (14, -1, 1, 2, -1, 1, -1, 1, -1, 1, -1, 9223372036854775808, -0.01,
     0.000000000000000000000000000001, 1e-38, 4.9e-324, NULL, b'1', b'1',
     '1970-01-01', '1970-01-01 00:00:00', '1969-12-31 23:59:59.999', '1969-12-31 23:59:59.999999',
     '2000-01-01 00:00:00', '1999-12-31 23:59:59.999999', '-00:00:01', '-12:34:56.789012', 2000,
     ' a  ', 'trailing  ', ' ', 'a ', 'b ', 'c ', 'x',
     x'00000000', x'00', x'00', NULL, 'e f', 'null', ST_GeomFromText('MULTIPOINT(1 1, 2 2)'), NULL);
-- A row of NULLs.
INSERT INTO types (id) VALUES (15);

-- 3. Zero dates, an invalid ENUM value, YEAR 0, two-digit years (sql_mode=''; the
--    snapshot rows of zero_dates and types row 6 again).
SET @saved_mode = @@sql_mode;
SET sql_mode = '';
INSERT INTO zero_dates VALUES
    (11, '0000-00-00', '0000-00-00 00:00:00', '0000-00-00 00:00:00.000000', '0000-00-00 00:00:00',
        '0000-00-00', '0000-00-00 00:00:00', '0000-00-00 00:00:00'),
    (12, '2024-00-15', '2024-02-00 10:00:00', '0000-01-01 00:00:00.000001', '1970-01-01 00:00:01',
        '2024-00-00', '0000-00-01 00:00:00', NULL);
INSERT INTO types (id, c_enum, c_year, c_date, c_datetime, c_datetime3, c_datetime6)
    VALUES (16, 'bogus', 0, '0000-00-00', '0000-00-00 00:00:00', '0099-12-31 23:59:59.999',
        '0070-01-01 00:00:00.000001');
UPDATE types SET c_year = 0 WHERE id = 4;
SET sql_mode = @saved_mode;

-- 4. Updates: some columns (the before image is the whole old row: binlog_row_image=FULL),
--    several rows in one statement, a table without a key, a composite key's non-key column.
UPDATE types SET c_varchar = 'updated', c_int = c_int + 1, c_ts6 = '2025-12-31 23:59:59.999999',
    c_enum = 'a,b', c_set = '', c_json = '{"updated": true}', c_point = ST_GeomFromText('POINT(3 4)')
    WHERE id = 11;
UPDATE types SET c_tinyint = c_tinyint - 1 WHERE id IN (1, 4);
UPDATE no_pk SET b = 'uno' WHERE a = 1;
UPDATE composite SET v = 11 WHERE k1 = 1 AND k2 = 'a';
-- An update that changes nothing: MariaDB logs no row event, so there is no record.
UPDATE composite SET v = 20 WHERE k1 = 1 AND k2 = 'b';

-- 5. Primary-key changes (delete + tombstone + create), on a single and a composite key.
UPDATE types SET id = 21 WHERE id = 12;
UPDATE composite SET k2 = 'z' WHERE k1 = 2 AND k2 = 'a';

-- 6. Deletes, a rolled-back transaction (not in the output).
DELETE FROM types WHERE id = 15;
DELETE FROM no_pk WHERE a IS NULL;
DELETE FROM composite WHERE k1 = 1;
BEGIN;
INSERT INTO types (id) VALUES (99);
ROLLBACK;

-- 7. DDL mid-stream, each followed by rows in the new shape.
ALTER TABLE ddl ADD COLUMN c VARCHAR(10) NOT NULL DEFAULT 'dflt';
INSERT INTO ddl VALUES (2, 2, 'added', 'c2');
INSERT INTO ddl (id, a, b) VALUES (3, 3, 'default');
ALTER TABLE ddl DROP COLUMN b;
INSERT INTO ddl VALUES (4, 4, 'dropped');
ALTER TABLE ddl MODIFY a BIGINT UNSIGNED;
INSERT INTO ddl VALUES (5, 18446744073709551615, 'modified');
ALTER TABLE ddl RENAME COLUMN c TO c_renamed;
INSERT INTO ddl VALUES (6, 6, 'renamedcol');
UPDATE ddl SET a = 7 WHERE id = 1;
RENAME TABLE ddl TO ddl_renamed;
INSERT INTO ddl_renamed VALUES (7, 7, 'renamed');
-- Created mid-stream: the binlog's CREATE statement says JSON (the snapshot's SHOW CREATE
-- TABLE says LONGTEXT ... CHECK (json_valid(...))).
CREATE TABLE created (
    id  INT NOT NULL PRIMARY KEY,
    j   JSON,
    d   DECIMAL(5,1),
    e   ENUM('x', 'y'),
    t   DATETIME(6)
);
INSERT INTO created VALUES (1, '{"k": [1, "v"]}', 1234.5, 'y', '2024-01-02 03:04:05.000006');
ALTER TABLE types ADD COLUMN c_added INT NOT NULL DEFAULT 7 AFTER id;
INSERT INTO types (id, c_varchar) VALUES (17, 'after alter');

-- 8. Truncate, then a row after it.
TRUNCATE TABLE composite;
INSERT INTO composite VALUES (50, 'd', 5);
