//! Results against the committed lists of tests expected to pass, and the generated
//! CONFORMANCE.md.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use crate::case::{Backend, Category, Outcome};

/// The suite whose totals count (ONNX's node tests); the others are reported beside it.
pub const COUNTED: &str = "node";

pub struct TestResult {
    pub section: &'static str,
    pub name: String,
    /// The op type a node test tests (see `tested_op`); empty for the other suites.
    pub op: String,
    /// An `_expanded` node test: the op's function body, expanded into the ops defining it.
    pub expanded: bool,
    pub outcomes: BTreeMap<Backend, Outcome>,
}

impl TestResult {
    /// The name used in the expected lists: `<suite>/<test>`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.section, self.name)
    }

    fn passed(&self, b: Backend) -> bool {
        self.outcomes.get(&b).is_some_and(Outcome::passed)
    }

    fn category(&self, b: Backend) -> Option<Category> {
        match self.outcomes.get(&b) {
            Some(Outcome::Fail { category, .. }) => Some(*category),
            _ => None,
        }
    }
}

/// The op a node test tests: the model's only op type; else the one whose name the test name
/// starts with (longest match, ignoring case and underscores); else the first node's.
pub fn tested_op(test: &str, op_types: &[String]) -> String {
    let distinct: BTreeSet<&str> = op_types.iter().map(String::as_str).collect();
    if distinct.len() == 1 {
        return op_types[0].clone();
    }
    let norm = |s: &str| s.to_ascii_lowercase().replace('_', "");
    let name = norm(test.strip_prefix("test_").unwrap_or(test));
    distinct
        .iter()
        .filter(|op| name.starts_with(&norm(op)))
        .max_by_key(|op| op.len())
        .map(|op| op.to_string())
        .or_else(|| op_types.first().cloned())
        .unwrap_or_else(|| "(no nodes)".into())
}

/// `test_x_expanded`, `test_x_expanded_ver18` -> `test_x`.
pub fn unexpanded(test: &str) -> Option<&str> {
    test.find("_expanded").map(|i| &test[..i])
}

pub fn list_path(root: &Path, b: Backend) -> std::path::PathBuf {
    root.join("tests")
        .join("conformance")
        .join(format!("expected_{}.txt", b.name()))
}

/// The listed test keys; `#` starts a comment.
pub fn read_list(path: &Path) -> BTreeSet<String> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

pub fn write_list(path: &Path, b: Backend, results: &[TestResult]) {
    let mut s = format!(
        "# ONNX backend tests (onnx {ver}) expected to pass on the {backend} backend, as\n\
         # <suite>/<test>, sorted. tests/conformance.rs fails when a listed test fails and reports\n\
         # tests that pass without being listed. Regenerate with\n\
         #   VKML_CONFORMANCE_UPDATE=1 cargo test --release --test conformance\n",
        ver = crate::ONNX_VERSION,
        backend = match b {
            Backend::Cpu => "CPU",
            Backend::Vulkan => "Vulkan",
        }
    );
    let mut keys: Vec<String> = results
        .iter()
        .filter(|r| r.passed(b))
        .map(TestResult::key)
        .collect();
    keys.sort();
    for k in keys {
        s.push_str(&k);
        s.push('\n');
    }
    std::fs::write(path, s).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// What the run says about one backend's list.
#[derive(Default)]
pub struct ListCheck {
    /// Listed, run, and failed.
    pub regressions: Vec<(String, String)>,
    /// Passed without being listed.
    pub new_passes: Vec<String>,
    /// Listed but not among the tests found (only checked on a full run).
    pub unknown: Vec<String>,
}

pub fn check_list(
    results: &[TestResult],
    b: Backend,
    expected: &BTreeSet<String>,
    full_run: bool,
) -> ListCheck {
    let mut c = ListCheck::default();
    let mut seen = BTreeSet::new();
    for r in results {
        let Some(o) = r.outcomes.get(&b) else {
            continue;
        };
        let key = r.key();
        let listed = expected.contains(&key);
        match o {
            Outcome::Pass { .. } if !listed => c.new_passes.push(key.clone()),
            Outcome::Fail { .. } if listed => c.regressions.push((key.clone(), o.to_string())),
            _ => {}
        }
        seen.insert(key);
    }
    if full_run {
        c.unknown = expected.difference(&seen).cloned().collect();
    }
    c
}

fn pct(n: usize, of: usize) -> String {
    if of == 0 {
        "-".into()
    } else {
        format!("{n} ({:.1}%)", 100.0 * n as f64 / of as f64)
    }
}

/// "2 unsupported type, 1 wrong value".
fn reasons(rs: &[&TestResult], b: Backend) -> String {
    let mut counts: BTreeMap<Category, usize> = BTreeMap::new();
    for r in rs {
        if let Some(c) = r.category(b) {
            *counts.entry(c).or_default() += 1;
        }
    }
    counts
        .iter()
        .map(|(c, n)| format!("{n} {}", c.label()))
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn conformance_md(results: &[TestResult], sections: &[&str], vulkan_device: &str) -> String {
    let backends = [Backend::Cpu, Backend::Vulkan];
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# ONNX conformance\n\n\
         Generated by `VKML_CONFORMANCE_UPDATE=1 cargo test [--release] --test conformance` \
         (tests/conformance.rs) from the backend tests of onnx {ver}; do not edit by hand. \
         **CPU** is vkml's CPU backend (`DeviceSelection::Cpu`); **Vulkan** is \
         `DeviceSelection::Vulkan` on {vulkan_device}, where ops with no Vulkan kernel run on \
         the CPU backend. A test passes when every output of every data set has the reference's \
         dtype and shape, integers and booleans are equal, and floats are within \
         `1e-7 + 1e-3 * |want|` (`1e-2` for float16 and bfloat16), NaN matching NaN. A test \
         whose graph draws random numbers (Bernoulli, RandomUniformLike...) has reference values \
         from numpy's generator, which no other runtime reproduces: there dtype and shape must \
         match, and where the reference holds only 0s and 1s (Bernoulli) so must the output.\n",
        ver = crate::ONNX_VERSION
    );
    let _ = writeln!(
        s,
        "## Totals\n\n| suite | tests | CPU | Vulkan |\n|---|---:|---:|---:|"
    );
    for sec in sections {
        let rs: Vec<&TestResult> = results.iter().filter(|r| r.section == *sec).collect();
        let p = |b| rs.iter().filter(|r| r.passed(b)).count();
        let _ = writeln!(
            s,
            "| {sec}{} | {} | {} | {} |",
            if *sec == COUNTED { " (counted)" } else { "" },
            rs.len(),
            pct(p(Backend::Cpu), rs.len()),
            pct(p(Backend::Vulkan), rs.len())
        );
    }
    let node: Vec<&TestResult> = results.iter().filter(|r| r.section == COUNTED).collect();
    let placed = |want: fn(usize, usize) -> bool| {
        node.iter()
            .filter(|r| match r.outcomes.get(&Backend::Vulkan) {
                Some(Outcome::Pass { gpu_ops, cpu_ops }) => want(*gpu_ops, *cpu_ops),
                _ => false,
            })
            .count()
    };
    let _ = writeln!(
        s,
        "\nWhere the Vulkan passes of the node tests ran: **{}** entirely on the GPU, **{}** partly \
         on the CPU backend (an op or dtype with no Vulkan kernel, or one the GPU lacks the \
         features for), **{}** computed while planning (every input known: a test whose inputs \
         only decide shapes, or an op such as NonZero whose output shape depends on values, is \
         folded on the CPU when its plan is made).",
        placed(|g, c| g > 0 && c == 0),
        placed(|_, c| c > 0),
        placed(|g, c| g == 0 && c == 0),
    );
    // Which ops' tests those partly-CPU passes are: where GPU kernels are missing.
    let mut partly: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &node {
        if let Some(Outcome::Pass { cpu_ops, .. }) = r.outcomes.get(&Backend::Vulkan)
            && *cpu_ops > 0
        {
            *partly.entry(r.op.as_str()).or_default() += 1;
        }
    }
    let list: Vec<String> = partly.iter().map(|(op, n)| format!("{op} {n}")).collect();
    let _ = writeln!(
        s,
        "\nThe partly-CPU passes by the op they test (expanded tests included): {}.",
        list.join(", ")
    );
    let _ = writeln!(
        s,
        "\n## Why node tests fail\n\n\
         - unsupported op: an op type vkml does not implement (refused at load);\n\
         - unsupported type: an element type an op or the loader refuses (string tensors among \
         them), or a map value;\n\
         - unsupported feature: any other refused construct (an attribute value, a subgraph...);\n\
         - wrong value: ran, and an output differs in dtype, shape or value;\n\
         - error: anything else (a failed plan, a run-time error, a panic, a timeout).\n\n\
         | reason | CPU | Vulkan |\n|---|---:|---:|"
    );
    for c in Category::ALL {
        let n = |b| node.iter().filter(|r| r.category(b) == Some(c)).count();
        let _ = writeln!(
            s,
            "| {} | {} | {} |",
            c.label(),
            n(Backend::Cpu),
            n(Backend::Vulkan)
        );
    }
    let _ = writeln!(
        s,
        "\n## Node tests by op\n\n\
         A node test counts under the op it tests: its model's only op type, or the one its name \
         starts with. An `_expanded` test runs the op's function body (the op rewritten into \
         the ops defining it), so it exercises those ops rather than this one: it counts under \
         the op of its unexpanded test, in the `expanded` columns. The last column gives the \
         failure reasons on the CPU / on Vulkan (`same` when the two agree).\n\n\
         | op | tests | CPU | Vulkan | expanded | CPU | Vulkan | failures (CPU / Vulkan) |\n\
         |---|---:|---:|---:|---:|---:|---:|---|"
    );
    let mut by_op: BTreeMap<&str, Vec<&TestResult>> = BTreeMap::new();
    for r in &node {
        by_op.entry(r.op.as_str()).or_default().push(r);
    }
    for (op, rs) in &by_op {
        let (exp, plain): (Vec<&TestResult>, Vec<&TestResult>) =
            rs.iter().partition(|r| r.expanded);
        let p = |set: &[&TestResult], b| set.iter().filter(|r| r.passed(b)).count();
        let cell = |set: &[&TestResult], b| {
            if set.is_empty() {
                "".to_string()
            } else {
                format!("{}/{}", p(set, b), set.len())
            }
        };
        let why_cpu = reasons(rs, Backend::Cpu);
        let why_vk = reasons(rs, Backend::Vulkan);
        let why = if why_cpu.is_empty() && why_vk.is_empty() {
            String::new()
        } else if why_cpu == why_vk {
            format!("{why_cpu} / same")
        } else {
            format!(
                "{} / {}",
                if why_cpu.is_empty() { "-" } else { &why_cpu },
                if why_vk.is_empty() { "-" } else { &why_vk }
            )
        };
        let _ = writeln!(
            s,
            "| {op} | {} | {} | {} | {} | {} | {} | {why} |",
            plain.len(),
            cell(&plain, Backend::Cpu),
            cell(&plain, Backend::Vulkan),
            if exp.is_empty() {
                String::new()
            } else {
                exp.len().to_string()
            },
            cell(&exp, Backend::Cpu),
            cell(&exp, Backend::Vulkan),
        );
    }
    let others: Vec<&TestResult> = results
        .iter()
        .filter(|r| r.section != COUNTED && backends.iter().any(|&b| !r.passed(b)))
        .collect();
    let _ = writeln!(
        s,
        "\n## Other suites: tests that fail\n\n\
         `pytorch-converted`, `pytorch-operator` and `simple` are whole small models.\n\n\
         | test | CPU | Vulkan |\n|---|---|---|"
    );
    for r in others {
        let cell = |b| match r.outcomes.get(&b) {
            Some(Outcome::Pass { .. }) => "pass".to_string(),
            Some(Outcome::Fail { category, .. }) => category.label().to_string(),
            None => "-".into(),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} |",
            r.key(),
            cell(Backend::Cpu),
            cell(Backend::Vulkan)
        );
    }
    s
}

/// Every failure with its full message, for whoever works on the ops.
pub fn failure_log(results: &[TestResult]) -> String {
    let mut s = String::new();
    for r in results {
        for (b, o) in &r.outcomes {
            if let Outcome::Fail { .. } = o {
                let _ = writeln!(s, "{} [{}] {}: {o}", r.key(), b.name(), r.op);
            }
        }
    }
    s
}
