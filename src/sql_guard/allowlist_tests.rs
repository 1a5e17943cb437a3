//! The guard admits only read-only functions, in every position a function can appear: the holes
//! of issue 8 as written, and the variants a reviewer would try next.

use super::*;

pub(super) fn refuse_with(sql: &str, dialect: Dialect, allow: &[&str]) -> GuardError {
    let allow: Vec<String> = allow.iter().map(|s| s.to_string()).collect();
    check_allowing(sql, dialect, &allow).expect_err(sql)
}

pub(super) fn refuse(sql: &str, dialect: Dialect) -> GuardError {
    refuse_with(sql, dialect, &[])
}

pub(super) fn accept_with(sql: &str, dialect: Dialect, allow: &[&str]) {
    let allow: Vec<String> = allow.iter().map(|s| s.to_string()).collect();
    if let Err(e) = check_allowing(sql, dialect, &allow) {
        panic!("{dialect}: {sql}: {e}");
    }
}

pub(super) fn accept(sql: &str, dialect: Dialect) {
    accept_with(sql, dialect, &[])
}

/// Asserts the guard itself refused `sql` because it calls `name`.
fn refuses_call(sql: &str, dialect: Dialect, name: &str) {
    assert_eq!(
        refuse(sql, dialect),
        GuardError::Function(name.into()),
        "{dialect}: {sql}"
    );
}

#[test]
fn every_hole_of_issue_8_is_refused_by_the_guard_on_postgres() {
    let pg = Dialect::Postgres;
    for (sql, name) in [
        (
            "SELECT * FROM dblink_exec('host=db dbname=app', 'DELETE FROM t WHERE id <= 10') AS d(x), t",
            "dblink_exec",
        ),
        (
            "SELECT * FROM dblink('host=db', 'INSERT INTO t (id) VALUES (1) RETURNING id') AS d(id int)",
            "dblink",
        ),
        (
            "SELECT * FROM t, pg_read_file('/etc/passwd', 0, 60) AS f(x)",
            "pg_read_file",
        ),
        ("SELECT * FROM pg_ls_dir('/') AS d(name)", "pg_ls_dir"),
        (
            "SELECT * FROM lo_export(lo_import('/etc/passwd'), '/tmp/x') AS l(x)",
            "lo_export",
        ),
        (
            "SELECT * FROM t a, pg_cancel_backend(a.pid) AS c(x)",
            "pg_cancel_backend",
        ),
        (
            "SELECT * FROM t a CROSS JOIN LATERAL pg_terminate_backend(a.pid) AS k(x)",
            "pg_terminate_backend",
        ),
        (
            "SELECT pg_create_physical_replication_slot('s', true)",
            "pg_create_physical_replication_slot",
        ),
        (
            "SELECT * FROM t WHERE pg_drop_replication_slot('s') IS NULL",
            "pg_drop_replication_slot",
        ),
        ("SELECT pg_file_unlink('/tmp/x')", "pg_file_unlink"),
        ("SELECT pg_stat_reset()", "pg_stat_reset"),
        (
            "SELECT query_to_xml('SELECT pg_sleep(10)', true, true, '')",
            "query_to_xml",
        ),
        (
            "SELECT * FROM ts_stat('SELECT to_tsvector(body) FROM t') AS s",
            "ts_stat",
        ),
        (
            "SELECT * FROM t, set_config('statement_timeout', '0', true) AS s(x)",
            "set_config",
        ),
        (
            "SELECT * FROM t, pg_try_advisory_lock(4545) AS l",
            "pg_try_advisory_lock",
        ),
    ] {
        refuses_call(sql, pg, name);
    }
}

/// Functions that must never be admitted without an explicit opt-in, one call each.
pub(super) const NEVER_POSTGRES: &[&str] = &[
    "cursor_to_xml(c, 1, true, true, '')",
    "database_to_xml(true, true, '')",
    "dblink_connect('c', 'host=x')",
    "dblink_exec('host=x', 'DELETE FROM t')",
    "lo_create(0)",
    "lo_import('/etc/passwd')",
    "lo_unlink(1)",
    "nextval('s')",
    "pg_advisory_lock(1)",
    "pg_advisory_xact_lock(1)",
    "pg_cancel_backend(1)",
    "pg_copy_physical_replication_slot('a', 'b')",
    "pg_create_logical_replication_slot('s', 'test_decoding')",
    "pg_current_xact_id()",
    "pg_file_rename('/a', '/b')",
    "pg_file_write('/tmp/x', 'y', false)",
    "pg_logical_emit_message(true, 'p', 'm')",
    "pg_logical_slot_get_changes('s', NULL, NULL)",
    "pg_ls_logdir()",
    "pg_ls_waldir()",
    "pg_notify('c', 'm')",
    "pg_promote()",
    "pg_read_binary_file('/etc/passwd')",
    "pg_reload_conf()",
    "pg_replication_origin_create('o')",
    "pg_replication_slot_advance('s', '0/0')",
    "pg_rotate_logfile()",
    "pg_sleep(10)",
    "pg_sleep_for('1 hour')",
    "pg_sleep_until('tomorrow')",
    "pg_stat_file('/etc/passwd')",
    "pg_stat_reset_shared('bgwriter')",
    "pg_switch_wal()",
    "query_to_xml_and_xmlschema('SELECT 1', true, true, '')",
    "query_to_xmlschema('SELECT 1', true, true, '')",
    "schema_to_xml('public', true, true, '')",
    "setseed(0.5)",
    "setval('s', 1)",
    "table_to_xml('t', true, true, '')",
    "txid_current()",
];

pub(super) const NEVER_SQLITE: &[&str] = &[
    "changes()",
    "edit('x')",
    "fts3_tokenizer('simple')",
    "last_insert_rowid()",
    "load_extension('/tmp/evil.so')",
    "randomblob(1000000000)",
    "readfile('/etc/passwd')",
    "sqlite_compileoption_get(0)",
    "writefile('/tmp/x', 'y')",
    "zeroblob(1000000000)",
];

pub(super) fn name_of(call: &str) -> &str {
    &call[..call.find('(').expect("a call")]
}

/// Every place a function can be written in a PostgreSQL query; `{f}` is the call.
const POSTGRES_SHAPES: &[&str] = &[
    "SELECT {f}",
    "SELECT * FROM {f} AS x",
    "SELECT * FROM {f} WITH ORDINALITY AS x",
    "SELECT * FROM t, {f} AS x",
    "SELECT * FROM t CROSS JOIN LATERAL {f} AS x",
    "SELECT * FROM t, LATERAL {f} AS x",
    "SELECT * FROM t JOIN {f} AS x ON true",
    "SELECT * FROM t LEFT JOIN LATERAL {f} AS x ON true",
    "SELECT (SELECT {f}) AS s FROM t",
    "SELECT (SELECT x FROM {f} AS x) AS s FROM t",
    "SELECT * FROM t WHERE {f} IS NOT NULL",
    "SELECT * FROM t WHERE EXISTS (SELECT 1 FROM {f} AS x)",
    "SELECT * FROM t WHERE id IN (SELECT 1 FROM {f} AS x)",
    "SELECT * FROM t WHERE id = ANY (SELECT 1 FROM t, LATERAL {f} AS x)",
    "WITH c AS (SELECT {f} AS v) SELECT * FROM c",
    "WITH c AS (SELECT * FROM {f} AS x) SELECT * FROM c",
    "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c, {f} AS x) SELECT * FROM c",
    "SELECT * FROM (SELECT * FROM {f} AS x) AS y",
    "SELECT * FROM ((SELECT 1) AS a JOIN {f} AS x ON true)",
    "SELECT * FROM t ORDER BY {f}",
    "SELECT count(*) FROM t GROUP BY {f}",
    "SELECT count(*) FROM t GROUP BY id HAVING {f} IS NULL",
    "SELECT lower({f}) FROM t",
    "SELECT coalesce(NULL, ({f})) FROM t",
    "SELECT CASE WHEN id > 0 THEN {f} END FROM t",
    "SELECT count(*) FILTER (WHERE {f} IS NULL) FROM t",
    "SELECT string_agg(name, ',' ORDER BY {f}) FROM t",
    "SELECT row_number() OVER (ORDER BY {f}) FROM t",
    "SELECT sum(id) OVER (PARTITION BY {f}) FROM t",
    "SELECT * FROM t LIMIT (SELECT count(*) FROM {f} AS x)",
    "SELECT 1 UNION SELECT {f}",
    "SELECT 1 EXCEPT SELECT 1 FROM {f} AS x",
    "VALUES ({f})",
    "SELECT * FROM t JOIN u ON u.id = t.id AND {f} IS NULL",
    "SELECT ({f})::text, CAST({f} AS text) FROM t",
    "SELECT ARRAY(SELECT {f})",
    "SELECT {f} AT TIME ZONE 'UTC'",
];

/// The same for SQLite (no LATERAL).
const SQLITE_SHAPES: &[&str] = &[
    "SELECT {f}",
    "SELECT * FROM {f} AS x",
    "SELECT * FROM t, {f} AS x",
    "SELECT * FROM t JOIN {f} AS x ON 1",
    "SELECT (SELECT {f}) AS s FROM t",
    "SELECT * FROM t WHERE {f} IS NOT NULL",
    "SELECT * FROM t WHERE id IN (SELECT 1 FROM {f} AS x)",
    "WITH c AS (SELECT {f} AS v) SELECT * FROM c",
    "WITH c AS (SELECT * FROM {f} AS x) SELECT * FROM c",
    "SELECT * FROM (SELECT * FROM {f} AS x) AS y",
    "SELECT * FROM t ORDER BY {f}",
    "SELECT count(*) FROM t GROUP BY id HAVING {f} IS NULL",
    "SELECT upper({f}) FROM t",
    "SELECT row_number() OVER (ORDER BY {f}) FROM t",
    "SELECT 1 UNION SELECT {f}",
    "VALUES ({f})",
];

/// Spellings of a call as the database would resolve it to the same function.
fn postgres_spellings(call: &str) -> Vec<String> {
    let name = name_of(call);
    let args = &call[name.len()..];
    vec![
        call.to_string(),
        format!("pg_catalog.{call}"),
        format!("\"{name}\"{args}"),
        format!("\"pg_catalog\".\"{name}\"{args}"),
        format!("{}{args}", name.to_uppercase()),
        format!("PG_CATALOG.{}{args}", name.to_uppercase()),
        format!("{}{}{args}", name[..1].to_uppercase(), &name[1..]),
    ]
}

fn sqlite_spellings(call: &str) -> Vec<String> {
    let name = name_of(call);
    let args = &call[name.len()..];
    vec![
        call.to_string(),
        format!("\"{name}\"{args}"),
        format!("\"{}\"{args}", name.to_uppercase()),
        format!("{}{args}", name.to_uppercase()),
    ]
}

#[test]
fn refused_functions_are_refused_in_every_position_and_spelling_on_postgres() {
    for call in NEVER_POSTGRES {
        let name = name_of(call);
        for spelled in postgres_spellings(call) {
            for shape in POSTGRES_SHAPES {
                refuses_call(&shape.replace("{f}", &spelled), Dialect::Postgres, name);
            }
        }
    }
}

#[test]
fn refused_functions_are_refused_in_every_position_and_spelling_on_sqlite() {
    for call in NEVER_SQLITE {
        let name = name_of(call);
        for spelled in sqlite_spellings(call) {
            for shape in SQLITE_SHAPES {
                refuses_call(&shape.replace("{f}", &spelled), Dialect::Sqlite, name);
            }
        }
    }
}

#[test]
fn a_refused_function_called_as_a_window_or_aggregate_is_refused() {
    for sql in [
        "SELECT pg_read_file(name) OVER () FROM t",
        "SELECT pg_read_file(name) OVER (PARTITION BY id ORDER BY at) FROM t",
        "SELECT pg_read_file(name ORDER BY id) FROM t",
        "SELECT pg_read_file(name) FILTER (WHERE id > 1) FROM t",
        "SELECT pg_read_file(0.5) WITHIN GROUP (ORDER BY id) FROM t",
        "SELECT id FROM t WINDOW w AS (ORDER BY pg_read_file(name))",
    ] {
        refuses_call(sql, Dialect::Postgres, "pg_read_file");
    }
    for sql in [
        "SELECT readfile(name) OVER () FROM t",
        "SELECT readfile(name) FILTER (WHERE id > 1) FROM t",
    ] {
        refuses_call(sql, Dialect::Sqlite, "readfile");
    }
}

#[test]
fn rows_from_and_table_style_calls_are_refused_by_the_guard() {
    for sql in [
        "SELECT * FROM ROWS FROM (pg_read_file('/etc/passwd'), generate_series(1, 2)) AS x",
        "SELECT * FROM ROWS FROM (generate_series(1, 2), pg_ls_dir('/')) AS x(a, b)",
        "SELECT * FROM TABLE(pg_read_file('/etc/passwd')) AS x",
        "SELECT * FROM t, TABLE(dblink_exec('h', 'DELETE FROM t')) AS x",
    ] {
        let err = refuse(sql, Dialect::Postgres);
        assert!(
            matches!(&err, GuardError::Function(_) | GuardError::Parse { .. }),
            "{sql}: {err:?}"
        );
    }
    for sql in [
        "SELECT * FROM TABLE(readfile('/etc/passwd')) AS x",
        "SELECT * FROM fsdir('/')",
        "SELECT * FROM t, zipfile('/tmp/x.zip')",
        "SELECT * FROM pragma_table_info('t')",
    ] {
        let err = refuse(sql, Dialect::Sqlite);
        assert!(
            matches!(&err, GuardError::Function(_) | GuardError::Parse { .. }),
            "{sql}: {err:?}"
        );
    }
}

#[test]
fn names_are_matched_as_the_database_resolves_them() {
    let pg = Dialect::Postgres;
    for sql in [
        "SELECT lower(name) FROM t",
        "SELECT LOWER(name) FROM t",
        "SELECT \"lower\"(name) FROM t",
        "SELECT pg_catalog.lower(name) FROM t",
        "SELECT \"pg_catalog\".\"lower\"(name) FROM t",
        "SELECT PG_CATALOG.Lower(name) FROM t",
    ] {
        accept(sql, pg);
    }
    // A quoted name keeps its case on PostgreSQL: "LOWER" is not lower.
    refuses_call("SELECT \"LOWER\"(name) FROM t", pg, "\"LOWER\"");
    // A dot inside quotes is part of one name, not a schema.
    refuses_call(
        "SELECT \"pg_catalog.lower\"(name) FROM t",
        pg,
        "\"pg_catalog.lower\"",
    );
    // Any schema but pg_catalog must be opted in: it may hold a function of any body.
    refuses_call("SELECT public.lower(name) FROM t", pg, "public.lower");
    refuses_call(
        "SELECT app.pg_catalog.lower(name) FROM t",
        pg,
        "app.pg_catalog.lower",
    );
    refuses_call(
        "SELECT * FROM public.generate_series(1, 3) AS g",
        pg,
        "public.generate_series",
    );
    // SQLite ignores the case of function names, quoted or not.
    accept(
        "SELECT \"UPPER\"(name), Upper(name) FROM t",
        Dialect::Sqlite,
    );
    refuses_call(
        "SELECT main.upper(name) FROM t",
        Dialect::Sqlite,
        "main.upper",
    );
}

#[test]
fn a_refused_call_inside_the_arguments_of_an_admitted_one_is_refused() {
    for sql in [
        "SELECT * FROM generate_series(1, length(pg_read_file('/etc/passwd'))) AS g",
        "SELECT * FROM t, LATERAL unnest(ARRAY[pg_ls_dir('/')]) AS u",
        "SELECT * FROM t CROSS JOIN LATERAL jsonb_array_elements(to_jsonb(pg_read_file('/x'))) AS j",
        "SELECT * FROM t JOIN u USING (id) WHERE coalesce(t.a, pg_read_file('/x')) IS NULL",
        "SELECT DISTINCT ON (pg_read_file('/x')) id FROM t",
        "SELECT max(id) FILTER (WHERE name = pg_read_file('/x')) FROM t",
        "SELECT sum(id) OVER (ORDER BY at ROWS BETWEEN length(pg_read_file('/x')) PRECEDING AND CURRENT ROW) FROM t",
    ] {
        let err = refuse(sql, Dialect::Postgres);
        assert!(
            matches!(&err, GuardError::Function(n) if n == "pg_read_file" || n == "pg_ls_dir"),
            "{sql}: {err:?}"
        );
    }
    refuses_call(
        "SELECT * FROM json_each(readfile('/etc/passwd'))",
        Dialect::Sqlite,
        "readfile",
    );
}

#[test]
fn a_refused_name_is_shown_escaped_and_bounded() {
    let long = "x".repeat(5000);
    let err = refuse(&format!("SELECT \"{long}\"(1)"), Dialect::Postgres).to_string();
    assert!(err.len() < 400, "{err}");
    let err = refuse("SELECT \"evil\u{1b}[31m\"(1)", Dialect::Postgres).to_string();
    assert!(!err.contains('\u{1b}'), "{err}");
    assert!(err.contains("evil\\u{1b}[31m"), "{err}");
}

#[test]
fn the_refusal_names_the_function_and_the_fix() {
    let err = refuse(
        "SELECT * FROM t, pg_read_file('/etc/passwd') AS f(x)",
        Dialect::Postgres,
    )
    .to_string();
    assert!(err.contains("pg_read_file()"), "{err}");
    assert!(err.contains("read-only functions"), "{err}");
    assert!(err.contains("allow_functions"), "{err}");
}

#[test]
fn postgres_system_catalogs_and_statistics_views_are_refused_in_every_spelling() {
    let pg = Dialect::Postgres;
    for (sql, shown) in [
        ("SELECT * FROM pg_stat_activity", "pg_stat_activity"),
        ("SELECT passwd FROM pg_shadow", "pg_shadow"),
        ("SELECT * FROM pg_catalog.pg_authid", "pg_catalog.pg_authid"),
        ("SELECT setting FROM PG_SETTINGS", "pg_settings"),
        ("SELECT * FROM \"pg_settings\"", "pg_settings"),
        ("SELECT * FROM pg_catalog.pg_class", "pg_catalog.pg_class"),
        (
            "SELECT * FROM pg_toast.pg_toast_2619",
            "pg_toast.pg_toast_2619",
        ),
        (
            "SELECT * FROM t WHERE id IN (SELECT pid FROM pg_locks)",
            "pg_locks",
        ),
        (
            "SELECT (SELECT query FROM pg_stat_activity LIMIT 1) AS q FROM t",
            "pg_stat_activity",
        ),
        (
            "WITH s AS (SELECT * FROM pg_file_settings) SELECT * FROM s",
            "pg_file_settings",
        ),
        (
            "SELECT * FROM t JOIN pg_hba_file_rules h ON true",
            "pg_hba_file_rules",
        ),
    ] {
        assert_eq!(
            refuse(sql, pg),
            GuardError::SystemRelation(shown.into()),
            "{sql}"
        );
    }
    accept(
        "SELECT * FROM public.payments JOIN app.pgx_events e ON true",
        pg,
    );
    accept("SELECT * FROM sqlite_events", Dialect::Postgres);
}
