//! Provisioning of test servers: a URL from the environment, a container where a Docker
//! engine answers, or a local server binary on a free port in a temp dir.

pub mod mysql;
pub mod postgres;
pub mod redis;
pub mod zookeeper;
