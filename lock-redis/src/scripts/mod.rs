//! Key layout and the Lua scripts, each with its typed call (a struct of named keys and
//! arguments and one `invoke`, next to its Lua): the stores and the crate's tests call the
//! scripts through them, so the order of `KEYS` and `ARGV` is written once. Every key a script
//! touches is passed in `KEYS` and all keys of one lock share the hash tag `{<escaped name>}`,
//! so each script runs on one Redis Cluster slot. Not part of the API: public, hidden, for the
//! crate's integration tests.
//!
//! Numbers: Lua 5.1 numbers are doubles, exact below 2^53; tokens are microsecond timestamps
//! (≈ 2^51 today) plus small increments. Numbers are passed *to* Redis as strings made with
//! `string.format('%d')`, because Redis formats a Lua number argument in a way that may lose
//! digits.

/// Lua that replicates its effects rather than itself (`redis.replicate_commands`; always so
/// from Redis 5 on): a script that reads `TIME` may not be replayed on a replica. The parts
/// follow in order.
macro_rules! effects_lua {
    ($($part:tt)*) => {
        concat!("if redis.replicate_commands then pcall(redis.replicate_commands) end\n", $($part)*)
    };
}

/// The `redis::Script` of the Lua source `$src`, made (and its SHA1 hashed) once, at the first
/// call that runs it: a script's typed call names its source here, so the script needs no
/// static of its own.
macro_rules! script {
    ($src:expr) => {{
        static SCRIPT: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| redis::Script::new($src));
        &*SCRIPT
    }};
}

/// Declares the typed call of one script: a struct of its named keys and arguments and one
/// `invoke` that sends them in the order the Lua reads them (`keys [..]`, `args [..]`:
/// expressions over the fields and, for an acquire, the boot marker `invoke` is given), so
/// that order is written once, next to the Lua. `-> T`: the script's reply.
macro_rules! script_call {
    (
        $(#[$doc:meta])*
        $name:ident -> $out:ty = $script:expr;
        { $($(#[$fdoc:meta])* $field:ident: $fty:ty,)* }
        $(marker $marker:ident;)?
        keys [$($key:expr),* $(,)?]
        args [$($arg:expr),* $(,)?]
    ) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        pub struct $name<'a> {
            $($(#[$fdoc])* pub $field: $fty,)*
        }

        impl $name<'_> {
            /// Runs the script (an acquire: with the boot marker of the name).
            pub async fn invoke(
                &self,
                $($marker: &str,)?
                c: &mut impl redis::aio::ConnectionLike,
            ) -> redis::RedisResult<$out> {
                let Self { $($field),* } = *self;
                let mut call = $script.prepare_invoke();
                $(call.key($key);)*
                $(call.arg($arg);)*
                call.invoke_async(c).await
            }
        }
    };
}

mod exclusive;
mod keys;
mod kinds;
mod kinds_queue;
mod lease;
mod queue;
mod redlock;
mod waiters;

pub use exclusive::{
    Acquire, Arm, ClaimPushed, ForceRelease, HandOff, HandOffScript, Inspect, LeaseEnd, Observe, Renew, Try,
};
pub(crate) use exclusive::{ARM, ARM_SRC};
pub use keys::{Keys, RwKeys, SemKeys};
pub use kinds::{RwAcquire, RwRelease, SemAcquire, SemRelease, Side, ZsetHolder, ZsetRenew};
pub use redlock::{RedlockAcquire, RedlockArm, RedlockClaim, RedlockFence, RedlockRelease, RedlockUndo};
pub(crate) use redlock::{REDLOCK_ARM, REDLOCK_ARM_SRC};

/// The terms of one attempt, the same in the acquire scripts of Redlock (per master), the
/// read-write lock and the semaphore: who asks, for how long, and how it waits if refused.
#[derive(Debug, Clone, Copy)]
pub struct Terms<'a> {
    /// The owner's id.
    pub owner: &'a str,
    /// The lease's ttl in ms.
    pub ttl_ms: u64,
    /// The restart quiet period in ms (`crate::boot`).
    pub quiet_ms: u64,
    /// How long a refused attempt's place in the queue lasts (ms), 0: a single try, no place.
    pub registration_ms: u64,
    /// How long the queue's head (or a grantable head) has to take a lock it finds free (ms).
    pub reserve_ms: u64,
    /// The caller's wake channel, `""`: none (a Redlock waiter is then woken on the name's
    /// channel; a reader, writer or permit waiter polls).
    pub wake: &'a str,
    /// The most waiters the name may have (`RedisOptions::max_waiters`).
    pub max_waiters: u32,
}

/// Every script's source, loaded on each new connection (one pipelined round trip) so the
/// first call by SHA does not pay a `NOSCRIPT` round trip.
pub(crate) fn all_sources() -> impl Iterator<Item = &'static str> {
    exclusive::SOURCES.into_iter().chain(redlock::SOURCES).chain(kinds::SOURCES)
}
