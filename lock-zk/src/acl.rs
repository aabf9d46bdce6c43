//! ACLs that hold. ZooKeeper checks an ACL per node, not per subtree: an open
//! parent lets anyone delete an empty child and recreate it open, and an open root lets anyone
//! plant a node every waiter would queue behind. So with credentials, everything dlock creates
//! (the nodes above the root included) is readable and writable by that user only, a root
//! that others may change is refused, and the root is kept from ever being empty.

use base64::Engine as _;
use lock_core::LockError;
use zookeeper_client::{Acl, Acls, Client, CreateMode, Permission};

use crate::config::ZkUrl;
use crate::session::ZkError;

/// A persistent child that keeps a protected root from ever being empty: an empty root whose
/// parent we do not control (`/`, say) could be deleted by anyone and recreated open. Escaped
/// lock names never contain `~`, and the kinds' parents start with `rw~`/`sem~`, so it can never
/// be a lock's parent.
pub(crate) const KEEPER: &str = "~dlock";

/// The digest id ZooKeeper derives from `user:password` (what `getAcl` shows for that user):
/// `user:base64(sha1(user:password))`.
pub(crate) fn digest_id(user: &str, password: &str) -> String {
    let hash = sha1_smol::Sha1::from(format!("{user}:{password}")).digest().bytes();
    format!("{user}:{}", base64::engine::general_purpose::STANDARD.encode(hash))
}

/// Our digest id when `url` carries credentials.
pub(crate) fn url_digest_id(url: &ZkUrl) -> Option<String> {
    url.digest.as_ref().map(|(user, password)| digest_id(user, password))
}

/// The ACL of every node we create: the credentials' user's only when `url` carries them,
/// open to everyone otherwise.
pub(crate) fn node_acls(url: &ZkUrl) -> Acls<'static> {
    if url.digest.is_some() {
        Acls::creator_all()
    } else {
        Acls::anyone_all()
    }
}

/// What anyone but `ours` (a digest id) may do to a node with this ACL beyond reading it, as
/// `scheme:id has RIGHTS` entries; `None` when nobody else can change it.
pub(crate) fn foreign_rights(acl: &[Acl], ours: &str) -> Option<String> {
    let changes = [Permission::WRITE, Permission::CREATE, Permission::DELETE, Permission::ADMIN];
    let foreign: Vec<String> = acl
        .iter()
        .filter(|a| !(a.scheme() == "digest" && a.id() == ours))
        .filter(|a| changes.iter().any(|p| a.permission().has(*p)))
        .map(|a| format!("{}:{} has {}", a.scheme(), a.id(), a.permission()))
        .collect();
    (!foreign.is_empty()).then(|| foreign.join(", "))
}

/// Creates the root (and the nodes above it) if missing. Without credentials (`ours` is
/// `None`) they are open to everyone, as before. With credentials they carry the credentials'
/// ACL; an existing root that others may change is refused with a `Config` error, and the root
/// gets its [`KEEPER`]. The outer error is the server's; the inner one the refusal.
pub(crate) async fn ensure_root(
    client: &Client,
    root: &str,
    ours: Option<&str>,
) -> Result<Result<(), LockError>, ZkError> {
    let acls = if ours.is_some() { Acls::creator_all() } else { Acls::anyone_all() };
    let options = CreateMode::Persistent.with_acls(acls);
    if let Some((above, _)) = root.rsplit_once('/').filter(|(above, _)| !above.is_empty()) {
        client.mkdir(above, &options).await?;
    }
    let created = match client.create(root, &[], &options).await {
        Ok(_) => true,
        Err(ZkError::NodeExists) => false,
        Err(e) => return Err(e),
    };
    let Some(ours) = ours else { return Ok(Ok(())) };
    if !created {
        let (acl, _) = client.get_acl(root).await?;
        if let Some(rights) = foreign_rights(&acl, ours) {
            return Ok(Err(LockError::config(format!(
                "the ZooKeeper root {root} can be changed by others ({rights}): anyone among them could plant \
                 or delete lock nodes. Restrict it to this user (setAcl {root} auth::cdrwa while authenticated \
                 as it) or name a root dlock creates"
            ))));
        }
    }
    match client.create(&format!("{root}/{KEEPER}"), &[], &options).await {
        Ok(_) | Err(ZkError::NodeExists) => Ok(Ok(())),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use zookeeper_client::AuthId;

    use super::*;

    #[test]
    fn digest_ids_are_zookeepers() {
        // From ZooKeeper's DigestAuthenticationProvider: super:test.
        assert_eq!(digest_id("super", "test"), "super:D/InIHSb7yEEbrWz8b9l71RjZJU=");
    }

    #[test]
    fn only_others_rights_beyond_reading_count() {
        let ours = digest_id("alice", "s3cret");
        let theirs = digest_id("alice", "other");
        let acl = |entries: &[(Permission, &str, &str)]| -> Vec<Acl> {
            entries.iter().map(|(p, scheme, id)| Acl::new(*p, AuthId::new(scheme, id))).collect()
        };
        let table: [(Vec<Acl>, bool); 6] = [
            (acl(&[(Permission::ALL, "digest", &ours)]), false),
            (acl(&[(Permission::ALL, "digest", &ours), (Permission::READ, "world", "anyone")]), false),
            (acl(&[(Permission::ALL, "world", "anyone")]), true),
            (acl(&[(Permission::ALL, "digest", &ours), (Permission::DELETE, "world", "anyone")]), true),
            // The same user name with another password is someone else.
            (acl(&[(Permission::ALL, "digest", &theirs)]), true),
            (acl(&[(Permission::ALL, "digest", &ours), (Permission::CREATE, "ip", "10.0.0.1")]), true),
        ];
        for (entries, refused) in table {
            assert_eq!(foreign_rights(&entries, &ours).is_some(), refused, "{entries:?}");
        }
    }
}
