//! The whole suite against the in-memory reference backend.

lock_conformance::conformance_tests!(memory, || async {
    Ok::<_, lock_core::LockError>(lock_conformance::memory::MemoryFixture::new())
});
