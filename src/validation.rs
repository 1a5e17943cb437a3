//! Checking definitions against live sources: the guard in each source's own dialect, and the
//! clock and key columns among each query's output columns (found with `LIMIT 0`).

use std::collections::HashMap;

use jiff::{SignedDuration, Timestamp};

use crate::definitions::Definitions;
use crate::source::{Source, SourceError};
use crate::sql_guard::{Shape, Window};

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
    let mut sources: HashMap<String, Result<Source, String>> = HashMap::new();
    let mut out = Vec::new();
    let window = Window {
        since: now - SignedDuration::from_hours(1),
        until: now,
    };
    for trigger in &defs.triggers {
        let def = defs
            .source(&trigger.source)
            .expect("validated: every trigger's source exists");
        if std::env::var(&def.dsn_env).map_or(true, |v| v.is_empty()) {
            out.push(TriggerCheck::NotChecked {
                trigger: trigger.name.clone(),
                var: def.dsn_env.clone(),
            });
            continue;
        }
        if !sources.contains_key(&def.name) {
            let connected = Source::from_env(def).await;
            let kept = match connected {
                Ok(s) => Ok(s),
                Err(e) => {
                    out.push(TriggerCheck::Failed {
                        trigger: trigger.name.clone(),
                        error: e,
                    });
                    Err(def.name.clone())
                }
            };
            let failed_now = kept.is_err();
            sources.insert(def.name.clone(), kept);
            if failed_now {
                continue;
            }
        }
        let source = match &sources[&def.name] {
            Ok(s) => s,
            Err(name) => {
                let error = SourceError::Connect {
                    name: name.clone(),
                    shown: "-".into(),
                    message: "see above".into(),
                };
                out.push(TriggerCheck::Failed {
                    trigger: trigger.name.clone(),
                    error,
                });
                continue;
            }
        };
        let shape = Shape {
            clock: &trigger.event_time,
            key: &trigger.key,
        };
        let result = match source.check(&trigger.name, &trigger.sql) {
            Ok(query) => {
                source
                    .check_shape(&trigger.name, &query, shape, window)
                    .await
            }
            Err(e) => Err(e),
        };
        out.push(match result {
            Ok(()) => TriggerCheck::Ok {
                trigger: trigger.name.clone(),
                source: format!("{} ({})", source.name(), source.shown()),
            },
            Err(error) => TriggerCheck::Failed {
                trigger: trigger.name.clone(),
                error,
            },
        });
    }
    out
}
