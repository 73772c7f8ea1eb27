//! Property-style runs: the same scenarios over many seeds, each seed a different order of
//! events, different faults, different run times. A failure prints its seed and the log.

use std::time::Duration;

use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

const NODES: [&str; 3] = ["n1", "n2", "n3"];

fn fast(seed: u64) -> SimConfig {
    let mut c = SimConfig::new(3, seed);
    c.core.run_deadline = ms(2000);
    c.core.early_ttl = ms(1000);
    c.core.stall = ms(500);
    c.ack_timeout = ms(1800);
    c.link.jitter = ms(5);
    c
}

/// `n` runs at random times in [0, within) ms, alternating between two submitters' models
/// (7 on n1, 8 on n2) unless `one` is set.
fn runs(sim: &mut Sim, rng: &mut Rng, n: usize, within: u64, one: bool) -> Vec<usize> {
    (0..n)
        .map(|i| {
            let (node, model) = if one || i % 2 == 0 {
                ("n1", 7)
            } else {
                ("n2", 8)
            };
            let at = ms(rng.next_u64() % within);
            let x = (rng.next_u64() % 1000) as i64;
            sim.run(at, node, model, [x, i as i64])
        })
        .collect()
}

/// The run ended with the outputs of the plan that made them.
fn check_ok(sim: &Sim, seed: u64, h: usize) -> bool {
    match sim.outcome(h) {
        Some(Ok(o)) => {
            let want = sim.expected(o.load_id, &sim.client(h).inputs);
            assert_eq!(o.outputs, want, "seed {seed}, run {h}\n{}", sim.log());
            true
        }
        Some(Err(_)) => false,
        None => panic!("seed {seed}: run {h} never ended\n{}", sim.log()),
    }
}

fn check_clean(sim: &Sim, seed: u64, nodes: &[&str]) {
    for n in nodes {
        let state = (
            sim.reserved(n),
            sim.loaded(n).len(),
            sim.entries(n),
            sim.partial(n),
        );
        assert_eq!(
            state,
            (0, 0, 0, 0),
            "seed {seed}: {n} keeps state\n{}",
            sim.log()
        );
    }
}

#[test]
fn reordering_and_duplicates_never_change_an_answer() {
    for seed in 0..200 {
        let mut c = fast(seed);
        c.link.duplicate = 0.2;
        let mut sim = Sim::new(c);
        let mut rng = Rng::new(seed ^ 0x5eed);
        sim.submit(ms(0), "n1", 7);
        sim.submit(ms(0), "n2", 8);
        let hs = runs(&mut sim, &mut rng, 6, 300, false);
        sim.run_until(ms(1000));
        for h in hs {
            assert!(
                check_ok(&sim, seed, h),
                "seed {seed}: run {h} failed\n{}",
                sim.log()
            );
            let o = sim.outcome(h).unwrap().as_ref().unwrap();
            assert!(!o.retried, "seed {seed}: run {h} retried\n{}", sim.log());
        }
        sim.unload(ms(1000), "n1", 7);
        sim.unload(ms(1000), "n2", 8);
        sim.run_until(ms(3000));
        check_clean(&sim, seed, &NODES);
    }
}

#[test]
fn lost_stripes_end_the_run_naming_a_node_never_in_a_wrong_answer() {
    let mut bit = 0;
    for seed in 0..200 {
        let mut c = fast(seed);
        c.link.drop = 0.05;
        c.link.kinds = vec![MsgKind::Stripe];
        let mut sim = Sim::new(c);
        let mut rng = Rng::new(seed ^ 0xd20f);
        sim.submit(ms(0), "n1", 7);
        sim.submit(ms(0), "n2", 8);
        let hs = runs(&mut sim, &mut rng, 6, 300, false);
        sim.run_until(ms(3000));
        for h in hs {
            // The attempt began when the run came, or when the plan went live (20-35 ms).
            let began = sim.client(h).at.max(ms(40));
            let ended = sim.ended_at(h);
            if check_ok(&sim, seed, h) {
                bit += usize::from(sim.outcome(h).unwrap().as_ref().unwrap().retried);
                continue;
            }
            bit += 1;
            let e = sim.outcome(h).unwrap().as_ref().unwrap_err().to_string();
            // A lost stripe is a value given up (its tensor stalls) or a send that fails:
            // each attempt fails naming the node, before its deadline.
            assert!(e.starts_with("node n"), "seed {seed}: {e}\n{}", sim.log());
            let ended = ended.unwrap();
            assert!(
                ended < began + ms(4000),
                "seed {seed}: {ended:?} {e}\n{}",
                sim.log()
            );
        }
        sim.unload(ms(3000), "n1", 7);
        sim.unload(ms(3000), "n2", 8);
        sim.run_until(ms(6000));
        check_clean(&sim, seed, &NODES);
    }
    // The faults did bite.
    assert!(bit > 50, "{bit}");
}

#[test]
fn a_death_at_any_time_is_survived_by_every_run() {
    let mut retried = 0;
    for seed in 0..200 {
        let mut rng = Rng::new(seed ^ 0xdead);
        let victim = if rng.next_u64().is_multiple_of(2) {
            "n2"
        } else {
            "n3"
        };
        let survivor = if victim == "n2" { "n3" } else { "n2" };
        let mut c = fast(seed);
        c.exec_time = ms(20);
        c.faults.push(NodeFault::Die {
            node: victim.into(),
            at: ms(50 + rng.next_u64() % 1500),
        });
        let mut sim = Sim::new(c);
        sim.submit(ms(0), "n1", 7);
        let hs = runs(&mut sim, &mut rng, 6, 2000, true);
        sim.run_until(ms(8000));
        for h in hs {
            assert!(
                check_ok(&sim, seed, h),
                "seed {seed}: run {h} failed\n{}",
                sim.log()
            );
            let o = sim.outcome(h).unwrap().as_ref().unwrap();
            retried += usize::from(o.retried);
        }
        sim.unload(ms(8000), "n1", 7);
        sim.run_until(ms(12_000));
        check_clean(&sim, seed, &["n1", survivor]);
    }
    assert!(retried > 100, "{retried}");
}
