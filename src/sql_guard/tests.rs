use super::*;

fn refuse(sql: &str, dialect: Dialect) -> GuardError {
    check(sql, dialect).expect_err(sql)
}

fn accept(sql: &str, dialect: Dialect) -> CheckedQuery {
    check(sql, dialect).unwrap_or_else(|e| panic!("{sql}: {e}"))
}

const BOTH: [Dialect; 2] = [Dialect::Postgres, Dialect::Sqlite];

#[test]
fn empty_input_is_refused() {
    for d in BOTH {
        for sql in ["", "   ", "-- just a comment", ";"] {
            assert_eq!(refuse(sql, d), GuardError::Empty, "{sql:?}");
        }
    }
}

#[test]
fn more_than_one_statement_is_refused() {
    for d in BOTH {
        assert_eq!(
            refuse("SELECT 1; SELECT 2", d),
            GuardError::MultipleStatements(2)
        );
        assert_eq!(
            refuse("SELECT 1; DELETE FROM t", d),
            GuardError::MultipleStatements(2)
        );
    }
}

#[test]
fn statements_that_are_not_queries_are_refused() {
    let cases = [
        ("INSERT INTO t VALUES (1)", "INSERT"),
        ("UPDATE t SET a = 1", "UPDATE"),
        ("DELETE FROM t", "DELETE"),
        ("CREATE TABLE x (a int)", "CREATE TABLE"),
        ("DROP TABLE t", "DROP TABLE"),
        ("ALTER TABLE t ADD COLUMN b int", "ALTER TABLE"),
        ("CREATE INDEX i ON t (a)", "CREATE INDEX"),
    ];
    for d in BOTH {
        for (sql, kind) in cases {
            assert_eq!(refuse(sql, d), GuardError::NotAQuery(kind.into()), "{sql}");
        }
    }
    for sql in [
        "TRUNCATE t",
        "GRANT SELECT ON t TO bob",
        "SET search_path = x",
        "BEGIN",
        "COPY t TO STDOUT",
        "VACUUM",
    ] {
        assert!(
            matches!(
                refuse(sql, Dialect::Postgres),
                GuardError::NotAQuery(_) | GuardError::Parse { .. }
            ),
            "{sql}"
        );
    }
    for sql in [
        "PRAGMA writable_schema = 1",
        "ATTACH DATABASE 'x.db' AS x",
        "VACUUM",
    ] {
        assert!(
            matches!(
                refuse(sql, Dialect::Sqlite),
                GuardError::NotAQuery(_) | GuardError::Parse { .. }
            ),
            "{sql}"
        );
    }
}

#[test]
fn data_modifying_statements_inside_a_cte_are_refused() {
    let cases = [
        (
            "WITH d AS (DELETE FROM t RETURNING id) SELECT * FROM d",
            "DELETE",
        ),
        (
            "WITH i AS (INSERT INTO t (a) VALUES (1) RETURNING a) SELECT * FROM i",
            "INSERT",
        ),
        (
            "WITH u AS (UPDATE t SET a = 2 RETURNING a) SELECT * FROM u",
            "UPDATE",
        ),
        (
            "SELECT * FROM (WITH d AS (DELETE FROM t RETURNING id) SELECT id FROM d) AS x",
            "DELETE",
        ),
    ];
    for (sql, kind) in cases {
        assert_eq!(
            refuse(sql, Dialect::Postgres),
            GuardError::NestedStatement(kind.into()),
            "{sql}"
        );
    }
}

#[test]
fn select_into_is_refused() {
    for d in BOTH {
        assert_eq!(
            refuse("SELECT a INTO new_table FROM t", d),
            GuardError::SelectInto
        );
    }
}

#[test]
fn locking_clauses_are_refused_anywhere() {
    for sql in [
        "SELECT * FROM t FOR UPDATE",
        "SELECT * FROM t FOR SHARE",
        "SELECT * FROM t FOR UPDATE SKIP LOCKED",
        "SELECT * FROM (SELECT * FROM t FOR UPDATE) AS x",
    ] {
        assert!(
            matches!(refuse(sql, Dialect::Postgres), GuardError::Locking(_)),
            "{sql}"
        );
    }
}

#[test]
fn placeholders_other_than_since_and_until_are_refused() {
    assert_eq!(
        refuse("SELECT * FROM t WHERE a > :other", Dialect::Postgres),
        GuardError::Placeholder(":other".into())
    );
    assert_eq!(
        refuse("SELECT * FROM t WHERE a > $1", Dialect::Postgres),
        GuardError::Placeholder("$1".into())
    );
    assert_eq!(
        refuse("SELECT * FROM t WHERE a > ?", Dialect::Sqlite),
        GuardError::Placeholder("?".into())
    );
}

#[test]
fn functions_that_act_outside_the_query_are_refused() {
    for (sql, name) in [
        (
            "SELECT dblink_exec('host=x', 'DELETE FROM t')",
            "dblink_exec",
        ),
        (
            "SELECT * FROM t WHERE pg_advisory_lock(1) IS NOT NULL",
            "pg_advisory_lock",
        ),
        (
            "SELECT pg_catalog.pg_terminate_backend(pid) FROM pg_stat_activity",
            "pg_terminate_backend",
        ),
        ("SELECT set_config('role', 'admin', false)", "set_config"),
        ("SELECT lo_export(1, '/tmp/x')", "lo_export"),
        (
            "WITH x AS (SELECT pg_notify('c', 'm')) SELECT * FROM x",
            "pg_notify",
        ),
    ] {
        assert_eq!(
            refuse(sql, Dialect::Postgres),
            GuardError::Function(name.into()),
            "{sql}"
        );
    }
    assert_eq!(
        refuse("SELECT load_extension('x.so')", Dialect::Sqlite),
        GuardError::Function("load_extension".into())
    );
    assert_eq!(
        refuse("SELECT pg_sleep(0), now() FROM t", Dialect::Postgres),
        GuardError::Function("pg_sleep".into())
    );
    accept("SELECT now(), lower(name), lo FROM t", Dialect::Postgres);
}

#[test]
fn a_very_long_or_chain_is_checked_without_overflowing_the_stack() {
    let terms = vec!["a = 1"; 4_900].join(" OR ");
    let q = accept(
        &format!("SELECT a, at FROM t WHERE {terms}"),
        Dialect::Postgres,
    );
    assert!(
        q.window_sql(
            Shape {
                clock: "at",
                key: &["a".into()]
            },
            window(),
            Placeholders::Numbered,
            &[]
        )
        .sql
        .len()
            > 40_000
    );
    let too_long = format!("SELECT 1 WHERE {}", vec!["a = 1"; 60_000].join(" OR "));
    assert!(matches!(
        refuse(&too_long, Dialect::Postgres),
        GuardError::TooLong(_)
    ));
}

#[test]
fn garbage_is_a_parse_error_with_the_dialect() {
    let err = refuse("SELEKT * FROM", Dialect::Postgres);
    assert!(
        matches!(
            err,
            GuardError::Parse {
                dialect: Dialect::Postgres,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn read_only_queries_of_every_shape_are_accepted() {
    let cases = [
        "SELECT a.id, b.total FROM accounts a JOIN bills b ON b.account_id = a.id LEFT JOIN plans p ON p.id = a.plan_id",
        "SELECT * FROM t WHERE id IN (SELECT id FROM u WHERE u.x > 1) AND EXISTS (SELECT 1 FROM v)",
        "WITH recent AS (SELECT * FROM t WHERE x > 1), top AS (SELECT * FROM recent) SELECT * FROM top",
        "SELECT id, row_number() OVER (PARTITION BY account_id ORDER BY created_at) AS n FROM t",
        "SELECT id, coalesce(upper(name), lower(other)), length(name) FROM t",
        "SELECT a FROM t UNION SELECT a FROM u",
        "SELECT a FROM t UNION ALL SELECT a FROM u",
        "SELECT a FROM t INTERSECT SELECT a FROM u",
        "SELECT a FROM t EXCEPT SELECT a FROM u",
        "VALUES (1, 'a'), (2, 'b')",
        "SELECT * FROM t WHERE name LIKE '%100%' AND note = 'it''s'",
    ];
    for d in BOTH {
        for sql in cases {
            accept(sql, d);
        }
    }
    accept(
        "SELECT date_trunc('week', created_at)::date AS wk, now() - interval '1 day' FROM t",
        Dialect::Postgres,
    );
}

#[test]
fn since_and_until_placeholders_are_found_by_the_parser_not_by_text() {
    let q = accept(
        "SELECT * FROM t WHERE created_at >= :since AND created_at < :until",
        Dialect::Postgres,
    );
    assert!(q.names_window());
    let q = accept(
        "SELECT ':since' AS label, created_at FROM t",
        Dialect::Postgres,
    );
    assert!(!q.names_window(), "a string literal is not a placeholder");
    let q = accept(
        "SELECT created_at AS since_at FROM t -- :since in a comment",
        Dialect::Sqlite,
    );
    assert!(!q.names_window());
}

fn window() -> Window {
    Window {
        since: "2026-11-01T00:00:00Z".parse().unwrap(),
        until: "2026-11-29T00:00:00Z".parse().unwrap(),
    }
}

#[test]
fn the_query_that_runs_is_rendered_from_the_tree_inside_the_window() {
    let q = accept(
        "select id, created_at from t   where kind = 'x' -- note",
        Dialect::Postgres,
    );
    let key = vec!["id".to_string()];
    let shape = Shape {
        clock: "created_at",
        key: &key,
    };
    let r = q.window_sql(shape, window(), Placeholders::Numbered, &[]);
    assert_eq!(
        r.sql,
        "SELECT t.* FROM (SELECT id, created_at FROM t WHERE kind = 'x') AS t \
         WHERE t.\"created_at\" >= $1 AND t.\"created_at\" < $2 \
         ORDER BY t.\"created_at\", t.\"id\""
    );
    assert_eq!(
        r.binds,
        vec![Bind::Clock(window().since), Bind::Clock(window().until)]
    );
}

#[test]
fn the_one_pass_is_ordered_only_by_the_key_columns_it_is_told_pages_may_be_cut_on() {
    let q = accept("SELECT id, name, at FROM t", Dialect::Postgres);
    let key = vec!["name".to_string(), "id".to_string()];
    let shape = Shape {
        clock: "at",
        key: &key,
    };
    let sql = |sorted: &[bool]| {
        q.window_sql(shape, window(), Placeholders::Numbered, sorted)
            .sql
    };
    assert!(
        sql(&[false, true]).ends_with("ORDER BY t.\"at\", t.\"id\""),
        "{}",
        sql(&[false, true])
    );
    assert!(sql(&[false, false]).ends_with("ORDER BY t.\"at\""));
    assert!(sql(&[]).ends_with("ORDER BY t.\"at\", t.\"name\", t.\"id\""));
}

#[test]
fn authors_placeholders_are_bound_directly_instead_of_wrapping_the_window() {
    let q = accept(
        "SELECT id, at FROM t WHERE at >= :since AND at < :until AND at > :since",
        Dialect::Sqlite,
    );
    let key = vec!["id".to_string()];
    let r = q.window_sql(
        Shape {
            clock: "at",
            key: &key,
        },
        window(),
        Placeholders::Numbered,
        &[],
    );
    assert!(
        r.sql.contains("WHERE at >= ?1 AND at < ?2 AND at > ?1"),
        "{}",
        r.sql
    );
    assert!(r.sql.contains("IS NOT NULL"), "{}", r.sql);
    assert_eq!(r.binds.len(), 2);
}

#[test]
fn sql_of_an_undeclared_engine_passes_in_whichever_dialect_reads_it() {
    check_any_dialect("SELECT id, at FROM t WHERE doc ? 'k'").unwrap();
    check_any_dialect("SELECT `id`, at FROM t").unwrap();
    assert!(matches!(
        check_any_dialect("DELETE FROM t"),
        Err(GuardError::NotAQuery(_))
    ));
    assert!(matches!(
        check_any_dialect("SELEKT"),
        Err(GuardError::Parse {
            dialect: Dialect::Postgres,
            ..
        })
    ));
}

/// `TABLE name` is a query too: it must not read what `FROM name` may not (found reading
/// `pg_authid`'s password hashes through `(TABLE pg_authid)`).
#[test]
fn a_table_query_is_refused_in_every_position() {
    for d in [Dialect::Postgres, Dialect::Mysql] {
        for sql in [
            "TABLE t",
            "SELECT * FROM (TABLE pg_authid) a",
            "WITH x AS (TABLE pg_shadow) SELECT * FROM x",
            "SELECT a FROM t UNION TABLE mysql.user",
            "SELECT a FROM t WHERE a IN (TABLE u)",
        ] {
            let Err(e) = check(sql, d) else {
                panic!("{d:?} accepted {sql}");
            };
            assert!(
                matches!(e, GuardError::Construct(_) | GuardError::Parse { .. }),
                "{d:?} {sql}: {e}"
            );
        }
    }
}

/// SQLite's eponymous virtual tables are functions used as tables: without parentheses they
/// still show the database's files, build and schema.
#[test]
fn sqlite_virtual_tables_without_arguments_are_refused() {
    for sql in [
        "SELECT file FROM pragma_database_list",
        "SELECT name FROM PRAGMA_TABLE_INFO WHERE arg = 'ev'",
        "SELECT * FROM \"pragma_compile_options\"",
        "SELECT * FROM dbstat",
        "SELECT * FROM main.sqlite_master",
        "SELECT * FROM sqlite_schema",
        "SELECT * FROM sqlite_dbpage",
    ] {
        assert!(
            matches!(refuse(sql, Dialect::Sqlite), GuardError::SystemRelation(_)),
            "{sql}"
        );
    }
    accept(
        "SELECT id FROM events JOIN pragmatic ON 1 = 1",
        Dialect::Sqlite,
    );
}

/// A trigger of more tokens than any hand-written query is refused before it is parsed: a long
/// chain such as `1+1+…` builds a tree as deep as it is long.
#[test]
fn sql_of_too_many_tokens_is_refused_before_parsing() {
    let chain = format!("SELECT {} AS x FROM t", vec!["1"; 12_000].join("+"));
    assert!(chain.len() < MAX_SQL_BYTES);
    for d in [Dialect::Postgres, Dialect::Sqlite, Dialect::Mysql] {
        assert!(
            matches!(refuse(&chain, d), GuardError::TooManyTokens(_)),
            "{d:?}"
        );
    }
}

/// With no engine named, what one engine admits another may refuse: the finding of each is
/// given with its engine, not PostgreSQL's alone (SQLite's `iif` was reported as the offender
/// where `changes()` was).
#[test]
fn sql_refused_differently_by_each_engine_names_each_finding() {
    let e = check_any_dialect("SELECT iif(a, 1, 2), changes() FROM t").unwrap_err();
    let GuardError::PerDialect(findings) = &e else {
        panic!("{e}");
    };
    assert!(
        findings.contains(&(Dialect::Sqlite, GuardError::Function("changes".into()))),
        "{e}"
    );
    assert!(e.to_string().contains("give the source its `type`"), "{e}");
}

/// SQLite reads `x IN name` as `x IN (SELECT * FROM name)`: the name is a relation, or a
/// table-valued function with arguments, and is checked as one.
#[test]
fn a_table_named_after_in_is_checked_like_one_in_from() {
    for sql in [
        "SELECT id FROM t WHERE v IN pragma_database_list",
        "SELECT id FROM t WHERE (0, 'main', v) IN pragma_module_list",
        "SELECT id FROM t WHERE id IN main.sqlite_master",
    ] {
        assert!(
            matches!(refuse(sql, Dialect::Sqlite), GuardError::SystemRelation(_)),
            "{sql}"
        );
    }
    assert!(matches!(
        refuse(
            "SELECT id FROM t WHERE v IN pragma_table_list()",
            Dialect::Sqlite
        ),
        GuardError::Function(_)
    ));
    accept(
        "SELECT id FROM t WHERE v IN allowed_values",
        Dialect::Sqlite,
    );
}

#[test]
fn a_long_check_on_a_multi_threaded_runtime_leaves_the_threads_other_tasks_running() {
    // One worker thread: unless the check hands its tasks on, nothing else runs until it ends.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()
        .unwrap();
    let long = format!(
        "SELECT id FROM t WHERE {}",
        vec!["a = 1"; MAX_SQL_TOKENS / 5].join(" OR ")
    );
    let (ticks, checked) = rt.block_on(async move {
        let checking = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let ticks = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (c, t) = (checking.clone(), ticks.clone());
        let ticker = tokio::spawn(async move {
            loop {
                if c.load(std::sync::atomic::Ordering::SeqCst) {
                    t.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                tokio::task::yield_now().await;
            }
        });
        let checked = tokio::spawn(async move {
            checking.store(true, std::sync::atomic::Ordering::SeqCst);
            // Several checks in a row, with no await between them: long enough for the ticker
            // to be scheduled on the thread that took over, however busy the machine.
            let result = (0..5).try_for_each(|_| check(&long, Dialect::Postgres).map(drop));
            checking.store(false, std::sync::atomic::Ordering::SeqCst);
            result
        })
        .await
        .unwrap();
        ticker.abort();
        (ticks.load(std::sync::atomic::Ordering::SeqCst), checked)
    });
    assert!(checked.is_ok(), "{checked:?}");
    assert!(ticks > 0, "no other task ran while the SQL was checked");
}
