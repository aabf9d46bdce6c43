//! Change feeds for election observers (docs/contract.md §5.8): a children watch on the
//! exclusive lock's node, re-armed after every fire.
//!
//! The holder is the lowest node of the queue, so the feed remembers the lowest node seen when
//! the watch was armed and fires when a later arming lists another one: a waiter joining or
//! leaving fires the watch but not the feed, and a change made between a fire and the re-arm
//! is still reported (the listing differs). Every listing is made behind a `sync`, like
//! `inspect`'s, so a follower lagging behind the leader does not arm on a stale listing. A
//! name whose node does not exist yet is watched with an exists watch until it does. The
//! first watch is armed before `watch_changes` returns, so nothing between the registration
//! and the observer's first read is missed. Failures (a session that ended, a server that
//! does not answer) fire the feed once, since the holder may have changed meanwhile, and the
//! watch is armed again after a short pause.

use std::future::Future;
use std::time::Duration;

use lock_core::{backend::ChangeSignal, ChangeFeed, LockError};
use tokio::sync::oneshot;
use zookeeper_client::{Client, Error as ZkError, OneshotWatcher};

use crate::recipe::{queue, Recipe};
use crate::session::{call, Failure};

/// The pause before arming again after a failure.
const RETRY: Duration = Duration::from_millis(200);

/// Lists the queue under `parent` behind a `sync` and leaves a watch on it: the lowest node
/// (the holder's; `None` when nobody holds it) and the watch.
pub(crate) async fn arm(
    client: &Client,
    parent: &str,
    bound: Duration,
) -> Result<(Option<String>, OneshotWatcher), Failure> {
    loop {
        let listing = async {
            let (synced, children) = tokio::join!(client.sync(parent), client.list_and_watch_children(parent));
            synced.and(children)
        };
        match call(bound, "watching the lock's queue", listing).await {
            Ok((children, watcher)) => return Ok((queue(Recipe::Exclusive, children).into_iter().next(), watcher)),
            Err(Failure::Server(ZkError::NoNode)) => {
                match call(bound, "watching for the lock's node", client.check_and_watch_stat(parent)).await? {
                    (None, watcher) => return Ok((None, watcher)),
                    // Created in between: list it.
                    (Some(_), _) => continue,
                }
            }
            Err(f) => return Err(f),
        }
    }
}

/// The feed of the holder changes of one queue, whose first watch the caller armed (`seen`,
/// `watcher`: what [`arm`] answered); `rearm` arms it again, through whatever session the
/// client has by then. Dropping the feed ends its task.
pub(crate) fn feed<A, F>(rearm: A, seen: Option<String>, watcher: OneshotWatcher) -> ChangeFeed
where
    A: Fn() -> F + Send + 'static,
    F: Future<Output = Result<(Option<String>, OneshotWatcher), LockError>> + Send + 'static,
{
    let signal = ChangeSignal::new();
    // The feed keeps `stop`'s sender: dropping the feed ends the task.
    let (keep, stop) = oneshot::channel::<()>();
    let feed = signal.feed(keep);
    tokio::spawn(follow(rearm, seen, watcher, signal, stop));
    feed
}

/// Waits for the watch to fire, re-arms it, and fires the feed when the holder changed.
async fn follow<A, F>(
    rearm: A,
    mut seen: Option<String>,
    mut watcher: OneshotWatcher,
    signal: ChangeSignal,
    mut stop: oneshot::Receiver<()>,
) where
    A: Fn() -> F,
    F: Future<Output = Result<(Option<String>, OneshotWatcher), LockError>>,
{
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = watcher.changed() => {}
        }
        let mut failing = false;
        watcher = loop {
            let armed = tokio::select! {
                _ = &mut stop => return,
                armed = rearm() => armed,
            };
            match armed {
                Ok((lowest, w)) => {
                    if lowest != seen || failing {
                        seen = lowest;
                        signal.changed();
                    }
                    break w;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "observe: arming the children watch failed; retrying");
                    if !failing {
                        failing = true;
                        signal.changed();
                    }
                    tokio::select! {
                        _ = &mut stop => return,
                        _ = tokio::time::sleep(RETRY) => {}
                    }
                }
            }
        };
    }
}
