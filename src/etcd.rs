//! etcd (`etcd://[user:pass@]h1:2379,h2:2379/prefix`, `etcds://…` for TLS with `[etcd] tls_ca_file`
//! for a private CA; cargo feature `etcd`): the `lock-etcd` crate
//! plugged into the backend table the way any third party's backend is — a [`Driver`] made with
//! the public [`Driver::new`], its `[etcd]` configuration section read through
//! [`Config::section`], and [`register_backend`](crate::register_backend). With the feature on,
//! the facade registers it before the table is first read, so `dlock.toml`, `DLOCK_URL`,
//! [`crate::Client`] and the `dlock` tool know `etcd://` without a call; the etcd-client it builds
//! on needs `protoc` at build time, hence a feature of its own, off by default.

use std::sync::Arc;

use lock_core::backend::EveryKind;
use lock_core::LockProvider;
use lock_etcd::EtcdOptions;

use crate::{Config, Connecting, Driver};

/// The backend's row: name `etcd` (its config section), schemes `etcd` and `etcds` (TLS), port 2379.
pub fn driver() -> Driver {
    Driver::new("etcd", &["etcd", "etcds"], connect).default_port(lock_etcd::DEFAULT_PORT)
}

fn connect(config: &Config) -> Connecting<'_> {
    Box::pin(async move {
        let options: EtcdOptions = config.section("etcd")?;
        let lock = lock_etcd::connect(&config.url, options).await?;
        Ok(Arc::new(EveryKind(lock)) as Arc<dyn LockProvider>)
    })
}
