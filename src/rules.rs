//! Rule state in the control plane (the `rule_state` table): each rule's mode (shadow or live),
//! the checksum of its meaning, and tombstones for rules that were removed.

use jiff::Timestamp;

use crate::definitions::Definitions;
use crate::store::WorkspaceId;
use crate::store::{DbTime, Store, StoreError, StoreTx, execute, fetch_all, stored_enum};

stored_enum! {
    /// Whether a rule's fires are only recorded (shadow) or also sent (live).
    #[derive(serde::Serialize)]
    #[serde(rename_all = "lowercase")]
    pub enum Mode as "rule mode" {
        /// Rendered and recorded; nothing leaves the machine.
        Shadow = "shadow",
        /// Sent for real.
        Live = "live",
    }
}

/// One rule's stored state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleState {
    /// The rule.
    pub rule: String,
    /// Its trigger.
    pub trigger: String,
    /// Its mode.
    pub mode: Mode,
    /// When it was removed from the definitions, if it was.
    pub tombstoned_at: Option<Timestamp>,
}

/// What a mode change could not do.
#[derive(Debug, thiserror::Error)]
pub enum ModeError {
    /// No such rule in force.
    #[error("unknown rule \"{0}\"; `rowfire list` shows the rules in force")]
    UnknownRule(String),
    /// The control plane failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

type Names = Vec<String>;

/// Brings rule state in line with `defs`: new rules start in shadow; a rule whose meaning changed
/// goes back to shadow (no other rule is touched); a removed rule becomes a tombstone.
/// Returns (new, changed, tombstoned) rule names.
pub(crate) async fn reconcile(
    tx: &mut StoreTx,
    workspace: &WorkspaceId,
    defs: &Definitions,
    now: Timestamp,
) -> Result<(Names, Names, Names), sqlx::Error> {
    let existing = fetch_all!(
        &mut *tx,
        "SELECT rule_name, checksum, tombstoned_at FROM rule_state WHERE workspace_id = $1",
        [workspace],
        |r| Ok((
            r.try_get::<String, _>("rule_name")?,
            r.try_get::<String, _>("checksum")?,
            r.try_get::<Option<DbTime>, _>("tombstoned_at")?
        ))
    )?;
    let (mut new, mut changed, mut tombstoned) = (Vec::new(), Vec::new(), Vec::new());
    for rule in &defs.rules {
        let trigger = defs
            .trigger(&rule.trigger)
            .expect("validated: every rule's trigger exists");
        let checksum = rule.checksum(trigger);
        match existing.iter().find(|(name, _, _)| *name == rule.name) {
            None => {
                execute!(
                    &mut *tx,
                    "INSERT INTO rule_state (workspace_id, rule_name, trigger_name, checksum, mode, mode_changed_at) VALUES ($1, $2, $3, $4, 'shadow', $5)",
                    [workspace, &rule.name, &rule.trigger, &checksum, DbTime(now)]
                )?;
                new.push(rule.name.clone());
            }
            Some((_, old, tomb)) if *old != checksum || tomb.is_some() => {
                execute!(
                    &mut *tx,
                    "UPDATE rule_state SET trigger_name = $3, checksum = $4, mode = 'shadow', mode_changed_at = $5, tombstoned_at = NULL WHERE workspace_id = $1 AND rule_name = $2",
                    [workspace, &rule.name, &rule.trigger, &checksum, DbTime(now)]
                )?;
                if tomb.is_some() {
                    new.push(rule.name.clone())
                } else {
                    changed.push(rule.name.clone())
                }
            }
            Some(_) => {}
        }
    }
    for (name, _, tomb) in &existing {
        if tomb.is_none() && defs.rule(name).is_none() {
            execute!(
                &mut *tx,
                "UPDATE rule_state SET tombstoned_at = $3 WHERE workspace_id = $1 AND rule_name = $2",
                [workspace, name, DbTime(now)]
            )?;
            tombstoned.push(name.clone());
        }
    }
    Ok((new, changed, tombstoned))
}

/// Every rule's state, tombstones included, by name.
pub async fn list(store: &Store, workspace: &WorkspaceId) -> Result<Vec<RuleState>, StoreError> {
    let mut tx = store.begin(workspace).await?;
    let rows = fetch_all!(
        &mut tx,
        "SELECT rule_name, trigger_name, mode, tombstoned_at FROM rule_state WHERE workspace_id = $1 ORDER BY rule_name",
        [workspace],
        |r| Ok(RuleState {
            rule: r.try_get("rule_name")?,
            trigger: r.try_get("trigger_name")?,
            mode: r.try_get("mode")?,
            tombstoned_at: r.try_get::<Option<DbTime>, _>("tombstoned_at")?.map(|t| t.0),
        })
    )
    .map_err(|e| store.error(e))?;
    tx.rollback().await.map_err(|e| store.error(e))?;
    Ok(rows)
}

/// Sets a rule's mode (`promote`: live; `demote`: shadow). Returns the mode it had.
pub async fn set_mode(
    store: &Store,
    workspace: &WorkspaceId,
    rule: &str,
    mode: Mode,
    now: Timestamp,
) -> Result<Mode, ModeError> {
    let mut tx = store.begin(workspace).await?;
    let before = fetch_all!(
        &mut tx,
        "SELECT mode FROM rule_state WHERE workspace_id = $1 AND rule_name = $2 AND tombstoned_at IS NULL",
        [workspace, rule],
        |r| r.try_get::<Mode, _>("mode")
    )
    .map_err(|e| store.error(e))?;
    let Some(before) = before.first().copied() else {
        return Err(ModeError::UnknownRule(rule.to_string()));
    };
    if before != mode {
        execute!(
            &mut tx,
            "UPDATE rule_state SET mode = $3, mode_changed_at = $4 WHERE workspace_id = $1 AND rule_name = $2",
            [workspace, rule, mode.as_str(), DbTime(now)]
        )
        .map_err(|e| store.error(e))?;
    }
    tx.commit().await.map_err(|e| store.error(e))?;
    Ok(before)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::SAMPLE_DEFINITIONS;
    use crate::store::DEFAULT_WORKSPACE as WS;
    use sqlx::Connection as _;

    #[test]
    fn modes_read_back_as_written_and_nothing_else_does() {
        for mode in [Mode::Shadow, Mode::Live] {
            assert_eq!(mode.to_string().parse::<Mode>(), Ok(mode));
        }
        for stored in ["paused", "", "Live", "shadow "] {
            let err = stored.parse::<Mode>().unwrap_err();
            assert_eq!(
                err,
                crate::store::UnknownValue {
                    what: "rule mode",
                    value: stored.to_string()
                }
            );
            assert!(err.to_string().contains(&format!("\"{stored}\"")), "{err}");
            assert!(
                err.to_string().contains("this Rowfire does not know"),
                "{err}"
            );
        }
    }

    /// A mode this Rowfire does not know (as a newer Rowfire that widened the CHECK would store)
    /// is an error wherever it is read, never shadow.
    #[tokio::test]
    async fn an_unknown_stored_mode_is_an_error_not_shadow() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("control.db").display());
        let store = Store::open(&url).await.unwrap();
        store.migrate().await.unwrap();
        let now: Timestamp = "2026-11-29T12:00:00Z".parse().unwrap();
        crate::push::push(&store, WS, SAMPLE_DEFINITIONS, now)
            .await
            .unwrap();
        let mut raw = sqlx::SqliteConnection::connect(&url).await.unwrap();
        sqlx::query("PRAGMA ignore_check_constraints = ON")
            .execute(&mut raw)
            .await
            .unwrap();
        let planted = sqlx::query(
            "UPDATE rule_state SET mode = 'paused' WHERE workspace_id = 'default' AND rule_name = 'billing_ticket'",
        )
        .execute(&mut raw)
        .await
        .unwrap();
        assert_eq!(planted.rows_affected(), 1);
        raw.close().await.unwrap();

        let err = list(&store, WS).await.unwrap_err();
        assert!(matches!(err, StoreError::Database { .. }), "{err:?}");
        assert!(err.to_string().contains("\"paused\""), "{err}");
        assert!(
            err.to_string().contains("this Rowfire does not know"),
            "{err}"
        );

        let err = set_mode(&store, WS, "billing_ticket", Mode::Live, now)
            .await
            .unwrap_err();
        assert!(matches!(err, ModeError::Store(_)), "{err:?}");
        assert!(err.to_string().contains("\"paused\""), "{err}");
        // Nothing was changed by the refused promote; other rules still read and change.
        let mut raw = sqlx::SqliteConnection::connect(&url).await.unwrap();
        let (still,): (String,) = sqlx::query_as(
            "SELECT mode FROM rule_state WHERE workspace_id = 'default' AND rule_name = 'billing_ticket'",
        )
        .fetch_one(&mut raw)
        .await
        .unwrap();
        assert_eq!(still, "paused");
        raw.close().await.unwrap();
        assert_eq!(
            set_mode(&store, WS, "billing_heads_up", Mode::Live, now)
                .await
                .unwrap(),
            Mode::Shadow
        );
    }
}
