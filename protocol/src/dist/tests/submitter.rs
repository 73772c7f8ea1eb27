use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use super::{ms, t0};
use crate::dist::Config;
use crate::dist::deployment::{DeploymentPlan, FixedOutput, LoadState};
use crate::dist::run::{Failure, PlanError, RunError, RunOutput};
use crate::dist::submitter::*;
use crate::{Message, pb};

pub(super) type S = Submitter<u32, i64>;
pub(super) type A = Action<u32, i64>;

pub(super) const ALL: [&str; 3] = ["n1", "n2", "n3"];

fn submitter() -> S {
    let mut s = Submitter::new("n1".into(), Config::default());
    s.add_model(7);
    s
}

pub(super) fn drain(s: &mut S) -> Vec<A> {
    std::iter::from_fn(|| s.poll_action()).collect()
}

/// A chain over `nodes`: the first reads input 0, the last input 1; one output computed.
pub(super) fn plan(load_id: u64, nodes: &[&str]) -> DeploymentPlan<i64> {
    let mut needs: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    needs.entry(nodes[0].into()).or_default().push(0);
    needs
        .entry(nodes[nodes.len() - 1].into())
        .or_default()
        .push(1);
    DeploymentPlan {
        load_id,
        nodes: nodes.iter().map(|n| n.to_string()).collect(),
        needs,
        fixed_outputs: Vec::new(),
        n_outputs: 1,
        lives: BTreeMap::new(),
        reserves: BTreeMap::new(),
    }
}

/// Prepares model 7 for `key` when no plan is cached: the plan asked for (its actions drained).
fn pending(s: &mut S, key: u32, now: Instant) -> PlanId {
    let p = match s.prepare(7, key, now).unwrap() {
        Prepared::Pending(p) => p,
        other => panic!("{other:?}"),
    };
    drain(s);
    p
}

pub(super) fn unload(to: &str, load_id: u64, reason: &str) -> A {
    Action::Send {
        to: to.into(),
        message: Message::Unload(pb::Unload {
            model_id: load_id,
            reason: reason.into(),
            keep_weights: reason == crate::dist::submitter::REPLACED,
        }),
    }
}

pub(super) fn abort(to: &str, load_id: u64, run_id: u64, reason: &str) -> A {
    Action::Send {
        to: to.into(),
        message: Message::RunFailed(pb::RunFailed {
            model_id: load_id,
            run_id,
            reason: reason.into(),
            culprit: String::new(),
            model_lost: false,
            unreachable: false,
        }),
    }
}

pub(super) fn report(
    model: u64,
    run: u64,
    reason: &str,
    culprit: &str,
    lost: bool,
) -> pb::RunFailed {
    pb::RunFailed {
        model_id: model,
        run_id: run,
        reason: reason.into(),
        culprit: culprit.into(),
        model_lost: lost,
        // Only reports of values that could not be sent name a node other than their
        // sender, in these tests.
        unreachable: reason.starts_with("cannot send"),
    }
}

/// The one `Plan` asked for.
fn asked(actions: &[A]) -> (PlanId, BTreeSet<String>) {
    let plans: Vec<_> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Plan { plan, avoid, .. } => Some((*plan, avoid.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(plans.len(), 1, "{actions:?}");
    plans[0].clone()
}

/// Plans and loads `load_id` over `nodes` for `plan`; returns the actions once it is live.
pub(super) fn go_live(
    s: &mut S,
    plan_id: PlanId,
    load_id: u64,
    nodes: &[&str],
    now: Instant,
) -> Vec<A> {
    assert!(s.planned(plan_id, plan(load_id, nodes), now));
    let sends: Vec<A> = nodes
        .iter()
        .map(|n| Action::SendFragment {
            load_id,
            node: n.to_string(),
        })
        .collect();
    assert_eq!(drain(s), sends);
    for n in nodes {
        s.load_result(load_id, n, Ok(()), now);
    }
    drain(s)
}

/// A run of model 7 on inputs [1, 2] started on a fresh plan `load_id` over `nodes`: its id
/// and its wire run id.
pub(super) fn started(s: &mut S, load_id: u64, nodes: &[&str], now: Instant) -> (RunId, u64) {
    let run = s.run(7, vec![1, 2]).unwrap();
    assert_eq!(drain(s), [Action::Resolve { run, model: 7 }]);
    s.resolve(run, 0, now);
    let (plan_id, _) = asked(&drain(s));
    let acts = go_live(s, plan_id, load_id, nodes, now);
    let wire: Vec<u64> = acts
        .iter()
        .filter_map(|a| match a {
            Action::StartRun { run_id, .. } => Some(*run_id),
            _ => None,
        })
        .collect();
    assert_eq!(wire.len(), nodes.len(), "{acts:?}");
    (run, wire[0])
}

pub(super) fn done(actions: &[A]) -> Option<&Result<RunOutput<i64>, RunError>> {
    actions.iter().find_map(|a| match a {
        Action::RunDone { result, .. } => Some(result),
        _ => None,
    })
}

#[test]
fn failures_are_attributed_as_the_submitter_always_did() {
    let r = report(1, 2, "boom", "", false);
    assert_eq!(
        Failure::attribute("n2", &r),
        Failure::Other("on node n2: boom".into())
    );
    let r = report(1, 2, "boom", "n2", false);
    assert_eq!(
        Failure::attribute("n2", &r),
        Failure::Other("on node n2: boom".into())
    );
    // A report passed on by another node keeps its culprit, and its kind.
    assert_eq!(
        Failure::attribute("n3", &r),
        Failure::Other("on node n2: boom".into())
    );
    // A node that could not be reached failed: whoever reports it.
    let r = report(1, 2, "cannot send a value to n3: x", "n3", false);
    assert_eq!(
        Failure::attribute("n2", &r),
        Failure::Node {
            node: "n3".into(),
            reason: "cannot send a value to n3: x".into(),
        }
    );
    assert_eq!(
        Failure::attribute("n1", &r),
        Failure::attribute("n2", &r),
        "passed on by n1"
    );
    // The culprit lost the model: load it again.
    let r = report(1, 2, "gone", "n3", true);
    assert_eq!(
        Failure::attribute("n2", &r),
        Failure::Lost {
            node: "n3".into(),
            reason: "it restarted and lost the model".into()
        }
    );
}

#[test]
fn a_run_sends_each_node_its_inputs_and_completes_with_the_last_output() {
    let mut s = submitter();
    let now = t0();
    let run = s.run(7, vec![1, 2]).unwrap();
    drain(&mut s);
    s.resolve(run, 0, now);
    let (plan_id, avoid) = asked(&drain(&mut s));
    assert!(avoid.is_empty());
    let acts = go_live(&mut s, plan_id, 100, &ALL, now);
    let start = |node: &str, inputs: Vec<(usize, i64)>| Action::StartRun {
        run,
        node: node.into(),
        load_id: 100,
        run_id: 1,
        inputs,
    };
    assert_eq!(
        acts,
        [
            Action::Deployed {
                plan: plan_id,
                model: 7,
                load_id: 100
            },
            start("n1", vec![(0, 1)]),
            start("n2", vec![]),
            start("n3", vec![(1, 2)]),
        ]
    );
    // Out of range, then the answer, then a copy of it: one completion.
    s.output(100, 1, 5, 0);
    s.output(100, 1, 0, 114);
    s.output(100, 1, 0, 999);
    let out = RunOutput {
        outputs: vec![114],
        retried: false,
        load_id: 100,
    };
    assert_eq!(
        drain(&mut s),
        [Action::RunDone {
            run,
            result: Ok(out)
        }]
    );
    assert_eq!(s.cached(7), [100]);
    assert_eq!(s.runs_in_flight(), 0);
    assert_eq!(s.poll_timeout(), None);
}

#[test]
fn outputs_known_without_running_complete_the_run_with_nothing_sent() {
    let mut s = submitter();
    let now = t0();
    let run = s.run(7, vec![1, 2]).unwrap();
    drain(&mut s);
    s.resolve(run, 0, now);
    let (plan_id, _) = asked(&drain(&mut s));
    let mut p = plan(100, &["n1"]);
    p.fixed_outputs = vec![(0, FixedOutput::Input(1)), (1, FixedOutput::Const(42))];
    p.n_outputs = 2;
    s.planned(plan_id, p, now);
    drain(&mut s);
    s.load_result(100, "n1", Ok(()), now);
    let acts = drain(&mut s);
    assert!(!acts.iter().any(|a| matches!(a, Action::StartRun { .. })));
    assert_eq!(done(&acts).unwrap().as_ref().unwrap().outputs, [2, 42]);
}

#[test]
fn runs_with_one_key_share_one_plan_and_resolve_again_when_it_needs_values() {
    let mut s = submitter();
    let now = t0();
    let a = s.run(7, vec![1, 2]).unwrap();
    let b = s.run(7, vec![3, 4]).unwrap();
    drain(&mut s);
    s.resolve(a, 0, now);
    s.resolve(b, 0, now);
    s.resolve(b, 0, now);
    let (plan_id, _) = asked(&drain(&mut s));
    s.plan_failed(plan_id, PlanError::NeedsValues);
    assert_eq!(
        drain(&mut s),
        [
            Action::Deferred {
                plan: plan_id,
                model: 7
            },
            Action::Resolve { run: a, model: 7 },
            Action::Resolve { run: b, model: 7 }
        ]
    );
    s.resolve(a, 1, now);
    s.resolve(b, 2, now);
    let acts = drain(&mut s);
    assert_eq!(
        acts.iter()
            .filter(|a| matches!(a, Action::Plan { .. }))
            .count(),
        2
    );
}

#[test]
fn a_failed_load_waits_for_every_answer_then_unloads_the_loaded_and_names_the_first() {
    let mut s = submitter();
    let now = t0();
    let run = s.run(7, vec![1, 2]).unwrap();
    drain(&mut s);
    s.resolve(run, 0, now);
    let (plan_id, _) = asked(&drain(&mut s));
    s.planned(plan_id, plan(100, &ALL), now);
    drain(&mut s);
    s.load_result(100, "n3", Err("no room on n3".into()), now);
    s.load_result(100, "n1", Ok(()), now);
    assert!(drain(&mut s).is_empty(), "n2 has not answered");
    s.load_result(100, "n2", Err("no room on n2".into()), now);
    let e = RunError::NodeFailed {
        node: "n2".into(),
        reason: "could not load its part of the model: no room on n2".into(),
    };
    assert_eq!(
        drain(&mut s),
        [
            unload("n1", 100, "loading failed on another node"),
            Action::DeployFailed {
                plan: plan_id,
                model: 7,
                error: e.clone()
            },
            Action::RunDone {
                run,
                result: Err(e)
            },
        ]
    );
    assert!(s.deployment(100).is_none());
}

#[test]
fn a_death_while_loading_fails_the_load_even_if_that_node_had_loaded() {
    let mut s = submitter();
    let now = t0();
    let p = pending(&mut s, 0, now);
    s.planned(p, plan(100, &ALL), now);
    drain(&mut s);
    s.load_result(100, "n1", Ok(()), now);
    s.load_result(100, "n2", Ok(()), now);
    s.member_down("n2", 0, "dead", now);
    assert!(drain(&mut s).is_empty(), "n3 has not answered");
    s.load_result(100, "n3", Ok(()), now);
    let acts = drain(&mut s);
    assert_eq!(
        acts[..2],
        [
            unload("n1", 100, "loading failed on another node"),
            unload("n3", 100, "loading failed on another node"),
        ]
    );
    match &acts[2] {
        Action::DeployFailed { error, .. } => assert_eq!(
            error.to_string(),
            "node n2 failed: could not load its part of the model: node n2 is dead"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_dead_node_fails_the_run_and_the_retry_plans_without_it() {
    let mut s = submitter();
    let now = t0();
    let (run, wire) = started(&mut s, 100, &ALL, now);
    s.member_down("n2", 0, "dead", now);
    let acts = drain(&mut s);
    assert_eq!(
        acts[..4],
        [
            // Retired first (by the death), then the run's other nodes told to give it up.
            unload("n1", 100, "node n2 is dead"),
            unload("n3", 100, "node n2 is dead"),
            abort("n1", 100, wire, "node n2: the node is dead"),
            abort("n3", 100, wire, "node n2: the node is dead"),
        ]
    );
    assert_eq!(acts[4], Action::Resolve { run, model: 7 });
    assert_eq!(acts.len(), 5, "unloaded once: {acts:?}");
    assert_eq!(
        s.avoided(7, now).unwrap().iter().collect::<Vec<_>>(),
        ["n2"]
    );
    s.resolve(run, 0, now);
    let (plan_id, avoid) = asked(&drain(&mut s));
    assert!(avoid.contains("n2"));
    let acts = go_live(&mut s, plan_id, 200, &["n1", "n3"], now);
    let wire2 = acts
        .iter()
        .find_map(|a| match a {
            Action::StartRun { run_id, .. } => Some(*run_id),
            _ => None,
        })
        .unwrap();
    assert_ne!(wire, wire2, "each attempt has its own run id");
    s.output(200, wire2, 0, 104);
    let out = done(&drain(&mut s)).unwrap().clone().unwrap();
    assert!(out.retried);
    // Back: it may be used again.
    s.member_up("n2", 0, now);
    assert!(s.avoided(7, now).unwrap().is_empty());
}

#[test]
fn a_second_node_failure_names_both_and_a_failed_retry_plan_names_the_first() {
    let mut s = submitter();
    let now = t0();
    let (run, wire) = started(&mut s, 100, &ALL, now);
    // n2 could not send to n3: n3 is the culprit and is not told to abort.
    s.run_failed(
        "n2",
        &report(100, wire, "cannot send a value to n3: x", "n3", false),
        now,
    );
    let acts = drain(&mut s);
    assert_eq!(
        acts,
        [
            abort("n1", 100, wire, "node n3: cannot send a value to n3: x"),
            abort("n2", 100, wire, "node n3: cannot send a value to n3: x"),
            // n3 too: it may only have been unreachable for a while.
            unload("n1", 100, "node n3 failed: cannot send a value to n3: x"),
            unload("n2", 100, "node n3 failed: cannot send a value to n3: x"),
            unload("n3", 100, "node n3 failed: cannot send a value to n3: x"),
            Action::Resolve { run, model: 7 },
        ]
    );
    s.resolve(run, 0, now);
    let (plan_id, _) = asked(&drain(&mut s));
    let acts = go_live(&mut s, plan_id, 200, &["n1", "n2"], now);
    let wire2 = acts
        .iter()
        .find_map(|a| match a {
            Action::StartRun { run_id, .. } => Some(*run_id),
            _ => None,
        })
        .unwrap();
    s.start_failed(200, wire2, "n2", "connection lost", now);
    let acts = drain(&mut s);
    assert_eq!(
        done(&acts).unwrap().as_ref().unwrap_err().to_string(),
        "node n2 failed: cannot start the run there: connection lost (on the retry, after n3 \
         failed: cannot send a value to n3: x)"
    );

    // Another run: its first attempt loses n2, and no plan fits without it.
    let (run, wire) = started(&mut s, 300, &["n1", "n2"], now);
    s.member_down("n2", 0, "left", now);
    drain(&mut s);
    s.resolve(run, 0, now);
    let (plan_id, _) = asked(&drain(&mut s));
    s.plan_failed(plan_id, PlanError::Placement("no room".into()));
    let acts = drain(&mut s);
    assert_eq!(
        done(&acts).unwrap().as_ref().unwrap_err().to_string(),
        "node n2 failed: the node is left; the run cannot be retried without it: placement: no \
         room"
    );
    let _ = wire;
    // A later run that cannot be planned names every node lost.
    let run = s.run(7, vec![1, 2]).unwrap();
    drain(&mut s);
    s.resolve(run, 0, now);
    let (plan_id, _) = asked(&drain(&mut s));
    s.plan_failed(plan_id, PlanError::Placement("no room".into()));
    assert_eq!(
        done(&drain(&mut s))
            .unwrap()
            .as_ref()
            .unwrap_err()
            .to_string(),
        "node n2, n3 failed: it is gone and the remaining nodes have no room for the model: no \
         room"
    );
}

#[test]
fn a_node_that_lost_the_model_gets_it_again_once() {
    let mut s = submitter();
    let now = t0();
    let (run, wire) = started(&mut s, 100, &ALL, now);
    s.run_failed(
        "n3",
        &report(100, wire, "n3 does not hold it", "n3", true),
        now,
    );
    let acts = drain(&mut s);
    // Everyone, the node that lost it included, is told to abort and unload.
    assert_eq!(
        acts,
        [
            abort("n1", 100, wire, "node n3: it restarted and lost the model"),
            abort("n2", 100, wire, "node n3: it restarted and lost the model"),
            abort("n3", 100, wire, "node n3: it restarted and lost the model"),
            unload("n1", 100, "node n3 lost its part"),
            unload("n2", 100, "node n3 lost its part"),
            unload("n3", 100, "node n3 lost its part"),
            Action::Resolve { run, model: 7 },
        ]
    );
    assert!(s.avoided(7, now).unwrap().is_empty());
    s.resolve(run, 0, now);
    let (plan_id, _) = asked(&drain(&mut s));
    let acts = go_live(&mut s, plan_id, 200, &ALL, now);
    let wire2 = acts
        .iter()
        .find_map(|a| match a {
            Action::StartRun { run_id, .. } => Some(*run_id),
            _ => None,
        })
        .unwrap();
    s.run_failed("n2", &report(200, wire2, "gone", "", true), now);
    assert_eq!(
        done(&drain(&mut s))
            .unwrap()
            .as_ref()
            .unwrap_err()
            .to_string(),
        "node n2 failed: it restarted and lost the model, on the retry after n3 failed: it \
         restarted and lost the model"
    );
}

#[test]
fn a_plain_failure_is_final_and_keeps_the_plan() {
    let mut s = submitter();
    let now = t0();
    let (run, wire) = started(&mut s, 100, &ALL, now);
    s.run_failed("n2", &report(100, wire, "kernel failed", "n2", false), now);
    let acts = drain(&mut s);
    assert_eq!(
        acts,
        [
            abort("n1", 100, wire, "on node n2: kernel failed"),
            abort("n2", 100, wire, "on node n2: kernel failed"),
            abort("n3", 100, wire, "on node n2: kernel failed"),
            Action::RunDone {
                run,
                result: Err(RunError::RunFailed("on node n2: kernel failed".into()))
            },
        ]
    );
    assert_eq!(s.cached(7), [100]);
    // This node's own refusal to start is a plain failure too.
    let run = s.run(7, vec![1, 2]).unwrap();
    drain(&mut s);
    s.resolve(run, 0, now);
    let wire = drain(&mut s)
        .iter()
        .find_map(|a| match a {
            Action::StartRun { run_id, .. } => Some(*run_id),
            _ => None,
        })
        .unwrap();
    s.start_failed(100, wire, "n1", "no model with id 64", now);
    assert_eq!(
        done(&drain(&mut s))
            .unwrap()
            .as_ref()
            .unwrap_err()
            .to_string(),
        "the run failed on node n1: no model with id 64"
    );
}

#[test]
fn the_deadline_fails_a_run_that_never_completes() {
    let mut s = submitter();
    let now = t0();
    let (run, wire) = started(&mut s, 100, &ALL, now);
    let deadline = now + Config::default().run_deadline;
    assert_eq!(s.poll_timeout(), Some(deadline));
    s.handle_timeout(deadline - ms(1));
    assert!(drain(&mut s).is_empty());
    s.handle_timeout(deadline);
    let why = "no result within 600 s";
    assert_eq!(
        drain(&mut s),
        [
            abort("n1", 100, wire, why),
            abort("n2", 100, wire, why),
            abort("n3", 100, wire, why),
            Action::RunDone {
                run,
                result: Err(RunError::RunFailed(why.into()))
            },
        ]
    );
    assert_eq!(s.poll_timeout(), None);
    // A result after the deadline changes nothing.
    s.output(100, wire, 0, 1);
    assert!(drain(&mut s).is_empty());
}

#[test]
fn a_full_cache_unloads_its_oldest_plan() {
    let mut s = Submitter::<u32, i64>::new(
        "n1".into(),
        Config {
            max_deployments: 2,
            ..Config::default()
        },
    );
    s.add_model(7);
    let now = t0();
    for key in 0..3u32 {
        let p = pending(&mut s, key, now);
        let acts = go_live(&mut s, p, 100 + u64::from(key), &["n1"], now);
        let unloads: Vec<&A> = acts
            .iter()
            .filter(|a| matches!(a, Action::Send { .. }))
            .collect();
        // The third plan evicts the first, which no run uses: it is unloaded, not leaked.
        if key == 2 {
            assert_eq!(
                unloads,
                [&unload("n1", 100, "evicted from its model's plan cache")]
            );
        } else {
            assert!(unloads.is_empty(), "{acts:?}");
        }
    }
    assert_eq!(s.cached(7), [102, 101]);
    assert!(s.deployment(100).is_none());
    assert_eq!(s.prepare(7, 2, now).unwrap(), Prepared::Live(102));
}

#[test]
fn removing_a_model_retires_its_plans_and_fails_its_waiting_runs() {
    let mut s = submitter();
    let now = t0();
    let p = pending(&mut s, 0, now);
    go_live(&mut s, p, 100, &["n1", "n2"], now);
    // A second plan loading, with a run waiting for it.
    let run = s.run(7, vec![1, 2]).unwrap();
    drain(&mut s);
    s.resolve(run, 1, now);
    let (plan_id, _) = asked(&drain(&mut s));
    assert!(s.planned(plan_id, plan(200, &["n1", "n2"]), now));
    drain(&mut s);
    s.load_result(200, "n1", Ok(()), now);
    s.remove_model(7).unwrap();
    assert_eq!(s.remove_model(7), Err(RunError::NoModel(7)));
    assert_eq!(
        drain(&mut s),
        [
            unload("n1", 100, "unloaded by its client"),
            unload("n2", 100, "unloaded by its client"),
            Action::RunDone {
                run,
                result: Err(RunError::NoModel(7))
            },
        ]
    );
    // The loading plan is unloaded once it settles, not before (an unload that overtook
    // its fragment would be ignored).
    assert_eq!(s.deployment(200).unwrap().state(), LoadState::Loading);
    s.load_result(200, "n2", Ok(()), now);
    let acts = drain(&mut s);
    assert_eq!(
        acts[..2],
        [
            unload("n1", 200, "unloaded by its client"),
            unload("n2", 200, "unloaded by its client"),
        ]
    );
    assert!(matches!(acts[2], Action::DeployFailed { .. }));
    assert!(s.deployment(200).is_none());
    assert_eq!(s.run(7, vec![]), Err(RunError::NoModel(7)));
}

#[test]
fn a_plan_answered_twice_or_for_a_removed_model_is_not_taken() {
    let mut s = submitter();
    let now = t0();
    let p = pending(&mut s, 0, now);
    assert!(s.planned(p, plan(100, &["n1"]), now));
    assert!(
        !s.planned(p, plan(101, &["n1"]), now),
        "the first plan is loading"
    );
    assert!(s.deployment(101).is_none());
    drain(&mut s);
    // A plan asked for, then the model removed while the driver planned.
    let run = s.run(7, vec![1, 2]).unwrap();
    drain(&mut s);
    s.resolve(run, 1, now);
    let (q, _) = asked(&drain(&mut s));
    s.remove_model(7).unwrap();
    drain(&mut s);
    assert!(!s.planned(q, plan(200, &["n1"]), now));
    assert_eq!(
        drain(&mut s),
        [Action::DeployFailed {
            plan: q,
            model: 7,
            error: RunError::NoModel(7)
        }]
    );
    assert!(s.deployment(200).is_none());
}

#[test]
fn an_unload_a_live_node_did_not_get_is_sent_again_until_it_does() {
    // A one-sided partition: n2 stays alive in membership but misses the unload of a
    // retired plan; before, it kept its part and its reservation for good.
    let mut s = submitter();
    let now = t0();
    let p = pending(&mut s, 0, now);
    go_live(&mut s, p, 100, &["n1", "n2"], now);
    s.remove_model(7).unwrap();
    let why = "unloaded by its client";
    assert_eq!(
        drain(&mut s),
        [unload("n1", 100, why), unload("n2", 100, why)]
    );
    s.unload_delivered("n1", 100);
    s.unload_failed("n2", 100, why, now);
    let retry = Config::default().unload_retry;
    assert_eq!(s.poll_timeout(), Some(now + retry));
    s.handle_timeout(now + retry - ms(1));
    assert_eq!(drain(&mut s), []);
    s.handle_timeout(now + retry);
    assert_eq!(drain(&mut s), [unload("n2", 100, why)]);
    // In flight: nothing due until it is answered.
    assert_eq!(s.poll_timeout(), None);
    s.unload_failed("n2", 100, why, now + retry);
    s.handle_timeout(now + retry * 2);
    assert_eq!(drain(&mut s), [unload("n2", 100, why)]);
    s.unload_delivered("n2", 100);
    assert_eq!(s.poll_timeout(), None);
    s.handle_timeout(now + retry * 10);
    assert_eq!(drain(&mut s), []);
}

#[test]
fn an_unload_is_given_up_after_its_tries_and_owed_to_a_node_declared_down() {
    let mut s = submitter();
    let now = t0();
    let retry = Config::default().unload_retry;
    let why = "gone";
    let mut t = now;
    for _ in 1..crate::dist::unloads::UNLOAD_TRIES {
        s.unload_failed("n2", 100, why, t);
        t += retry;
        s.handle_timeout(t);
        assert_eq!(drain(&mut s), [unload("n2", 100, why)]);
    }
    s.unload_failed("n2", 100, why, t);
    assert_eq!(s.poll_timeout(), None, "given up");
    // Declared down while pending: owed, and sent when it comes back.
    s.unload_failed("n3", 200, why, t);
    s.member_down("n3", 0, "dead", t);
    assert_eq!(s.poll_timeout(), None);
    s.handle_timeout(t + retry);
    assert_eq!(drain(&mut s), []);
    s.member_up("n3", 5, t + retry);
    assert_eq!(drain(&mut s), [unload("n3", 200, why)]);
}

#[test]
fn what_a_model_reserves_counts_its_loading_and_live_plans_until_it_is_removed() {
    let mut s = submitter();
    let now = t0();
    let p = pending(&mut s, 0, now);
    assert!(s.reserved(7).is_empty(), "nothing is planned yet");
    let mut loading = plan(100, &["n1", "n2"]);
    loading.reserves = BTreeMap::from([("n1".into(), 30), ("n2".into(), 5)]);
    assert!(s.planned(p, loading, now));
    drain(&mut s);
    let expect = BTreeMap::from([("n1".to_string(), 30), ("n2".to_string(), 5)]);
    assert_eq!(s.reserved(7), expect, "while it loads");
    s.load_result(100, "n1", Ok(()), now);
    s.load_result(100, "n2", Ok(()), now);
    drain(&mut s);
    assert_eq!(s.reserved(7), expect, "once live");
    s.remove_model(7).unwrap();
    drain(&mut s);
    assert!(s.reserved(7).is_empty());
}

/// A node that left (SIGTERM) retired the live plan with no run in flight; the next run's
/// plan, without it, did not fit, and the client read a bare "placement: the model does not
/// fit" that named no node (seen in cluster_hardening's SIGTERM test). It names the node.
#[test]
fn a_plan_that_no_longer_fits_after_a_node_left_names_the_node() {
    let mut s = submitter();
    let now = t0();
    let p = pending(&mut s, 0, now);
    go_live(&mut s, p, 100, &ALL, now);
    s.member_down("n3", 0, "left", now);
    drain(&mut s);
    let run = s.run(7, vec![1, 2]).unwrap();
    drain(&mut s);
    s.resolve(run, 0, now);
    let (plan_id, avoid) = asked(&drain(&mut s));
    assert!(avoid.contains("n3"), "{avoid:?}");
    s.plan_failed(
        plan_id,
        PlanError::Placement("the model does not fit".into()),
    );
    match done(&drain(&mut s)) {
        Some(Err(RunError::NodeFailed { node, reason })) => {
            assert_eq!(node, "n3");
            assert!(reason.contains("the model does not fit"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn evicting_idle_plans_unloads_those_no_run_uses_and_keeps_the_busy_one() {
    let mut s = submitter();
    let now = t0();
    // Plan 11 (key 0) has a run in flight; plan 12 (key 1) is live and idle.
    let (_run, _) = started(&mut s, 11, &["n1", "n2"], now);
    let p = pending(&mut s, 1, now);
    go_live(&mut s, p, 12, &["n2", "n3"], now);
    assert_eq!(s.evict_idle(7), [12]);
    let why = "replaced by a plan for other input shapes";
    assert_eq!(
        drain(&mut s),
        [unload("n2", 12, why), unload("n3", 12, why)]
    );
    assert!(!s.has_deployment(12));
    assert!(s.has_deployment(11));
    assert_eq!(s.load_ids(7), [11]);
    // Nothing idle is left to evict.
    assert!(s.evict_idle(7).is_empty());
    assert!(s.evict_idle(99).is_empty());
}

/// A step of model 7 on a fresh two-output plan over `nodes`, output 1 kept: its run, its
/// wire run id, and the actions once started.
fn step_started(s: &mut S, key: u32, load_id: u64, nodes: &[&str], now: Instant) -> (RunId, u64) {
    let run = s.run_step(7, vec![1, 2], BTreeSet::from([1])).unwrap();
    assert_eq!(drain(s), [Action::Resolve { run, model: 7 }]);
    s.resolve(run, key, now);
    let (plan_id, _) = asked(&drain(s));
    let mut p = plan(load_id, nodes);
    p.n_outputs = 2;
    assert!(s.planned(plan_id, p, now));
    drain(s);
    for n in nodes {
        s.load_result(load_id, n, Ok(()), now);
    }
    let wire = drain(s)
        .iter()
        .find_map(|a| match a {
            Action::StartRun { run_id, .. } => Some(*run_id),
            _ => None,
        })
        .expect("started");
    (run, wire)
}

#[test]
fn a_step_completes_without_its_kept_outputs_and_is_never_retried() {
    let mut s = submitter();
    let now = t0();
    let (run, wire) = step_started(&mut s, 0, 100, &["n1", "n2"], now);
    s.output(100, wire, 0, 42);
    let acts = drain(&mut s);
    match done(&acts) {
        Some(Ok(out)) => assert_eq!((out.outputs.as_slice(), out.load_id), (&[42][..], 100)),
        other => panic!("{other:?} in {acts:?}"),
    }
    assert!(
        acts.iter()
            .any(|a| matches!(a, Action::RunDone { run: r, .. } if *r == run))
    );

    // A node that cannot be reached fails a plain run's attempt, which is retried; a step's
    // is not: its sequence's values may be half updated.
    let (run, wire) = step_started(&mut s, 1, 101, &["n2", "n3"], now);
    let r = report(101, wire, "cannot send a value to n3: x", "n3", false);
    s.run_failed("n2", &r, now);
    let acts = drain(&mut s);
    assert!(
        !acts.iter().any(|a| matches!(a, Action::Resolve { .. })),
        "{acts:?}"
    );
    match done(&acts) {
        Some(Err(RunError::NodeFailed { node, .. })) => assert_eq!(node, "n3"),
        other => panic!("{other:?} in {acts:?}"),
    }
    let _ = run;
}
