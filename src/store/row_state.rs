//! The states of a `campaign_targets` row ([`RowState`]), stored as `text`.

use crate::text_enum::{text_enum, text_enum_sql};

text_enum! {
    /// Where a row is in its life. Stored as `text` under a `CHECK` (not a PostgreSQL enum: the
    /// other system that fills the table writes plain text, and a new state is then an online
    /// `CHECK` change instead of an `ALTER TYPE`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum RowState: "row state" {
        /// Waiting to be claimed (maybe not before `not_before`).
        Pending = "pending",
        /// Claimed under `claim_id` until `lease_until`.
        Sending = "sending",
        /// Delivered (`sent_at` set).
        Sent = "sent",
        /// Given up: permanent, or out of attempts.
        Failed = "failed",
        /// Maybe delivered, and not safe to send again: an attempt's outcome is unknown (a
        /// timeout, a broken connection, a crash after the send began) and the provider no
        /// longer suppresses a repeat of its key (`IDEMPOTENCY_WINDOW_S`). Settled by
        /// `resolve`.
        Unconfirmed = "unconfirmed",
        /// Its address is on the suppression list (`suppress`); `suppress --remove` puts it
        /// back to `pending`.
        Suppressed = "suppressed",
    }
}

text_enum_sql!(RowState);
