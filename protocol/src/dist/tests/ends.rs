//! The submitter's ways for a run to end other than its outputs: failures passed on, outputs
//! given up, verdicts keyed by a node's life, this node's own false death, a client gone,
//! a load that never answers.

use std::collections::BTreeMap;
use std::time::Instant;

use super::submitter::{A, ALL, S, abort, done, drain, plan, report, started, unload};
use super::{ms, t0};
use crate::dist::Config;
use crate::dist::deployment::DeploymentPlan;
use crate::dist::run::RunError;
use crate::dist::submitter::*;

fn with(config: Config) -> S {
    let mut s = Submitter::new("n1".into(), config);
    s.add_model(7);
    s
}

/// `plan` with life 5 of every node.
fn lived(load_id: u64, nodes: &[&str]) -> DeploymentPlan<i64> {
    let mut p = plan(load_id, nodes);
    p.lives = nodes.iter().map(|n| (n.to_string(), 5)).collect();
    p.reserves = nodes.iter().map(|n| (n.to_string(), 100)).collect();
    p
}

/// A run of model 7 started on `p`: its id and wire run id.
fn started_on(s: &mut S, p: DeploymentPlan<i64>, now: Instant) -> (RunId, u64) {
    let run = s.run(7, vec![1, 2]).unwrap();
    drain(s);
    s.resolve(run, 0, now);
    let plan_id = drain(s)
        .iter()
        .find_map(|a| match a {
            Action::Plan { plan, .. } => Some(*plan),
            _ => None,
        })
        .unwrap();
    let nodes: Vec<String> = p.nodes.iter().cloned().collect();
    let load_id = p.load_id;
    assert!(s.planned(plan_id, p, now));
    drain(s);
    for n in &nodes {
        s.load_result(load_id, n, Ok(()), now);
    }
    let wire = drain(s)
        .iter()
        .find_map(|a| match a {
            Action::StartRun { run_id, .. } => Some(*run_id),
            _ => None,
        })
        .unwrap();
    (run, wire)
}

#[test]
fn a_lost_output_fails_the_attempt_naming_its_sender_unless_it_arrived() {
    let mut s = with(Config::default());
    let now = t0();
    let mut p = lived(100, &ALL);
    p.n_outputs = 2;
    let (run, wire) = started_on(&mut s, p, now);
    s.output(100, wire, 0, 11);
    // Output 0 is in: losing a copy of it changes nothing.
    s.output_lost(100, wire, 0, "n3", "none for 60 s", now);
    assert!(drain(&mut s).is_empty());
    s.output_lost(100, wire, 1, "n3", "none for 60 s", now);
    let acts = drain(&mut s);
    assert!(
        acts.contains(&Action::Resolve { run, model: 7 }),
        "{acts:?}"
    );
}

#[test]
fn an_output_given_up_fails_the_run_at_once() {
    let mut s = with(Config::default());
    let now = t0();
    let (run, wire) = started(&mut s, 100, &ALL, now);
    s.output_lost(100, wire, 0, "n3", "none for 60 s", now);
    let acts = drain(&mut s);
    assert_eq!(
        acts[0],
        abort(
            "n1",
            100,
            wire,
            "node n3: output 0 from it was lost: none for 60 s"
        )
    );
    assert!(
        acts.contains(&Action::Resolve { run, model: 7 }),
        "{acts:?}"
    );
    assert!(s.avoided(7, now).unwrap().contains("n3"));
    // Left out for a while only: it was never declared dead.
    let later = now + Config::default().avoid_for;
    assert!(s.avoided(7, later).unwrap().is_empty());
}

#[test]
fn every_attempt_on_a_plan_retired_by_a_failure_fails_with_it() {
    let mut s = with(Config::default());
    let now = t0();
    let (a, wire_a) = started(&mut s, 100, &ALL, now);
    let b = s.run(7, vec![3, 4]).unwrap();
    drain(&mut s);
    s.resolve(b, 0, now);
    let wire_b = drain(&mut s)
        .iter()
        .find_map(|x| match x {
            Action::StartRun { run_id, .. } => Some(*run_id),
            _ => None,
        })
        .unwrap();
    s.run_failed(
        "n2",
        &report(100, wire_a, "cannot send a value to n3: x", "n3", false),
        now,
    );
    let acts = drain(&mut s);
    // Both runs are retried, not left to the deadline.
    assert!(acts.contains(&Action::Resolve { run: a, model: 7 }));
    assert!(acts.contains(&Action::Resolve { run: b, model: 7 }));
    assert!(acts.contains(&abort(
        "n1",
        100,
        wire_b,
        "node n3: cannot send a value to n3: x"
    )));
    assert_eq!(s.poll_timeout(), None);
}

#[test]
fn a_verdict_on_an_older_life_ends_nothing_made_with_a_newer_one() {
    let mut s = with(Config::default());
    let now = t0();
    let (run, _) = started_on(&mut s, lived(100, &ALL), now);
    s.member_down("n3", 4, "dead", now);
    assert!(drain(&mut s).is_empty());
    assert_eq!(s.cached(7), [100]);
    // The same life, or an unknown one, does end it.
    s.member_down("n3", 5, "dead", now);
    let acts = drain(&mut s);
    assert!(
        acts.contains(&Action::Resolve { run, model: 7 }),
        "{acts:?}"
    );
    assert!(s.cached(7).is_empty());
}

#[test]
fn a_newer_life_retires_the_plans_of_the_older_and_retries_their_runs() {
    let mut s = with(Config::default());
    let now = t0();
    let (run, wire) = started_on(&mut s, lived(100, &ALL), now);
    // n3 is alive in its own life: nothing changes.
    s.member_up("n3", 5, now);
    assert!(drain(&mut s).is_empty());
    s.member_up("n3", 6, now);
    let acts = drain(&mut s);
    let why = "node n3 restarted";
    assert_eq!(
        acts[..3],
        [
            unload("n1", 100, why),
            unload("n2", 100, why),
            unload("n3", 100, why)
        ]
    );
    assert!(acts.contains(&abort("n2", 100, wire, "node n3: it restarted")));
    assert!(acts.contains(&Action::Resolve { run, model: 7 }));
    // Not avoided: it is alive.
    assert!(s.avoided(7, now).unwrap().is_empty());
}

#[test]
fn unloads_a_node_missed_while_down_are_sent_when_it_comes_back() {
    let mut s = with(Config::default());
    let now = t0();
    started_on(&mut s, lived(100, &ALL), now);
    s.member_down("n3", 5, "dead", now);
    let acts = drain(&mut s);
    assert!(!acts.contains(&unload("n3", 100, "node n3 is dead")));
    // Its verdict was false: it comes back in the same life, holding its part.
    s.member_up("n3", 5, now);
    assert_eq!(drain(&mut s), [unload("n3", 100, "node n3 is dead")]);
    s.member_up("n3", 5, now);
    assert!(drain(&mut s).is_empty(), "sent once");
}

#[test]
fn a_node_declared_dead_retires_its_shared_plans_and_retries_their_runs() {
    let mut s = with(Config::default());
    let now = t0();
    let (run, _) = started_on(&mut s, lived(100, &ALL), now);
    s.rejoined(now);
    let acts = drain(&mut s);
    let why = "node n1 was declared dead";
    assert!(acts.contains(&unload("n2", 100, why)), "{acts:?}");
    assert!(acts.contains(&Action::Resolve { run, model: 7 }));
    s.resolve(run, 0, now);
    let acts = drain(&mut s);
    assert!(matches!(acts[0], Action::Plan { .. }), "{acts:?}");
    // A plan of this node alone stays.
    let mut s = with(Config::default());
    started_on(&mut s, lived(200, &["n1"]), now);
    s.rejoined(now);
    assert!(drain(&mut s).is_empty());
    assert_eq!(s.cached(7), [200]);
}

#[test]
fn a_model_whose_owner_is_gone_is_unloaded_after_the_grace() {
    let config = Config {
        lease_grace: ms(3000),
        ..Config::default()
    };
    let mut s = with(config);
    let now = t0();
    s.lease(7, 42).unwrap();
    s.add_model(8);
    s.lease(8, 43).unwrap();
    let (run, wire) = started_on(&mut s, lived(100, &["n1", "n2"]), now);
    assert_eq!(
        s.reserved(7),
        BTreeMap::from([("n1".to_string(), 100), ("n2".to_string(), 100)])
    );
    assert_eq!(s.lease_of(7), Some((Some(42), None)));
    s.owner_gone(42, now + ms(1000));
    assert_eq!(s.lease_of(7), Some((Some(42), Some(now + ms(4000)))));
    assert_eq!(s.poll_timeout(), Some(now + ms(4000)));
    s.handle_timeout(now + ms(3999));
    assert!(drain(&mut s).is_empty());
    s.handle_timeout(now + ms(4000));
    let acts = drain(&mut s);
    let why = "unloaded after its client went away";
    assert_eq!(
        acts,
        [
            abort("n1", 100, wire, &format!("the model was {why}")),
            abort("n2", 100, wire, &format!("the model was {why}")),
            A::RunDone {
                run,
                result: Err(RunError::NoModel(7))
            },
            unload("n1", 100, why),
            unload("n2", 100, why),
            A::Removed {
                model: 7,
                why: "unloaded: its client went away".into()
            },
        ]
    );
    assert!(!s.has_model(7));
    assert!(s.has_model(8), "another owner's model stays");
    assert_eq!(s.poll_timeout(), None);
}

#[test]
fn a_load_that_never_answers_fails_at_its_deadline() {
    let config = Config {
        load_deadline: ms(5000),
        ..Config::default()
    };
    let mut s = with(config);
    let now = t0();
    let run = s.run(7, vec![1, 2]).unwrap();
    drain(&mut s);
    s.resolve(run, 0, now);
    let plan_id = match &drain(&mut s)[0] {
        Action::Plan { plan, .. } => *plan,
        other => panic!("{other:?}"),
    };
    assert!(s.planned(plan_id, plan(100, &ALL), now));
    drain(&mut s);
    s.load_result(100, "n1", Ok(()), now);
    s.load_result(100, "n3", Ok(()), now);
    assert_eq!(s.poll_timeout(), Some(now + ms(5000)));
    s.handle_timeout(now + ms(5000));
    let acts = drain(&mut s);
    assert_eq!(
        acts[..2],
        [
            unload("n1", 100, "loading failed on another node"),
            unload("n3", 100, "loading failed on another node"),
        ]
    );
    assert_eq!(
        done(&acts).unwrap().as_ref().unwrap_err().to_string(),
        "node n2 failed: could not load its part of the model: no answer within 5 s"
    );
}

#[test]
fn stopping_fails_every_run() {
    let mut s = with(Config::default());
    let now = t0();
    let (run, wire) = started(&mut s, 100, &["n1", "n2"], now);
    s.shutdown("node n1 is stopping");
    assert_eq!(
        drain(&mut s),
        [
            abort("n1", 100, wire, "node n1 is stopping"),
            abort("n2", 100, wire, "node n1 is stopping"),
            A::RunDone {
                run,
                result: Err(RunError::RunFailed("node n1 is stopping".into()))
            },
        ]
    );
}
