//! The conformance suite's waiter in a process of its own (`queued_head_killed`): the fixture
//! re-runs this test binary on `conformance_waiter_child`, which each dialect's test file
//! defines with `lock_conformance::waiter_child_test!(common::connect_child)`.

use std::sync::Arc;

use lock_conformance::waiter_process::{ChildWaiter, QueuedWaiter};
use lock_core::{AcquireOptions, DistributedLock, LockError, LockName};

use super::{test_options, SqlFixture};

/// A waiter for `name` in a child process, connected to the fixture's table.
pub async fn queued_waiter(
    fx: &SqlFixture,
    name: &LockName,
    opts: &AcquireOptions,
) -> Result<Option<Box<dyn QueuedWaiter>>, LockError> {
    let target = format!("{} {}", fx.options().table, fx.url());
    Ok(Some(Box::new(ChildWaiter::spawn(&target, name, opts).await?)))
}

/// The child's client: the table and URL of [`queued_waiter`]'s target, the fixture's options.
pub async fn connect_child(target: String) -> Result<Arc<dyn DistributedLock>, LockError> {
    let (table, url) =
        target.split_once(' ').ok_or_else(|| LockError::config(format!("bad child target {target:?}")))?;
    Ok(Arc::new(lock_sql::connect(url, test_options(table.to_owned())).await?))
}
