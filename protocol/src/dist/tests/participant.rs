use std::collections::BTreeSet;

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
    ParticipantAction::Send {
        to: to.into(),
        message: Message::RunFailed(pb::RunFailed {
            model_id: model,
            run_id: run,
            reason: reason.into(),
            culprit: culprit.into(),
            model_lost: lost,
        }),
    }
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
    p.run_ready(&t);
    let deliver = |value, data| ParticipantAction::Deliver {
        model: 1,
        run: 9,
        value,
        data,
    };
    assert_eq!(drain(&mut p), [deliver(4, 40), deliver(5, 50)]);
    assert_eq!(p.arrive(1, 9, 6, 60, now), Arrival::Delivered);
    assert_eq!(drain(&mut p), [deliver(6, 60)]);
    p.run_finished(&t, Ok(()));
    assert_eq!(p.entries(), 0);
    assert!(drain(&mut p).is_empty());
}

#[test]
fn a_run_aborted_before_it_was_ready_stops_at_once_and_reports_nothing() {
    let mut p = node();
    let now = t0();
    load(&mut p, 1, &[], &["n1", "n2"]);
    let t = p.start_run("n1", 1, 9).unwrap();
    p.abort(1, 9, "node n3: gone", now);
    assert!(drain(&mut p).is_empty(), "nothing runs yet");
    assert_eq!(p.arrive(1, 9, 4, 40, now), Arrival::Aborted);
    p.run_ready(&t);
    assert_eq!(
        drain(&mut p),
        [ParticipantAction::AbortRun {
            model: 1,
            run: 9,
            reason: "the run was abandoned".into(),
        }]
    );
    p.run_finished(&t, Err("aborted".into()));
    assert!(drain(&mut p).is_empty(), "the submitter knows already");
}

#[test]
fn a_running_run_that_is_aborted_is_stopped_with_the_reason() {
    let mut p = node();
    load(&mut p, 1, &[], &["n1", "n2"]);
    let t = p.start_run("n1", 1, 9).unwrap();
    p.run_ready(&t);
    p.abort(1, 9, "node n3: gone", t0());
    assert_eq!(
        drain(&mut p),
        [ParticipantAction::AbortRun {
            model: 1,
            run: 9,
            reason: "run abandoned: node n3: gone".into(),
        }]
    );
}

#[test]
fn a_failed_run_is_reported_to_its_submitter_naming_this_node() {
    let mut p = node();
    load(&mut p, 1, &[], &["n1", "n2"]);
    let t = p.start_run("n1", 1, 9).unwrap();
    p.run_ready(&t);
    // Unloaded meanwhile: the end still knows its submitter.
    p.unload(1, "x", t0());
    drain(&mut p);
    p.run_finished(&t, Err("kernel failed".into()));
    assert!(drain(&mut p).is_empty(), "aborted by the unload");
    load(&mut p, 1, &[], &["n1", "n2"]);
    let t = p.start_run("n1", 1, 10).unwrap();
    p.run_finished(&t, Err("kernel failed".into()));
    assert_eq!(
        drain(&mut p),
        [failed("n1", 1, 10, "kernel failed", "n2", false)]
    );
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
    p.run_ready(&t);
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
    p.run_ready(&r);
    p.member_down("n3", now);
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
    p.member_down("n1", now);
    assert_eq!(p.reserved(), [0, 0]);
    assert!(p.loaded_models().is_empty());
}

#[test]
fn early_values_and_aborts_are_forgotten_after_the_ttl() {
    let mut p = node();
    let now = t0();
    load(&mut p, 1, &[], &["n1", "n2"]);
    p.arrive(1, 9, 4, 40, now);
    // Remembered even for a model not loaded here.
    p.abort(5, 1, "x", now + ms(300));
    let t = p.start_run("n1", 1, 10).unwrap();
    p.run_ready(&t);
    assert_eq!(p.entries(), 3);
    assert_eq!(p.poll_timeout(), Some(now + ms(1000)));
    p.handle_timeout(now + ms(999));
    assert_eq!(p.entries(), 3);
    p.handle_timeout(now + ms(1000));
    assert_eq!(p.entries(), 2);
    assert_eq!(p.poll_timeout(), Some(now + ms(1300)));
    p.handle_timeout(now + ms(1300));
    // A running run is never swept.
    assert_eq!(p.entries(), 1);
    assert_eq!(p.poll_timeout(), None);
}

#[test]
fn a_value_that_cannot_be_sent_blames_its_receiver() {
    let mut p = node();
    p.value_send_failed("n1", 1, 9, "n3", "n3 is dead: the tensor did not arrive");
    assert_eq!(
        drain(&mut p),
        [failed(
            "n1",
            1,
            9,
            "cannot send a value to n3: n3 is dead: the tensor did not arrive",
            "n3",
            false
        )]
    );
}
