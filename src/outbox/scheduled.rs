//! Scheduled sends as the outbox stores them (when a time-anchored fire's deliveries are due,
//! and where their lead came from), and the Demo inbox's side of a send delivered at its due time.

use jiff::Timestamp;

use super::INBOX_URL;
use crate::cadence::Anchor;
use crate::definitions::limits::shown;
use crate::store::batch::{Rows, fetch_with_rows};
use crate::store::{Arg, DbTime, StoreTx, WorkspaceId};

crate::store::stored_enum! {
    /// Where a scheduled send's lead came from.
    #[derive(serde::Serialize)]
    #[serde(rename_all = "lowercase")]
    pub enum LeadFrom as "lead source" {
        /// The rule's `lead`.
        Default = "default",
        /// The row's `lead_column`.
        Row = "row",
    }
}

/// Whether a rendered URL is the Demo inbox's (delivered in-process, never over the network).
pub fn is_inbox_url(url: &str) -> bool {
    url == INBOX_URL || url.starts_with(&format!("{INBOX_URL}/"))
}

/// Records sent deliveries to the Demo inbox (scheduled ones, sent by a sender at their due
/// time) as messages there, inside the settle's transaction; a message already recorded stays.
pub async fn to_inbox(
    tx: &mut StoreTx,
    workspace: &WorkspaceId,
    deliveries: &[i64],
    at: Timestamp,
) -> Result<(), sqlx::Error> {
    let ids = Rows::new().int("i", deliveries.iter().copied());
    fetch_with_rows(
        tx,
        &ids,
        &[
            Arg::Text(workspace.to_string()),
            Arg::Time(DbTime(at)),
        ],
        "INSERT INTO inbox_message (workspace_id, delivery_id, action, recipient, body, received_at)
         SELECT d.workspace_id, d.id, d.action, d.recipient, COALESCE(d.body, 'null'), $2 FROM u JOIN delivery d ON d.id = u.i
         WHERE d.workspace_id = $1
         ON CONFLICT (workspace_id, delivery_id) DO NOTHING
         RETURNING id",
        |r| r.try_get::<i64, _>("id"),
    )
    .await?;
    Ok(())
}

/// When a time-anchored fire's deliveries are due (from [`crate::schedule`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scheduled {
    /// Anchor minus lead.
    pub due: Timestamp,
    /// Due plus grace: not sent by then, never sent.
    pub expires: Timestamp,
    /// The anchor instant.
    pub anchor: Timestamp,
    /// Where the lead came from.
    pub lead_from: LeadFrom,
    /// First found after it expired: recorded as expired, never queued.
    pub too_late: bool,
}

impl Scheduled {
    /// Why a send first found after its due time plus grace is recorded as expired. A lead from
    /// the row that is not shorter than the rule's look-ahead is named, with what to change: no
    /// sweep reads its anchor early enough.
    pub fn expired_reason(&self, anchor: Option<&Anchor>) -> String {
        let lead = self.due.duration_until(self.anchor);
        match anchor {
            Some(a) if self.lead_from == LeadFrom::Row && lead >= a.look_ahead => format!(
                "expired: its lead of {} (from the row's {}) is not shorter than the rule's look_ahead of {}, so no sweep reads it before it is due; raise anchor.look_ahead to at least the longest lead plus the sweep interval",
                shown(lead),
                a.lead_column.as_deref().unwrap_or("lead column"),
                shown(a.look_ahead),
            ),
            _ => "expired: first found after its due time plus grace; a reminder this late would be wrong".to_string(),
        }
    }
}
