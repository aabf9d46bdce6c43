//! [`FencingToken`] as an sqlx parameter and column (feature `sqlx`): stored as a signed 64-bit
//! integer (`BIGINT`), so that `UPDATE … SET fence = $1 WHERE fence <= $1` binds the token itself.
//! Every backend's tokens fit (they come from 63-bit counters and zxids); a token above
//! `i64::MAX` is an encode error, never a wrapped negative number.

use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::{Database, Decode, Encode, Type};

use crate::FencingToken;

impl<DB: Database> Type<DB> for FencingToken
where
    i64: Type<DB>,
{
    fn type_info() -> DB::TypeInfo {
        <i64 as Type<DB>>::type_info()
    }

    fn compatible(ty: &DB::TypeInfo) -> bool {
        <i64 as Type<DB>>::compatible(ty)
    }
}

impl<'q, DB: Database> Encode<'q, DB> for FencingToken
where
    i64: Encode<'q, DB>,
{
    fn encode_by_ref(&self, buf: &mut <DB as Database>::ArgumentBuffer) -> Result<IsNull, BoxDynError> {
        let v = i64::try_from(self.0)
            .map_err(|_| format!("fencing token {} does not fit a signed 64-bit column", self.0))?;
        <i64 as Encode<'q, DB>>::encode_by_ref(&v, buf)
    }
}

impl<'r, DB: Database> Decode<'r, DB> for FencingToken
where
    i64: Decode<'r, DB>,
{
    fn decode(value: <DB as Database>::ValueRef<'r>) -> Result<Self, BoxDynError> {
        let v = <i64 as Decode<'r, DB>>::decode(value)?;
        let v = u64::try_from(v).map_err(|_| format!("a fencing token column holds a negative value, {v}"))?;
        Ok(FencingToken(v))
    }
}
