//! Idle names cost nothing (docs/contract.md §5.7): the state of names nobody holds or waits
//! for is removed, and the server's fence floor keeps tokens rising across the removal.

use std::sync::atomic::Ordering;

use tokio::time::Instant;

use super::MemoryLock;

impl MemoryLock {
    /// Removes the state (holders, queue, fence counter) of every name that nobody holds or
    /// waits for, of all three kinds, and returns how many were removed. The server's fence
    /// floor is raised to their highest fence first, so a token issued afterwards for any name
    /// is greater than every token issued before.
    pub fn collect_idle(&self) -> usize {
        let now = Instant::now();
        let mut locks = self.server.locks.lock().unwrap_or_else(|e| e.into_inner());
        let before = locks.len();
        let mut floor = self.server.floor.load(Ordering::SeqCst);
        locks.retain(|_, e| {
            e.expire(now);
            let idle = e.holders.is_empty() && !e.has_waiters();
            if idle {
                floor = floor.max(e.fence);
            }
            !idle
        });
        self.server.floor.store(floor, Ordering::SeqCst);
        before - locks.len()
    }
}
