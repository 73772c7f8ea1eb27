//! Models split between vulkan:0 and the CPU by a device memory cap: the plan must use both,
//! with at least one transfer between them, and the outputs must not change.

mod common;

fn check_split(name: &str) {
    if common::skip_vulkan() {
        return;
    }
    let sets = common::data_sets(name);
    let plans = common::plans_under_caps(name, &sets[0]);
    let split = plans
        .iter()
        .find(|p| common::is_split(&p.summary))
        .unwrap_or_else(|| {
            let tried: Vec<_> = plans.iter().map(|p| (p.limit, &p.summary)).collect();
            panic!(
                "{name}: no device_memory_limit split the plan over cpu and vulkan:0: {tried:#?}"
            )
        });
    let summary = &split.summary;
    assert!(
        summary.transfers >= 1,
        "{name}: ops on two devices but no transfer between them: {summary:?}"
    );
    assert!(
        summary.chunks >= 2,
        "{name}: ops on two devices must make at least two chunks: {summary:?}"
    );
    assert!(
        summary
            .ops_per_device
            .keys()
            .all(|d| d == "cpu" || d.starts_with("vulkan:")),
        "{name}: unexpected device names in {summary:?}"
    );

    // Every data set, through one session, under the cap that splits.
    let session = vkml::Session::load(
        common::model_path(name),
        common::options(vkml::DeviceSelection::Auto, Some(split.limit)),
    )
    .unwrap_or_else(|e| panic!("{name}: load with limit {}: {e}", split.limit));
    assert_eq!(
        session.plan_summary(&sets[0].feeds()).unwrap(),
        *summary,
        "{name}: the same cap and inputs must give the same plan"
    );
    for set in &sets {
        common::run_and_check(&session, set, &format!("{name} split at {}", split.limit));
    }
}

#[test]
fn mnist_cnn_splits_between_vulkan_and_cpu() {
    check_split("mnist_cnn");
}

#[test]
fn mlp_splits_between_vulkan_and_cpu() {
    check_split("mlp");
}

#[test]
fn add_chain_1000_splits_between_vulkan_and_cpu() {
    check_split("add_chain_1000");
}

/// Without a cap, a model this small fits on the GPU: Vulkan-only selection puts nothing on
/// the CPU.
#[test]
fn vulkan_selection_places_nothing_on_the_cpu() {
    if common::skip_vulkan() {
        return;
    }
    let session = common::load("mnist_cnn", vkml::DeviceSelection::Vulkan);
    let set = &common::data_sets("mnist_cnn")[0];
    let summary = session.plan_summary(&set.feeds()).unwrap();
    assert_eq!(
        summary.ops_per_device.get("cpu").copied().unwrap_or(0),
        0,
        "{summary:?}"
    );
    assert!(
        summary.ops_per_device.get("vulkan:0").copied().unwrap_or(0) > 0,
        "{summary:?}"
    );
}

/// The CPU selection never touches a GPU.
#[test]
fn cpu_selection_places_everything_on_the_cpu() {
    let session = common::load("mnist_cnn", vkml::DeviceSelection::Cpu);
    let set = &common::data_sets("mnist_cnn")[0];
    let summary = session.plan_summary(&set.feeds()).unwrap();
    let used: Vec<&str> = summary
        .ops_per_device
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(d, _)| d.as_str())
        .collect();
    assert_eq!(used, ["cpu"], "{summary:?}");
    assert_eq!(summary.transfers, 0, "{summary:?}");
}
