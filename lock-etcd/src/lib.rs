#![doc = include_str!("../docs.md")]

mod client;
mod config;
mod error;
mod inspect;
mod keepalive;
mod keys;
mod kinds;
mod lease;
mod observe;
mod queue;
mod recipe;
mod spare;

pub use client::{connect, from_client, EtcdLock};
pub use config::{EtcdOptions, DEFAULT_PORT};
