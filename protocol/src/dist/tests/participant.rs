use std::collections::{BTreeMap, BTreeSet};

use super::{ms, t0};
use crate::dist::Config;
use crate::dist::participant::*;
use crate::{Message, pb};

type P = Participant<&'static str, i64>;

fn node() -> P {
    let devices = vec![
        DeviceBudget {
            name: "cpu".into(),
            budget: 1000,
        },
        DeviceBudget {
            name: "vulkan:0".into(),
            budget: 500,
        },
    ];
    let config = Config {
        early_ttl: ms(1000),
        ..Config::default()
    };
    Participant::new("n2".into(), devices, config)
}

fn info(submitter: &str, nodes: &[&str]) -> FragmentInfo {
    FragmentInfo {
        submitter: submitter.into(),
        nodes: nodes.iter().map(|n| n.to_string()).collect::<BTreeSet<_>>(),
        lives: BTreeMap::new(),
    }
}

/// A fragment of model `model` made with life 5 of every node.
fn load_lives(p: &mut P, model: u64, submitter: &str, nodes: &[&str]) {
    let mut i = info(submitter, nodes);
    i.lives = nodes
        .iter()
        .chain([&submitter])
        .map(|n| (n.to_string(), 5))
        .collect();
    let t = p.reserve(&[(0, 10)]).unwrap();
    p.loaded(t, model, i, "exe");
}

/// The submitter's abort (or a peer's report) as it arrives.
fn run_failed(model: u64, run: u64, reason: &str, culprit: &str) -> pb::RunFailed {
    pb::RunFailed {
        model_id: model,
        run_id: run,
        reason: reason.into(),
        culprit: culprit.into(),
        ..Default::default()
    }
}

fn load(p: &mut P, model: u64, charges: &[(usize, u64)], nodes: &[&str]) {
    let t = p.reserve(charges).unwrap();
    p.loaded(t, model, info("n1", nodes), "exe");
}

fn drain(p: &mut P) -> Vec<ParticipantAction<i64>> {
    std::iter::from_fn(|| p.poll_action()).collect()
}

fn failed(
    to: &str,
    model: u64,
    run: u64,
    reason: &str,
    culprit: &str,
    lost: bool,
) -> ParticipantAction<i64> {
    sent(to, model, run, reason, culprit, lost, false)
}

fn unreachable(
    to: &str,
    model: u64,
    run: u64,
    reason: &str,
    culprit: &str,
) -> ParticipantAction<i64> {
    sent(to, model, run, reason, culprit, false, true)
}

fn sent(
    to: &str,
    model: u64,
    run: u64,
    reason: &str,
    culprit: &str,
    lost: bool,
    unreachable: bool,
) -> ParticipantAction<i64> {
    ParticipantAction::Send {
        to: to.into(),
        message: Message::RunFailed(pb::RunFailed {
            model_id: model,
            run_id: run,
            reason: reason.into(),
            culprit: culprit.into(),
            model_lost: lost,
            unreachable,
        }),
    }
}

/// Weights shared between plans stay reserved after the plan that uploaded them is gone,
/// until the driver releases them; a failed load gives back its shared part too.
#[test]
fn shared_weights_stay_reserved_until_released() {
    let mut p = node();
    let t = p.reserve_sharing(&[(1, 50)], &[(1, 300)]).unwrap();
    assert_eq!(t.shared(), [(1, 300)]);
    p.loaded(t, 1, info("n1", &["n1", "n2"]), "exe");
    assert_eq!(p.reserved(), [0, 350]);
    let e = p.reserve_sharing(&[(1, 100)], &[(1, 100)]);
    assert!(e.is_err(), "350 + 200 > 500");
    let t = p.reserve_sharing(&[(1, 40)], &[(1, 20)]).unwrap();
    assert_eq!(p.reserved(), [0, 410]);
    p.load_failed(t);
    assert_eq!(p.reserved(), [0, 350]);
    p.unload(1, "done", t0());
    assert_eq!(
        p.reserved(),
        [0, 300],
        "the shared weights outlive their plan"
    );
    p.release_shared(&[(1, 300)]);
    assert_eq!(p.reserved(), [0, 0]);
}

#[test]
fn reservations_are_all_or_nothing_and_released_once() {
    let mut p = node();
    load(&mut p, 1, &[(0, 600), (1, 200)], &["n1", "n2"]);
    assert_eq!(p.reserved(), [600, 200]);
    let e = p.reserve(&[(0, 100), (1, 400)]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "n2 has no room for its part: vulkan:0 needs 400 bytes, 200 of 500 are reserved by \
         other models"
    );
    assert_eq!(
        p.reserved(),
        [600, 200],
        "nothing of a refused load is kept"
    );
    assert_eq!(
        p.reserve(&[(2, 1)]).unwrap_err(),
        ParticipantError::NoDevice(2)
    );
    // A load whose executable fails gives its reservation back.
    let t = p.reserve(&[(0, 400)]).unwrap();
    assert_eq!(p.reserved(), [1000, 200]);
    p.load_failed(t);
    assert_eq!(p.reserved(), [600, 200]);
    // Loading the same id again replaces the fragment and its reservation.
    load(&mut p, 1, &[(0, 100)], &["n1", "n2"]);
    assert_eq!(p.reserved(), [100, 0]);
    p.unload(1, "done", t0());
    p.unload(1, "done", t0());
    assert_eq!(p.reserved(), [0, 0]);
    assert_eq!(
        drain(&mut p),
        [ParticipantAction::Unloaded {
            model: 1,
            reason: "done".into(),
            released: vec![(0, 100)],
        }]
    );
}

#[test]
fn values_before_the_run_wait_and_are_delivered_in_order() {
    let mut p = node();
    let now = t0();
    load(&mut p, 1, &[], &["n1", "n2", "n3"]);
    assert_eq!(p.arrive(1, 9, 4, 40, now), Arrival::Early);
    assert_eq!(p.arrive(1, 9, 5, 50, now), Arrival::Early);
    let t = p.start_run("n1", 1, 9).unwrap();
    assert_eq!(t.submitter, "n1");
    assert!(drain(&mut p).is_empty());
    p.run_ready(&t, now);
    let deliver = |value, data| ParticipantAction::Deliver {
        model: 1,
        run: 9,
        value,
        data,
    };
    assert_eq!(drain(&mut p), [deliver(4, 40), deliver(5, 50)]);
    assert_eq!(p.arrive(1, 9, 6, 60, now), Arrival::Delivered);
    assert_eq!(drain(&mut p), [deliver(6, 60)]);
    p.run_finished(&t, Ok(()), now);
    assert_eq!(p.entries(), 0);
    assert!(drain(&mut p).is_empty());
}

#[test]
fn a_run_aborted_before_it_was_ready_stops_at_once_and_reports_nothing() {
    let mut p = node();
    let now = t0();
    load(&mut p, 1, &[], &["n1", "n2"]);
    let t = p.start_run("n1", 1, 9).unwrap();
    p.run_failed("n1", &run_failed(1, 9, "node n3: gone", ""), now);
    assert!(drain(&mut p).is_empty(), "nothing runs yet");
    assert_eq!(p.arrive(1, 9, 4, 40, now), Arrival::Aborted);
    p.run_ready(&t, now);
    assert_eq!(
        drain(&mut p),
        [ParticipantAction::AbortRun {
            model: 1,
            run: 9,
            reason: "the run was abandoned".into(),
        }]
    );
    p.run_finished(&t, Err("aborted".into()), now);
    assert!(drain(&mut p).is_empty(), "the submitter knows already");
}

#[test]
fn a_running_run_that_is_aborted_is_stopped_with_the_reason() {
    let mut p = node();
    let now = t0();
    load(&mut p, 1, &[], &["n1", "n2"]);
    let t = p.start_run("n1", 1, 9).unwrap();
    p.run_ready(&t, now);
    p.run_failed("n1", &run_failed(1, 9, "node n3: gone", ""), now);
    assert_eq!(
        drain(&mut p),
        [ParticipantAction::AbortRun {
            model: 1,
            run: 9,
            reason: "run abandoned: node n3: gone".into(),
        }]
    );
    // Its end is known: nothing is reported, and its stragglers are dropped.
    p.run_finished(&t, Err("aborted".into()), now);
    assert!(drain(&mut p).is_empty());
    assert_eq!(p.arrive(1, 9, 4, 40, now), Arrival::Aborted);
}

#[test]
fn a_failed_run_is_reported_to_its_submitter_and_every_other_node() {
    let mut p = node();
    let now = t0();
    load(&mut p, 1, &[], &["n1", "n2"]);
    let t = p.start_run("n1", 1, 9).unwrap();
    p.run_ready(&t, now);
    // Unloaded meanwhile: the end still knows its submitter.
    p.unload(1, "x", now);
    drain(&mut p);
    p.run_finished(&t, Err("kernel failed".into()), now);
    assert!(drain(&mut p).is_empty(), "aborted by the unload");
    load(&mut p, 1, &[], &["n1", "n2", "n3", "n4"]);
    let t = p.start_run("n1", 1, 10).unwrap();
    p.run_finished(&t, Err("kernel failed".into()), now);
    assert_eq!(
        drain(&mut p),
        [
            failed("n1", 1, 10, "kernel failed", "n2", false),
            failed("n3", 1, 10, "kernel failed", "n2", false),
            failed("n4", 1, 10, "kernel failed", "n2", false),
        ]
    );
    // Remembered: a straggler is dropped, not kept as an early value.
    assert_eq!(p.arrive(1, 10, 4, 40, now), Arrival::Aborted);
}

#[test]
fn a_peer_report_is_passed_on_to_the_submitter_once() {
    let mut p = node();
    let now = t0();
    load(&mut p, 1, &[], &["n1", "n2", "n3"]);
    let t = p.start_run("n1", 1, 9).unwrap();
    p.run_ready(&t, now);
    // n3 could not reach the submitter n1 with its output: it told n2 too.
    let r = pb::RunFailed {
        unreachable: true,
        ..run_failed(1, 9, "cannot send output 0 to n1: cut off", "n3")
    };
    p.run_failed("n3", &r, now);
    assert_eq!(
        drain(&mut p),
        [
            ParticipantAction::AbortRun {
                model: 1,
                run: 9,
                reason: "run abandoned: cannot send output 0 to n1: cut off".into(),
            },
            unreachable("n1", 1, 9, "cannot send output 0 to n1: cut off", "n3"),
        ]
    );
    // Once: the same news again, or the submitter's own abort, is not passed on.
    p.run_failed("n3", &r, now);
    p.run_failed("n1", &run_failed(1, 9, "node n3: cut off", ""), now);
    assert!(drain(&mut p).is_empty());
    // A run that already ended here is passed on too (n2 finished its part long ago).
    p.run_failed(
        "n3",
        &pb::RunFailed {
            run_id: 11,
            ..r.clone()
        },
        now,
    );
    assert_eq!(drain(&mut p).len(), 1);
    // The submitter's own abort is never passed on; a model not held here cannot be.
    p.run_failed("n1", &run_failed(1, 12, "x", ""), now);
    p.run_failed("n3", &run_failed(7, 1, "x", "n3"), now);
    assert!(drain(&mut p).is_empty());
}

#[test]
fn an_output_that_cannot_reach_the_submitter_blames_this_node() {
    let mut p = node();
    let now = t0();
    load(&mut p, 1, &[], &["n1", "n2", "n3"]);
    let t = p.start_run("n1", 1, 9).unwrap();
    p.run_ready(&t, now);
    p.run_finished(&t, Ok(()), now);
    p.value_send_failed(&t, "n1", "output 0", "member 'n1' is cut off", now);
    let why = "cannot send output 0 to n1: member 'n1' is cut off";
    assert_eq!(
        drain(&mut p),
        [
            unreachable("n1", 1, 9, why, "n2"),
            unreachable("n3", 1, 9, why, "n2"),
        ]
    );
    // A value to another node blames that node, and is not told the news it caused.
    let t = p.start_run("n1", 1, 10).unwrap();
    p.run_ready(&t, now);
    p.value_send_failed(
        &t,
        "n3",
        "value 4",
        "n3 is dead: the tensor did not arrive",
        now,
    );
    let why = "cannot send value 4 to n3: n3 is dead: the tensor did not arrive";
    assert_eq!(
        drain(&mut p),
        [
            ParticipantAction::AbortRun {
                model: 1,
                run: 10,
                reason: why.into(),
            },
            unreachable("n1", 1, 10, why, "n3"),
        ]
    );
    // A run aborted here says nothing more.
    p.value_send_failed(&t, "n3", "value 5", "x", now);
    assert!(drain(&mut p).is_empty());
}

#[test]
fn a_lost_value_fails_the_run_naming_its_sender() {
    let mut p = node();
    let now = t0();
    load(&mut p, 1, &[], &["n1", "n2", "n3"]);
    let t = p.start_run("n1", 1, 9).unwrap();
    p.run_ready(&t, now);
    p.value_lost(1, 9, "n3", "none for 60 s", now);
    let why = "a value from n3 was lost: none for 60 s";
    assert_eq!(
        drain(&mut p),
        [
            ParticipantAction::AbortRun {
                model: 1,
                run: 9,
                reason: "run abandoned: none for 60 s".into(),
            },
            unreachable("n1", 1, 9, why, "n3"),
        ]
    );
    p.value_lost(1, 9, "n3", "again", now);
    p.value_lost(7, 9, "n3", "no such model", now);
    assert!(drain(&mut p).is_empty());
}

#[test]
fn a_run_of_a_model_not_held_here_says_so_to_a_remote_submitter_only() {
    let mut p = node();
    assert_eq!(
        p.start_run("n1", 1, 9).unwrap_err(),
        ParticipantError::NoModel(1)
    );
    assert_eq!(
        drain(&mut p),
        [failed(
            "n1",
            1,
            9,
            "n2 does not hold model 0000000000000001 (it restarted?)",
            "n2",
            true
        )]
    );
    // The local submitter gets the error itself (as a plain failure).
    assert!(p.start_run("n2", 1, 9).is_err());
    assert!(drain(&mut p).is_empty());
}

#[test]
fn unload_aborts_the_runs_in_flight_and_drops_early_values() {
    let mut p = node();
    let now = t0();
    load(&mut p, 1, &[(0, 10)], &["n1", "n2"]);
    load(&mut p, 2, &[(0, 10)], &["n1", "n2"]);
    let t = p.start_run("n1", 1, 9).unwrap();
    p.run_ready(&t, now);
    p.arrive(1, 10, 4, 40, now);
    p.arrive(2, 9, 4, 40, now);
    p.unload(1, "unloaded by its client", now);
    assert_eq!(
        drain(&mut p),
        [
            ParticipantAction::Unloaded {
                model: 1,
                reason: "unloaded by its client".into(),
                released: vec![(0, 10)],
            },
            ParticipantAction::AbortRun {
                model: 1,
                run: 9,
                reason: "the model was unloaded: unloaded by its client".into(),
            },
        ]
    );
    assert_eq!(p.reserved(), [10, 0]);
    // Run 10's early value is gone; model 2's stays.
    assert_eq!(p.arrive(1, 10, 5, 50, now), Arrival::UnknownModel);
    assert_eq!(p.arrive(2, 9, 5, 50, now), Arrival::Early);
}

#[test]
fn a_member_down_drops_every_fragment_it_is_in_or_submitted() {
    let mut p = node();
    let now = t0();
    load(&mut p, 1, &[(0, 10)], &["n1", "n2", "n3"]);
    load(&mut p, 2, &[(0, 20)], &["n1", "n2"]);
    // Submitted by n3 (not in its plan's nodes).
    let t = p.reserve(&[(0, 40)]).unwrap();
    p.loaded(t, 3, info("n3", &["n1", "n2"]), "exe");
    let r = p.start_run("n1", 1, 9).unwrap();
    p.run_ready(&r, now);
    p.member_down("n3", 0, now);
    assert_eq!(p.loaded_models(), [2]);
    assert_eq!(p.reserved(), [20, 0]);
    let aborts: Vec<_> = drain(&mut p)
        .into_iter()
        .filter(|a| matches!(a, ParticipantAction::AbortRun { .. }))
        .collect();
    assert_eq!(
        aborts,
        [ParticipantAction::AbortRun {
            model: 1,
            run: 9,
            reason: "node n3 failed".into(),
        }]
    );
    p.member_down("n1", 0, now);
    assert_eq!(p.reserved(), [0, 0]);
    assert!(p.loaded_models().is_empty());
}

/// A run asked of a fragment dropped because another node went, in the moment before its
/// submitter heard of it, fails naming that node, so the submitter retries without it (it
/// named this node before: the retry left out a healthy node, and found no room).
#[test]
fn a_run_asked_of_a_part_dropped_for_another_node_names_that_node() {
    let mut p = node();
    let now = t0();
    load(&mut p, 1, &[(0, 10)], &["n1", "n2", "n3"]);
    load(&mut p, 2, &[(0, 10)], &["n1", "n2", "n3"]);
    p.member_down("n3", 0, now);
    drain(&mut p);
    let e = p.start_run("n1", 1, 9).unwrap_err();
    assert_eq!(
        e,
        ParticipantError::Dropped {
            model: 1,
            why: "node n3 is gone".into()
        }
    );
    let why = "n2 dropped its part: node n3 is gone";
    assert_eq!(drain(&mut p), [unreachable("n1", 1, 9, why, "n3")]);
    // Its own submitter hears the same.
    p.start_run("n2", 1, 10).unwrap_err();
    assert_eq!(drain(&mut p), [unreachable("n2", 1, 10, why, "n3")]);
    // A node that restarted: its part is to be loaded again, with it.
    load_lives(&mut p, 3, "n1", &["n1", "n2", "n4"]);
    p.member_up("n4", 6, now);
    drain(&mut p);
    p.start_run("n1", 3, 11).unwrap_err();
    let why = "n2 dropped its part: node n4 restarted";
    assert_eq!(drain(&mut p), [failed("n1", 3, 11, why, "n4", true)]);
    // A model never held here is this node's loss, as before.
    assert_eq!(p.start_run("n1", 7, 12), Err(ParticipantError::NoModel(7)));
}

#[test]
fn verdicts_are_about_one_life_of_a_node() {
    let mut p = node();
    let now = t0();
    load_lives(&mut p, 1, "n1", &["n1", "n2", "n3"]);
    load_lives(&mut p, 2, "n3", &["n2"]);
    // The late news of an older life of n3 ends nothing made with life 5.
    p.member_down("n3", 4, now);
    assert_eq!(p.loaded_models(), [1, 2]);
    // n3 is up again in life 6 (it restarted before anyone saw it die): its part of plan 1
    // and its model 2 are gone, and so are they here.
    p.member_up("n3", 5, now);
    assert_eq!(p.loaded_models(), [1, 2]);
    p.member_up("n3", 6, now);
    assert!(p.loaded_models().is_empty());
    assert_eq!(p.reserved(), [0, 0]);
    let why: Vec<String> = drain(&mut p)
        .into_iter()
        .filter_map(|a| match a {
            ParticipantAction::Unloaded { reason, .. } => Some(reason),
            _ => None,
        })
        .collect();
    assert_eq!(why, ["node n3 restarted", "node n3 restarted"]);
    // Life 5 dying ends a fragment made with it.
    load_lives(&mut p, 3, "n1", &["n1", "n2", "n3"]);
    p.member_down("n3", 5, now);
    assert!(p.loaded_models().is_empty());
}

#[test]
fn a_node_told_it_was_declared_dead_drops_every_shared_fragment() {
    let mut p = node();
    let now = t0();
    load(&mut p, 1, &[(0, 10)], &["n1", "n2"]);
    let t = p.reserve(&[(0, 20)]).unwrap();
    p.loaded(t, 2, info("n2", &["n2"]), "exe");
    let t = p.reserve(&[(0, 30)]).unwrap();
    p.loaded(t, 3, info("n2", &["n2", "n3"]), "exe");
    let r = p.start_run("n1", 1, 9).unwrap();
    p.run_ready(&r, now);
    p.rejoined(now);
    // Only its own plan of itself alone stays.
    assert_eq!(p.loaded_models(), [2]);
    assert_eq!(p.reserved(), [20, 0]);
    let acts = drain(&mut p);
    assert!(acts.contains(&ParticipantAction::AbortRun {
        model: 1,
        run: 9,
        reason: "this node was declared dead".into(),
    }));
}

#[test]
fn a_run_still_running_at_the_deadline_is_given_up() {
    let devices = vec![DeviceBudget {
        name: "cpu".into(),
        budget: 1000,
    }];
    let config = Config {
        run_deadline: ms(2000),
        early_ttl: ms(1000),
        ..Config::default()
    };
    let mut p: P = Participant::new("n2".into(), devices, config);
    let now = t0();
    load(&mut p, 1, &[], &["n1", "n2"]);
    let t = p.start_run("n1", 1, 9).unwrap();
    p.run_ready(&t, now);
    assert_eq!(p.poll_timeout(), Some(now + ms(2000)));
    p.handle_timeout(now + ms(2000));
    assert_eq!(
        drain(&mut p),
        [ParticipantAction::AbortRun {
            model: 1,
            run: 9,
            reason: "run abandoned: no result within 2 s".into(),
        }]
    );
    // Its submitter failed it at its own deadline: nothing is reported.
    p.run_finished(&t, Err("aborted".into()), now + ms(2001));
    assert!(drain(&mut p).is_empty());
    p.handle_timeout(now + ms(3000));
    assert_eq!(p.entries(), 0);
}

#[test]
fn stopping_aborts_every_run() {
    let mut p = node();
    let now = t0();
    load(&mut p, 1, &[], &["n1", "n2"]);
    let t = p.start_run("n1", 1, 9).unwrap();
    p.run_ready(&t, now);
    p.abort_all("node n2 is stopping", now);
    assert_eq!(
        drain(&mut p),
        [ParticipantAction::AbortRun {
            model: 1,
            run: 9,
            reason: "run abandoned: node n2 is stopping".into(),
        }]
    );
}

#[test]
fn early_values_and_aborts_are_forgotten_after_the_ttl() {
    let mut p = node();
    let now = t0();
    load(&mut p, 1, &[], &["n1", "n2"]);
    p.arrive(1, 9, 4, 40, now);
    // Remembered even for a model not loaded here.
    p.run_failed("n1", &run_failed(5, 1, "x", ""), now + ms(300));
    let t = p.start_run("n1", 1, 10).unwrap();
    p.run_ready(&t, now);
    assert_eq!(p.entries(), 3);
    assert_eq!(p.poll_timeout(), Some(now + ms(1000)));
    p.handle_timeout(now + ms(999));
    assert_eq!(p.entries(), 3);
    p.handle_timeout(now + ms(1000));
    assert_eq!(p.entries(), 2);
    assert_eq!(p.poll_timeout(), Some(now + ms(1300)));
    p.handle_timeout(now + ms(1300));
    // A running run is not swept: it is given up at its deadline.
    assert_eq!(p.entries(), 1);
    assert_eq!(p.poll_timeout(), Some(now + Config::default().run_deadline));
}
