//! The guard in the MySQL dialect (MySQL and MariaDB): one read-only query, nothing that writes
//! a file, locks a row, assigns or reads a variable, waits, takes a named lock, reads a server
//! file or a system schema, or lifts the statement timeout from inside the query.

use super::allowlist_tests::{accept, accept_with, refuse, refuse_with};
use super::*;

const MY: Dialect = Dialect::Mysql;

#[test]
fn a_mysql_query_of_the_common_shapes_is_admitted() {
    for sql in [
        "SELECT id, `order`, created_at FROM events WHERE status = 'open'",
        "SELECT e.id, a.name FROM events e LEFT JOIN accounts a ON a.id = e.account_id",
        "SELECT id, DATE_ADD(created_at, INTERVAL 1 DAY) AS next_day FROM events",
        "SELECT id, IF(amount > 10, 'big', 'small') AS size, IFNULL(note, '') AS note FROM t",
        "SELECT id, JSON_EXTRACT(doc, '$.a') AS a, doc->>'$.b' AS b FROM t",
        "SELECT id, amount DIV 2 AS half, amount % 3 AS m, a <=> b AS same FROM t",
        "SELECT id FROM t WHERE created_at >= :since AND created_at < :until",
        "SELECT id, GROUP_CONCAT(tag ORDER BY tag SEPARATOR ',') AS tags FROM t GROUP BY id",
        "SELECT id, ROW_NUMBER() OVER (PARTITION BY k ORDER BY at) AS n FROM t",
        "SELECT SQL_NO_CACHE STRAIGHT_JOIN id FROM t",
        "SELECT id FROM t USE INDEX (t_at) WHERE at > NOW() - INTERVAL 7 DAY",
        "SELECT id FROM app.events",
        "WITH recent AS (SELECT * FROM t) SELECT * FROM recent",
        "SELECT id FROM t UNION ALL SELECT id FROM u",
        "SELECT CAST(amount AS DECIMAL(10, 2)) AS amount, CONVERT(name USING utf8mb4) AS n FROM t",
        "SELECT id FROM t WHERE name LIKE 'a%' AND kind IN ('x', 'y') LIMIT 10",
    ] {
        accept(sql, MY);
    }
}

#[test]
fn select_into_a_file_or_a_variable_is_refused() {
    for sql in [
        "SELECT * FROM t INTO OUTFILE '/tmp/x'",
        "SELECT * INTO OUTFILE '/tmp/x' FROM t",
        "SELECT * FROM t INTO DUMPFILE '/tmp/x'",
        "SELECT id INTO @x FROM t",
        "SELECT id FROM t INTO @x",
        "SELECT id INTO x FROM t",
        "SELECT INTO",
        "SELECT outfile FROM t",
    ] {
        refuse(sql, MY);
    }
    assert_eq!(
        refuse("SELECT id INTO @x FROM t", MY),
        GuardError::SelectInto
    );
}

#[test]
fn row_locks_are_refused_in_every_spelling() {
    for sql in [
        "SELECT * FROM t FOR UPDATE",
        "SELECT * FROM t FOR UPDATE NOWAIT",
        "SELECT * FROM t FOR UPDATE SKIP LOCKED",
        "SELECT * FROM t FOR SHARE",
        "SELECT * FROM t LOCK IN SHARE MODE",
        "SELECT * FROM (SELECT * FROM t FOR UPDATE) AS s",
        "SELECT * FROM t WHERE id IN (SELECT id FROM u FOR SHARE)",
    ] {
        refuse(sql, MY);
    }
    assert!(matches!(
        refuse("SELECT * FROM t FOR UPDATE", MY),
        GuardError::Locking(_)
    ));
}

#[test]
fn statements_other_than_a_query_are_refused() {
    for sql in [
        "HANDLER t OPEN",
        "HANDLER t READ FIRST",
        "DO SLEEP(10)",
        "SET @x = 1",
        "SET SESSION max_execution_time = 0",
        "SET STATEMENT max_statement_time = 0 FOR SELECT 1",
        "LOCK TABLES t READ",
        "UNLOCK TABLES",
        "CALL p()",
        "LOAD DATA INFILE '/etc/passwd' INTO TABLE t",
        "INSERT INTO t VALUES (1)",
        "REPLACE INTO t VALUES (1)",
        "DELETE FROM t",
        "UPDATE t SET a = 1",
        "CREATE TABLE x SELECT * FROM t",
        "SHOW GRANTS",
        "START TRANSACTION READ WRITE",
        "SELECT 1; DROP TABLE t",
    ] {
        refuse(sql, MY);
    }
}

#[test]
fn user_and_system_variables_are_refused_read_or_assigned() {
    for sql in [
        "SELECT @x := id FROM t",
        "SELECT id FROM t WHERE (@n := @n + 1) > 0",
        "SELECT @x FROM t",
        "SELECT @@hostname",
        "SELECT @@session.max_execution_time",
        "SELECT @@global.secure_file_priv AS p",
        "SELECT id FROM t WHERE id = @`x`",
        "SELECT id AS a@b FROM t",
    ] {
        refuse(sql, MY);
    }
    // An @ inside a string or a quoted name is data, not a variable.
    accept("SELECT id, 'a@b.example' AS email, `x@y` FROM t", MY);
}

#[test]
fn functions_that_wait_lock_or_read_files_are_refused_by_the_allowlist() {
    for (sql, name) in [
        ("SELECT SLEEP(10)", "sleep"),
        ("SELECT id FROM t WHERE SLEEP(1) = 0", "sleep"),
        ("SELECT BENCHMARK(100000000, MD5('x'))", "benchmark"),
        ("SELECT GET_LOCK('a', 10)", "get_lock"),
        ("SELECT RELEASE_LOCK('a')", "release_lock"),
        ("SELECT RELEASE_ALL_LOCKS()", "release_all_locks"),
        ("SELECT IS_USED_LOCK('a')", "is_used_lock"),
        ("SELECT LOAD_FILE('/etc/passwd')", "load_file"),
        ("SELECT MASTER_POS_WAIT('log', 4)", "master_pos_wait"),
        ("SELECT CONNECTION_ID()", "connection_id"),
        ("SELECT LAST_INSERT_ID()", "last_insert_id"),
        ("SELECT FOUND_ROWS()", "found_rows"),
        ("SELECT VERSION()", "version"),
        ("SELECT id FROM t WHERE id IN (SELECT SLEEP(5))", "sleep"),
        (
            "SELECT * FROM t JOIN (SELECT BENCHMARK(1, 1) AS b) AS s ON 1 = 1",
            "benchmark",
        ),
        ("SELECT app.my_fn(id) FROM t", "app.my_fn"),
    ] {
        assert_eq!(refuse(sql, MY), GuardError::Function(name.into()), "{sql}");
    }
    // A quoted name is a stored function of the database, not the built-in.
    assert!(matches!(
        refuse("SELECT `lower`(name) FROM t", MY),
        GuardError::Function(_)
    ));
    accept_with("SELECT app.my_fn(id) FROM t", MY, &["app.my_fn"]);
    refuse_with("SELECT SLEEP(1)", MY, &["app.my_fn"]);
}

#[test]
fn executable_comments_are_read_as_the_sql_they_hold() {
    for sql in [
        "SELECT 1 /*! , SLEEP(10) */",
        "SELECT id FROM t /*!50000 FOR UPDATE */",
        "SELECT id FROM t /*!50000 INTO OUTFILE '/tmp/x' */",
    ] {
        refuse(sql, MY);
    }
}

#[test]
fn optimizer_hints_that_could_lift_the_timeout_are_refused() {
    for sql in [
        "SELECT /*+ MAX_EXECUTION_TIME(0) */ id FROM t",
        "SELECT /*+ SET_VAR(max_execution_time = 0) */ id FROM t",
        "SELECT /*+ SET_VAR(sql_mode = 'ANSI_QUOTES') */ id FROM t",
        "SELECT SQL_CALC_FOUND_ROWS id FROM t",
    ] {
        assert!(matches!(refuse(sql, MY), GuardError::Construct(_)), "{sql}");
    }
}

#[test]
fn the_system_schemas_are_refused() {
    for (sql, shown) in [
        ("SELECT * FROM mysql.user", "mysql.user"),
        ("SELECT * FROM MySQL.User", "mysql.user"),
        (
            "SELECT * FROM information_schema.processlist",
            "information_schema.processlist",
        ),
        (
            "SELECT * FROM `information_schema`.`TABLES`",
            "information_schema.tables",
        ),
        (
            "SELECT * FROM performance_schema.threads",
            "performance_schema.threads",
        ),
        ("SELECT * FROM sys.session", "sys.session"),
        (
            "SELECT id FROM t WHERE EXISTS (SELECT 1 FROM mysql.db)",
            "mysql.db",
        ),
    ] {
        assert_eq!(
            refuse(sql, MY),
            GuardError::SystemRelation(shown.into()),
            "{sql}"
        );
    }
}

#[test]
fn strings_with_backslashes_are_re_rendered_as_the_author_meant_them() {
    // The author's `\'` is an escaped quote (MySQL's default); sources run with
    // NO_BACKSLASH_ESCAPES, so the rendering doubles quotes and keeps backslashes literal.
    let window = Window {
        since: jiff::Timestamp::UNIX_EPOCH,
        until: jiff::Timestamp::UNIX_EPOCH,
    };
    let q = check(r"SELECT 'it\'s' AS a, 'back\\slash' AS b FROM t", MY).unwrap();
    let sql = q.columns_sql(window).sql;
    assert!(sql.contains("'it''s'"), "{sql}");
    assert!(sql.contains(r"'back\slash'"), "{sql}");
    // A lone backslash before the closing quote cannot open the string past it.
    let q = check(
        r"SELECT '\\' AS a, ' UNION SELECT LOAD_FILE(1) -- ' AS b",
        MY,
    )
    .unwrap();
    let sql = q.columns_sql(window).sql;
    assert!(sql.contains(r"'\' AS a"), "{sql}");
}

#[test]
fn window_placeholders_take_one_positional_bind_each_in_order() {
    let q = check(
        "SELECT id, at FROM t WHERE at < :until AND at >= :since OR at = :until",
        MY,
    )
    .unwrap();
    let window = Window {
        since: "2026-01-01T00:00:00Z".parse().unwrap(),
        until: "2026-02-01T00:00:00.0000001Z".parse().unwrap(),
    };
    let key = vec!["id".to_string()];
    let shape = Shape {
        clock: "at",
        key: &key,
    };
    let r = q.window_sql(shape, window, Placeholders::Numbered, &[]);
    assert_eq!(r.sql.matches('?').count(), r.binds.len(), "{}", r.sql);
    assert_eq!(
        r.binds,
        vec![
            Bind::Instant(window.until),
            Bind::Instant(window.since),
            Bind::Instant(window.until),
        ]
    );
    assert!(r.sql.contains("`at`"), "{}", r.sql);
    assert_eq!(mysql_clock_text(window.until), "2026-02-01 00:00:00.000001");
    assert_eq!(
        mysql_clock_text(jiff::Timestamp::MIN),
        "1000-01-01 00:00:00.000000"
    );
}

#[test]
fn sql_of_unknown_origin_is_admitted_when_it_reads_in_mysql() {
    check_any_dialect("SELECT id FROM t WHERE a <=> b").unwrap();
    assert!(check_any_dialect("SELECT SLEEP(1)").is_err());
}

#[test]
fn a_literal_ending_in_a_backslash_hides_nothing_from_the_variable_scan() {
    // As run (NO_BACKSLASH_ESCAPES) `'\'` is a whole string, so what follows it is code: the
    // scan must read it so, not as the inside of a string reaching the next quote.
    for sql in [
        r"SELECT '\\' AS a, @x AS b, 'q' AS c",
        r"SELECT '\\' AS a, @@hostname AS b, 1 AS `q'`",
        r#"SELECT "\\" AS a, @x AS b, "q" AS c"#,
        r#"SELECT '\\' AS a, @x AS b, "it's" AS c, 'say "hi' AS d"#,
    ] {
        assert!(
            matches!(refuse(sql, MY), GuardError::Construct(ref w) if w.contains("variable")),
            "{sql}: {:?}",
            refuse(sql, MY)
        );
    }
}

#[test]
fn literals_ending_in_a_backslash_or_holding_comment_marks_are_admitted() {
    let window = Window {
        since: jiff::Timestamp::UNIX_EPOCH,
        until: jiff::Timestamp::UNIX_EPOCH,
    };
    for sql in [
        r"SELECT '\\' AS a, 'x' AS b FROM t",
        r#"SELECT " /*! " AS a, '--' AS b, '#' AS c FROM t"#,
        r"SELECT 'C:\\dir\\' AS path, '/*+ MAX_EXECUTION_TIME(0) */' AS note FROM t",
    ] {
        let q = check(sql, MY).unwrap_or_else(|e| panic!("{sql}: {e}"));
        let _ = q.columns_sql(window);
    }
}

/// The session's account, written as the bare keyword, is as refused as `CURRENT_USER()`.
#[test]
fn the_session_user_as_a_bare_keyword_is_refused() {
    for sql in [
        "SELECT id, CURRENT_USER AS cu FROM t",
        "SELECT id FROM t WHERE CURRENT_USER = 'root'",
        "SELECT id, CURRENT_USER() AS cu FROM t",
    ] {
        let e = refuse(sql, MY);
        assert!(matches!(e, GuardError::Function(_)), "{sql}: {e}");
    }
}
