//! How long a ZooKeeper lease may be believed after the request that confirmed it, in the
//! model's whole time units: the rule lock-zk's `lease::server_bound` applies, and the rules it
//! replaced (the bug switches).
//!
//! lock-zk keeps `server_bound` private and in `Duration`s, so this is the same formula written
//! once more in units; `the_bound_matches_lock_zk_at_the_default_tick` in the tests pins the two
//! to lock-zk's own table (60 s session, 2 s tick: 32 s).

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

/// The validity after a request the quorum answered: `session − tick/2 − 9/20·session`
/// (commit 670434b). The leader may last have heard of the session half a tick before the
/// request reached the follower (the follower's last ping answer), and before that the client
/// may have been silent for up to [`silence`].
pub fn fixed(session: u8, tick: u8) -> u8 {
    session.saturating_sub(half_tick(session, tick) + silence(session))
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
