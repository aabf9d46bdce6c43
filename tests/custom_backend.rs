//! The third-party backend example (`examples/custom_backend.rs`) certifies as its header says:
//! the whole suite passes on it, every case that does not apply says why.

#[path = "../examples/custom_backend.rs"]
#[allow(dead_code)]
mod custom_backend;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_custom_backend_example_passes_the_whole_suite() {
    let report = custom_backend::certify().await;
    let failed: Vec<_> = report
        .cases
        .iter()
        .filter(|c| {
            !matches!(
                c.outcome,
                lock_conformance::runner::Outcome::Passed | lock_conformance::runner::Outcome::NotApplicable
            )
        })
        .map(|c| format!("{}: {:?} {}", c.name, c.outcome, c.detail))
        .collect();
    assert!(report.ok() && failed.is_empty(), "cases that did not pass: {failed:#?}");
    assert!(report.passed >= 40, "only {} cases passed: {:#?}", report.passed, report.cases);
}
