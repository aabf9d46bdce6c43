//! The pure recipe: from the sorted children of a lock's parent, whether our node holds or which
//! nodes it waits for (Curator's `getsTheLock`), for each lock kind. No I/O here, so every rule
//! has a table test.

use lock_core::backend::QueueKind;
use lock_core::{LockError, LockName, OwnerId};

/// Which lock kind, and in it which side, an acquisition is for. The three kinds live under
/// different parents, so one name used as a lock, a read-write lock and a semaphore names three
/// independent things.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Recipe {
    /// The exclusive lock: the lowest node holds.
    Exclusive,
    /// A reader: holds while no write node precedes it.
    Read,
    /// A writer: holds when it is the lowest node.
    Write,
    /// One of `n` permits: holds while fewer than `n` nodes precede it.
    Permit(u32),
}

/// What a node should do, given the queue.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It holds.
    Hold,
    /// Wait for any of these nodes to be deleted.
    Wait(Vec<String>),
    /// Wait for this semaphore node to be deleted or granted: a permit node's data is
    /// rewritten when it is granted (its version turns 1).
    WaitGranted(String),
}

impl Recipe {
    /// The parent segment's kind marker. Escaped names never contain `~`, so `rw~x` and `sem~x`
    /// can never be the parent of an exclusive lock (whose segment is the bare escaped name).
    pub(crate) fn marker(self) -> &'static str {
        match self {
            Recipe::Exclusive => "",
            Recipe::Read | Recipe::Write => "rw~",
            Recipe::Permit(_) => "sem~",
        }
    }

    /// The znode under which this kind's queue of `name` lives: `<root>/<marker><escaped name>`.
    pub(crate) fn parent(self, root: &str, name: &LockName) -> String {
        format!("{root}/{}{}", self.marker(), name.escaped())
    }

    /// The word between the owner and the sequence in our node names.
    pub(crate) fn role(self) -> String {
        match self {
            Recipe::Exclusive => "lock".to_owned(),
            Recipe::Read => "read".to_owned(),
            Recipe::Write => "write".to_owned(),
            Recipe::Permit(n) => format!("permits{n}"),
        }
    }

    /// Whether a node with this role takes part in this kind's queue (foreign nodes do not).
    pub(crate) fn member(self, role: &str) -> bool {
        match self {
            Recipe::Exclusive => role == "lock",
            Recipe::Read | Recipe::Write => role == "read" || role == "write",
            Recipe::Permit(_) => permits_of(role).is_some(),
        }
    }

    /// The data stored in our node (the semaphore's permits, for operators to read).
    pub(crate) fn data(self) -> Vec<u8> {
        match self {
            Recipe::Permit(n) => n.to_string().into_bytes(),
            _ => Vec::new(),
        }
    }

    /// Whether the node at `index` of `queue` holds, or which nodes it waits for. An `index`
    /// of `queue.len()` asks whether a newcomer would hold at once. `InvalidOptions` when a
    /// semaphore node ahead of us was made with another number of permits.
    pub fn verdict(self, name: &LockName, queue: &[String], index: usize) -> Result<Verdict, LockError> {
        let ahead = &queue[..index.min(queue.len())];
        match self {
            Recipe::Exclusive | Recipe::Write => Ok(match ahead.last() {
                None => Verdict::Hold,
                Some(predecessor) => Verdict::Wait(vec![predecessor.clone()]),
            }),
            Recipe::Read => Ok(match ahead.iter().rev().find(|c| role_of(c) == Some("write")) {
                None => Verdict::Hold,
                Some(writer) => Verdict::Wait(vec![writer.clone()]),
            }),
            Recipe::Permit(n) => {
                if let Some(m) = ahead.iter().filter_map(|c| role_of(c).and_then(permits_of)).find(|m| *m != n) {
                    return Err(lock_core::backend::permits_mismatch(name, m, n));
                }
                let n = usize::try_from(n).unwrap_or(usize::MAX);
                Ok(match ahead.len() {
                    k if k < n => Verdict::Hold,
                    // The first waiter: all `n` nodes ahead hold, and any of them leaving
                    // frees a place for us.
                    k if k == n => Verdict::Wait(ahead.to_vec()),
                    // Further back: we can only become the first waiter once our predecessor
                    // has left or been granted (which rewrites its data).
                    _ => Verdict::WaitGranted(ahead[ahead.len() - 1].clone()),
                })
            }
        }
    }
}

/// The permits of a semaphore node's role (`permits3` → 3).
fn permits_of(role: &str) -> Option<u32> {
    let digits = role.strip_prefix("permits")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|n| *n > 0)
}

/// `_c_<uuid>-<role>-`, the naming of Curator's protected lock nodes: the unique part lets a
/// create whose reply was lost be found again, and the queue sorts on the sequence alone.
/// (Interoperation of the exclusive lock with Curator clients on the same path is plausible but
/// untested.)
pub(crate) fn node_prefix(owner: OwnerId, role: &str) -> String {
    let h = owner.to_hex();
    format!("_c_{}-{}-{}-{}-{}-{role}-", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
}

/// The role and sequence number of a node (`…-lock-0000000042` → `("lock", 42)`), or `None`
/// for nodes that are not queue nodes.
///
/// The server's per-parent counter is a signed 32-bit number: after 2^31 creates under one
/// parent it continues at `-2147483648`, which is read as 2^31 so the queue order holds.
fn parse_node(child: &str) -> Option<(&str, i64)> {
    let (head, seq) = child.rsplit_once('-')?;
    if seq.len() < 10 || !seq.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: i64 = seq.parse().ok()?;
    let (head, n) = match head.strip_suffix('-') {
        // Wrapped past i32::MAX: "-2147483648" follows 2147483647.
        Some(head) => (head, (1i64 << 32) - n),
        None => (head, n),
    };
    let role = head.rsplit('-').next().unwrap_or(head);
    Some((role, n))
}

fn role_of(child: &str) -> Option<&str> {
    parse_node(child).map(|(role, _)| role)
}

/// The children named with our unique prefix `ours` (`_c_<owner>-<role>-`), earliest first.
pub(crate) fn ours(mut children: Vec<String>, ours: &str) -> Vec<String> {
    children.retain(|c| c.starts_with(ours) && parse_node(c).is_some());
    children.sort_by_key(|c| parse_node(c).map(|(_, seq)| seq));
    children
}

/// Splits a listing into the queue of `recipe`'s kind, without our strays, and the strays:
/// nodes with our unique prefix `ours` other than our node `own`. A stray is a create whose reply
/// was lost and that a lagging server did not show us when we looked for it, so we created
/// again: it is ours to delete, never a node to wait on (it would block us, and every later
/// waiter, for the life of the session).
pub(crate) fn sort_out(recipe: Recipe, children: Vec<String>, ours: &str, own: &str) -> (Vec<String>, Vec<String>) {
    let (strays, others): (Vec<String>, Vec<String>) =
        children.into_iter().partition(|c| c.starts_with(ours) && c != own && parse_node(c).is_some());
    (queue(recipe, others), strays)
}

/// The nodes of `recipe`'s kind, in queue order.
pub(crate) fn queue(recipe: Recipe, mut children: Vec<String>) -> Vec<String> {
    children.retain(|c| parse_node(c).is_some_and(|(role, _)| recipe.member(role)));
    children.sort_by_key(|c| parse_node(c).map(|(_, seq)| seq));
    children
}

impl From<QueueKind> for Recipe {
    fn from(kind: QueueKind) -> Self {
        match kind {
            QueueKind::Exclusive => Recipe::Exclusive,
            QueueKind::Read => Recipe::Read,
            QueueKind::Write => Recipe::Write,
            QueueKind::Permit(n) => Recipe::Permit(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names_sort_by_sequence() {
        let p = node_prefix(OwnerId::random(), "lock");
        assert!(p.starts_with("_c_") && p.ends_with("-lock-") && p.len() == 3 + 36 + 6);
        let q = queue(
            Recipe::Exclusive,
            vec![
                format!("{p}0000000010"),
                "foreign".into(),
                "_c_x-lock-0000000002".into(),
                "x-lock-abc".into(),
                "readlock-0000000001".into(),
                "_c_y-read-0000000003".into(),
                "_c_y-permits2-0000000004".into(),
            ],
        );
        assert_eq!(q, vec!["_c_x-lock-0000000002".to_owned(), format!("{p}0000000010")]);
        let wrapped = queue(
            Recipe::Exclusive,
            vec!["_c_b-lock--2147483647".into(), "_c_a-lock-2147483647".into(), "_c_c-lock--2147483648".into()],
        );
        assert_eq!(
            wrapped,
            vec!["_c_a-lock-2147483647".to_owned(), "_c_c-lock--2147483648".into(), "_c_b-lock--2147483647".into()]
        );
    }

    #[test]
    fn strays_of_ours_are_sorted_out_never_waited_on() {
        let ours = "_c_aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee-lock-";
        let own = format!("{ours}0000000005");
        // (listing, queue left, strays)
        let table: [(Vec<String>, Vec<String>, Vec<String>); 4] = [
            // No stray: the queue is the plain queue.
            (names(&["_c_x-lock-0000000001", &own]), names(&["_c_x-lock-0000000001", &own]), vec![]),
            // A lost create ahead of us (lagging server): not waited on, deleted.
            (
                names(&[&format!("{ours}0000000002"), "_c_x-lock-0000000001", &own]),
                names(&["_c_x-lock-0000000001", &own]),
                names(&[&format!("{ours}0000000002")]),
            ),
            // Behind us too: it would block every later waiter.
            (names(&[&own, &format!("{ours}0000000009")]), names(&[&own]), names(&[&format!("{ours}0000000009")])),
            // Another owner's prefix that merely starts alike is not ours.
            (
                names(&["_c_aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeef-lock-0000000003", &own]),
                names(&["_c_aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeef-lock-0000000003", &own]),
                vec![],
            ),
        ];
        for (listing, want_queue, want_strays) in table {
            let (q, strays) = sort_out(Recipe::Exclusive, listing.clone(), ours, &own);
            assert_eq!((q, strays), (want_queue, want_strays), "{listing:?}");
        }
        let found = ours_of(names(&[&format!("{ours}0000000009"), "_c_x-lock-0000000001", &own]), ours);
        assert_eq!(found, names(&[&own, &format!("{ours}0000000009")]), "earliest first");
    }

    fn ours_of(children: Vec<String>, prefix: &str) -> Vec<String> {
        super::ours(children, prefix)
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    fn waits_for(v: Result<Verdict, LockError>) -> Option<Vec<String>> {
        match v.expect("no error") {
            Verdict::Hold => None,
            Verdict::Wait(w) => Some(w),
            Verdict::WaitGranted(p) => Some(vec![format!("granted {p}")]),
        }
    }

    #[test]
    fn rw_verdicts_follow_the_recipe() {
        let n = LockName::new("rw").expect("valid");
        let all = vec![
            "_c_a-read-0000000001".to_owned(),
            "_c_b-foreign-0000000000".into(),
            "_c_c-write-0000000002".into(),
            "_c_d-read-0000000003".into(),
            "_c_e-read-0000000004".into(),
            "_c_f-write-0000000005".into(),
            "_c_g-read-0000000006".into(),
        ];
        let q = queue(Recipe::Read, all);
        assert_eq!(q.len(), 6, "the foreign node is not in the queue");
        // The first reader holds; the writer waits for its predecessor only.
        assert!(waits_for(Recipe::Read.verdict(&n, &q, 0)).is_none());
        assert_eq!(waits_for(Recipe::Write.verdict(&n, &q, 1)), Some(names(&["_c_a-read-0000000001"])));
        // Readers behind the writer wait for that writer only, not for the readers between.
        assert_eq!(waits_for(Recipe::Read.verdict(&n, &q, 3)), Some(names(&["_c_c-write-0000000002"])));
        assert_eq!(waits_for(Recipe::Write.verdict(&n, &q, 4)), Some(names(&["_c_e-read-0000000004"])));
        // The last reader waits for the nearest earlier writer.
        assert_eq!(waits_for(Recipe::Read.verdict(&n, &q, 5)), Some(names(&["_c_f-write-0000000005"])));
        // A newcomer: a reader is busy while any writer is queued, a writer while anyone is.
        assert!(waits_for(Recipe::Read.verdict(&n, &q[..1], 1)).is_none());
        assert!(waits_for(Recipe::Write.verdict(&n, &q[..1], 1)).is_some());
        assert!(waits_for(Recipe::Write.verdict(&n, &[], 0)).is_none());
    }

    #[test]
    fn permit_verdicts_count_and_agree() {
        let n = LockName::new("sem").expect("valid");
        let q = queue(
            Recipe::Permit(2),
            names(&[
                "_c_a-permits2-0000000001",
                "_c_b-permits2-0000000002",
                "_c_c-permits2-0000000003",
                "_c_d-permits2-0000000004",
                "_c_e-read-0000000000",
            ]),
        );
        assert_eq!(q.len(), 4);
        assert!(waits_for(Recipe::Permit(2).verdict(&n, &q, 1)).is_none());
        // The first waiter watches the holders; the next its predecessor's grant.
        assert_eq!(
            waits_for(Recipe::Permit(2).verdict(&n, &q, 2)),
            Some(names(&["_c_a-permits2-0000000001", "_c_b-permits2-0000000002"]))
        );
        assert_eq!(waits_for(Recipe::Permit(2).verdict(&n, &q, 3)), Some(names(&["granted _c_c-permits2-0000000003"])));
        assert!(matches!(Recipe::Permit(3).verdict(&n, &q, 4), Err(LockError::InvalidOptions { .. })));
        // Nodes behind us are not our business: they check against us.
        assert!(Recipe::Permit(3).verdict(&n, &q, 0).is_ok());
        assert_eq!(permits_of("permits"), None);
        assert_eq!(permits_of("permits0"), None);
        assert_eq!(permits_of("permits12"), Some(12));
    }

    #[test]
    fn kinds_never_share_a_parent() {
        // Escaped names never contain '~', so the kind markers cannot be forged by a name.
        for raw in ["rw~x", "sem~x", "~", "rw%7Ex"] {
            let escaped = LockName::new(raw).expect("valid").escaped();
            assert!(!escaped.contains('~'), "{escaped}");
        }
        assert_ne!(Recipe::Read.marker(), Recipe::Permit(1).marker());
        assert_eq!(Recipe::Read.marker(), Recipe::Write.marker());
        assert_eq!(Recipe::Exclusive.marker(), "");
    }
}
