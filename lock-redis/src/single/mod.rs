//! The single-instance backend: [`RedisStore`] (its connection, grants and queue hand-off) and
//! its inspection (who holds a lock, listing, the operator's release).

mod inspect;
mod observe;
mod store;

pub use store::RedisStore;
pub(crate) use store::{BACKEND, RESERVE_MS};
