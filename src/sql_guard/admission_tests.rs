//! What the guard admits: read-only functions in every position, the functions a source opts in
//! to (in the guard and in the definitions), and the lists themselves as data.

use super::allowlist_tests::{
    NEVER_POSTGRES, NEVER_SQLITE, accept, accept_with, name_of, refuse, refuse_with,
};
use super::*;

#[test]
fn read_only_functions_are_admitted_in_every_position() {
    let pg = Dialect::Postgres;
    for sql in [
        "SELECT * FROM generate_series(1, 10) AS g(i)",
        "SELECT * FROM generate_series(now() - interval '1 day', now(), interval '1 hour') WITH ORDINALITY AS g(at, n)",
        "SELECT t.id, tag FROM t, LATERAL unnest(t.tags) AS tag",
        "SELECT * FROM t CROSS JOIN LATERAL jsonb_array_elements(t.doc -> 'items') AS item",
        "SELECT * FROM unnest(ARRAY[1, 2]) WITH ORDINALITY AS u(x, n)",
        "SELECT gen_random_uuid() AS id, pg_catalog.lower(name), current_user FROM t",
        "SELECT max(x) OVER (PARTITION BY y ORDER BY at), lag(x) OVER w FROM t WINDOW w AS (ORDER BY at)",
        "SELECT count(*) FILTER (WHERE a > 1), percentile_cont(0.5) WITHIN GROUP (ORDER BY x) FROM t",
        "SELECT string_agg(a, ',' ORDER BY a), array_agg(DISTINCT b), jsonb_agg(t) FROM t",
        "SELECT ARRAY(SELECT id FROM t), ROW(1, 2), CURRENT_TIMESTAMP, current_date, now()",
        "SELECT extract(epoch FROM at), substring(name FROM 1 FOR 3), trim(both ' ' FROM name), position('a' IN name) FROM t",
        "SELECT CAST(x AS text), x::int, coalesce(a, b), nullif(a, 0), greatest(a, b), date_trunc('day', at) FROM t",
        "SELECT doc ->> 'a', doc #> '{a,b}', doc @> '{}'::jsonb, doc ? 'k', tags && ARRAY['x'] FROM t",
        "SELECT * FROM t WHERE id = ANY (SELECT id FROM u) AND at > now() - interval '1 day'",
        "WITH c AS (SELECT date_trunc('week', at) AS wk, count(*) AS n FROM t GROUP BY 1) SELECT * FROM c",
        "SELECT (SELECT max(at) FROM u WHERE u.id = t.id) AS last_at FROM t",
        "SELECT * FROM t WHERE to_tsvector('english', body) @@ websearch_to_tsquery('english', 'x')",
    ] {
        accept(sql, pg);
    }
    let lite = Dialect::Sqlite;
    for sql in [
        "SELECT datetime('now'), strftime('%s', at), json_extract(doc, '$.a'), iif(a, 1, 2), group_concat(x) FROM t",
        "SELECT t.id, j.value FROM t, json_each(t.doc) AS j",
        "SELECT * FROM json_tree('{\"a\": 1}')",
        "SELECT total(x), ifnull(a, b), substr(name, 1, 3), printf('%d', id), unixepoch(at) FROM t",
        "SELECT id, row_number() OVER (PARTITION BY kind ORDER BY at) FROM t",
    ] {
        accept(sql, lite);
    }
}

#[test]
fn a_source_may_opt_in_to_functions_it_names() {
    let pg = Dialect::Postgres;
    let allow = [
        "my_schema.score",
        "set_config",
        "pg_try_advisory_lock",
        "pg_sleep",
    ];
    for sql in [
        "SELECT my_schema.score(t.id) FROM t",
        "SELECT * FROM t, my_schema.score(t.id) AS s",
        "SELECT * FROM t, LATERAL My_Schema.Score(t.id) AS s",
        "SELECT * FROM t, set_config('statement_timeout', '0', true) AS s(x)",
        "SELECT pg_catalog.set_config('x.y', 'z', true)",
        "SELECT * FROM t, pg_try_advisory_lock(4545) AS l",
        "SELECT pg_sleep(1)",
    ] {
        accept_with(sql, pg, &allow);
    }
    // The opt-in names exactly what it lists.
    refuses_call_with("SELECT score(t.id) FROM t", pg, &allow, "score");
    refuses_call_with("SELECT other.score(1)", pg, &allow, "other.score");
    refuses_call_with("SELECT pg_advisory_lock(1)", pg, &allow, "pg_advisory_lock");
    // Names that are not identifiers admit nothing.
    refuses_call_with("SELECT \"a;b\"(1)", pg, &["a;b", "", "a.b.c.d"], "\"a;b\"");
    accept_with("SELECT readfile('x')", Dialect::Sqlite, &["readfile"]);
    accept_with("SELECT ReadFile('x')", Dialect::Sqlite, &["READFILE"]);
}

fn refuses_call_with(sql: &str, dialect: Dialect, allow: &[&str], name: &str) {
    assert_eq!(
        refuse_with(sql, dialect, allow),
        GuardError::Function(name.into()),
        "{sql}"
    );
}

#[test]
fn custom_operators_and_foreign_constructs_are_refused() {
    // OPERATOR(schema.op) may name an operator whose function does anything.
    for sql in [
        "SELECT * FROM t WHERE a OPERATOR(evil.+) 1",
        "SELECT a OPERATOR(public.<->) b FROM t",
        "SELECT * FROM t, LATERAL (SELECT t.a OPERATOR(pg_catalog.+) 1) AS x",
    ] {
        assert!(
            matches!(refuse(sql, Dialect::Postgres), GuardError::Operator(_)),
            "{sql}"
        );
    }
    // Built-in operators stay admitted.
    accept(
        "SELECT a + b, a || b, a ~ 'x', a !~* 'y', a ^ 2, |/ a, a << 1, a <-> b FROM t",
        Dialect::Postgres,
    );
}

#[test]
fn check_any_dialect_admits_a_function_of_either_dialect_only() {
    check_any_dialect("SELECT datetime('now')").unwrap();
    check_any_dialect("SELECT * FROM generate_series(1, 2) AS g").unwrap();
    assert_eq!(
        check_any_dialect("SELECT * FROM t, pg_read_file('/etc/passwd') AS f"),
        Err(GuardError::Function("pg_read_file".into()))
    );
    assert_eq!(
        check_any_dialect("SELECT readfile('/etc/passwd')"),
        Err(GuardError::Function("readfile".into()))
    );
    check_any_dialect_allowing("SELECT readfile('/etc/passwd')", &["readfile".into()]).unwrap();
}

#[test]
fn the_allowlists_are_sorted_lower_case_data_without_a_dangerous_name() {
    let dangerous: Vec<&str> = NEVER_POSTGRES
        .iter()
        .chain(NEVER_SQLITE)
        .map(|c| name_of(c))
        .chain([
            "query_to_xml",
            "ts_stat",
            "dblink",
            "pg_read_file",
            "pg_ls_dir",
            "lo_export",
            "pg_terminate_backend",
            "pg_create_physical_replication_slot",
            "pg_drop_replication_slot",
            "pg_file_unlink",
            "pg_stat_reset",
            "set_config",
            "pg_try_advisory_lock",
        ])
        .collect();
    for dialect in [Dialect::Postgres, Dialect::Sqlite] {
        let mut all = Vec::new();
        for group in functions::allowlist(dialect) {
            assert!(group.is_sorted(), "{dialect}: {group:?} is not sorted");
            for name in *group {
                assert!(
                    name.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                    "{name}"
                );
                assert!(!dangerous.contains(name), "{dialect} admits {name}");
                assert!(!name.starts_with("pg_") || *name == "pg_typeof", "{name}");
                assert!(!name.starts_with("lo_") && !name.starts_with("dblink"));
                all.push(*name);
            }
        }
        let count = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), count, "{dialect}: a name is listed twice");
        for name in &all {
            assert!(is_allowlisted(dialect, name));
        }
    }
}

#[test]
fn the_sample_definitions_pass_the_guard_in_both_dialects() {
    let defs = crate::definitions::parse(crate::fixture::SAMPLE_DEFINITIONS).unwrap();
    assert!(!defs.triggers.is_empty());
    for trigger in &defs.triggers {
        for dialect in [Dialect::Postgres, Dialect::Sqlite] {
            accept(&trigger.sql, dialect);
        }
    }
}

fn definitions_with_source(source_block: &str, sql: &str) -> String {
    format!(
        "version: 2\nsource:\n{source_block}\ntriggers:\n  t:\n    sql: \"{sql}\"\n    event_time: at\n    key: id\n"
    )
}

#[test]
fn allow_functions_in_the_definitions_opt_a_source_in() {
    let sql = "SELECT id, at FROM t, set_config('statement_timeout', '0', true) AS s(x)";
    let without = definitions_with_source("  type: postgres", sql);
    let problems = crate::definitions::parse(&without).unwrap_err().to_string();
    assert!(problems.contains("set_config()"), "{problems}");
    assert!(problems.contains("allow_functions"), "{problems}");
    let with = definitions_with_source(
        "  type: postgres\n  allow_functions: [set_config, my_schema.fn]",
        sql,
    );
    let defs = crate::definitions::parse(&with).unwrap();
    assert_eq!(
        defs.source("default").unwrap().allow_functions,
        vec!["set_config".to_string(), "my_schema.fn".to_string()]
    );
    // Named sources too, with the engine not declared.
    let named = "version: 2\nsources:\n  app:\n    allow_functions: [readfile]\ntriggers:\n  t:\n    source: app\n    sql: \"SELECT id, at, readfile('x') FROM t\"\n    event_time: at\n    key: id\n";
    crate::definitions::parse(named).unwrap();
}

#[test]
fn allow_functions_refuses_what_is_not_a_bounded_list_of_names() {
    for (block, expect) in [
        ("  allow_functions: set_config", "expected a list"),
        ("  allow_functions: [\"a;b\"]", "allow_functions[0]"),
        ("  allow_functions: [a.b.c]", "allow_functions[0]"),
        ("  allow_functions: [ok, 42]", "allow_functions[1]"),
        ("  allow_functions: [\"\"]", "expected a function name"),
    ] {
        let doc = definitions_with_source(block, "SELECT id, at FROM t");
        let problems = crate::definitions::parse(&doc).unwrap_err().to_string();
        assert!(problems.contains(expect), "{block}: {problems}");
    }
    let long = "x".repeat(64);
    let doc = definitions_with_source(&format!("  allow_functions: [{long}]"), "SELECT 1");
    assert!(crate::definitions::parse(&doc).is_err());
    let many = (0..=crate::definitions::MAX_ALLOW_FUNCTIONS)
        .map(|i| format!("f{i}"))
        .collect::<Vec<_>>()
        .join(", ");
    let doc = definitions_with_source(&format!("  allow_functions: [{many}]"), "SELECT 1");
    let problems = crate::definitions::parse(&doc).unwrap_err().to_string();
    assert!(problems.contains("at most 100"), "{problems}");
}
