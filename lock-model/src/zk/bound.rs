//! How long a ZooKeeper lease may be believed after the request that confirmed it, in the
//! model's whole time units: lock-zk's own rule (`lock_zk::decisions::server_bound`, called
//! here), and the rules it replaced (the bug switches).

use std::time::Duration;

use lock_zk::decisions::server_bound;

/// The length of the model's time unit when it calls lock-zk's rule.
const UNIT: Duration = Duration::from_secs(1);

/// The client's longest silence towards its server while it keeps the connection, in units of
/// a `session` of `session` units: 9/20 of the session (it pings after 3/20 idle, checks every
/// 1/20 and drops a connection that answered nothing for 2/5), rounded up so that the model's
/// client may stay silent at least as long as the real one.
pub fn silence(session: u8) -> u8 {
    (u16::from(session) * 9).div_ceil(20) as u8
}

/// The interval of the leader's pings to a follower (each answer lists the sessions the
/// follower heard from since the last): half a tick, the tick taken as at most half the session
/// (ZooKeeper's default `minSessionTimeout` is two ticks).
pub fn half_tick(session: u8, tick: u8) -> u8 {
    (tick.min(session / 2) / 2).max(1)
}

/// The validity after a request the quorum answered: lock-zk's `server_bound` (`session −
/// tick/2 − 9/20·session`, commit 670434b) of a `session` and a `tick` in units, rounded down
/// to a unit: the model's client, silent up to [`silence`] (rounded up), believes no longer
/// than the rule allows it with that silence. Exact when the units divide the session into
/// twentieths (the deep run).
pub fn fixed(session: u8, tick: u8) -> u8 {
    let bound = server_bound(UNIT * u32::from(session), UNIT * u32::from(tick));
    u8::try_from(bound.as_secs()).unwrap_or(u8::MAX)
}

/// The former rule, ¾ of the session (rounded down): it allowed half a tick for the leader's
/// lag, on the assumption that the client had just been heard, and ignored the client's ping gap.
pub fn three_quarters(session: u8) -> u8 {
    (u16::from(session) * 3 / 4) as u8
}

/// The fixed rule without its half tick (the client's ping gap alone): shows the model needs
/// both terms.
pub fn without_half_tick(session: u8) -> u8 {
    session.saturating_sub(silence(session))
}
