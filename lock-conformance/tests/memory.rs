//! The whole suite against the in-memory reference backend, in strict mode: the memory fixture
//! offers every fault hook, so no case may be skipped for a missing one.

lock_conformance::conformance_tests!(
    memory,
    || async { Ok::<_, lock_core::LockError>(lock_conformance::memory::MemoryFixture::new()) },
    strict
);

/// Strict mode fails a case that only lacks a hook.
#[test]
#[should_panic(expected = "NOT RUN")]
fn strict_mode_fails_on_a_missing_hook() {
    use std::sync::Arc;

    use lock_conformance::{async_trait, Fixture};

    struct NoHooks(lock_conformance::memory::MemoryFixture);

    #[async_trait]
    impl Fixture for NoHooks {
        fn backend(&self) -> &str {
            "nohooks"
        }
        async fn client(&self) -> Result<Arc<dyn lock_core::DistributedLock>, lock_core::LockError> {
            self.0.client().await
        }
    }

    lock_conformance::harness::run_test("fault_partition", lock_conformance::harness::Mode::Strict, || async {
        Ok::<_, lock_core::LockError>(NoHooks(lock_conformance::memory::MemoryFixture::new()))
    });
}
