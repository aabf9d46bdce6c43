//! Who holds a lock on ZooKeeper (docs/contract.md §5.6): the holder id and metadata are the
//! data of the exclusive lock's node, written by the create itself; `inspect` reads the lowest
//! node of the name's queue (its `czxid` is the token), `list` the children of the root;
//! `force_release` deletes that lowest node.

use std::time::Duration;

use lock_core::{backend::escape_prefix, AcquireOptions, HolderInfo, LockError, LockKind, LockName};
use zookeeper_client::{Client, Error as ZkError};

use crate::recipe::{queue, Recipe};
use crate::session::{call, server_error, Failure, BACKEND};

/// The first line of node data that carries a holder identity.
const MAGIC: &str = "dlock-holder/1";

/// The data of our node: the recipe's own, or for an exclusive lock with a holder identity
/// `dlock-holder/1\n<id>` and, with metadata, `\n+<metadata>` (ids hold no control characters,
/// so the id ends at the second line break).
pub(crate) fn node_data(recipe: Recipe, opts: &AcquireOptions) -> Vec<u8> {
    match (recipe, &opts.holder) {
        (Recipe::Exclusive, Some(h)) => {
            let mut data = format!("{MAGIC}\n{}", h.id());
            if let Some(m) = h.metadata() {
                data.push_str("\n+");
                data.push_str(m);
            }
            data.into_bytes()
        }
        _ => recipe.data(),
    }
}

/// Holder id and metadata from node data written by [`node_data`].
fn decode(data: &[u8]) -> (Option<String>, Option<String>) {
    let Ok(text) = std::str::from_utf8(data) else { return (None, None) };
    let Some(rest) = text.strip_prefix(MAGIC).and_then(|r| r.strip_prefix('\n')) else { return (None, None) };
    match rest.split_once('\n') {
        Some((id, meta)) => (Some(id.to_owned()), meta.strip_prefix('+').map(str::to_owned)),
        None => (Some(rest.to_owned()), None),
    }
}

/// A failed read as the caller's error (`root` names where an authorisation is missing).
pub(crate) fn failed(root: &str, f: Failure) -> LockError {
    match f {
        Failure::Transient(e) => e,
        Failure::SessionGone => LockError::unavailable(BACKEND, "the ZooKeeper session ended during the read"),
        Failure::Server(e) => server_error(e, root),
    }
}

/// The path of the lowest node of the exclusive queue under `parent` (the holder's), if any.
async fn lowest(client: &Client, root: &str, parent: &str, bound: Duration) -> Result<Option<String>, LockError> {
    // Behind a `sync` (pipelined): a follower's own state may not yet hold a grant or release
    // the leader already committed (the ensemble suite saw "reported nobody" while held).
    let listing = async {
        let (synced, children) = tokio::join!(client.sync(parent), client.list_children(parent));
        synced.and(children)
    };
    let children = match call(bound, "listing the lock's queue", listing).await {
        Ok(c) => c,
        Err(Failure::Server(ZkError::NoNode)) => return Ok(None),
        Err(f) => return Err(failed(root, f)),
    };
    Ok(queue(Recipe::Exclusive, children).into_iter().next().map(|first| format!("{parent}/{first}")))
}

/// The holder of `name`: the lowest node of its queue, read right after listing (a node that
/// went away in between is followed by the next listing, a few times at most).
pub(crate) async fn holder_of(
    client: &Client,
    root: &str,
    name: &LockName,
    bound: Duration,
) -> Result<Option<HolderInfo>, LockError> {
    let parent = Recipe::Exclusive.parent(root, name);
    for _ in 0..3 {
        let Some(path) = lowest(client, root, &parent, bound).await? else { return Ok(None) };
        match call(bound, "reading the holder's node", client.get_data(&path)).await {
            Ok((data, stat)) => {
                let token = u64::try_from(stat.czxid).map_err(|_| {
                    LockError::backend(BACKEND, format!("the holder's node has a negative czxid {}", stat.czxid))
                })?;
                let (holder, metadata) = decode(&data);
                return Ok(Some(
                    HolderInfo::new(name.as_str(), lock_core::FencingToken(token), LockKind::Exclusive)
                        .with_holder(holder, metadata),
                ));
            }
            Err(Failure::Server(ZkError::NoNode)) => continue,
            Err(f) => return Err(failed(root, f)),
        }
    }
    Err(LockError::unavailable(BACKEND, format!("the queue of {name} changed under three reads in a row; try again")))
}

/// Up to `limit` held exclusive locks whose names start with `prefix`, in name order.
pub(crate) async fn list(
    client: &Client,
    root: &str,
    prefix: &str,
    limit: usize,
    bound: Duration,
) -> Result<Vec<HolderInfo>, LockError> {
    let children = match call(bound, "listing the lock root", client.list_children(root)).await {
        Ok(c) => c,
        Err(Failure::Server(ZkError::NoNode)) => Vec::new(),
        Err(f) => return Err(failed(root, f)),
    };
    let escaped = escape_prefix(prefix);
    // Exclusive locks' parents are the bare escaped names (the other kinds' carry a `~`).
    let mut names: Vec<LockName> = children
        .iter()
        .filter(|c| c.starts_with(&escaped))
        .filter_map(|c| LockName::from_escaped(c))
        .filter(|n| n.as_str().starts_with(prefix))
        .collect();
    names.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    let mut held = Vec::new();
    for name in names {
        if held.len() >= limit {
            break;
        }
        if let Some(info) = holder_of(client, root, &name, bound).await? {
            held.push(info);
        }
    }
    Ok(held)
}

/// Deletes the holder's node of `name` (the lowest of its queue), whoever's session made it:
/// the holder's node watch fires its lost signal, and the next node is created later, so its
/// `czxid` (token) is higher. The deleted node's token, `None` when nobody held `name`.
pub(crate) async fn force_release(
    client: &Client,
    root: &str,
    name: &LockName,
    bound: Duration,
) -> Result<Option<lock_core::FencingToken>, LockError> {
    let parent = Recipe::Exclusive.parent(root, name);
    for _ in 0..3 {
        let Some(path) = lowest(client, root, &parent, bound).await? else { return Ok(None) };
        let stat = match call(bound, "reading the holder's node", client.check_stat(&path)).await {
            Ok(Some(stat)) => stat,
            Ok(None) | Err(Failure::Server(ZkError::NoNode)) => continue,
            Err(f) => return Err(failed(root, f)),
        };
        let token = u64::try_from(stat.czxid).map_err(|_| {
            LockError::backend(BACKEND, format!("the holder's node has a negative czxid {}", stat.czxid))
        })?;
        match call(bound, "deleting the holder's node", client.delete(&path, None)).await {
            Ok(()) => return Ok(Some(lock_core::FencingToken(token))),
            Err(Failure::Server(ZkError::NoNode)) => continue,
            Err(f) => return Err(failed(root, f)),
        }
    }
    Err(LockError::unavailable(BACKEND, format!("the queue of {name} changed under three tries in a row; try again")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_data_round_trips() {
        let who = lock_core::Holder::new("web-7").unwrap().with_metadata("line\nbreak").unwrap();
        let opts = AcquireOptions::new(Duration::from_secs(1)).holder(who);
        let data = node_data(Recipe::Exclusive, &opts);
        assert_eq!(decode(&data), (Some("web-7".into()), Some("line\nbreak".into())));
        let bare = AcquireOptions::new(Duration::from_secs(1)).holder(lock_core::Holder::new("x").unwrap());
        assert_eq!(decode(&node_data(Recipe::Exclusive, &bare)), (Some("x".into()), None));
        assert_eq!(decode(&node_data(Recipe::Exclusive, &AcquireOptions::new(Duration::from_secs(1)))), (None, None));
        assert_eq!(node_data(Recipe::Permit(3), &opts), b"3");
    }
}
