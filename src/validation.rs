//! Checking definitions against live sources: the guard in each source's own dialect, and the
//! clock and key columns among each query's output columns (found with `LIMIT 0`).

use std::collections::HashMap;

use jiff::{SignedDuration, Timestamp};

use crate::definitions::Definitions;
use crate::source::{Source, SourceError};
use crate::sql_guard::Window;

/// What checking one trigger against its source found.
#[derive(Debug)]
pub enum TriggerCheck {
    /// The SQL passed the guard in the source's dialect and returns the clock and key columns.
    Ok {
        /// The trigger.
        trigger: String,
        /// The source, without secrets.
        source: String,
    },
    /// The source's DSN is not in the environment, so only the offline checks ran.
    NotChecked {
        /// The trigger.
        trigger: String,
        /// The missing variable.
        var: String,
    },
    /// The trigger's source is not declared in the file (it may be stored in the control
    /// plane), so only the offline checks ran.
    Undeclared {
        /// The trigger.
        trigger: String,
        /// The source.
        source: String,
    },
    /// The trigger's source could not be reached (reported once, on its first trigger).
    SourceUnavailable {
        /// The trigger.
        trigger: String,
        /// The source.
        source: String,
    },
    /// Something is wrong.
    Failed {
        /// The trigger.
        trigger: String,
        /// What.
        error: SourceError,
    },
}

/// Checks every trigger against its source, connecting once per source whose DSN is set.
pub async fn check_against_sources(defs: &Definitions, now: Timestamp) -> Vec<TriggerCheck> {
    let mut connected: HashMap<String, Option<Source>> = HashMap::new();
    let mut out = Vec::new();
    let window = Window {
        since: now - SignedDuration::from_hours(1),
        until: now,
    };
    // A trigger without a clock has nothing to check: `Definitions::held_back` says so.
    for trigger in defs.triggers.iter().filter(|t| t.has_clock()) {
        let name = trigger.name.clone();
        let def = defs
            .source(&trigger.source)
            .expect("validated: every trigger's source exists");
        if !def.declared {
            out.push(TriggerCheck::Undeclared {
                trigger: name,
                source: def.name.clone(),
            });
            continue;
        }
        #[expect(
            clippy::disallowed_methods,
            reason = "a definitions file's dsn_env is data: the variable it names holds a source's DSN"
        )]
        let unset = std::env::var(&def.dsn_env).map_or(true, |v| v.is_empty());
        if unset {
            out.push(TriggerCheck::NotChecked {
                trigger: name,
                var: def.dsn_env.clone(),
            });
            continue;
        }
        if !connected.contains_key(&def.name) {
            let source = match Source::from_env(def).await {
                Ok(source) => Some(source),
                Err(error) => {
                    out.push(TriggerCheck::Failed {
                        trigger: name.clone(),
                        error,
                    });
                    None
                }
            };
            let first_failure = source.is_none();
            connected.insert(def.name.clone(), source);
            if first_failure {
                continue;
            }
        }
        let Some(source) = &connected[&def.name] else {
            out.push(TriggerCheck::SourceUnavailable {
                trigger: name,
                source: def.name.clone(),
            });
            continue;
        };
        let result = source.prepare(defs, trigger, window).await.map(|_| ());
        out.push(match result {
            Ok(()) => TriggerCheck::Ok {
                trigger: name,
                source: format!("{} ({})", source.name(), source.shown()),
            },
            Err(error) => TriggerCheck::Failed {
                trigger: name,
                error,
            },
        });
    }
    out
}
