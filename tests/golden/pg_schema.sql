-- Debezium golden test: the captured tables (see README.md). Deterministic; run on an empty
-- database before the publications and slots are created, then pg_changes.sql.
CREATE TYPE golden_mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN golden_posint AS int4 CHECK (VALUE > 0);
CREATE TYPE golden_pair AS (label text, n int4);

-- Every built-in type the Postgres source maps, REPLICA IDENTITY DEFAULT (old key only).
CREATE TABLE golden_types (
    id             int4 PRIMARY KEY,
    c_bool         bool,
    c_int2         int2,
    c_int4         int4,
    c_int8         int8,
    c_float4       float4,
    c_float8       float8,
    c_numeric      numeric(12,3),
    c_numeric_big  numeric(40,20),
    c_numeric_free numeric,
    c_text         text,
    c_varchar      varchar(20),
    c_char         char(4),
    c_bytea        bytea,
    c_date         date,
    c_time         time,
    c_time3        time(3),
    c_timetz       timetz,
    c_ts           timestamp,
    c_ts3          timestamp(3),
    c_tstz         timestamptz,
    c_interval     interval,
    c_uuid         uuid,
    c_json         json,
    c_jsonb        jsonb,
    c_inet         inet,
    c_cidr         cidr,
    c_macaddr      macaddr,
    c_money        money,
    c_bit1         bit(1),
    c_bit          bit(12),
    c_varbit       varbit(20),
    c_xml          xml,
    c_mood         golden_mood,
    c_domain       golden_posint,
    c_int_arr      int4[],
    c_text_arr     text[],
    c_int_matrix   int4[][],
    c_pair         golden_pair
);

-- TOAST-sized values, REPLICA IDENTITY DEFAULT: an update of another column leaves them
-- out of the new tuple (unchanged TOAST).
CREATE TABLE golden_toast (
    id        int4 PRIMARY KEY,
    n         int4 NOT NULL,
    big_text  text,
    big_bytea bytea,
    big_jsonb jsonb,
    big_arr   text[],
    big_ints  int4[],
    big_num   numeric
);
-- Out of line without compression, however compressible the values are.
ALTER TABLE golden_toast ALTER COLUMN big_ints SET STORAGE EXTERNAL, ALTER COLUMN big_num SET STORAGE EXTERNAL;

-- The same shape with REPLICA IDENTITY FULL: `before` carries the whole old row.
CREATE TABLE golden_full (
    id        int4 PRIMARY KEY,
    n         int4 NOT NULL,
    big_text  text,
    big_bytea bytea,
    big_jsonb jsonb,
    big_arr   text[],
    big_ints  int4[],
    big_num   numeric
);
-- Out of line without compression, however compressible the values are.
ALTER TABLE golden_full ALTER COLUMN big_ints SET STORAGE EXTERNAL, ALTER COLUMN big_num SET STORAGE EXTERNAL;
ALTER TABLE golden_full REPLICA IDENTITY FULL;

-- numeric NaN / ±Infinity (not representable as a Connect Decimal: Debezium writes null
-- in precise mode, the default capture) and timestamps after 294247 AD (beyond a
-- microsecond int64).
CREATE TABLE golden_special (
    id        int4 PRIMARY KEY,
    c_numeric numeric,
    c_num_s   numeric(10,2),
    c_float8  float8,
    c_ts      timestamp,
    c_tstz    timestamptz
);
