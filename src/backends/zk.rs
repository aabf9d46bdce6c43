//! ZooKeeper as a [`LockProvider`]: one session, every kind.

use std::sync::Arc;

use lock_core::backend::EveryKind;
use lock_core::LockProvider;

use crate::driver::Connecting;
use crate::Config;

/// Opens a session with the ensemble the URL names, with the `[zk]` options.
pub(super) fn connect(config: &Config) -> Connecting<'_> {
    Box::pin(async move {
        let lock = lock_zk::connect(&config.url, config.zk_options()).await?;
        Ok(Arc::new(EveryKind(lock)) as Arc<dyn LockProvider>)
    })
}
