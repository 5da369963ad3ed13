//! The states of a `campaign_targets` row ([`RowState`]), stored as `text`.

use sqlx::postgres::{PgHasArrayType, PgTypeInfo, PgValueRef, Postgres};
use sqlx::{Decode, Encode, Type};

/// Where a row is in its life. Stored as `text` under a `CHECK` (not a PostgreSQL enum: the
/// other system that fills the table writes plain text, and a new state is then an online
/// `CHECK` change instead of an `ALTER TYPE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RowState {
    /// Waiting to be claimed (maybe not before `not_before`).
    Pending,
    /// Claimed under `claim_id` until `lease_until`.
    Sending,
    /// Delivered (`sent_at` set).
    Sent,
    /// Given up: permanent, or out of attempts.
    Failed,
    /// Maybe delivered, and not safe to send again: an attempt's outcome is unknown (a
    /// timeout, a broken connection, a crash after the send began) and the provider no longer
    /// suppresses a repeat of its key (`IDEMPOTENCY_WINDOW_S`). Settled by `resolve`.
    Unconfirmed,
    /// Its address is on the suppression list (`suppress`); `suppress --remove` puts it back
    /// to `pending`.
    Suppressed,
}

impl RowState {
    pub const ALL: [RowState; 6] = [
        RowState::Pending,
        RowState::Sending,
        RowState::Sent,
        RowState::Failed,
        RowState::Unconfirmed,
        RowState::Suppressed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RowState::Pending => "pending",
            RowState::Sending => "sending",
            RowState::Sent => "sent",
            RowState::Failed => "failed",
            RowState::Unconfirmed => "unconfirmed",
            RowState::Suppressed => "suppressed",
        }
    }
}

impl std::str::FromStr for RowState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        RowState::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| format!("{s:?} is not a row state"))
    }
}

impl std::fmt::Display for RowState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

// `sqlx::Type` as the `text` it is stored as (the derive would declare a PostgreSQL type of
// that name and look its OID up at run time; this is the builtin `text` directly).
impl Type<Postgres> for RowState {
    fn type_info() -> PgTypeInfo {
        <&str as Type<Postgres>>::type_info()
    }
    fn compatible(ty: &PgTypeInfo) -> bool {
        <&str as Type<Postgres>>::compatible(ty)
    }
}

impl PgHasArrayType for RowState {
    fn array_type_info() -> PgTypeInfo {
        <&str as PgHasArrayType>::array_type_info()
    }
}

impl Encode<'_, Postgres> for RowState {
    fn encode_by_ref(
        &self,
        buf: &mut sqlx::postgres::PgArgumentBuffer,
    ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
        <&str as Encode<Postgres>>::encode(self.as_str(), buf)
    }
}

impl<'r> Decode<'r, Postgres> for RowState {
    fn decode(value: PgValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
        Ok(<&str as Decode<Postgres>>::decode(value)?.parse()?)
    }
}
