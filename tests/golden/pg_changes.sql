-- Debezium golden test: the changes (see README.md). Fixed values only (no now(), no
-- random()), so every run writes the same rows; one transaction per numbered step unless
-- a step says otherwise. Timestamps with time zone are written with explicit offsets.
SET TIME ZONE 'UTC';

-- 1. Typical values (one transaction, two tables).
BEGIN;
INSERT INTO golden_types VALUES (
    1, true, 12345, -7, 9007199254740993, 1.5, 3.141592653589793,
    12345.678, 12345678901234567890.12345678901234567890, 0.000001,
    'tab	newline
quote'' back\slash é ✓', 'varchar', 'ab', '\x00ff10deadbeef'::bytea,
    '2024-02-29', '13:14:15.123456', '23:59:59.999', '12:00:01.5+05:30',
    '2024-01-02 03:04:05.678901', '1999-12-31 23:59:59.999', '2024-06-01 12:00:00.25+02',
    '1 year 2 months 3 days 04:05:06.789', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
    '{"a": [1, 2.5, null], "b": "x"}', '{"b": true, "a": {"c": 1}}',
    '192.168.0.1/24', '10.1.0.0/16', '08:00:2b:01:02:03', 1234.56,
    B'1', B'101000000001', B'1100', '<a b="1">x &amp; y</a>', 'happy', 42,
    '{1,NULL,3}', '{"a b","c,d",NULL,"q\"uote"}', '{{1,2},{3,NULL}}', ROW('pair "one"', 7)
);
INSERT INTO golden_special VALUES (1, 'NaN', 'NaN', 'NaN');
COMMIT;

-- 2. Edge values.
INSERT INTO golden_types VALUES (
    2, false, -32768, 2147483647, -9223372036854775808, '-Infinity', 'NaN',
    -999999999.999, -0.00000000000000000001, 123456789012345678901234567890.000000000000000000000000000001,
    '', '', '    ', '\x'::bytea,
    '0044-03-15 BC', '00:00:00', '24:00:00', '00:00:00-12:34',
    '0001-01-01 00:00:00 BC', '99999-12-31 23:59:59.999', '1900-01-01 00:00:00+01:30',
    '-1 years -2 days +03:00:00.000001', '00000000-0000-0000-0000-000000000000',
    '[]', '{}',
    '::1', '2001:db8::/32', 'ff:ff:ff:ff:ff:ff', -92233720368547758.08,
    B'0', B'000000000000', B'', '<empty/>', 'sad', 1,
    '{}', '{""}', '{{{1}},{{2}}}', ROW(NULL, NULL)
);

-- 3. Infinities, and a row of NULLs.
INSERT INTO golden_types (id, c_float4, c_float8, c_date, c_ts, c_tstz)
    VALUES (3, 'Infinity', '-Infinity', 'infinity', 'infinity', '-infinity');
INSERT INTO golden_types (id) VALUES (4);
INSERT INTO golden_special VALUES (2, 'Infinity', 12.5, 'Infinity'), (3, '-Infinity', NULL, '-Infinity');
INSERT INTO golden_special VALUES (4, 1, 1, 1, '294276-12-31 23:59:59.999999', '294276-12-31 23:59:59.5+00');

-- 4. Updates: some columns, then the primary key (delete + tombstone + create), then a
--    delete (old key only: REPLICA IDENTITY DEFAULT).
UPDATE golden_types SET c_text = 'updated', c_int4 = c_int4 + 1, c_tstz = '2025-12-31 23:59:59.999999+00' WHERE id = 1;
UPDATE golden_types SET id = 20 WHERE id = 2;
DELETE FROM golden_types WHERE id = 4;
UPDATE golden_special SET c_numeric = 1.25 WHERE id = 1;
DELETE FROM golden_special WHERE id = 3;

-- 5. TOAST-sized values: ~10 KB of md5 hex (incompressible enough to be stored out of line).
--    Also an int4[] and a numeric (stored out of line: EXTERNAL), types without a string
--    placeholder form.
INSERT INTO golden_toast
SELECT 1, 0, s, decode(s, 'hex'), jsonb_build_object('k', s), ARRAY[s, 'x'],
       (SELECT array_agg(i ORDER BY i) FROM generate_series(1, 2000) i),
       translate(s, 'abcdef', '123456')::numeric / 1000
  FROM (SELECT string_agg(md5(i::text), '' ORDER BY i) AS s FROM generate_series(1, 320) i) g;
INSERT INTO golden_full SELECT * FROM golden_toast;

-- 6. Update another column: the TOASTed values are unchanged (not in the new tuple).
UPDATE golden_toast SET n = 1 WHERE id = 1;
UPDATE golden_full SET n = 1 WHERE id = 1;

-- 7. Change a TOASTed value, then delete the rows.
UPDATE golden_toast SET big_text = 'short', n = 2 WHERE id = 1;
UPDATE golden_full SET big_text = 'short', n = 2 WHERE id = 1;
DELETE FROM golden_toast WHERE id = 1;
DELETE FROM golden_full WHERE id = 1;

-- 8. A transaction over several tables, with a logical decoding message.
BEGIN;
INSERT INTO golden_full VALUES (2, 5, 'a', '\x01', '{"n": 5}', '{a}');
UPDATE golden_full SET n = 6, big_arr = '{b,NULL}' WHERE id = 2;
INSERT INTO golden_toast VALUES (2, 7, 'b', '\x02', '[7]', '{}');
SELECT pg_logical_emit_message(true, 'golden', 'hello from the golden test');
COMMIT;

-- 9. Truncate, then a row after it.
TRUNCATE golden_full;
INSERT INTO golden_full VALUES (3, 8, NULL, NULL, NULL, NULL);
