#![doc = include_str!("../docs.md")]

mod acl;
mod acquire;
mod client;
mod config;
mod hints;
mod inspect;
mod keeper;
mod lease;
mod node;
mod observe;
mod recipe;
mod root_watch;
mod scope;
mod session;
mod tls;

pub use client::{connect, from_client, ZkLock};
pub use config::ZkOptions;

/// The recipe's pure decisions, public so that lock-model's ZooKeeper model calls the code's own
/// rules instead of copies of them. Not part of the API: no stability promise.
#[doc(hidden)]
pub mod decisions {
    pub use crate::lease::server_bound;
    pub use crate::recipe::{Recipe, Verdict};
}
