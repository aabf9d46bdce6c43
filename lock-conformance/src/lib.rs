//! The dlock conformance suite.

pub mod fixture;
pub mod process;
pub mod proxy;
pub mod servers;

pub use async_trait::async_trait;
pub use fixture::{ClientLink, Fixture, LinkedClient, ServerControl};
