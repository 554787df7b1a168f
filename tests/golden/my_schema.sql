-- Debezium golden test for the MySQL source: the captured tables and the rows the initial
-- snapshot reads (see README.md, "MySQL / MariaDB"). Deterministic; run on a server without a
-- `golden` database, before the capture starts. my_changes.sql holds the streamed changes.
-- The snapshot rows repeat the edge values of my_changes.sql: the snapshot reads them
-- through JDBC, the stream from the binlog, and the two paths convert differently.
SET NAMES utf8mb4;
SET time_zone = '+00:00';
CREATE DATABASE golden CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci;
USE golden;

-- Every MariaDB column type the MySQL source maps.
CREATE TABLE types (
    id            INT NOT NULL PRIMARY KEY,
    c_tinyint     TINYINT,
    c_tinyint_u   TINYINT UNSIGNED,
    c_bool        TINYINT(1),
    c_smallint    SMALLINT,
    c_smallint_u  SMALLINT UNSIGNED,
    c_mediumint   MEDIUMINT,
    c_mediumint_u MEDIUMINT UNSIGNED,
    c_int         INT,
    c_int_u       INT UNSIGNED,
    c_bigint      BIGINT,
    c_bigint_u    BIGINT UNSIGNED,
    c_decimal     DECIMAL(10,2),
    c_decimal_big DECIMAL(65,30),
    c_float       FLOAT,
    c_double      DOUBLE,
    c_bit1        BIT(1),
    c_bit10       BIT(10),
    c_bit64       BIT(64),
    c_date        DATE,
    c_datetime    DATETIME,
    c_datetime3   DATETIME(3),
    c_datetime6   DATETIME(6),
    c_ts          TIMESTAMP NULL DEFAULT NULL,
    c_ts6         TIMESTAMP(6) NULL DEFAULT NULL,
    c_time        TIME,
    c_time6       TIME(6),
    c_year        YEAR,
    c_char        CHAR(4) CHARACTER SET utf8mb4,
    c_varchar     VARCHAR(20) CHARACTER SET utf8mb4,
    c_text        TEXT CHARACTER SET utf8mb4,
    c_char_l1     CHAR(4) CHARACTER SET latin1,
    c_varchar_l1  VARCHAR(20) CHARACTER SET latin1,
    c_text_l1     TEXT CHARACTER SET latin1,
    c_varchar_bin VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    c_binary      BINARY(4),
    c_varbinary   VARBINARY(20),
    c_blob        BLOB,
    c_enum        ENUM('small', 'it''s', 'a,b'),
    c_set         SET('r', 'w''x', 'e f'),
    c_json        JSON,
    c_geometry    GEOMETRY,
    c_point       POINT,
    c_gen_virtual BIGINT AS (c_int + 1) VIRTUAL,
    c_gen_stored  VARCHAR(30) AS (CONCAT(c_varchar, '!')) STORED
);

-- No primary key: Debezium's key is null.
CREATE TABLE no_pk (
    a INT,
    b VARCHAR(10)
);

-- A composite primary key, not in column order.
CREATE TABLE composite (
    v  INT,
    k2 VARCHAR(10) NOT NULL,
    k1 INT NOT NULL,
    PRIMARY KEY (k1, k2)
);

-- Zero and partly zero dates (sql_mode=''), in NOT NULL and nullable columns.
CREATE TABLE zero_dates (
    id      INT NOT NULL PRIMARY KEY,
    d       DATE NOT NULL,
    dt      DATETIME NOT NULL,
    dt6     DATETIME(6) NOT NULL,
    ts      TIMESTAMP NOT NULL DEFAULT '0000-00-00 00:00:00',
    d_null  DATE NULL,
    dt_null DATETIME NULL,
    ts_null TIMESTAMP NULL DEFAULT NULL
);

-- Changed by the DDL in my_changes.sql (step 7), then renamed to ddl_renamed.
CREATE TABLE ddl (
    id INT NOT NULL PRIMARY KEY,
    a  INT,
    b  VARCHAR(10)
);

-- Rows of the initial snapshot (op "r").
INSERT INTO types (id, c_tinyint, c_tinyint_u, c_bool, c_smallint, c_smallint_u, c_mediumint,
    c_mediumint_u, c_int, c_int_u, c_bigint, c_bigint_u, c_decimal, c_decimal_big, c_float,
    c_double, c_bit1, c_bit10, c_bit64, c_date, c_datetime, c_datetime3, c_datetime6, c_ts,
    c_ts6, c_time, c_time6, c_year, c_char, c_varchar, c_text, c_char_l1, c_varchar_l1,
    c_text_l1, c_varchar_bin, c_binary, c_varbinary, c_blob, c_enum, c_set, c_json,
    c_geometry, c_point)
VALUES
    -- typical
    (1, 12, 200, 1, -1234, 60000, -8000000, 16000000, -2000000000, 4000000000,
     -9007199254740993, 9007199254740993, 12345.67,
     12345678901234567890.123456789012345678901234567890, 1.5, 3.141592653589793,
     b'1', b'1010000001', b'1000000000000000000000000000000000000000000000000000000000000001',
     '2024-02-29', '2024-01-02 03:04:05', '2024-01-02 03:04:05.678', '2024-01-02 03:04:05.678901',
     '2024-06-01 12:00:00', '2024-06-01 12:00:00.250000', '13:14:15', '13:14:15.123456', 2024,
     'ab', 'varchar é ✓ 😀', 'tab	newline
quote'' back\\slash', 'café', 'latin1 àéîõü', 'Grüße ©', 'BinCase',
     x'0102', x'00ff10deadbeef', x'000102fffe', 'it''s', 'r,w''x', '{"a": [1, 2.5, null], "b": "x\\"y"}',
     ST_GeomFromText('LINESTRING(0 0, 1 1, 2 0.5)'), ST_GeomFromText('POINT(-1.5 2.25)')),
    -- minimums
    (2, -128, 0, 0, -32768, 0, -8388608, 0, -2147483648, 0,
     -9223372036854775808, 0, -99999999.99,
     -99999999999999999999999999999999999.999999999999999999999999999999, -3.4e38, -1.7976931348623157e308,
     b'0', b'0', b'0', '0001-01-01', '0001-01-01 00:00:00', '0001-01-01 00:00:00.000',
     '0001-01-01 00:00:00.000000', '1970-01-01 00:00:01', '1970-01-01 00:00:01.000000',
     '-838:59:59', '-838:59:59.000000', 1901, '', '', '', '', '', '', '',
     x'', x'', x'', 'small', '', '[]', ST_GeomFromText('POINT(0 0)', 4326), ST_GeomFromText('POINT(0 0)')),
    -- maximums
    (3, 127, 255, 127, 32767, 65535, 8388607, 16777215, 2147483647, 4294967295,
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
    (4, -1, 1, 2, -1, 1, -1, 1, -1, 1, -1, 9223372036854775808, -0.01,
     0.000000000000000000000000000001, 1e-38, 4.9e-324, NULL, b'1', b'1',
     '1970-01-01', '1970-01-01 00:00:00', '1969-12-31 23:59:59.999', '1969-12-31 23:59:59.999999',
     '2000-01-01 00:00:00', '1999-12-31 23:59:59.999999', '-00:00:01', '-12:34:56.789012', 2000,
     ' a  ', 'trailing  ', ' ', 'a ', 'b ', 'c ', 'x',
     x'00000000', x'00', x'00', NULL, 'e f', 'null', ST_GeomFromText('MULTIPOINT(1 1, 2 2)'), NULL);
-- A row of NULLs.
INSERT INTO types (id) VALUES (5);

INSERT INTO no_pk VALUES (1, 'one'), (1, 'one'), (NULL, NULL);
INSERT INTO composite VALUES (10, 'a', 1), (20, 'b', 1), (30, 'a', 2);

SET @saved_mode = @@sql_mode;
SET sql_mode = '';
INSERT INTO zero_dates VALUES
    (1, '0000-00-00', '0000-00-00 00:00:00', '0000-00-00 00:00:00.000000', '0000-00-00 00:00:00',
        '0000-00-00', '0000-00-00 00:00:00', '0000-00-00 00:00:00'),
    (2, '2024-00-15', '2024-02-00 10:00:00', '0000-01-01 00:00:00.000001', '1970-01-01 00:00:01',
        '2024-00-00', '0000-00-01 00:00:00', NULL);
-- An invalid ENUM value (stored as '', index 0), YEAR 0, zero dates, two-digit years.
INSERT INTO types (id, c_enum, c_year, c_date, c_datetime, c_datetime3, c_datetime6)
    VALUES (6, 'bogus', 0, '0000-00-00', '0000-00-00 00:00:00', '0099-12-31 23:59:59.999',
        '0070-01-01 00:00:00.000001');
SET sql_mode = @saved_mode;

INSERT INTO ddl VALUES (1, 1, 'before');
