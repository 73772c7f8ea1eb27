//! Models bigger than one machine (issue 19), on loopback clusters of real `vkml-node`
//! processes: a model whose weights live in external-data files (two side files, one in a
//! subfolder) submitted to three nodes each capped at 45% of its weights, each node receiving
//! only its part (the one submitted to included); a lost node's part taken from the client
//! again, through the node submitted to; the weight cache
//! (a second submission, and one after a participant restarts, move no weight bytes); a
//! `--models` folder mapped instead of received; and bad input (missing, truncated or
//! changed side files, a location outside the model's folder, a cache too small for a
//! weight, an unusable cache folder), each a clear error that leaves nothing loaded.
//!
//! Outputs are compared with onnxruntime's (tests/generate/models.py, `gen_chain_external`).

mod cluster_harness;
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster_harness::{BIN, Cluster, Node};
use vkml::cluster::Secret;
use vkml::distributed::client::{ClusterClient, RemoteModel};

const FIXTURE: &str = "chain_external";

/// The fixture's side files, relative to its folder.
const SIDE_FILES: [&str; 2] = ["part-a.bin", "sub/part-b.bin"];

fn weight_bytes(dir: &Path) -> u64 {
    SIDE_FILES
        .iter()
        .map(|f| std::fs::metadata(dir.join(f)).unwrap().len())
        .sum()
}

/// A private copy of the fixture (model and side files), to damage or change.
fn copy_fixture(to: &Path) -> PathBuf {
    let from = common::fixture(FIXTURE);
    std::fs::create_dir_all(to.join("sub")).unwrap();
    for f in ["model.onnx", SIDE_FILES[0], SIDE_FILES[1]] {
        std::fs::copy(from.join(f), to.join(f)).unwrap();
    }
    to.to_path_buf()
}

struct Running {
    cluster: Cluster,
    nodes: Vec<Node>,
}

impl Running {
    fn all(&self) -> Vec<&Node> {
        self.nodes.iter().collect()
    }

    fn logs(&self) -> String {
        cluster_harness::logs(&self.all())
    }
}

/// Node `name`'s flags: its cap, its own cache folder under the cluster's, and `extra`.
fn flags(cluster: &Cluster, name: &str, cap: u64, extra: &[String]) -> Vec<String> {
    let mut f = vec![
        "--device-memory-limit".to_string(),
        cap.to_string(),
        "--cache-dir".into(),
        cluster
            .dir
            .join(format!("cache-{name}"))
            .to_string_lossy()
            .into_owned(),
    ];
    f.extend_from_slice(extra);
    f
}

/// Starts nodes n1.. with `caps`, each with `extra[i]` flags, and waits until they converge.
fn start(test: &str, caps: &[u64], extra: &[Vec<String>]) -> Running {
    let cluster = Cluster::new(test);
    let mut nodes: Vec<Node> = Vec::new();
    for (i, &cap) in caps.iter().enumerate() {
        let name = format!("n{}", i + 1);
        let f = flags(&cluster, &name, cap, extra.get(i).map_or(&[], |v| v));
        let seeds: Vec<&Node> = nodes.first().into_iter().collect();
        nodes.push(cluster.start_opts(&name, &seeds, &f, None, &[]));
    }
    let r = Running { cluster, nodes };
    wait_converged(&r, test);
    r
}

fn wait_converged(r: &Running, test: &str) {
    cluster_harness::converged(
        &r.all(),
        Instant::now() - Duration::from_secs(120),
        Duration::from_secs(20),
    )
    .unwrap_or_else(|| panic!("{test}: the cluster did not converge\n{}", r.logs()));
    // Inventories travel after membership: give them a moment to arrive everywhere.
    std::thread::sleep(Duration::from_millis(500));
}

fn connect(r: &Running) -> Arc<ClusterClient> {
    let secret = Secret::read(&r.cluster.key).unwrap();
    ClusterClient::connect(&r.nodes[0].addr, &secret).unwrap()
}

/// Each node's (weight bytes received, weight bytes taken from its cache or models folder),
/// as it reports them.
fn counters(r: &Running) -> Vec<(u64, u64)> {
    r.nodes
        .iter()
        .map(|n| {
            let s = cluster_harness::status(n, &r.cluster.key);
            let get = |k: &str| {
                s[k].as_u64()
                    .unwrap_or_else(|| panic!("status of {} has no {k}: {s}", n.name))
            };
            (get("weight_bytes_received"), get("weight_bytes_cached"))
        })
        .collect()
}

fn run_all_sets(model: &RemoteModel, what: &str, r: &Running) {
    for set in common::data_sets(FIXTURE) {
        let out = model
            .run(&set.feeds())
            .unwrap_or_else(|e| panic!("{what}: run: {e}\n{}", r.logs()));
        common::assert_outputs_match(what, &out.outputs, &set.outputs);
    }
}

fn nodes_of(model: &RemoteModel) -> std::collections::BTreeSet<String> {
    let p = model
        .placement
        .as_ref()
        .expect("a fixed-shape model is planned at load");
    p.parts.iter().map(|x| x.node.clone()).collect()
}

/// Issue 19's loopback test: three nodes capped at 45% of the weights run the model split
/// (one of them on Vulkan when it is there), through the Rust API and the CLI; the second
/// submission and one after a participant restarts receive no weight bytes.
#[test]
fn external_data_is_split_under_caps_and_stays_put() {
    let _serial = cluster_harness::serial();
    let dir = common::fixture(FIXTURE);
    let cap = weight_bytes(&dir) * 45 / 100;
    let vulkan = !common::skip_vulkan();
    let device = |d: &str| vec!["--device".to_string(), d.to_string()];
    let extra = [
        device("cpu"),
        device(if vulkan { "vulkan" } else { "cpu" }),
        device("cpu"),
    ];
    let mut r = start("ext-split", &[cap; 3], &extra);
    let client = connect(&r);
    let model_path = dir.join("model.onnx");

    let model = client
        .load(&model_path, |_| {})
        .unwrap_or_else(|e| panic!("load: {e}\n{}", r.logs()));
    assert_eq!(nodes_of(&model).len(), 3, "45% caps need all three nodes");
    run_all_sets(&model, "first submission", &r);
    let first = counters(&r);
    // Every node received its own part only, n1 (submitted to) too: each weight crossed
    // once (the side files hold the tensors back to back), and none more than a cap.
    let total = weight_bytes(&dir);
    let sum: u64 = first.iter().map(|c| c.0).sum();
    assert_eq!(sum, total, "each weight was received once: {first:?}");
    for (i, c) in first.iter().enumerate() {
        assert!(
            c.0 > 0 && c.0 <= cap,
            "n{} received its part only: {first:?} (cap {cap})",
            i + 1
        );
    }
    model.unload().unwrap();

    // Again: every weight is where it was.
    let model = client.load(&model_path, |_| {}).unwrap();
    run_all_sets(&model, "second submission", &r);
    let second = counters(&r);
    for (i, (a, b)) in first.iter().zip(&second).enumerate() {
        assert_eq!(
            a.0,
            b.0,
            "n{} received weights again: {first:?} -> {second:?}",
            i + 1
        );
        assert!(
            b.1 > a.1,
            "n{} took its part from its cache: {second:?}",
            i + 1
        );
    }
    model.unload().unwrap();
    client.close();

    // A participant restarts on its cache: it receives nothing.
    r.nodes[2].kill9();
    let f = flags(&r.cluster, "n3", cap, &extra[2]);
    let n3 = r.cluster.start_opts("n3", &[&r.nodes[0]], &f, None, &[]);
    r.nodes[2] = n3;
    wait_converged(&r, "ext-split (restart)");
    let out = r.cluster.dir.join("out");
    let set = &common::data_sets(FIXTURE)[0];
    let printed = Command::new(BIN)
        .arg("submit")
        .arg(&model_path)
        .args(["--to", &r.nodes[0].addr])
        .arg("--cluster-key")
        .arg(&r.cluster.key)
        .arg("--test-data")
        .arg(&set.dir)
        .arg("--output-dir")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        printed.status.success(),
        "submit after the restart: {}\n{}",
        String::from_utf8_lossy(&printed.stderr),
        r.logs()
    );
    let y = vkml::io::read_tensor_file(&out.join("y.npy")).unwrap();
    common::assert_outputs_match("after a restart (CLI)", &[("y".into(), y)], &set.outputs);
    let third = counters(&r);
    assert_eq!(
        third[2].0, 0,
        "the restarted n3 received nothing: {third:?}"
    );
    assert!(third[2].1 > 0, "n3 took its part from its cache: {third:?}");
}

/// A participant lost after the load: its part goes to a spare node on the retry, and the
/// spare receives it from the client through n1 (which does not keep it): the client serves
/// its model's weights for as long as the model is loaded.
#[test]
fn a_lost_participant_s_part_is_taken_from_the_client_again() {
    let _serial = cluster_harness::serial();
    let dir = common::fixture(FIXTURE);
    let cap = weight_bytes(&dir) * 45 / 100;
    let mut r = start("ext-lost", &[cap; 4], &[]);
    let client = connect(&r);
    let model = client
        .load(&dir.join("model.onnx"), |_| {})
        .unwrap_or_else(|e| panic!("load: {e}\n{}", r.logs()));
    let used = nodes_of(&model);
    let spare: Vec<usize> = (0..4)
        .filter(|i| !used.contains(&format!("n{}", i + 1)))
        .collect();
    assert_eq!(spare.len(), 1, "45% caps need three of the four: {used:?}");
    let spare = spare[0];
    let victim = (1..4)
        .find(|&i| i != spare)
        .expect("a participant other than n1");
    let before = counters(&r);
    assert_eq!(before[spare].0, 0, "the spare took no part yet: {before:?}");
    r.nodes[victim].kill9();
    let set = &common::data_sets(FIXTURE)[0];
    let out = model
        .run(&set.feeds())
        .unwrap_or_else(|e| panic!("run after the loss: {e}\n{}", r.logs()));
    common::assert_outputs_match("after the loss", &out.outputs, &set.outputs);
    let live: Vec<usize> = (0..4).filter(|&i| i != victim).collect();
    let now: Vec<(u64, u64)> = live
        .iter()
        .map(|&i| {
            let s = cluster_harness::status(&r.nodes[i], &r.cluster.key);
            (
                s["weight_bytes_received"].as_u64().unwrap(),
                s["weight_bytes_cached"].as_u64().unwrap(),
            )
        })
        .collect();
    let spare_now = now[live.iter().position(|&i| i == spare).unwrap()];
    assert!(
        spare_now.0 > 0 && spare_now.0 <= cap,
        "the spare received its part: before {before:?}, now {now:?}"
    );
    assert!(
        now[0].0 <= cap,
        "n1 passed the spare's part on without keeping it: before {before:?}, now {now:?}"
    );
    model.unload().unwrap();
    client.close();
}

/// A participant started with `--models DIR` holding the side files maps them: with every
/// node so started, no weight byte travels at all. A file of the same name with other bytes
/// is not used.
#[test]
fn a_models_folder_is_mapped_instead_of_received() {
    let _serial = cluster_harness::serial();
    let dir = common::fixture(FIXTURE);
    let cap = weight_bytes(&dir) * 45 / 100;
    let scratch = std::env::temp_dir().join(format!("vkml-ext-models-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    // n3's folder has part-a.bin with its bytes reversed: same name and length, other content.
    let wrong = copy_fixture(&scratch.join("wrong"));
    let mut bytes = std::fs::read(wrong.join(SIDE_FILES[0])).unwrap();
    bytes.reverse();
    std::fs::write(wrong.join(SIDE_FILES[0]), bytes).unwrap();
    let models = |d: &Path| vec!["--models".to_string(), d.to_string_lossy().into_owned()];
    let extra = [models(&dir), models(&dir), models(&wrong)];
    let r = start("ext-models", &[cap; 3], &extra);
    let client = connect(&r);
    let model = client
        .load(&dir.join("model.onnx"), |_| {})
        .unwrap_or_else(|e| panic!("load: {e}\n{}", r.logs()));
    run_all_sets(&model, "weights from --models", &r);
    let c = counters(&r);
    assert_eq!(
        (c[0].0, c[1].0),
        (0, 0),
        "n1 and n2 mapped their weights: {c:?}"
    );
    assert!(c[0].1 > 0 && c[1].1 > 0, "{c:?}");
    let n3_part = model
        .placement
        .as_ref()
        .unwrap()
        .parts
        .iter()
        .any(|p| p.node == "n3");
    assert!(n3_part, "45% caps need n3 too");
    model.unload().unwrap();
    client.close();
    let _ = std::fs::remove_dir_all(&scratch);
}

/// A second model is planned into the memory the first left: nodes gossip what loaded parts
/// reserve, and the submitter plans against budget minus that. Planned against whole budgets,
/// the second copy went where the first already was, and that node refused it ("no room").
#[test]
fn a_second_model_is_planned_into_the_memory_left() {
    let _serial = cluster_harness::serial();
    let dir = common::fixture(FIXTURE);
    let cap = weight_bytes(&dir) * 75 / 100;
    let r = start("ext-second", &[cap; 3], &[]);
    let client = connect(&r);
    let first = client
        .load(&dir.join("model.onnx"), |_| {})
        .unwrap_or_else(|e| panic!("first load: {e}\n{}", r.logs()));
    // The reservations travel by gossip.
    std::thread::sleep(Duration::from_millis(1500));
    let second = client
        .load(&dir.join("model.onnx"), |_| {})
        .unwrap_or_else(|e| panic!("second load: {e}\n{}", r.logs()));
    let (a, b) = (nodes_of(&first), nodes_of(&second));
    assert!(a != b, "the second copy went elsewhere: {a:?} and {b:?}");
    run_all_sets(&first, "the first copy", &r);
    run_all_sets(&second, "the second copy", &r);
    first.unload().unwrap();
    second.unload().unwrap();
    client.close();
}

/// `--cache-size 0` keeps no cache: the weights live as long as their model, and a second
/// submission sends them again.
#[test]
fn without_a_cache_weights_are_received_again() {
    let _serial = cluster_harness::serial();
    let dir = common::fixture(FIXTURE);
    let none = vec!["--cache-size".to_string(), "0".into()];
    let r = start("ext-nocache", &[1 << 30], &[none]);
    let client = connect(&r);
    let mut received = Vec::new();
    for k in 0..2 {
        let model = client
            .load(&dir.join("model.onnx"), |_| {})
            .unwrap_or_else(|e| panic!("load {k}: {e}\n{}", r.logs()));
        run_all_sets(&model, "without a cache", &r);
        model.unload().unwrap();
        received.push(counters(&r)[0].0);
    }
    let total = weight_bytes(&dir);
    assert!(
        received[0] >= total,
        "the first load sends the weights: {received:?}"
    );
    assert_eq!(
        received[1],
        2 * received[0],
        "and so does the second: {received:?}"
    );
    client.close();
}

/// Bad input: each a clear error naming the file, and nothing left loaded.
#[test]
fn bad_external_data_is_a_clear_error_and_leaves_nothing_loaded() {
    let _serial = cluster_harness::serial();
    let r = start("ext-bad", &[1 << 30], &[]);
    let client = connect(&r);
    let scratch = r.cluster.dir.join("models");
    let nothing_loaded = |what: &str| {
        let s = cluster_harness::status(&r.nodes[0], &r.cluster.key);
        let empty = |k: &str| s[k].as_array().is_none_or(|a| a.is_empty());
        assert!(
            empty("models") && empty("fragments"),
            "{what}: something stayed loaded: {s}"
        );
    };
    let fails = |model: &Path, what: &str, needles: &[&str]| {
        let e = match client.load(model, |_| {}) {
            Ok(_) => panic!("{what}: loaded"),
            Err(e) => e.to_string(),
        };
        for n in needles {
            assert!(e.contains(n), "{what}: the error names {n:?}: {e}");
        }
        nothing_loaded(what);
    };

    let missing = copy_fixture(&scratch.join("missing"));
    std::fs::remove_file(missing.join(SIDE_FILES[1])).unwrap();
    fails(
        &missing.join("model.onnx"),
        "a missing side file",
        &["part-b.bin", "cannot open"],
    );

    let truncated = copy_fixture(&scratch.join("truncated"));
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(truncated.join(SIDE_FILES[0]))
        .unwrap();
    f.set_len(1000).unwrap();
    fails(
        &truncated.join("model.onnx"),
        "a truncated side file",
        &["part-a.bin", "truncated"],
    );

    // "part-a.bin" -> "../a-a.bin": same length, so the protobuf stays valid.
    let outside = copy_fixture(&scratch.join("outside"));
    let onnx = std::fs::read(outside.join("model.onnx")).unwrap();
    let patched = replace_all(&onnx, b"part-a.bin", b"../a-a.bin");
    std::fs::write(outside.join("model.onnx"), patched).unwrap();
    fails(
        &outside.join("model.onnx"),
        "a location outside the model's folder",
        &["../a-a.bin", "inside the model's folder"],
    );

    // A side file changed between submissions: the second run uses the new bytes, not the
    // cached ones. All weights zero makes every output exactly Relu(0) = 0.
    let changed = copy_fixture(&scratch.join("changed"));
    let model = client.load(&changed.join("model.onnx"), |_| {}).unwrap();
    run_all_sets(&model, "before the change", &r);
    model.unload().unwrap();
    for f in SIDE_FILES {
        let len = std::fs::metadata(changed.join(f)).unwrap().len();
        std::fs::write(changed.join(f), vec![0u8; len as usize]).unwrap();
    }
    let model = client.load(&changed.join("model.onnx"), |_| {}).unwrap();
    let set = &common::data_sets(FIXTURE)[0];
    let out = model.run(&set.feeds()).unwrap();
    let y = out.outputs[0].1.to_f64_vec().unwrap();
    assert!(
        y.iter().all(|&v| v == 0.0),
        "zeroed weights give zeros, not the cached weights' answer: {:?}",
        &y[..4]
    );
    model.unload().unwrap();
    client.close();
}

/// A cache that cannot hold a weight, and a cache folder that cannot be made: clear errors
/// naming the cache.
#[test]
fn a_cache_too_small_or_unusable_is_a_clear_error() {
    let _serial = cluster_harness::serial();
    let dir = common::fixture(FIXTURE);
    // Each W is 16 KiB: a 4 KiB cache holds none.
    let small = vec!["--cache-size".to_string(), "4K".into()];
    let r = start("ext-cache", &[1 << 30], &[small]);
    let client = connect(&r);
    let e = match client.load(&dir.join("model.onnx"), |_| {}) {
        Ok(_) => panic!("loaded with a 4 KiB cache"),
        Err(e) => e.to_string(),
    };
    assert!(
        e.contains("--cache-size") && e.contains("cache-n1"),
        "the error names the cache and the flag: {e}"
    );
    let s = cluster_harness::status(&r.nodes[0], &r.cluster.key);
    assert!(
        s["models"].as_array().is_none_or(|a| a.is_empty()),
        "nothing stays loaded: {s}"
    );
    client.close();

    // A --cache-dir under a regular file cannot be made: the node says so and does not start.
    let file = r.cluster.dir.join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let bad = file.join("cache");
    let out = alone_with_cache(Path::new(BIN), &bad).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a node with an unusable cache starts: {err}"
    );
    assert!(
        err.contains(&*bad.to_string_lossy()) && err.contains("--cache-dir"),
        "the error names the folder and the flag: {err}"
    );
}

/// A node started on its own (no cluster, no key) with `--cache-dir cache`.
fn alone_with_cache(bin: &Path, cache: &Path) -> Command {
    let mut cmd = Command::new(bin);
    cmd.args([
        "--listen",
        "127.0.0.1:0",
        "--insecure",
        "--name",
        "alone",
        "--device",
        "cpu",
    ])
    .arg("--cache-dir")
    .arg(cache);
    cmd
}

#[test]
fn a_read_only_cache_folder_is_a_clear_error() {
    // Root may write anywhere, so as root the node runs as `nobody`, for whom the
    // permissions hold.
    let r = Cluster::new("ext-cache-ro");
    let ro = r.dir.join("read-only");
    std::fs::create_dir(&ro).unwrap();
    std::fs::set_permissions(&ro, std::os::unix::fs::PermissionsExt::from_mode(0o555)).unwrap();
    let root = rustix::process::geteuid().is_root();
    // `nobody` may not reach the build folder (a clone under /root): a copy it can run.
    let bin = if root {
        let open = std::os::unix::fs::PermissionsExt::from_mode(0o755);
        std::fs::set_permissions(&r.dir, open).unwrap();
        let copy = r.dir.join("vkml-node");
        std::fs::copy(BIN, &copy).unwrap();
        std::fs::set_permissions(&copy, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        copy
    } else {
        PathBuf::from(BIN)
    };
    let mut cmd = alone_with_cache(&bin, &ro);
    if root {
        std::os::unix::process::CommandExt::uid(&mut cmd, 65534);
        std::os::unix::process::CommandExt::gid(&mut cmd, 65534);
    }
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a node with a read-only cache starts: {err}"
    );
    assert!(
        err.contains(&*ro.to_string_lossy())
            && err.contains("--cache-dir")
            && err.matches("denied").count() == 1,
        "the error names the folder and the flag, and the cause once: {err}"
    );
}

fn replace_all(data: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let mut out = data.to_vec();
    let mut i = 0;
    let mut n = 0;
    while i + from.len() <= out.len() {
        if &out[i..i + from.len()] == from {
            out[i..i + from.len()].copy_from_slice(to);
            n += 1;
            i += from.len();
        } else {
            i += 1;
        }
    }
    assert!(n > 0, "nothing to replace");
    out
}
