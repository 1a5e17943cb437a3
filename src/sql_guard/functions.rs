//! The functions a trigger's SQL may call: per dialect, only those known to act on their
//! arguments and the query's snapshot alone. Everything else is refused by name unless the
//! source opts in to it (`allow_functions`).
//!
//! Never on these lists, whatever the dialect: functions that run SQL written in a string
//! (`query_to_xml` and its family, `ts_stat`, `dblink*`), touch files (`pg_read_file`,
//! `pg_ls_dir`, `lo_*`, `readfile`, `writefile`, `load_extension`), act on other sessions
//! (`pg_cancel_backend`, `pg_terminate_backend`), take locks that outlive the statement
//! (`pg_advisory_*`), change settings (`set_config`, `setseed`), touch replication or WAL,
//! notify listeners, reset statistics, sleep, or assign transaction ids or sequence values.
//!
//! Each group is sorted (checked by a test) so lookups are binary searches; a new dialect (MySQL)
//! is new groups and an arm in [`allowlist`].

use super::Dialect;

/// PostgreSQL's groups: built-ins in `pg_catalog` that read only their arguments.
const POSTGRES: &[&[&str]] = &[
    PG_MATH,
    PG_STRING,
    PG_TIME,
    PG_JSON,
    PG_ARRAY,
    PG_AGGREGATE,
    WINDOW,
    PG_CONDITIONAL,
    PG_ROWS,
    PG_SESSION,
    PG_TEXT_SEARCH,
];

/// SQLite's groups: core, date, math, JSON, aggregate and window functions. `randomblob` and
/// `zeroblob` are left out: they exist to allocate.
const SQLITE: &[&[&str]] = &[
    SQLITE_CORE,
    SQLITE_MATH,
    SQLITE_TIME,
    SQLITE_JSON,
    SQLITE_AGGREGATE,
    WINDOW,
    SQLITE_ROWS,
];

/// Math: arithmetic on the arguments alone.
const PG_MATH: &[&str] = &[
    "abs",
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atan",
    "atan2",
    "atanh",
    "cbrt",
    "ceil",
    "ceiling",
    "cos",
    "cosh",
    "cot",
    "degrees",
    "div",
    "exp",
    "factorial",
    "floor",
    "gcd",
    "lcm",
    "ln",
    "log",
    "log10",
    "min_scale",
    "mod",
    "pi",
    "pow",
    "power",
    "radians",
    "round",
    "scale",
    "sign",
    "sin",
    "sinh",
    "sqrt",
    "tan",
    "tanh",
    "trim_scale",
    "trunc",
    "width_bucket",
];

/// Strings and bytes: transform text values (hashes and encodings included); `format` and the
/// `quote_*` functions only build text, they never run it.
const PG_STRING: &[&str] = &[
    "ascii",
    "bit_length",
    "btrim",
    "char_length",
    "character_length",
    "chr",
    "concat",
    "concat_ws",
    "convert",
    "convert_from",
    "convert_to",
    "decode",
    "encode",
    "format",
    "initcap",
    "left",
    "length",
    "lower",
    "lpad",
    "ltrim",
    "md5",
    "normalize",
    "octet_length",
    "overlay",
    "position",
    "quote_ident",
    "quote_literal",
    "quote_nullable",
    "regexp_count",
    "regexp_instr",
    "regexp_like",
    "regexp_match",
    "regexp_matches",
    "regexp_replace",
    "regexp_split_to_array",
    "regexp_split_to_table",
    "regexp_substr",
    "repeat",
    "replace",
    "reverse",
    "right",
    "rpad",
    "rtrim",
    "sha224",
    "sha256",
    "sha384",
    "sha512",
    "split_part",
    "starts_with",
    "string_to_array",
    "string_to_table",
    "strpos",
    "substr",
    "substring",
    "to_hex",
    "translate",
    "trim",
    "unistr",
    "upper",
];

/// Date and time: arithmetic and formatting on values; the clock functions read the
/// transaction's, statement's or wall clock's time and change nothing.
const PG_TIME: &[&str] = &[
    "clock_timestamp",
    "current_date",
    "current_time",
    "current_timestamp",
    "date_add",
    "date_bin",
    "date_part",
    "date_subtract",
    "date_trunc",
    "extract",
    "isfinite",
    "justify_days",
    "justify_hours",
    "justify_interval",
    "localtime",
    "localtimestamp",
    "make_date",
    "make_interval",
    "make_time",
    "make_timestamp",
    "make_timestamptz",
    "now",
    "statement_timestamp",
    "timeofday",
    "timezone",
    "to_char",
    "to_date",
    "to_number",
    "to_timestamp",
    "transaction_timestamp",
];

/// JSON and JSONB: build, read and transform JSON values (`json_table` reads a value, not a table).
const PG_JSON: &[&str] = &[
    "array_to_json",
    "json_agg",
    "json_array_elements",
    "json_array_elements_text",
    "json_array_length",
    "json_build_array",
    "json_build_object",
    "json_each",
    "json_each_text",
    "json_extract_path",
    "json_extract_path_text",
    "json_object",
    "json_object_agg",
    "json_object_keys",
    "json_populate_record",
    "json_populate_recordset",
    "json_strip_nulls",
    "json_table",
    "json_to_record",
    "json_to_recordset",
    "json_typeof",
    "jsonb_agg",
    "jsonb_array_elements",
    "jsonb_array_elements_text",
    "jsonb_array_length",
    "jsonb_build_array",
    "jsonb_build_object",
    "jsonb_each",
    "jsonb_each_text",
    "jsonb_extract_path",
    "jsonb_extract_path_text",
    "jsonb_insert",
    "jsonb_object",
    "jsonb_object_agg",
    "jsonb_object_keys",
    "jsonb_path_exists",
    "jsonb_path_match",
    "jsonb_path_query",
    "jsonb_path_query_array",
    "jsonb_path_query_first",
    "jsonb_populate_record",
    "jsonb_populate_recordset",
    "jsonb_pretty",
    "jsonb_set",
    "jsonb_set_lax",
    "jsonb_strip_nulls",
    "jsonb_to_record",
    "jsonb_to_recordset",
    "jsonb_typeof",
    "row_to_json",
    "to_json",
    "to_jsonb",
    "xmltable",
];

/// Arrays and ranges: build, inspect and transform array and range values; `array` and `row`
/// are the `ARRAY(SELECT …)` and `ROW(…)` constructors.
const PG_ARRAY: &[&str] = &[
    "array",
    "array_append",
    "array_cat",
    "array_dims",
    "array_fill",
    "array_length",
    "array_lower",
    "array_ndims",
    "array_position",
    "array_positions",
    "array_prepend",
    "array_remove",
    "array_replace",
    "array_to_string",
    "array_upper",
    "cardinality",
    "daterange",
    "int4range",
    "int8range",
    "isempty",
    "lower_inc",
    "lower_inf",
    "numrange",
    "range_merge",
    "row",
    "trim_array",
    "tsrange",
    "tstzrange",
    "upper_inc",
    "upper_inf",
];

/// Aggregates: fold the rows the query already reads.
const PG_AGGREGATE: &[&str] = &[
    "any_value",
    "array_agg",
    "avg",
    "bit_and",
    "bit_or",
    "bit_xor",
    "bool_and",
    "bool_or",
    "corr",
    "count",
    "covar_pop",
    "covar_samp",
    "every",
    "grouping",
    "max",
    "min",
    "mode",
    "percentile_cont",
    "percentile_disc",
    "range_agg",
    "range_intersect_agg",
    "regr_avgx",
    "regr_avgy",
    "regr_count",
    "regr_intercept",
    "regr_r2",
    "regr_slope",
    "regr_sxx",
    "regr_sxy",
    "regr_syy",
    "stddev",
    "stddev_pop",
    "stddev_samp",
    "string_agg",
    "sum",
    "var_pop",
    "var_samp",
    "variance",
];

/// Window functions, the same in both dialects: rank and look across the rows of the query's own
/// window frame.
const WINDOW: &[&str] = &[
    "cume_dist",
    "dense_rank",
    "first_value",
    "lag",
    "last_value",
    "lead",
    "nth_value",
    "ntile",
    "percent_rank",
    "rank",
    "row_number",
];

/// Conditionals and casts written as calls (`text(x)`, `int8(x)`): choose among or convert
/// their arguments.
const PG_CONDITIONAL: &[&str] = &[
    "bool",
    "coalesce",
    "date",
    "float4",
    "float8",
    "greatest",
    "int2",
    "int4",
    "int8",
    "interval",
    "least",
    "nullif",
    "num_nonnulls",
    "num_nulls",
    "numeric",
    "pg_typeof",
    "text",
    "time",
    "timestamp",
    "timestamptz",
    "varchar",
];

/// Row generators: set-returning functions whose rows come from their arguments alone.
const PG_ROWS: &[&str] = &["generate_series", "generate_subscripts", "unnest"];

/// Session facts and randomness: who the query runs as, and random values from the session's
/// generator (seeding it, `setseed`, is not here). Settings are not here in either direction:
/// `set_config` writes one, and `current_setting` reads values (custom settings may hold
/// secrets) that are no customer row; `pg_settings` is refused as a system view.
const PG_SESSION: &[&str] = &[
    "current_catalog",
    "current_database",
    "current_role",
    "current_schema",
    "current_user",
    "gen_random_uuid",
    "random",
    "session_user",
    "user",
];

/// Text search over values (`ts_stat`, which runs a query written in a string, is not here).
const PG_TEXT_SEARCH: &[&str] = &[
    "to_tsquery",
    "to_tsvector",
    "ts_rank",
    "ts_rank_cd",
    "websearch_to_tsquery",
];

/// Core scalar functions: transform and compare their arguments.
const SQLITE_CORE: &[&str] = &[
    "abs",
    "char",
    "coalesce",
    "concat",
    "concat_ws",
    "format",
    "glob",
    "hex",
    "ifnull",
    "iif",
    "instr",
    "length",
    "like",
    "likelihood",
    "likely",
    "lower",
    "ltrim",
    "nullif",
    "octet_length",
    "printf",
    "quote",
    "random",
    "replace",
    "round",
    "rtrim",
    "sign",
    "substr",
    "substring",
    "trim",
    "typeof",
    "unhex",
    "unicode",
    "unlikely",
    "upper",
];

/// Math functions: arithmetic on the arguments alone.
const SQLITE_MATH: &[&str] = &[
    "acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "ceil", "ceiling", "cos", "cosh",
    "degrees", "exp", "floor", "ln", "log", "log10", "log2", "mod", "pi", "pow", "power",
    "radians", "sin", "sinh", "sqrt", "tan", "tanh", "trunc",
];

/// Date and time: arithmetic and formatting on values and the statement's time.
const SQLITE_TIME: &[&str] = &[
    "current_date",
    "current_time",
    "current_timestamp",
    "date",
    "datetime",
    "julianday",
    "strftime",
    "time",
    "timediff",
    "unixepoch",
];

/// JSON: build, read and transform JSON text (`json_each` and `json_tree` as tables).
const SQLITE_JSON: &[&str] = &[
    "json",
    "json_array",
    "json_array_length",
    "json_each",
    "json_error_position",
    "json_extract",
    "json_group_array",
    "json_group_object",
    "json_insert",
    "json_object",
    "json_patch",
    "json_pretty",
    "json_quote",
    "json_remove",
    "json_replace",
    "json_set",
    "json_tree",
    "json_type",
    "json_valid",
    "jsonb",
    "jsonb_array",
    "jsonb_extract",
    "jsonb_group_array",
    "jsonb_group_object",
    "jsonb_insert",
    "jsonb_object",
    "jsonb_patch",
    "jsonb_remove",
    "jsonb_replace",
    "jsonb_set",
];

/// Aggregates: fold the rows the query already reads.
const SQLITE_AGGREGATE: &[&str] = &[
    "avg",
    "count",
    "group_concat",
    "max",
    "min",
    "string_agg",
    "sum",
    "total",
];

/// Row generators: rows from the arguments alone.
const SQLITE_ROWS: &[&str] = &["generate_series"];

/// The groups of built-in functions a trigger's SQL may call in `dialect`, each sorted.
pub(crate) fn allowlist(dialect: Dialect) -> &'static [&'static [&'static str]] {
    match dialect {
        Dialect::Postgres => POSTGRES,
        Dialect::Sqlite => SQLITE,
    }
}

/// Whether `name` (lower case, unqualified) is one of `dialect`'s read-only built-ins.
pub fn is_allowlisted(dialect: Dialect, name: &str) -> bool {
    allowlist(dialect)
        .iter()
        .any(|group| group.binary_search(&name).is_ok())
}

/// A function's name as the database resolves it: one part per identifier, unquoted parts
/// folded to lower case (SQLite folds every part: its function names ignore case), and on
/// PostgreSQL a leading `pg_catalog` dropped, since the unqualified name resolves there first.
pub(crate) fn normalise(dialect: Dialect, parts: &[(String, bool)]) -> Vec<String> {
    let mut out: Vec<String> = parts
        .iter()
        .map(|(value, quoted)| match (dialect, quoted) {
            (Dialect::Postgres, true) => value.clone(),
            _ => value.to_ascii_lowercase(),
        })
        .collect();
    if dialect == Dialect::Postgres && out.len() == 2 && out[0] == "pg_catalog" {
        out.remove(0);
    }
    out
}

/// Shows a normalised name: parts joined by `.`, a part that is not a plain identifier quoted,
/// control characters escaped, and a very long name cut (it is echoed in an error).
pub(crate) fn display(parts: &[String]) -> String {
    const SHOWN: usize = 120;
    let text = parts
        .iter()
        .map(|p| {
            if is_identifier(p) && p.bytes().all(|b| !b.is_ascii_uppercase()) {
                p.clone()
            } else {
                let escaped: String = p
                    .chars()
                    .flat_map(|c| {
                        if c.is_control() {
                            c.escape_unicode().collect::<Vec<_>>()
                        } else if c == '"' {
                            vec!['"', '"']
                        } else {
                            vec![c]
                        }
                    })
                    .collect();
                format!("\"{escaped}\"")
            }
        })
        .collect::<Vec<_>>()
        .join(".");
    match text.char_indices().nth(SHOWN) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// Longest part of a name listed in `allow_functions` (PostgreSQL's identifier limit).
pub const MAX_NAME_PART: usize = 63;

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
        && s.len() <= MAX_NAME_PART
}

/// Parses a name listed in a source's `allow_functions` (`fn` or `schema.fn`, plain
/// identifiers of at most 63 bytes each) into its normalised parts, or `None` if it is not one.
pub fn parse_allowed_name(dialect: Dialect, name: &str) -> Option<Vec<String>> {
    let parts: Vec<&str> = name.split('.').collect();
    if parts.len() > 2 || !parts.iter().all(|p| is_identifier(p)) {
        return None;
    }
    let parts: Vec<(String, bool)> = parts.iter().map(|p| (p.to_string(), false)).collect();
    Some(normalise(dialect, &parts))
}

/// Whether a call to the normalised `name` is admitted: a built-in on the dialect's list (called
/// unqualified, or through `pg_catalog` on PostgreSQL), or a name the source opted in to.
pub(crate) fn admitted(dialect: Dialect, name: &[String], extra: &[Vec<String>]) -> bool {
    (name.len() == 1 && is_allowlisted(dialect, &name[0])) || extra.iter().any(|e| e == name)
}
