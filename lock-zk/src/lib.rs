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
