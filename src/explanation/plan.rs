//! `rowfire explain TRIGGER`: the SQL a trigger runs, with the window's literals inlined, as the
//! command line prints it and the trigger page shows it.

use jiff::{SignedDuration, Timestamp};

use crate::definitions::{SourceDef, Trigger};
use crate::sql_guard::{self, Dialect, GuardError, Placeholders, Shape, Window};

/// Why the SQL that will run could not be shown.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The guard refused the trigger's SQL.
    #[error("trigger {trigger}: {error}")]
    Guard {
        /// The trigger.
        trigger: String,
        /// Why.
        error: GuardError,
    },
    /// The trigger names no clock column.
    #[error("trigger {trigger} {}", crate::definitions::NO_CLOCK)]
    NoClock {
        /// The trigger.
        trigger: String,
    },
    /// The window reaches before the earliest representable time.
    #[error("--days {0} reaches before the earliest representable time")]
    TooFarBack(u32),
}

/// The statements a poll of `trigger` over the last `days` days before `now` runs on its source
/// (`def`, in `dialect`): the window's one ordered pass, with comments.
pub fn planned_sql(
    trigger: &Trigger,
    def: &SourceDef,
    dialect: Dialect,
    now: Timestamp,
    days: u32,
) -> Result<String, PlanError> {
    let name = &trigger.name;
    if !trigger.has_clock() {
        return Err(PlanError::NoClock {
            trigger: name.clone(),
        });
    }
    let query = sql_guard::check_allowing(&trigger.sql, dialect, &def.allow_functions).map_err(
        |error| PlanError::Guard {
            trigger: name.clone(),
            error,
        },
    )?;
    let since = now
        .checked_sub(SignedDuration::from_hours(24 * i64::from(days)))
        .map_err(|_| PlanError::TooFarBack(days))?;
    let window = Window { since, until: now };
    let shape = Shape {
        clock: &trigger.event_time,
        key: &trigger.key,
    };
    let mut out = format!("-- trigger {name} on source {} ({dialect})\n", def.name);
    if query.names_window() {
        out.push_str(&format!(
            "-- window {since} → {now}, bound to the query's own :since and :until\n"
        ));
    } else {
        out.push_str(&format!(
            "-- window {since} ≤ {} < {now}\n",
            trigger.event_time
        ));
    }
    let order = format!("({}, {})", trigger.event_time, trigger.key.join(", "));
    // Every engine reads the window in one ordered pass.
    let pass = query
        .window_sql(shape, window, Placeholders::Inline, &[])
        .sql;
    out.push_str("-- rows with a NULL key are read and counted, never fired\n");
    match dialect {
        Dialect::Postgres | Dialect::Mysql => out.push_str(&format!(
            "\n-- the window in one pass, in {order} order: one statement in the read-only snapshot, its rows streamed in pages of {}, each within the statement timeout\n{pass};\n",
            def.page_size
        )),
        Dialect::Sqlite => out.push_str(&format!(
            "\n-- the window in one pass, in {order} order: one statement stepping across pages of {} rows\n{pass};\n",
            def.page_size
        )),
    }
    out.push_str(&format!(
        "\n-- a page ends only between rows at different instants or whose keys differ in a type whose equality is identity, so rows equal on {order} are never split\n"
    ));
    if dialect == Dialect::Postgres {
        out.push_str(
            "-- the read first describes the query's columns; key columns of a type a page cannot end between (text, numeric, …) are left out of the ORDER BY\n",
        );
    }
    Ok(out)
}
