//! The control plane behaves the same on SQLite and PostgreSQL: one conformance suite, two engines.

use jiff::{SignedDuration, Timestamp};
use rowfire::definitions::versions;
use rowfire::fixture::SAMPLE_DEFINITIONS;
use rowfire::poll;
use rowfire::push::{self, PushError};
use rowfire::rules::{self, Mode, ModeError};
use rowfire::store::{DEFAULT_WORKSPACE as WS, Store, StoreError, workspace};

use crate::support::now;

async fn migrated(url: &str) -> Store {
    let store = Store::open(url).await.unwrap();
    store.migrate().await.unwrap();
    store
}

async fn migrations_apply_once_and_are_required(url: &str) {
    let store = Store::open(url).await.unwrap();
    let err = store.check_migrated().await.unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::NotMigrated {
                have: 0,
                want: 15,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("run `rowfire migrate`"));
    assert_eq!(store.migrate().await.unwrap(), 15);
    assert_eq!(
        store.migrate().await.unwrap(),
        0,
        "a second migrate changes nothing"
    );
    store.check_migrated().await.unwrap();
}
on_both_engines!(
    migrations_apply_once_and_are_required_,
    migrations_apply_once_and_are_required
);

async fn push_stores_versions_and_pull_returns_them_byte_for_byte(url: &str) {
    let store = migrated(url).await;
    assert_eq!(versions::get(&store, WS, None).await.unwrap(), None);
    let first = push::push(&store, WS, SAMPLE_DEFINITIONS, now())
        .await
        .unwrap();
    assert_eq!((first.version, first.unchanged), (1, false));
    assert_eq!(first.new_triggers.len(), 7);
    assert_eq!(first.new_rules.len(), 8);
    let again = push::push(&store, WS, SAMPLE_DEFINITIONS, now())
        .await
        .unwrap();
    assert_eq!(
        (again.version, again.unchanged),
        (1, true),
        "an identical document is not a new version"
    );

    let edited =
        format!("{SAMPLE_DEFINITIONS}\n# a comment is a new version, but changes no rule\n");
    let second = push::push(&store, WS, &edited, now()).await.unwrap();
    assert_eq!(second.version, 2);
    assert!(
        second.new_rules.is_empty()
            && second.changed_rules.is_empty()
            && second.new_triggers.is_empty()
    );
    assert_eq!(
        versions::get(&store, WS, None)
            .await
            .unwrap()
            .unwrap()
            .document,
        edited
    );
    let v1 = versions::get(&store, WS, Some(1)).await.unwrap().unwrap();
    assert_eq!(v1.document, SAMPLE_DEFINITIONS);
    assert_eq!(v1.pushed_at, now());
    assert_eq!(versions::get(&store, WS, Some(9)).await.unwrap(), None);

    let broken = push::push(
        &store,
        WS,
        "version: 2\nrules: { x: { trigger: nope, policy: once_ever } }\n",
        now(),
    )
    .await;
    assert!(matches!(broken, Err(PushError::Definitions(_))));
    assert_eq!(
        versions::get(&store, WS, None)
            .await
            .unwrap()
            .unwrap()
            .version,
        2,
        "an invalid push stores nothing"
    );
}
on_both_engines!(
    push_stores_versions_and_pull_returns_them_byte_for_byte_,
    push_stores_versions_and_pull_returns_them_byte_for_byte
);

async fn a_new_trigger_starts_at_now_so_history_never_fires(url: &str) {
    let store = migrated(url).await;
    push::push(&store, WS, SAMPLE_DEFINITIONS, now())
        .await
        .unwrap();
    let later = now() + SignedDuration::from_hours(1);
    let with_new = SAMPLE_DEFINITIONS.replace(
        "  meeting_changed:\n",
        "  trial_started:\n    sql: SELECT id, account_id, started_at FROM trials\n    event_time: started_at\n    key: [account_id]\n\n  meeting_changed:\n",
    );
    let summary = push::push(&store, WS, &with_new, later).await.unwrap();
    assert_eq!(summary.new_triggers, vec!["trial_started"]);
    let states = poll::list(&store, WS).await.unwrap();
    let state = |name: &str| states.iter().find(|s| s.trigger == name).unwrap().clone();
    assert_eq!(state("trial_started").watermark, later);
    assert_eq!(state("trial_started").next_poll_at, later);
    assert_eq!(
        state("declined_charge").watermark,
        now(),
        "an existing trigger keeps its watermark"
    );

    push::push(&store, WS, SAMPLE_DEFINITIONS, later)
        .await
        .unwrap();
    let removed = poll::list(&store, WS).await.unwrap();
    assert_eq!(
        removed
            .iter()
            .find(|s| s.trigger == "trial_started")
            .unwrap()
            .removed_at,
        Some(later)
    );
}
on_both_engines!(
    a_new_trigger_starts_at_now_so_history_never_fires_,
    a_new_trigger_starts_at_now_so_history_never_fires
);

async fn mode_of(store: &Store, rule: &str) -> (Mode, Option<Timestamp>) {
    let all = rules::list(store, WS).await.unwrap();
    let r = all.iter().find(|r| r.rule == rule).unwrap();
    (r.mode, r.tombstoned_at)
}

async fn editing_one_rules_cadence_demotes_that_rule_only(url: &str) {
    let store = migrated(url).await;
    push::push(&store, WS, SAMPLE_DEFINITIONS, now())
        .await
        .unwrap();
    for rule in ["billing_ticket", "billing_heads_up", "detractor_follow_up"] {
        assert_eq!(
            rules::set_mode(&store, WS, rule, Mode::Live, now())
                .await
                .unwrap(),
            Mode::Shadow
        );
    }
    // billing_heads_up goes from daily to weekly; nothing else changes meaning.
    let edited = SAMPLE_DEFINITIONS.replace("    period: day\n", "    period: week\n");
    let summary = push::push(&store, WS, &edited, now()).await.unwrap();
    assert_eq!(summary.changed_rules, vec!["billing_heads_up"]);
    assert_eq!(mode_of(&store, "billing_heads_up").await.0, Mode::Shadow);
    assert_eq!(mode_of(&store, "billing_ticket").await.0, Mode::Live);
    assert_eq!(mode_of(&store, "detractor_follow_up").await.0, Mode::Live);

    // Changing a trigger's SQL changes the meaning of every rule on it, and only those.
    let edited_sql = edited.replace("WHERE r.score <= 6", "WHERE r.score <= 5");
    let summary = push::push(&store, WS, &edited_sql, now()).await.unwrap();
    assert_eq!(summary.changed_rules, vec!["detractor_follow_up"]);
    assert_eq!(mode_of(&store, "billing_ticket").await.0, Mode::Live);

    // A description is not meaning.
    let described = edited_sql.replace("Open a billing ticket", "Open a ticket for billing");
    assert!(
        push::push(&store, WS, &described, now())
            .await
            .unwrap()
            .changed_rules
            .is_empty()
    );
}
on_both_engines!(
    editing_one_rules_cadence_demotes_that_rule_only_,
    editing_one_rules_cadence_demotes_that_rule_only
);

async fn a_removed_rule_becomes_a_tombstone_and_returns_in_shadow(url: &str) {
    let store = migrated(url).await;
    push::push(&store, WS, SAMPLE_DEFINITIONS, now())
        .await
        .unwrap();
    rules::set_mode(&store, WS, "enterprise_announcement", Mode::Live, now())
        .await
        .unwrap();
    let start = SAMPLE_DEFINITIONS
        .find("  enterprise_announcement:\n")
        .unwrap();
    let end = SAMPLE_DEFINITIONS
        .find("  third_failed_payment:\n")
        .unwrap();
    let without = format!(
        "{}{}",
        &SAMPLE_DEFINITIONS[..start],
        &SAMPLE_DEFINITIONS[end..]
    );
    let later = now() + SignedDuration::from_mins(5);
    let summary = push::push(&store, WS, &without, later).await.unwrap();
    assert_eq!(summary.tombstoned_rules, vec!["enterprise_announcement"]);
    assert_eq!(
        mode_of(&store, "enterprise_announcement").await.1,
        Some(later)
    );
    let err = rules::set_mode(&store, WS, "enterprise_announcement", Mode::Live, later)
        .await
        .unwrap_err();
    assert!(matches!(err, ModeError::UnknownRule(_)));

    let summary = push::push(&store, WS, SAMPLE_DEFINITIONS, later)
        .await
        .unwrap();
    assert_eq!(summary.new_rules, vec!["enterprise_announcement"]);
    assert_eq!(
        mode_of(&store, "enterprise_announcement").await,
        (Mode::Shadow, None)
    );
}
on_both_engines!(
    a_removed_rule_becomes_a_tombstone_and_returns_in_shadow_,
    a_removed_rule_becomes_a_tombstone_and_returns_in_shadow
);

async fn halting_and_resuming_a_workspace_is_recorded(url: &str) {
    let store = migrated(url).await;
    assert_eq!(workspace::get(&store, WS).await.unwrap().halted, None);
    workspace::halt(&store, WS, "billing outage", now())
        .await
        .unwrap();
    assert_eq!(
        workspace::get(&store, WS).await.unwrap().halted,
        Some(("billing outage".to_string(), now()))
    );
    workspace::resume(&store, WS).await.unwrap();
    assert_eq!(workspace::get(&store, WS).await.unwrap().halted, None);
}
on_both_engines!(
    halting_and_resuming_a_workspace_is_recorded_,
    halting_and_resuming_a_workspace_is_recorded
);

#[tokio::test]
async fn the_control_plane_url_must_name_a_supported_engine() {
    assert!(matches!(
        Store::open("mysql://x/y").await,
        Err(StoreError::BadUrl)
    ));
}
