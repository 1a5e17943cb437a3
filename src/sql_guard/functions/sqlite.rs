//! SQLite's admitted functions: core, math, date, JSON, aggregate and row-generating
//! built-ins, one sorted group per reason (window functions are shared with PostgreSQL, in the
//! parent module).

use super::WINDOW;

/// SQLite's groups: core, date, math, JSON, aggregate and window functions. `randomblob` and
/// `zeroblob` are left out: they exist to allocate.
pub(super) const SQLITE: &[&[&str]] = &[
    SQLITE_CORE,
    SQLITE_MATH,
    SQLITE_TIME,
    SQLITE_JSON,
    SQLITE_AGGREGATE,
    WINDOW,
    SQLITE_ROWS,
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
