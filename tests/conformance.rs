//! ONNX's backend tests (onnx 1.22.0's `onnx/backend/test/data/`): every test of the `node`
//! suite (the counted one) and of `pytorch-converted`, `pytorch-operator` and `simple`, on the
//! CPU backend and on Vulkan, against the lists of tests expected to pass in
//! tests/conformance/. No Python: the data is fetched beforehand by
//! scripts/fetch-onnx-tests.sh (scripts/test.sh does it).
//!
//!     cargo test --release --test conformance                 # everything
//!     cargo test --release --test conformance -- relu gemm    # tests whose name contains one
//!
//! Environment: VKML_ONNX_TESTS (the data folder; default target/onnx-tests/onnx-1.22.0),
//! VKML_CONFORMANCE_UPDATE=1 (rewrite the lists and CONFORMANCE.md from this run),
//! VKML_CONFORMANCE_THREADS, VKML_CONFORMANCE_TIMEOUT (seconds per test, default 60),
//! VKML_SKIP_CONFORMANCE=1 (skip), VKML_SKIP_VULKAN=1 (CPU only).
//!
//! A listed test that fails fails the run, with its reason; a test that passes without being
//! listed is printed so the list can grow. A panic is caught and counted as that test's failure
//! (with its message); a test that runs past the timeout stops the whole run, naming it.

#[path = "conformance/case.rs"]
mod case;
#[path = "conformance/report.rs"]
mod report;

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use case::{Backend, Category, Outcome};
use report::{COUNTED, TestResult};
use vkml::onnx::ModelOutline;

pub const ONNX_VERSION: &str = "1.22.0";
const SECTIONS: [&str; 4] = [COUNTED, "pytorch-converted", "pytorch-operator", "simple"];

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v == "1")
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn data_dir() -> PathBuf {
    match std::env::var_os("VKML_ONNX_TESTS") {
        Some(d) => PathBuf::from(d),
        None => repo_root()
            .join("target")
            .join("onnx-tests")
            .join(format!("onnx-{ONNX_VERSION}")),
    }
}

/// Name filters: the arguments that are not flags (cargo passes some of libtest's).
fn filters() -> Vec<String> {
    let mut out = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if matches!(
            a.as_str(),
            "--test-threads" | "--skip" | "--format" | "--color" | "--logfile" | "-Z"
        ) {
            args.next();
        } else if !a.starts_with('-') {
            out.push(a);
        }
    }
    out
}

/// One test folder, with what is needed to run and to file it.
struct Test {
    section: &'static str,
    name: String,
    dir: PathBuf,
    outline: Result<ModelOutline, String>,
    op: String,
    expanded: bool,
}

fn collect(root: &Path, filters: &[String]) -> Vec<Test> {
    let mut tests = Vec::new();
    for section in SECTIONS {
        let dir = root.join(section);
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .filter_map(|e| {
                let e = e.ok()?;
                e.path()
                    .join("model.onnx")
                    .exists()
                    .then(|| e.file_name().to_string_lossy().into_owned())
            })
            .collect();
        names.sort();
        for name in names {
            if !filters.is_empty() && !filters.iter().any(|f| name.contains(f.as_str())) {
                continue;
            }
            let tdir = dir.join(&name);
            let outline = vkml::onnx::outline(&tdir.join("model.onnx")).map_err(|e| e.to_string());
            let (op, expanded) = if section == COUNTED {
                match report::unexpanded(&name) {
                    Some(base) => {
                        // Filed under the op of the test it expands.
                        let base_ops = vkml::onnx::outline(&dir.join(base).join("model.onnx"))
                            .map(|o| o.op_types)
                            .ok();
                        let ops = base_ops
                            .or_else(|| outline.as_ref().ok().map(|o| o.op_types.clone()))
                            .unwrap_or_default();
                        (report::tested_op(base, &ops), true)
                    }
                    None => {
                        let ops = outline
                            .as_ref()
                            .map(|o| o.op_types.clone())
                            .unwrap_or_default();
                        (report::tested_op(&name, &ops), false)
                    }
                }
            } else {
                (String::new(), false)
            };
            tests.push(Test {
                section,
                name,
                dir: tdir,
                outline,
                op,
                expanded,
            });
        }
    }
    tests
}

thread_local! {
    /// The last panic's message on this thread, kept by the hook for the catch_unwind below.
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
    /// Whether this thread is inside a test, where a panic is a result rather than a crash.
    static IN_TEST: Cell<bool> = const { Cell::new(false) };
}

fn run_caught(t: &Test, b: Backend) -> Outcome {
    let outline = match &t.outline {
        Ok(o) => o,
        Err(e) => return Outcome::fail(Category::Error, format!("reading the model: {e}")),
    };
    LAST_PANIC.with(|p| p.borrow_mut().take());
    IN_TEST.with(|f| f.set(true));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        case::run_test(&t.dir, outline, b)
    }));
    IN_TEST.with(|f| f.set(false));
    match result {
        Ok(o) => o,
        Err(payload) => {
            // A panic on another thread (a rayon worker) arrives here without the hook's text.
            let msg = LAST_PANIC
                .with(|p| p.borrow_mut().take())
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".into());
            Outcome::fail(Category::Error, format!("PANIC: {msg}"))
        }
    }
}

/// What each worker is running, and since when, for the watchdog.
type Slots = Arc<Vec<Mutex<Option<(String, Instant)>>>>;

fn run_all(tests: &[Test], backends: &[Backend]) -> Vec<BTreeMap<Backend, Outcome>> {
    let jobs: Vec<(usize, Backend)> = backends
        .iter()
        .flat_map(|&b| (0..tests.len()).map(move |i| (i, b)))
        .collect();
    let threads = std::env::var("VKML_CONFORMANCE_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
        .max(1);
    let timeout = Duration::from_secs(
        std::env::var("VKML_CONFORMANCE_TIMEOUT")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(60),
    );
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let finished = Arc::new(AtomicBool::new(false));
    let slots: Slots = Arc::new((0..threads).map(|_| Mutex::new(None)).collect());
    let results: Mutex<Vec<BTreeMap<Backend, Outcome>>> =
        Mutex::new((0..tests.len()).map(|_| BTreeMap::new()).collect());

    let watchdog = {
        let slots = slots.clone();
        let finished = finished.clone();
        let total = jobs.len();
        std::thread::spawn(move || watch(&slots, &finished, timeout, total))
    };
    std::thread::scope(|s| {
        for w in 0..threads {
            let (jobs, next, done, slots, results) = (&jobs, &next, &done, &slots, &results);
            s.spawn(move || {
                loop {
                    let j = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&(i, b)) = jobs.get(j) else { break };
                    let t = &tests[i];
                    *slots[w].lock().unwrap() = Some((
                        format!("{}/{} on {}", t.section, t.name, b.name()),
                        Instant::now(),
                    ));
                    let o = run_caught(t, b);
                    *slots[w].lock().unwrap() = None;
                    results.lock().unwrap()[i].insert(b, o);
                    let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                    if n % 500 == 0 {
                        eprintln!("conformance: {n}/{} runs done", jobs.len());
                    }
                }
            });
        }
    });
    finished.store(true, Ordering::Relaxed);
    let _ = watchdog.join();
    results.into_inner().unwrap()
}

/// Stops the process when a test runs past `timeout`: a hung kernel must not hang CI.
fn watch(slots: &Slots, finished: &AtomicBool, timeout: Duration, total: usize) {
    while !finished.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(500));
        for slot in slots.iter() {
            if let Some((name, since)) = slot.lock().unwrap().as_ref()
                && since.elapsed() > timeout
            {
                eprintln!(
                    "\nconformance: FAILED: {name} has run for more than {} s (of {total} runs); \
                     stopping. Set VKML_CONFORMANCE_TIMEOUT to allow longer.",
                    timeout.as_secs()
                );
                std::process::exit(1);
            }
        }
    }
}

fn vulkan_device() -> Result<String, String> {
    let v = vkml::session::vulkan(&Default::default()).map_err(|e| e.to_string())?;
    v.gpus()
        .first()
        .map(|g| g.info().name.clone())
        .ok_or_else(|| "no Vulkan GPU found".to_string())
}

fn main() -> ExitCode {
    if env_flag("VKML_SKIP_CONFORMANCE") {
        eprintln!("conformance: VKML_SKIP_CONFORMANCE=1: skipped");
        return ExitCode::SUCCESS;
    }
    case::check_pass_rule();
    let root = data_dir();
    if !root.join(COUNTED).is_dir() {
        eprintln!(
            "conformance: no ONNX test data in {}.\n  Fetch it once with scripts/fetch-onnx-tests.sh \
             (scripts/test.sh does), point VKML_ONNX_TESTS at a copy of onnx {ONNX_VERSION}'s \
             onnx/backend/test/data, or set VKML_SKIP_CONFORMANCE=1 to skip these tests.",
            root.display()
        );
        return ExitCode::FAILURE;
    }
    let mut backends = vec![Backend::Cpu];
    let mut device = String::new();
    if env_flag("VKML_SKIP_VULKAN") {
        eprintln!("conformance: VKML_SKIP_VULKAN=1: CPU backend only");
    } else {
        match vulkan_device() {
            Ok(d) => {
                device = d;
                backends.push(Backend::Vulkan);
            }
            Err(e) => {
                eprintln!(
                    "conformance: Vulkan is not available ({e}); set VKML_SKIP_VULKAN=1 to run \
                     the CPU backend only"
                );
                return ExitCode::FAILURE;
            }
        }
    }
    // A panic inside a test is that test's result, reported with it; the default hook would
    // print each one. Panics elsewhere (the harness itself) still print.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if IN_TEST.with(Cell::get) {
            LAST_PANIC.with(|p| *p.borrow_mut() = Some(info.to_string().replace('\n', " ")));
        } else {
            default_hook(info);
        }
    }));

    let filters = filters();
    let full_run = filters.is_empty();
    let tests = collect(&root, &filters);
    let start = Instant::now();
    let outcomes = run_all(&tests, &backends);
    let elapsed = start.elapsed();
    let results: Vec<TestResult> = tests
        .into_iter()
        .zip(outcomes)
        .map(|(t, outcomes)| TestResult {
            section: t.section,
            name: t.name,
            op: t.op,
            expanded: t.expanded,
            outcomes,
        })
        .collect();

    println!(
        "\nconformance: {} tests x {} backend(s) in {:.1} s (data: {})",
        results.len(),
        backends.len(),
        elapsed.as_secs_f64(),
        root.display()
    );
    for sec in SECTIONS {
        let rs: Vec<&TestResult> = results.iter().filter(|r| r.section == sec).collect();
        if rs.is_empty() {
            continue;
        }
        let line: Vec<String> = backends
            .iter()
            .map(|b| {
                let p = rs
                    .iter()
                    .filter(|r| r.outcomes.get(b).is_some_and(Outcome::passed))
                    .count();
                format!("{} {p}/{}", b.name(), rs.len())
            })
            .collect();
        println!("  {sec:<18} {}", line.join("   "));
    }
    let panics = results
        .iter()
        .flat_map(|r| r.outcomes.values())
        .filter(|o| matches!(o, Outcome::Fail { message, .. } if message.starts_with("PANIC")))
        .count();
    if panics > 0 {
        println!("  {panics} run(s) panicked: bugs to fix (see the failure log)");
    }
    let log = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("conformance-failures.txt");
    if std::fs::write(&log, report::failure_log(&results)).is_ok() {
        println!("  every failure with its message: {}", log.display());
    }

    if env_flag("VKML_CONFORMANCE_UPDATE") {
        if !full_run {
            eprintln!("conformance: VKML_CONFORMANCE_UPDATE=1 needs a run without filters");
            return ExitCode::FAILURE;
        }
        for &b in &backends {
            report::write_list(&report::list_path(&repo_root(), b), b, &results);
        }
        if backends.len() == 2 {
            let md = report::conformance_md(&results, &SECTIONS, &device);
            std::fs::write(repo_root().join("CONFORMANCE.md"), md).expect("CONFORMANCE.md");
            println!("conformance: rewrote the expected lists and CONFORMANCE.md");
        } else {
            println!("conformance: rewrote the CPU list; CONFORMANCE.md needs Vulkan too");
        }
        return ExitCode::SUCCESS;
    }

    let mut failed = false;
    for &b in &backends {
        let path = report::list_path(&repo_root(), b);
        let expected = report::read_list(&path);
        let c = report::check_list(&results, b, &expected, full_run);
        if !c.regressions.is_empty() {
            failed = true;
            println!(
                "\nFAILED on {}: {} test(s) listed in {} fail:",
                b.name(),
                c.regressions.len(),
                path.display()
            );
            for (k, why) in &c.regressions {
                println!("  {k}: {why}");
            }
        }
        if !c.unknown.is_empty() {
            failed = true;
            println!(
                "\nFAILED: {} lists {} test(s) that do not exist: {}",
                path.display(),
                c.unknown.len(),
                c.unknown.join(", ")
            );
        }
        if !c.new_passes.is_empty() {
            println!(
                "\n{}: {} test(s) pass but are not in {}; add these to the list \
                 (or rerun with VKML_CONFORMANCE_UPDATE=1):",
                b.name(),
                c.new_passes.len(),
                path.display()
            );
            for k in &c.new_passes {
                println!("  {k}");
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        println!("\nconformance: ok");
        ExitCode::SUCCESS
    }
}
