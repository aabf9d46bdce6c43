//! Taking turns: `baseline` and `uncontended` run interleaved, in short alternating slices, so
//! that their ratio compares the two loops in the same machine state. Run one after the other,
//! the same binary's `uncontended / baseline` moved between 0.48 and 0.91 from run to run on
//! this 2-core machine (scheduler placement and CPU speed change by the second); alternating
//! slices of a quarter second cancel most of that.

use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Two loops that take turns, `slice` each. The first turn starts once both loops are ready
/// (connected), so that neither's set-up falls into the other's time.
pub(crate) struct Turns {
    slice: Duration,
    state: Mutex<State>,
    changed: Notify,
}

#[derive(Default)]
struct State {
    turn: usize,
    ready: [bool; 2],
    finished: [bool; 2],
}

impl Turns {
    pub(crate) fn new(slice: Duration) -> Turns {
        Turns { slice, state: Mutex::new(State::default()), changed: Notify::new() }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn wait(&self, me: usize) {
        let arrived = !std::mem::replace(&mut self.state().ready[me], true);
        if arrived {
            // The other loop may be waiting for this one to be ready.
            self.changed.notify_waiters();
        }
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let s = self.state();
                let other = 1 - me;
                if s.finished[other] || (s.turn == me && s.ready[other]) {
                    return;
                }
            }
            notified.await;
        }
    }

    /// Hands the turn to the other loop, unless it has finished.
    fn pass(&self, me: usize, finished: bool) {
        let mut s = self.state();
        s.finished[me] |= finished;
        if !s.finished[1 - me] {
            s.turn = 1 - me;
        }
        drop(s);
        self.changed.notify_waiters();
    }
}

/// When a timed loop runs its next operation: `duration` of its own time, either at once or in
/// turns with another loop (its time then counts only while it has the turn).
pub(crate) struct Schedule<'a> {
    turns: Option<(&'a Turns, usize)>,
    duration: Duration,
    active: Duration,
    slice_began: Option<Instant>,
}

impl<'a> Schedule<'a> {
    /// A loop that runs on its own.
    pub(crate) fn alone(duration: Duration) -> Schedule<'static> {
        Schedule { turns: None, duration, active: Duration::ZERO, slice_began: None }
    }

    /// Loop `me` (0 or 1) of `turns`; loop 0 goes first.
    pub(crate) fn taking_turns(turns: &'a Turns, me: usize, duration: Duration) -> Schedule<'a> {
        Schedule { turns: Some((turns, me.min(1))), duration, active: Duration::ZERO, slice_began: None }
    }

    /// Whether to run another operation (waiting for this loop's turn first); `false` once
    /// the loop has had its whole duration.
    pub(crate) async fn next(&mut self) -> bool {
        if let Some(began) = self.slice_began {
            let in_slice = began.elapsed();
            if self.active + in_slice >= self.duration {
                self.active += in_slice;
                self.slice_began = None;
                if let Some((turns, me)) = self.turns {
                    turns.pass(me, true);
                }
                return false;
            }
            match self.turns {
                None => return true,
                Some((turns, _)) if in_slice < turns.slice => return true,
                Some((turns, me)) => {
                    self.active += in_slice;
                    self.slice_began = None;
                    turns.pass(me, false);
                }
            }
        }
        if let Some((turns, me)) = self.turns {
            turns.wait(me).await;
        }
        self.slice_began = Some(Instant::now());
        true
    }

    /// The time this loop has run (its turns only).
    pub(crate) fn elapsed(&self) -> Duration {
        self.active + self.slice_began.map_or(Duration::ZERO, |b| b.elapsed())
    }
}

/// A loop that ends early (an error) hands its turns over for good, so the other never waits
/// for it.
impl Drop for Schedule<'_> {
    fn drop(&mut self) {
        if let Some((turns, me)) = self.turns {
            turns.pass(me, true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two loops that record who ran when: they alternate, never overlap, and each gets its
    /// whole duration of its own time.
    #[tokio::test]
    async fn two_loops_alternate_and_each_gets_its_duration() {
        let turns = Turns::new(Duration::from_millis(20));
        let log = Mutex::new(Vec::new());
        let run = |me: usize| {
            let (turns, log) = (&turns, &log);
            async move {
                let mut s = Schedule::taking_turns(turns, me, Duration::from_millis(100));
                while s.next().await {
                    log.lock().unwrap().push(me);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    log.lock().unwrap().push(me);
                }
                s.elapsed()
            }
        };
        let (a, b) = tokio::join!(run(0), run(1));
        for e in [a, b] {
            assert!(e >= Duration::from_millis(100) && e < Duration::from_millis(150), "{e:?}");
        }
        let log = log.into_inner().unwrap();
        // Each operation's two entries are adjacent: the other loop never ran in between.
        assert!(log.chunks(2).all(|op| op[0] == op[1]), "{log:?}");
        let switches = log.windows(2).filter(|w| w[0] != w[1]).count();
        assert!(switches >= 6, "100 ms each in 20 ms slices: {switches} switches in {log:?}");
        assert_eq!(log.first(), Some(&0), "loop 0 goes first");
    }

    /// A loop that fails before its first turn (its set-up failed) does not leave the other
    /// waiting for ever.
    #[tokio::test]
    async fn a_loop_that_ends_early_leaves_the_turns_to_the_other() {
        let turns = Turns::new(Duration::from_millis(5));
        let failing = async {
            let _s = Schedule::taking_turns(&turns, 0, Duration::from_secs(10));
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let other = async {
            let mut s = Schedule::taking_turns(&turns, 1, Duration::from_millis(30));
            let mut ops = 0;
            while s.next().await {
                ops += 1;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            ops
        };
        let (_, ops) = tokio::time::timeout(Duration::from_secs(5), async { tokio::join!(failing, other) })
            .await
            .expect("the other loop ran to its end");
        assert!(ops > 5, "{ops}");
    }

    #[tokio::test]
    async fn alone_runs_its_duration_at_once() {
        let mut s = Schedule::alone(Duration::from_millis(30));
        let begun = Instant::now();
        let mut ops = 0;
        while s.next().await {
            ops += 1;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(ops > 5, "{ops}");
        assert!(begun.elapsed() >= Duration::from_millis(30) && s.elapsed() >= Duration::from_millis(30));
    }
}
