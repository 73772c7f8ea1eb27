//! Scenarios over simulated nodes: every one deterministic, each a few milliseconds of real
//! time. Durations are shortened (deadline 2 s, early TTL 1 s, stall 500 ms) so that the
//! timeouts are exercised too.

use std::time::Duration;

use super::*;
use crate::dist::run::RunOutput;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

const NODES: [&str; 3] = ["n1", "n2", "n3"];

/// Three nodes, fault-free, with the test durations.
fn fast(seed: u64) -> SimConfig {
    let mut c = SimConfig::new(3, seed);
    c.core.run_deadline = ms(2000);
    c.core.early_ttl = ms(1000);
    c.core.stall = ms(500);
    c.ack_timeout = ms(1800);
    c
}

fn ok(sim: &Sim, h: usize) -> &RunOutput<i64> {
    match sim.outcome(h) {
        Some(Ok(o)) => o,
        other => panic!("run {h}: {other:?}\n{}", sim.log()),
    }
}

fn err(sim: &Sim, h: usize) -> &RunError {
    match sim.outcome(h) {
        Some(Err(e)) => e,
        other => panic!("run {h}: {other:?}\n{}", sim.log()),
    }
}

/// The outputs are those of the plan that made them.
fn correct(sim: &Sim, h: usize) -> &RunOutput<i64> {
    let o = ok(sim, h);
    let want = sim.expected(o.load_id, &sim.client(h).inputs);
    assert_eq!(o.outputs, want, "run {h}\n{}", sim.log());
    o
}

fn clean(sim: &Sim, nodes: &[&str]) {
    for n in nodes {
        assert_eq!(sim.reserved(n), 0, "{n} keeps a reservation\n{}", sim.log());
        assert!(sim.loaded(n).is_empty(), "{n} keeps a fragment");
        assert_eq!(sim.entries(n), 0, "{n} keeps run entries");
        assert_eq!(sim.partial(n), 0, "{n} keeps partial tensors");
    }
}

#[test]
fn a_three_node_run_completes_and_unloading_frees_every_node() {
    let mut sim = Sim::new(fast(1));
    sim.submit(ms(0), "n1", 7);
    let h = sim.run(ms(100), "n1", 7, [5, 1000]);
    sim.run_until(ms(1000));
    let load = *sim.submission(7).unwrap().as_ref().unwrap();
    assert_eq!(sim.plan(load).unwrap(), NODES);
    let o = correct(&sim, h);
    // Every node added its id once (1 + 10 + 100); outputs 1 and 2 were known beforehand.
    assert_eq!(o.outputs, vec![5 + 1000 + 111, 5, 42]);
    assert!(!o.retried);
    assert_eq!(o.load_id, load);
    for n in NODES {
        assert_eq!(sim.reserved(n), 100);
    }
    sim.unload(ms(1000), "n1", 7);
    sim.run_until(ms(3000));
    clean(&sim, &NODES);
}

#[test]
fn a_death_mid_run_fails_the_attempt_and_the_retry_without_the_node_succeeds() {
    let mut c = fast(2);
    c.exec_time = ms(50);
    c.faults.push(NodeFault::Die {
        node: "n2".into(),
        at: ms(120),
    });
    let mut sim = Sim::new(c);
    sim.submit(ms(0), "n1", 7);
    let h = sim.run(ms(100), "n1", 7, [5, 1000]);
    sim.run_until(ms(5000));
    let o = correct(&sim, h);
    assert!(o.retried);
    assert_eq!(sim.plan(o.load_id).unwrap(), ["n1", "n3"]);
    assert_eq!(o.outputs[0], 5 + 1000 + 1 + 100);
    // Failed when the death was seen (1.5 s after it), not at the deadline.
    assert!(sim.ended_at(h).unwrap() < ms(1800));
    assert!(sim.avoided("n1", 7).contains("n2"));
    assert!(sim.log().contains("n3: aborts run 1: node n2 failed"));
    // The first plan's reservations are gone; the retry's are held.
    assert_eq!(sim.reserved("n1"), 100);
    assert_eq!(sim.reserved("n3"), 100);
    assert_eq!(sim.loaded("n1"), [o.load_id]);
}

#[test]
fn a_death_mid_run_with_no_room_left_names_the_node() {
    let mut c = fast(3);
    c.exec_time = ms(50);
    c.min_nodes = 3;
    c.faults.push(NodeFault::Die {
        node: "n2".into(),
        at: ms(120),
    });
    let mut sim = Sim::new(c);
    sim.submit(ms(0), "n1", 7);
    let h = sim.run(ms(100), "n1", 7, [5, 1000]);
    sim.run_until(ms(5000));
    assert_eq!(
        *err(&sim, h),
        RunError::NodeFailed {
            node: "n2".into(),
            reason: "the node is dead; the run cannot be retried without it: placement: 2 \
                     node(s) can take the model, it needs 3"
                .into(),
        }
    );
    clean(&sim, &["n1", "n3"]);
}

#[test]
fn a_second_failure_on_the_retry_names_both_nodes() {
    let mut c = fast(4);
    c.exec_time = ms(200);
    c.faults.push(NodeFault::Die {
        node: "n2".into(),
        at: ms(120),
    });
    // After the retry's plan loaded (about 1.64 s) and before its value reaches n3.
    c.faults.push(NodeFault::Die {
        node: "n3".into(),
        at: ms(1700),
    });
    let mut sim = Sim::new(c);
    sim.submit(ms(0), "n1", 7);
    let h = sim.run(ms(100), "n1", 7, [5, 1000]);
    sim.run_until(ms(6000));
    assert_eq!(
        *err(&sim, h),
        RunError::NodeFailed {
            node: "n3".into(),
            reason: "the node is dead (on the retry, after n2 failed: the node is dead)".into(),
        }
    );
    clean(&sim, &["n1"]);
}

#[test]
fn a_death_while_loading_unloads_the_nodes_that_loaded() {
    let mut c = fast(5);
    c.load_time = ms(100);
    c.faults.push(NodeFault::Die {
        node: "n3".into(),
        at: ms(50),
    });
    let mut sim = Sim::new(c);
    sim.submit(ms(0), "n1", 7);
    sim.run_until(ms(1000));
    // n1 and n2 loaded; n3's answer never comes until it is seen dead.
    assert_eq!(sim.reserved("n1"), 100);
    assert_eq!(sim.reserved("n2"), 100);
    assert!(sim.submission(7).is_none());
    sim.run_until(ms(3000));
    assert_eq!(
        *sim.submission(7).unwrap(),
        Err(RunError::NodeFailed {
            node: "n3".into(),
            reason: "could not load its part of the model: node n3 is dead".into(),
        })
    );
    clean(&sim, &["n1", "n2"]);
}

#[test]
fn a_refused_load_unloads_the_others_without_any_death() {
    let mut c = fast(6);
    c.faults.push(NodeFault::FailLoads {
        node: "n2".into(),
        start: ms(0),
        end: ms(1000),
    });
    let mut sim = Sim::new(c);
    sim.submit(ms(0), "n1", 7);
    sim.run_until(ms(500));
    assert_eq!(
        *sim.submission(7).unwrap(),
        Err(RunError::NodeFailed {
            node: "n2".into(),
            reason: "could not load its part of the model: cannot build the executable on n2"
                .into(),
        })
    );
    clean(&sim, &NODES);
    assert_eq!(sim.stats().unloaded, 2);
}

#[test]
fn a_node_with_no_room_refuses_its_part() {
    let mut c = fast(7);
    c.budget = 150;
    let mut sim = Sim::new(c);
    sim.submit(ms(0), "n1", 7);
    sim.submit(ms(100), "n1", 8);
    sim.run_until(ms(500));
    assert!(sim.submission(7).unwrap().is_ok());
    let e = sim.submission(8).unwrap().as_ref().unwrap_err();
    assert_eq!(
        e.to_string(),
        "node n1 failed: could not load its part of the model: n1 has no room for its part: \
         sim:0 needs 100 bytes, 100 of 150 are reserved by other models"
    );
    for n in NODES {
        assert_eq!(sim.reserved(n), 100, "only model 7's charge");
    }
}

#[test]
fn duplicate_stripes_are_refused_and_the_run_completes() {
    let mut c = fast(8);
    c.rules
        .push(Rule::new(Effect::Duplicate, ms(0), ms(10_000)).kind(MsgKind::Stripe));
    let mut sim = Sim::new(c);
    sim.submit(ms(0), "n1", 7);
    let h = sim.run(ms(100), "n1", 7, [5, 1000]);
    sim.run_until(ms(1000));
    correct(&sim, h);
    let refused = &sim.stats().refused;
    assert!(!refused.is_empty());
    assert!(
        refused.iter().all(|r| r.contains("arrived twice")),
        "{refused:?}"
    );
    // The copy of each tensor's last stripe started a tensor that never completes: it is
    // dropped after the stall.
    sim.run_until(ms(2000));
    assert_eq!(sim.stats().partial_dropped.len(), 3);
    for n in NODES {
        assert_eq!(sim.partial(n), 0);
    }
}

#[test]
fn a_stalled_output_fails_the_attempt_at_once_naming_its_sender() {
    let mut c = fast(9);
    // Stripe 1 of the output from n3 arrives 750 ms late: after the 500 ms stall.
    c.rules.push(
        Rule::new(Effect::Delay(ms(750)), ms(0), ms(10_000))
            .between("n3", "n1")
            .stripe(1),
    );
    let mut sim = Sim::new(c);
    sim.submit(ms(0), "n1", 7);
    let h = sim.run(ms(100), "n1", 7, [5, 1000]);
    sim.run_until(ms(5000));
    assert_eq!(sim.stats().partial_dropped, ["none for 500ms"]);
    // Given up 500 ms after its last stripe, the output fails the attempt naming n3 (not
    // the deadline), and the retry without n3 succeeds.
    let o = correct(&sim, h);
    assert!(o.retried);
    assert_eq!(sim.plan(o.load_id).unwrap(), ["n1", "n2"]);
    assert!(sim.ended_at(h).unwrap() < ms(700), "{:?}", sim.ended_at(h));
    assert!(
        sim.log()
            .contains("node n3 failed: output 0 from it was lost: none for 500ms")
    );
    // The late stripe is refused, and its sender told why.
    assert_eq!(sim.stats().refused, ["its tensor was already dropped"]);
    assert!(
        sim.log()
            .contains("n3: cannot send output 0 to n1: refused: its tensor was already dropped")
    );
    // The failed plan was unloaded from n3 too: it was only slow.
    assert!(sim.loaded("n3").is_empty());
    assert_eq!(sim.reserved("n3"), 0);
}

#[test]
fn a_lost_result_without_any_death_fails_the_attempt_naming_its_sender() {
    let mut c = fast(10);
    c.rules.push(
        Rule::new(Effect::Drop, ms(0), ms(10_000))
            .between("n3", "n1")
            .stripe(2),
    );
    c.min_nodes = 3;
    let mut sim = Sim::new(c);
    sim.submit(ms(0), "n1", 7);
    let h = sim.run(ms(100), "n1", 7, [5, 1000]);
    sim.run_until(ms(5000));
    // The partial output was dropped 500 ms after its last stripe, and the attempt failed
    // then, naming n3; with no room without it, the run fails saying so.
    assert_eq!(sim.stats().partial_dropped.len(), 1);
    assert_eq!(sim.partial("n1"), 0);
    assert!(sim.ended_at(h).unwrap() < ms(700));
    assert_eq!(
        err(&sim, h).to_string(),
        "node n3 failed: output 0 from it was lost: none for 500ms; the run cannot be retried \
         without it: placement: 2 node(s) can take the model, it needs 3"
    );
    sim.unload(ms(5000), "n1", 7);
    sim.run_until(ms(7000));
    clean(&sim, &NODES);
}

#[test]
fn values_before_their_run_wait_and_are_delivered() {
    let mut c = fast(11);
    // n2's Run is slower than n1's value for it.
    c.rules.push(
        Rule::new(Effect::Delay(ms(30)), ms(0), ms(10_000))
            .between("n1", "n2")
            .kind(MsgKind::Run),
    );
    let mut sim = Sim::new(c);
    sim.submit(ms(0), "n1", 7);
    let h = sim.run(ms(100), "n1", 7, [5, 1000]);
    sim.run_until(ms(1000));
    correct(&sim, h);
    assert_eq!(sim.stats().early, 1);
    assert_eq!(sim.entries("n2"), 0);
}

#[test]
fn early_values_whose_run_never_starts_are_forgotten_after_the_ttl() {
    let mut c = fast(12);
    c.rules.push(
        Rule::new(Effect::Drop, ms(0), ms(10_000))
            .between("n1", "n2")
            .kind(MsgKind::Run),
    );
    let mut sim = Sim::new(c);
    sim.submit(ms(0), "n1", 7);
    let h = sim.run(ms(100), "n1", 7, [5, 1000]);
    sim.run_until(ms(500));
    assert_eq!(sim.entries("n2"), 1);
    // The value arrived at about 107 ms; it is forgotten 1 s later.
    sim.run_until(ms(1200));
    assert_eq!(sim.entries("n2"), 0);
    // The lost Run was never acknowledged: its start failed 1.8 s after it was sent, naming
    // n2, and the run was retried without n2 (not left to its deadline).
    sim.run_until(ms(3000));
    let o = correct(&sim, h);
    assert!(o.retried);
    assert_eq!(sim.plan(o.load_id).unwrap(), ["n1", "n3"]);
    assert!(
        sim.log()
            .contains("n1: cannot start run 1 on n2: no acknowledgement within 1.8s")
    );
}

#[test]
fn stragglers_for_an_aborted_run_are_dropped() {
    let mut c = fast(13);
    c.core.run_deadline = ms(1000);
    // n1's value for n2 arrives 1.5 s late, and n2's Run later still: the deadline fires
    // first and the abort reaches n2 before either.
    c.rules.push(
        Rule::new(Effect::Delay(ms(1500)), ms(0), ms(10_000))
            .between("n1", "n2")
            .kind(MsgKind::Stripe),
    );
    c.rules.push(
        Rule::new(Effect::Delay(ms(1800)), ms(0), ms(10_000))
            .between("n1", "n2")
            .kind(MsgKind::Run),
    );
    let mut sim = Sim::new(c);
    sim.submit(ms(0), "n1", 7);
    let h = sim.run(ms(100), "n1", 7, [5, 1000]);
    sim.run_until(ms(1200));
    assert_eq!(
        err(&sim, h).to_string(),
        "the run failed no result within 1 s"
    );
    sim.run_until(ms(1700));
    assert_eq!(sim.stats().stragglers, 1);
    // The late Run finds the run aborted: it never computes, and nothing is reported.
    sim.run_until(ms(2000));
    assert!(
        sim.log()
            .contains("n2: aborts run 1: the run was abandoned")
    );
    sim.run_until(ms(4000));
    assert_eq!(sim.entries("n2"), 0);
}

#[test]
fn stragglers_after_an_aborted_run_returned_are_dropped() {
    // The run's end keeps its Aborted entry (for the TTL), so a value that arrives after it
    // is a straggler, not an early value nothing would take.
    let mut c = fast(14);
    c.core.run_deadline = ms(1000);
    c.rules.push(
        Rule::new(Effect::Delay(ms(1500)), ms(0), ms(10_000))
            .between("n1", "n2")
            .kind(MsgKind::Stripe),
    );
    let mut sim = Sim::new(c);
    sim.submit(ms(0), "n1", 7);
    let h = sim.run(ms(100), "n1", 7, [5, 1000]);
    sim.run_until(ms(1700));
    assert!(sim.outcome(h).unwrap().is_err());
    assert_eq!(sim.stats().stragglers, 1);
    assert_eq!(sim.stats().early, 0);
    assert_eq!(sim.entries("n2"), 1);
    sim.run_until(ms(3000));
    assert_eq!(sim.entries("n2"), 0);
}

#[test]
fn reservations_return_to_zero_when_a_member_goes_down() {
    let mut c = fast(15);
    c.faults.push(NodeFault::Die {
        node: "n3".into(),
        at: ms(1000),
    });
    let mut sim = Sim::new(c);
    sim.submit(ms(0), "n1", 7);
    sim.submit(ms(0), "n2", 8);
    sim.run_until(ms(500));
    for n in NODES {
        assert_eq!(sim.reserved(n), 200);
    }
    sim.run_until(ms(3000));
    clean(&sim, &["n1", "n2"]);
}

#[test]
fn a_restarted_node_that_lost_its_part_is_loaded_again() {
    let mut c = fast(16);
    c.faults.push(NodeFault::Die {
        node: "n3".into(),
        at: ms(200),
    });
    c.faults.push(NodeFault::Revive {
        node: "n3".into(),
        at: ms(300),
    });
    let mut sim = Sim::new(c);
    sim.submit(ms(0), "n1", 7);
    // Before anyone saw n3 restart: its new self answers that it holds no such model.
    let h = sim.run(ms(400), "n1", 7, [5, 1000]);
    sim.run_until(ms(450));
    let o = correct(&sim, h).clone();
    assert!(o.retried);
    assert_eq!(sim.plan(o.load_id).unwrap(), NODES);
    // At 500 ms everyone sees n3's new life: the retry's plan, made with its old life, is
    // retired everywhere, n3 included (it cannot be told which life loaded it).
    sim.run_until(ms(600));
    for n in NODES {
        assert!(sim.loaded(n).is_empty(), "{n}\n{}", sim.log());
    }
    // A run now plans with n3's new life; the old life's death, declared at 1.7 s, is news
    // about a life long gone and retires nothing: the next run uses the same plan.
    let h2 = sim.run(ms(1000), "n1", 7, [1, 2]);
    let h3 = sim.run(ms(2000), "n1", 7, [3, 4]);
    sim.run_until(ms(3000));
    let (o2, o3) = (correct(&sim, h2).clone(), correct(&sim, h3).clone());
    assert!(!o2.retried && !o3.retried);
    assert_eq!(o3.load_id, o2.load_id);
    assert_eq!(sim.plan(o2.load_id).unwrap(), NODES);
    // Nothing leaked: every node holds the live plan alone.
    for n in NODES {
        assert_eq!(sim.loaded(n), [o2.load_id], "{n}\n{}", sim.log());
        assert_eq!(sim.reserved(n), 100);
    }
}

#[test]
fn a_stalled_node_delays_the_run_but_it_completes() {
    let mut c = fast(17);
    c.faults.push(NodeFault::Stall {
        node: "n2".into(),
        start: ms(100),
        end: ms(600),
    });
    let mut sim = Sim::new(c);
    sim.submit(ms(0), "n1", 7);
    let h = sim.run(ms(100), "n1", 7, [5, 1000]);
    sim.run_until(ms(2000));
    correct(&sim, h);
    assert!(sim.ended_at(h).unwrap() > ms(600));
}

#[test]
fn a_kernel_failure_fails_the_run_without_a_retry() {
    let mut c = fast(18);
    c.faults.push(NodeFault::FailRuns {
        node: "n2".into(),
        start: ms(0),
        end: ms(10_000),
    });
    let mut sim = Sim::new(c);
    sim.submit(ms(0), "n1", 7);
    let h = sim.run(ms(100), "n1", 7, [5, 1000]);
    sim.run_until(ms(1000));
    assert_eq!(
        err(&sim, h).to_string(),
        "the run failed on node n2: a kernel failed on n2"
    );
    assert!(sim.avoided("n1", 7).is_empty());
    // n3 was told to give the run up; nothing waits.
    sim.run_until(ms(3000));
    for n in NODES {
        assert_eq!(sim.entries(n), 0);
    }
}

#[test]
fn a_one_sided_partition_fails_the_run_through_another_node() {
    // Issue 18 (a): n3 cannot reach the submitter n1 (its output, and its report of that,
    // are lost) while everyone else can, and nobody dies. n3 tells n2 too, which passes the
    // failure on to n1: the attempt fails naming n3, long before its deadline, and the
    // retry without n3 succeeds.
    let mut c = fast(19);
    c.core.run_deadline = ms(10_000);
    c.rules
        .push(Rule::new(Effect::Drop, ms(100), ms(20_000)).between("n3", "n1"));
    let mut sim = Sim::new(c);
    sim.submit(ms(0), "n1", 7);
    let h = sim.run(ms(100), "n1", 7, [5, 1000]);
    sim.run_until(ms(5000));
    let o = correct(&sim, h);
    assert!(o.retried);
    assert_eq!(sim.plan(o.load_id).unwrap(), ["n1", "n2"]);
    // n3's send timed out 1.8 s after it sent its output (about 120 ms in).
    let ended = sim.ended_at(h).unwrap();
    assert!(ended > ms(1900) && ended < ms(2100), "{ended:?}");
    let log = sim.log();
    assert!(
        log.contains("n3: cannot send output 0 to n1: no acknowledgement within 1.8s"),
        "{log}"
    );
    assert!(sim.avoided("n1", 7).contains("n3"));
    // Left out for a while only: it was never declared dead.
    sim.run_until(ms(13_000));
    assert!(sim.avoided("n1", 7).is_empty());
}

#[test]
fn a_false_death_verdict_on_the_submitter_ends_its_runs_when_it_rejoins() {
    // Issue 18 (b): n3 declares the submitter n1 dead, drops its part and cannot report
    // back. When n1 learns it was declared dead (SWIM's gossip tells it) it renews its life,
    // fails its runs that involve other nodes, and retries them: nothing waits for the
    // deadline, and no node keeps a plan everyone else retired.
    let mut c = fast(20);
    c.core.run_deadline = ms(10_000);
    // n1's new life is news within a gossip round, faster than the retry's plan loads (on a
    // real node, seconds of weights; 20 ms here).
    c.announce = ms(10);
    c.faults.push(NodeFault::FalseDeath {
        observer: "n3".into(),
        node: "n1".into(),
        start: ms(50),
        end: ms(1000),
    });
    let mut sim = Sim::new(c);
    sim.submit(ms(0), "n1", 7);
    let h = sim.run(ms(100), "n1", 7, [5, 1000]);
    sim.run_until(ms(900));
    assert!(
        sim.outcome(h).is_none(),
        "nothing can tell n1 before it learns"
    );
    assert!(sim.loaded("n3").is_empty());
    sim.run_until(ms(2000));
    let o = correct(&sim, h);
    assert!(o.retried);
    assert!(sim.ended_at(h).unwrap() < ms(1300), "{:?}", sim.ended_at(h));
    assert_eq!(sim.generation("n1"), 2);
    assert!(sim.log().contains("n2: unloads"), "{}", sim.log());
    assert!(sim.log().contains("node n1 was declared dead"));
    // Every node holds the retry's plan alone.
    for n in NODES {
        assert_eq!(sim.loaded(n), [o.load_id], "{n}\n{}", sim.log());
        assert_eq!(sim.reserved(n), 100);
    }
}

#[test]
fn a_participant_declared_dead_falsely_drops_the_plans_everyone_else_retired() {
    // Issue 18 (reservations): n3 is frozen (SIGSTOP) long enough to be declared dead; the
    // submitter retires its plan, and cannot tell n3. When n3 runs again it learns it was
    // declared dead, and drops its part and its reservation.
    let mut c = fast(23);
    c.faults.push(NodeFault::Stall {
        node: "n3".into(),
        start: ms(100),
        end: ms(3000),
    });
    c.faults.push(NodeFault::FalseDeath {
        observer: "n1".into(),
        node: "n3".into(),
        start: ms(1600),
        end: ms(3000),
    });
    let mut sim = Sim::new(c);
    sim.submit(ms(0), "n1", 7);
    sim.run_until(ms(2000));
    assert_eq!(sim.reserved("n1"), 0);
    assert_eq!(sim.reserved("n2"), 0);
    assert_eq!(sim.reserved("n3"), 100, "frozen, it still holds its part");
    sim.run_until(ms(3500));
    assert_eq!(sim.reserved("n3"), 0, "{}", sim.log());
    assert!(sim.loaded("n3").is_empty());
    // The model plans over all three again.
    let h = sim.run(ms(4000), "n1", 7, [5, 1000]);
    sim.run_until(ms(5000));
    let o = correct(&sim, h);
    assert_eq!(sim.plan(o.load_id).unwrap(), NODES);
}

#[test]
fn a_node_that_kept_a_retired_plan_is_told_again_when_it_comes_back() {
    // A node seen dead misses the unload of the plans retired meanwhile; if it comes back
    // holding them (it never learned it was declared dead: the verdict was one node's), the
    // unload it missed is sent when it is seen alive again.
    let mut c = fast(24);
    c.faults.push(NodeFault::FalseDeath {
        observer: "n1".into(),
        node: "n3".into(),
        start: ms(100),
        end: ms(100_000),
    });
    let mut sim = Sim::new(c);
    sim.submit(ms(0), "n1", 7);
    sim.run_until(ms(200));
    assert_eq!(sim.reserved("n3"), 100);
    sim.alive_again(ms(300), "n1", "n3");
    sim.run_until(ms(400));
    assert_eq!(sim.reserved("n3"), 0, "{}", sim.log());
    assert!(sim.log().contains("n3: unloads"));
}

#[test]
fn unloading_a_model_mid_run_fails_the_run_at_once() {
    let mut c = fast(21);
    c.exec_time = ms(100);
    let mut sim = Sim::new(c);
    sim.submit(ms(0), "n1", 7);
    let h = sim.run(ms(100), "n1", 7, [5, 1000]);
    sim.unload(ms(150), "n1", 7);
    sim.run_until(ms(5000));
    assert_eq!(sim.ended_at(h), Some(ms(150)));
    assert_eq!(*err(&sim, h), RunError::NoModel(7));
    clean(&sim, &NODES);
}

#[test]
fn a_lost_fragment_fails_the_load_at_its_deadline() {
    let mut c = fast(22);
    c.core.load_deadline = ms(3000);
    c.rules.push(
        Rule::new(Effect::Drop, ms(0), ms(10))
            .between("n1", "n2")
            .kind(MsgKind::Load),
    );
    let mut sim = Sim::new(c);
    sim.submit(ms(0), "n1", 7);
    let h = sim.run(ms(100), "n1", 7, [5, 1000]);
    sim.run_until(ms(2999));
    assert!(sim.submission(7).is_none());
    sim.run_until(ms(3000));
    let want = "node n2 failed: could not load its part of the model: no answer within 3 s";
    let e = sim.submission(7).unwrap().as_ref().unwrap_err();
    assert_eq!(e.to_string(), want);
    assert_eq!(err(&sim, h).to_string(), want);
    assert_eq!(sim.runs_in_flight("n1"), 0);
    sim.run_until(ms(4000));
    clean(&sim, &NODES);
}

#[test]
fn a_model_whose_client_went_away_is_unloaded_everywhere_after_the_grace() {
    let mut c = fast(25);
    c.core.lease_grace = ms(1000);
    let mut sim = Sim::new(c);
    sim.submit(ms(0), "n1", 7);
    sim.submit(ms(0), "n1", 8);
    let h = sim.run(ms(100), "n1", 7, [5, 1000]);
    sim.disconnect(ms(500), "n1", 7);
    sim.run_until(ms(1499));
    correct(&sim, h);
    assert!(sim.has_model("n1", 7));
    sim.run_until(ms(1600));
    assert!(!sim.has_model("n1", 7));
    // Model 8's client is still there: its plan stays.
    assert!(sim.has_model("n1", 8));
    for n in NODES {
        assert_eq!(sim.reserved(n), 100, "{n}");
    }
    let late = sim.run(ms(1700), "n1", 7, [1, 2]);
    sim.run_until(ms(1800));
    assert_eq!(*err(&sim, late), RunError::NoModel(7));
}
