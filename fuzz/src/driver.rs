//! The driver: draws cases, hands them to worker processes (one case at a time each), and
//! turns a worker's panic, death or silence into a finding saved with its case. Cases that
//! reach an outcome no earlier case reached join the corpus, which later cases mutate: the
//! stable-Rust stand-in for coverage feedback.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use rand_core::{Rng, SeedableRng};
use rand_pcg::Pcg64;

use crate::case::{Case, Target};

pub struct Config {
    pub target: Target,
    /// The worker program and its arguments (`vkml-fuzz worker ...`).
    pub worker: Vec<String>,
    /// Seeds the model cases start from (names as `seeds::names` gives them).
    pub seeds: Vec<String>,
    pub cases: u64,
    pub jobs: usize,
    /// The generator's seed: the same seed and corpus give the same cases.
    pub seed: u64,
    /// A case running longer is a hang.
    pub timeout: Duration,
    /// Kept between runs: cases replayed first, then mutated; new outcomes added.
    pub corpus: Option<PathBuf>,
    /// Where findings are written, one folder each.
    pub findings: PathBuf,
    /// Builds the model of a model-case finding next to its case file (seed roots).
    pub seed_roots: Vec<PathBuf>,
    pub progress: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FindingKind {
    /// A panic, an abort or any other unrequested exit.
    Crash,
    /// No answer within the timeout.
    Hang,
}

#[derive(Debug, Clone)]
pub struct Finding {
    pub kind: FindingKind,
    pub message: String,
    pub case: Case,
    pub dir: PathBuf,
}

#[derive(Debug, Default)]
pub struct Report {
    pub cases: u64,
    /// How many cases reached each outcome.
    pub outcomes: BTreeMap<String, u64>,
    /// One per distinct message; `repeats` counts the rest.
    pub findings: Vec<Finding>,
    pub repeats: u64,
    pub corpus_added: u64,
    pub elapsed: Duration,
}

struct Shared {
    report: Mutex<Report>,
    corpus: Mutex<Vec<Case>>,
    known: Mutex<BTreeSet<String>>,
    next: AtomicU64,
}

impl Config {
    /// A campaign with `exe` (the vkml-fuzz program) as its worker, seeds from `seed_roots`,
    /// and the defaults of `vkml-fuzz run` otherwise; `worker_args` are the worker's settings
    /// (`--device`, `--device-memory-mib`, `--address-space-mib`).
    pub fn new(
        exe: &Path,
        target: Target,
        seed_roots: Vec<PathBuf>,
        worker_args: &[String],
    ) -> Config {
        let mut worker = vec![exe.display().to_string(), "worker".into()];
        for s in &seed_roots {
            worker.push("--seeds".into());
            worker.push(s.display().to_string());
        }
        worker.extend(worker_args.iter().cloned());
        Config {
            target,
            worker,
            seeds: crate::seeds::names(&seed_roots),
            cases: 1000,
            jobs: std::thread::available_parallelism().map_or(1, usize::from),
            seed: 1,
            timeout: Duration::from_secs(30),
            corpus: None,
            findings: PathBuf::from("target/fuzz-findings"),
            seed_roots,
            progress: false,
        }
    }
}

pub fn run(cfg: &Config) -> std::io::Result<Report> {
    let start = Instant::now();
    std::fs::create_dir_all(&cfg.findings)?;
    let replay = match &cfg.corpus {
        Some(dir) => load_corpus(dir, cfg.target)?,
        None => Vec::new(),
    };
    let shared = Shared {
        report: Mutex::new(Report::default()),
        corpus: Mutex::new(replay.clone()),
        known: Mutex::new(BTreeSet::new()),
        next: AtomicU64::new(0),
    };
    let bar = progress_bar(cfg);
    std::thread::scope(|s| {
        for job in 0..cfg.jobs.max(1) {
            let (shared, replay, bar) = (&shared, &replay, &bar);
            s.spawn(move || job_loop(cfg, job, shared, replay, bar));
        }
    });
    bar.finish_and_clear();
    let mut report = shared
        .report
        .into_inner()
        .unwrap_or_else(|p| p.into_inner());
    report.elapsed = start.elapsed();
    Ok(report)
}

fn progress_bar(cfg: &Config) -> indicatif::ProgressBar {
    if !cfg.progress {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(cfg.cases);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{prefix} [{elapsed_precise}] {wide_bar} {pos}/{len} ({per_sec}) {msg}",
        )
        .expect("a valid template"),
    );
    bar.set_prefix(cfg.target.name());
    bar
}

fn job_loop(
    cfg: &Config,
    job: usize,
    shared: &Shared,
    replay: &[Case],
    bar: &indicatif::ProgressBar,
) {
    let mut worker: Option<Worker> = None;
    loop {
        let i = shared.next.fetch_add(1, Ordering::Relaxed);
        if i >= cfg.cases {
            break;
        }
        let case = match replay.get(i as usize) {
            Some(c) => c.clone(),
            None => draw(cfg, i, &shared.corpus.lock().expect("corpus")),
        };
        if worker.is_none() {
            match Worker::spawn(cfg, job) {
                Ok(w) => worker = Some(w),
                Err(e) => {
                    record_finding(
                        cfg,
                        shared,
                        FindingKind::Crash,
                        format!("worker: {e}"),
                        case,
                    );
                    return;
                }
            }
        }
        let w = worker.as_mut().expect("spawned above");
        match w.run(&case, cfg.timeout) {
            Reply::Ok(outcome) => {
                record_outcome(cfg, shared, &case, outcome, i < replay.len() as u64)
            }
            Reply::Crash(message) => {
                worker.take().expect("running").finish();
                record_finding(cfg, shared, FindingKind::Crash, message, case);
            }
            Reply::Hang => {
                worker.take().expect("running").finish();
                let message = format!("no answer within {} s", cfg.timeout.as_secs());
                record_finding(cfg, shared, FindingKind::Hang, message, case);
            }
        }
        bar.inc(1);
        let r = shared.report.lock().expect("report");
        bar.set_message(format!(
            "{} outcomes, {} findings",
            r.outcomes.len(),
            r.findings.len()
        ));
    }
    if let Some(w) = worker {
        w.finish();
    }
}

/// Case `i`: from its own generator, so the same seed gives the same cases whatever the
/// number of jobs (while the corpus is the same).
fn draw(cfg: &Config, i: u64, corpus: &[Case]) -> Case {
    let mut rng = Pcg64::seed_from_u64(cfg.seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let pick = |rng: &mut Pcg64, n: usize| (rng.next_u64() % n as u64) as usize;
    if !corpus.is_empty() && rng.next_u32() % 2 == 0 {
        let parent = &corpus[pick(&mut rng, corpus.len())];
        let mut data = parent.data.clone();
        for _ in 0..1 + pick(&mut rng, 8) {
            let at = if data.is_empty() {
                0
            } else {
                pick(&mut rng, data.len())
            };
            match rng.next_u32() % 4 {
                0 if !data.is_empty() => data[at] ^= 1 << (rng.next_u32() % 8),
                1 if !data.is_empty() => data[at] = rng.next_u32() as u8,
                2 if !data.is_empty() => {
                    data.remove(at);
                }
                _ => data.insert(at, rng.next_u32() as u8),
            }
        }
        return Case {
            target: parent.target,
            seed: parent.seed.clone(),
            data,
        };
    }
    let seed = match cfg.target {
        Target::Models if !cfg.seeds.is_empty() => {
            cfg.seeds[pick(&mut rng, cfg.seeds.len())].clone()
        }
        _ => "-".into(),
    };
    let mut data = vec![0u8; 16 + pick(&mut rng, 496)];
    rng.fill_bytes(&mut data);
    Case {
        target: cfg.target,
        seed,
        data,
    }
}

fn record_outcome(cfg: &Config, shared: &Shared, case: &Case, outcome: String, replayed: bool) {
    let new = shared.known.lock().expect("known").insert(outcome.clone());
    let mut r = shared.report.lock().expect("report");
    r.cases += 1;
    *r.outcomes.entry(outcome).or_default() += 1;
    if new && !replayed {
        shared.corpus.lock().expect("corpus").push(case.clone());
        if let Some(dir) = &cfg.corpus {
            let path = dir.join(format!("{:016x}.case", fnv(case.to_line().as_bytes())));
            if std::fs::create_dir_all(dir)
                .and_then(|_| case.save(&path))
                .is_ok()
            {
                r.corpus_added += 1;
            }
        }
    }
}

fn record_finding(cfg: &Config, shared: &Shared, kind: FindingKind, message: String, case: Case) {
    let mut r = shared.report.lock().expect("report");
    r.cases += 1;
    let key = finding_key(kind, &message, &case);
    if r.findings
        .iter()
        .any(|f| finding_key(f.kind, &f.message, &f.case) == key)
    {
        r.repeats += 1;
        return;
    }
    let dir = cfg.findings.join(format!(
        "{}-{}-{:016x}",
        cfg.target.name(),
        if kind == FindingKind::Crash {
            "crash"
        } else {
            "hang"
        },
        fnv(case.to_line().as_bytes())
    ));
    let _ = save_finding(cfg, &dir, &message, &case);
    r.findings.push(Finding {
        kind,
        message,
        case,
        dir,
    });
}

/// What makes two findings the same: a panic's message and place; for an abort or a hang,
/// which have no place, the message and the seed (its operator, for a model case).
fn finding_key(kind: FindingKind, message: &str, case: &Case) -> String {
    let class = crate::exec::class(message);
    if message.contains(" at ") {
        format!("{kind:?} {class}")
    } else {
        format!("{kind:?} {class} {}", case.seed)
    }
}

/// The case, its message and, for a model, the model and inputs as files: what a regression
/// test is made from.
fn save_finding(cfg: &Config, dir: &Path, message: &str, case: &Case) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    case.save(&dir.join("case"))?;
    std::fs::write(dir.join("message"), format!("{message}\n"))?;
    if case.target == Target::Models {
        let seeds = crate::seeds::load(&cfg.seed_roots);
        if let Some(seed) = seeds.get(&case.seed) {
            let pools = crate::mutate::Pools::new(&seeds);
            let built = crate::case::build_model(seed, &pools, &case.data);
            crate::case::write_model(&built, &dir.join("model"))?;
        }
    }
    Ok(())
}

fn load_corpus(dir: &Path, target: Target) -> std::io::Result<Vec<Case>> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(out);
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for p in paths {
        if p.extension().is_some_and(|e| e == "case")
            && let Ok(c) = Case::load(&p)
            && c.target == target
        {
            out.push(c);
        }
    }
    Ok(out)
}

fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
    })
}

enum Reply {
    Ok(String),
    Crash(String),
    Hang,
}

struct Worker {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    log: PathBuf,
}

impl Worker {
    fn spawn(cfg: &Config, job: usize) -> std::io::Result<Worker> {
        let log = cfg.findings.join(format!(".worker-{job}.log"));
        let (program, args) = cfg.worker.split_first().expect("a worker command");
        let mut child = Command::new(program)
            .args(args)
            .arg("--scratch")
            .arg(cfg.findings.join(format!(".scratch-{job}")))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log)?)
            .spawn()?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut w = Worker {
            child,
            stdin,
            lines,
            log,
        };
        // Loading the seeds (or starting a node) takes a while on a slow machine.
        match w.answer(Duration::from_secs(300)) {
            Reply::Ok(_) => Ok(w),
            Reply::Crash(m) => Err(std::io::Error::other(format!(
                "the worker did not start: {m}"
            ))),
            Reply::Hang => Err(std::io::Error::other(
                "the worker did not start within 300 s",
            )),
        }
    }

    fn run(&mut self, case: &Case, timeout: Duration) -> Reply {
        if writeln!(self.stdin, "{}", case.to_line())
            .and_then(|_| self.stdin.flush())
            .is_err()
        {
            return self.died();
        }
        self.answer(timeout)
    }

    fn answer(&mut self, timeout: Duration) -> Reply {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line == "ready" => return Reply::Ok(String::new()),
                Ok(line) => {
                    if let Some(outcome) = line.strip_prefix("ok ") {
                        return Reply::Ok(outcome.to_string());
                    }
                    if let Some(message) = line.strip_prefix("panic ") {
                        return Reply::Crash(format!("panic: {message}"));
                    }
                    // Anything else on stdout is the library printing: not ours to judge here.
                }
                Err(RecvTimeoutError::Timeout) => return Reply::Hang,
                Err(RecvTimeoutError::Disconnected) => return self.died(),
            }
        }
    }

    /// The worker ended without a panic line: a signal (abort, out of memory, stack
    /// overflow) or an exit. The last thing its stderr says about why is the message.
    fn died(&mut self) -> Reply {
        let status = self.child.wait().map(|s| s.to_string()).unwrap_or_default();
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let why = [
            "memory allocation of",
            "overflowed its stack",
            "fatal runtime error",
            "panicked",
        ];
        let line = log
            .lines()
            .rev()
            .find(|l| why.iter().any(|w| l.contains(w)))
            .or_else(|| log.lines().rev().find(|l| !l.trim().is_empty()))
            .unwrap_or("");
        Reply::Crash(format!("worker died ({status}): {line}"))
    }

    fn finish(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Prints a report's summary: counts, the commonest outcomes, every finding.
pub fn print_report(target: Target, report: &Report) {
    let rate = report.cases as f64 / report.elapsed.as_secs_f64().max(1e-9);
    println!(
        "{}: {} cases in {:.1} s ({rate:.0}/s), {} distinct outcomes, {} new in the corpus",
        target.name(),
        report.cases,
        report.elapsed.as_secs_f64(),
        report.outcomes.len(),
        report.corpus_added
    );
    let mut common: Vec<(&String, &u64)> = report.outcomes.iter().collect();
    common.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    for (outcome, n) in common.iter().take(12) {
        println!("{n:>8}  {outcome}");
    }
    if report.findings.is_empty() {
        println!("{}: no crash, no hang", target.name());
    }
    for f in &report.findings {
        println!(
            "{:?}: {}\n    saved in {}",
            f.kind,
            f.message,
            f.dir.display()
        );
    }
    if report.repeats > 0 {
        println!("({} more cases repeated a finding above)", report.repeats);
    }
}
