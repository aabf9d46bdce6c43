//! What a `forge_grant` hook sends (see [`Fixture::forge_grant`](crate::Fixture::forge_grant)),
//! worked out once for the fixtures that forge Redis grant messages (`dlock conformance`'s URL
//! fixture, lock-redis's own tests): which messages name one queued waiter, and where they go.

/// The forged messages for one entry of a Redis lock's waiter queue, `owner[:terms][~wake]`
/// (the values of its `waiter-entries` hash).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisForgery<'a> {
    /// The grant wake-up `@<owner>`, and an older releaser's grant `!<owner>:<token>:<attempt>`
    /// for the attempt the entry's terms name and for attempts 1 to 5.
    pub messages: Vec<String>,
    /// The entry's own wake channel, if it names one: the messages go there as well as on the
    /// name's `released` channel.
    pub wake: Option<&'a str>,
}

impl<'a> RedisForgery<'a> {
    /// The forgery for `entry` with fencing token `token`; `None` for an entry without an owner.
    pub fn of(entry: &'a str, token: u64) -> Option<Self> {
        let (head, wake) = match entry.split_once('~') {
            Some((head, wake)) => (head, Some(wake)),
            None => (entry, None),
        };
        let mut terms = head.split(':');
        let owner = terms.next().unwrap_or_default();
        if owner.is_empty() {
            return None;
        }
        // Terms are `<ttl ms>` or `<ttl ms>:<attempt>`.
        let mut attempts: Vec<u64> = terms.skip(1).filter_map(|n| n.parse().ok()).chain(1..=5).collect();
        attempts.dedup();
        let mut messages: Vec<String> = attempts.iter().map(|n| format!("!{owner}:{token}:{n}")).collect();
        messages.push(format!("@{owner}"));
        Some(RedisForgery { messages, wake })
    }

    /// The channels the messages go to: `released` (the name's channel), then the wake channel.
    pub fn channels<'c>(&'c self, released: &'c str) -> impl Iterator<Item = &'c str> {
        std::iter::once(released).chain(self.wake)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_attempt_and_the_wake_up_on_both_channels() {
        let f = RedisForgery::of("abc:1500:7~wake-1", 9).unwrap();
        let want: Vec<String> =
            [7, 1, 2, 3, 4, 5].iter().map(|n| format!("!abc:9:{n}")).chain(["@abc".to_owned()]).collect();
        assert_eq!(f.messages, want);
        assert_eq!(f.channels("rel").collect::<Vec<_>>(), ["rel", "wake-1"]);
        let plain = RedisForgery::of("abc:1500", 9).unwrap();
        assert_eq!(plain.messages.len(), 6);
        assert_eq!(plain.channels("rel").collect::<Vec<_>>(), ["rel"]);
        assert_eq!(RedisForgery::of(":1500~w", 9), None);
    }
}
