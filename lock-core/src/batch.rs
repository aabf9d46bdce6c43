//! Gathering the requests of many leases into rounds: one task per batcher collects what comes
//! within a short window and hands it to a round function as one batch (one statement, one
//! pipeline, one `sync` for many leases), then answers each caller on its own.
//!
//! Assumptions callers rely on: a request joins a round only after it was asked, so a round's
//! server-side work happens after each of its callers took its own send time (a lease counts its
//! validity from that earlier instant, never from the round); and a caller that stops waiting
//! only loses its answer (it is left out of the next round if it gave up before it began).

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::{sleep_until, Instant};

type Ask<Q, A> = (Q, oneshot::Sender<A>);

/// Gathers requests `Q` into rounds and answers each with an `A`. The gathering task is started
/// on the runtime of the first request (and again if that runtime has gone) and ends when the
/// batcher is dropped; each round runs in a task of its own, so the round function must bound
/// its own network waits.
pub struct Batcher<Q, A> {
    gather: Duration,
    max: usize,
    round: Arc<dyn RoundFn<Q, A>>,
    asks: Mutex<Option<mpsc::UnboundedSender<Ask<Q, A>>>>,
}

/// One round: the answers in the order of the requests (fewer answers leave the rest unanswered).
/// Any `Fn(Vec<Q>) -> impl Future<Output = Vec<A>>` is one; named so the batcher can keep it.
trait RoundFn<Q, A>: Send + Sync + 'static {
    /// Serves one batch.
    fn call(&self, batch: Vec<Q>) -> std::pin::Pin<Box<dyn Future<Output = Vec<A>> + Send>>;
}

impl<Q, A, F, Fut> RoundFn<Q, A> for F
where
    F: Fn(Vec<Q>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Vec<A>> + Send + 'static,
{
    fn call(&self, batch: Vec<Q>) -> std::pin::Pin<Box<dyn Future<Output = Vec<A>> + Send>> {
        Box::pin(self(batch))
    }
}

impl<Q: Send + 'static, A: Send + 'static> Batcher<Q, A> {
    /// A batcher whose rounds wait `gather` after their first request for more, up to `max`.
    ///
    /// `round` serves one batch: the answers in the order of the requests (fewer answers leave
    /// the rest unanswered).
    pub fn new<F, Fut>(gather: Duration, max: usize, round: F) -> Self
    where
        F: Fn(Vec<Q>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Vec<A>> + Send + 'static,
    {
        Batcher { gather, max: max.max(1), round: Arc::new(round), asks: Mutex::new(None) }
    }

    /// Joins the next round; `None` when no round could answer (no runtime, or the round
    /// ended without an answer for this request). The caller bounds the wait.
    pub async fn ask(&self, request: Q) -> Option<A> {
        let (answer, rx) = oneshot::channel();
        self.sender()?.send((request, answer)).ok()?;
        rx.await.ok()
    }

    /// The running task's sender, starting the task when there is none or it has ended.
    fn sender(&self) -> Option<mpsc::UnboundedSender<Ask<Q, A>>> {
        let mut asks = self.asks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tx) = asks.as_ref().filter(|tx| !tx.is_closed()) {
            return Some(tx.clone());
        }
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (tx, rx) = mpsc::unbounded_channel();
        runtime.spawn(run(rx, self.gather, self.max, Arc::clone(&self.round)));
        *asks = Some(tx.clone());
        Some(tx)
    }
}

async fn run<Q: Send + 'static, A: Send + 'static>(
    mut rx: mpsc::UnboundedReceiver<Ask<Q, A>>,
    gather: Duration,
    max: usize,
    round: Arc<dyn RoundFn<Q, A>>,
) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        // A window too long for an `Instant` has no deadline: the round waits until it is full.
        let until = Instant::now().checked_add(gather);
        while batch.len() < max {
            let window = async {
                match until {
                    Some(until) => sleep_until(until).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                ask = rx.recv() => match ask {
                    Some(ask) => batch.push(ask),
                    None => break,
                },
                _ = window => break,
            }
        }
        // Callers that gave up need no work on the server.
        batch.retain(|(_, answer)| !answer.is_closed());
        if batch.is_empty() {
            continue;
        }
        let (requests, answers): (Vec<Q>, Vec<oneshot::Sender<A>>) = batch.into_iter().unzip();
        // A task per round, so that a slow round never holds back the next one.
        let served = round.call(requests);
        tokio::spawn(async move {
            for (answer, result) in answers.into_iter().zip(served.await) {
                let _ = answer.send(result);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test]
    async fn requests_close_together_share_a_round_and_each_gets_its_own_answer() {
        let rounds = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&rounds);
        let batcher = Arc::new(Batcher::new(Duration::from_millis(20), 100, move |batch: Vec<u32>| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move { batch.into_iter().map(|n| n * 2).collect::<Vec<_>>() }
        }));
        let asks: Vec<_> = (0..10u32)
            .map(|n| {
                let b = Arc::clone(&batcher);
                tokio::spawn(async move { b.ask(n).await })
            })
            .collect();
        let mut got = Vec::new();
        for ask in asks {
            got.push(ask.await.expect("joined"));
        }
        assert_eq!(got, (0..10u32).map(|n| Some(n * 2)).collect::<Vec<_>>());
        assert_eq!(rounds.load(Ordering::SeqCst), 1, "ten asks within the window took one round");
    }

    /// A window too long to compute a deadline for is "until the round is full", not a panic of
    /// the round task (which would leave every caller without an answer).
    #[tokio::test]
    async fn a_huge_window_waits_for_a_full_round() {
        let batcher = Arc::new(Batcher::new(Duration::MAX, 2, |batch: Vec<u32>| async move {
            batch.into_iter().map(|n| n + 1).collect::<Vec<_>>()
        }));
        let (a, b) = (Arc::clone(&batcher), Arc::clone(&batcher));
        let both = async { tokio::join!(a.ask(1), b.ask(2)) };
        let got = tokio::time::timeout(Duration::from_secs(30), both).await.expect("a full round answers");
        assert_eq!(got, (Some(2), Some(3)));
    }

    #[tokio::test]
    async fn a_round_that_answers_fewer_leaves_the_rest_without_an_answer() {
        let batcher = Batcher::new(Duration::ZERO, 1, |_batch: Vec<u32>| async { Vec::<u32>::new() });
        assert_eq!(batcher.ask(1).await, None);
    }
}
