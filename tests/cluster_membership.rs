//! Loopback clusters of real processes: convergence, failure detection, restart, leave,
//! partitions. The timing bounds are the (2 s to converge, 3 s to see a SIGKILL),
//! measured from the event by the nodes' own log lines.

mod cluster_harness;

use std::time::{Duration, Instant};

use cluster_harness::*;

const CONVERGE: Duration = Duration::from_secs(2);
const DETECT: Duration = Duration::from_secs(3);
/// Waits that are not the measurement: generous, so a loaded machine does not fail them.
const PATIENCE: Duration = Duration::from_secs(20);

fn converge(n: usize) {
    let _g = serial();
    let c = Cluster::new(&format!("converge{n}"));
    let first = c.start("n0", &[]);
    let mut nodes = vec![first];
    for i in 1..n {
        let seed = &nodes[0];
        let node = c.start(&format!("n{i}"), &[seed]);
        nodes.push(node);
    }
    // From the moment the last node was up and serving.
    let t0 = nodes
        .last()
        .unwrap()
        .wait_line(|l| l.contains("listening on"), STARTUP)
        .unwrap();
    let refs: Vec<&Node> = nodes.iter().collect();
    let done = converged(
        &refs,
        nodes[0]
            .wait_line(|l| l.contains("listening on"), STARTUP)
            .unwrap(),
        PATIENCE,
    )
    .unwrap_or_else(|| panic!("{n} nodes did not converge:\n{}", logs(&refs)));
    let took = done.saturating_duration_since(t0);
    eprintln!("{n} nodes converged {took:?} after the last one started");
    assert!(
        took <= CONVERGE,
        "{n} nodes converged {took:?} after the last started (limit {CONVERGE:?}):\n{}",
        logs(&refs)
    );
    // And every node's status agrees: n members, all alive. A member may be suspect for a
    // moment on a loaded machine (a probe answered late); that is still membership, so poll.
    for node in &nodes {
        let end = Instant::now() + PATIENCE;
        loop {
            let s = states(&status(node, &c.key));
            assert_eq!(s.len(), n, "{}: {s:?}", node.name);
            if s.iter().all(|(_, st)| st == "alive") {
                break;
            }
            assert!(
                s.iter().all(|(_, st)| st == "alive" || st == "suspect"),
                "{}: {s:?}",
                node.name
            );
            assert!(Instant::now() < end, "{}: {s:?}", node.name);
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn three_nodes_converge_within_2_s() {
    converge(3);
}

#[test]
fn five_nodes_converge_within_2_s() {
    converge(5);
}

#[test]
fn kill_9_is_seen_within_3_s_and_a_restart_rejoins() {
    let _g = serial();
    let c = Cluster::new("kill");
    let a = c.start("a", &[]);
    let b = c.start("b", &[&a]);
    let mut v = c.start("victim", &[&a]);
    let d = c.start("d", &[&b]);
    let all = [&a, &b, &d];
    converged(
        &[&a, &b, &v, &d],
        Instant::now() - Duration::from_secs(60),
        PATIENCE,
    )
    .unwrap_or_else(|| panic!("no convergence:\n{}", logs(&[&a, &b, &v, &d])));

    let killed = Instant::now();
    v.kill9();
    for n in all {
        let seen = n
            .saw("victim", "dead", killed, PATIENCE)
            .unwrap_or_else(|| panic!("{} never saw the victim dead:\n{}", n.name, logs(&all)));
        let took = seen.saturating_duration_since(killed);
        eprintln!("{} saw the victim dead {took:?} after kill -9", n.name);
        assert!(
            took <= DETECT,
            "{} saw the victim dead {took:?} after kill -9 (limit {DETECT:?}):\n{}",
            n.name,
            logs(&all)
        );
    }

    // Same name, same port: a new life that everyone accepts.
    let restarted = Instant::now();
    let v2 = c.start_with("victim", v.port, &[&d], &c.key, None);
    for n in all {
        n.saw("victim", "alive", restarted, PATIENCE)
            .unwrap_or_else(|| panic!("{} did not see the restart:\n{}", n.name, logs(&all)));
    }
    for other in ["a", "b", "d"] {
        v2.saw(other, "alive", restarted, PATIENCE)
            .unwrap_or_else(|| panic!("the restarted node did not see {other}:\n{}", v2.log()));
    }
    for n in all {
        let s = states(&status(n, &c.key));
        assert!(
            s.contains(&("victim".to_string(), "alive".to_string())),
            "{}: {s:?}",
            n.name
        );
    }
}

#[test]
fn a_node_that_leaves_says_so() {
    let _g = serial();
    let c = Cluster::new("leave");
    let a = c.start("a", &[]);
    let b = c.start("b", &[&a]);
    let mut l = c.start("leaver", &[&a]);
    converged(
        &[&a, &b, &l],
        Instant::now() - Duration::from_secs(60),
        PATIENCE,
    )
    .unwrap_or_else(|| panic!("no convergence:\n{}", logs(&[&a, &b, &l])));
    let t = Instant::now();
    let exit = l
        .terminate()
        .expect("SIGTERM did not stop the node within 10 s");
    assert!(exit.success(), "leaving exited with {exit}:\n{}", l.log());
    for n in [&a, &b] {
        n.saw("leaver", "left", t, PATIENCE)
            .unwrap_or_else(|| panic!("{} did not see the leave:\n{}", n.name, n.log()));
        let s = states(&status(n, &c.key));
        assert!(
            s.contains(&("leaver".to_string(), "left".to_string())),
            "{}: {s:?}",
            n.name
        );
    }
    assert!(a.saw("leaver", "dead", t, Duration::ZERO).is_none());
}

#[test]
fn a_node_with_the_wrong_key_is_refused_and_the_cluster_is_unharmed() {
    let _g = serial();
    let c = Cluster::new("wrongkey");
    let a = c.start("a", &[]);
    let b = c.start("b", &[&a]);
    converged(
        &[&a, &b],
        Instant::now() - Duration::from_secs(60),
        PATIENCE,
    )
    .unwrap();
    let other_key = c.dir.join("other.key");
    keygen(&other_key);
    let t = Instant::now();
    let intruder = c.start_with("intruder", free_port(), &[&a], &other_key, None);
    a.wait_line(|l| l.contains("refused a connection"), PATIENCE)
        .unwrap_or_else(|| panic!("a did not refuse the intruder:\n{}", logs(&[&a, &intruder])));
    // Give gossip time to spread anything it would have spread.
    std::thread::sleep(Duration::from_secs(2));
    for n in [&a, &b] {
        assert!(n.saw("intruder", "alive", t, Duration::ZERO).is_none());
        let s = states(&status(n, &c.key));
        assert_eq!(
            s,
            vec![("a".into(), "alive".into()), ("b".into(), "alive".into())],
            "{}",
            n.name
        );
    }
    // The intruder cannot even ask for the status.
    let out = std::process::Command::new(BIN)
        .args(["status", "--to", &a.addr])
        .arg("--cluster-key")
        .arg(&other_key)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert_ne!(out.status.code(), Some(101));
}

#[test]
fn a_partition_heals() {
    let _g = serial();
    let c = Cluster::new("partition");
    let a = c.start("a", &[]);
    let b = c.start("b", &[&a]);
    // c is cut from everyone from 3 s to 7 s after it starts (both directions, in its own
    // transport).
    let faults = "seed = 1\n[[rule]]\npeer = \"*\"\npartition = [[3.0, 7.0]]\n";
    let cn = c.start_with("c", free_port(), &[&a], &c.key, Some(faults));
    let nodes = [&a, &b, &cn];
    let start = Instant::now() - Duration::from_secs(60);
    converged(&nodes, start, PATIENCE).unwrap_or_else(|| panic!("{}", logs(&nodes)));
    let mut cut = Instant::now();
    for n in [&a, &b] {
        let t = n
            .saw("c", "dead", start, PATIENCE)
            .unwrap_or_else(|| panic!("{} never lost c:\n{}", n.name, logs(&nodes)));
        cut = cut.min(t);
    }
    cn.saw("a", "dead", start, PATIENCE)
        .unwrap_or_else(|| panic!("c never lost a:\n{}", logs(&nodes)));
    // Healed: both sides see the other alive again, after the cut.
    for (n, other) in [(&a, "c"), (&b, "c"), (&cn, "a"), (&cn, "b")] {
        n.saw(other, "alive", cut, PATIENCE)
            .unwrap_or_else(|| panic!("{} never saw {other} again:\n{}", n.name, logs(&nodes)));
    }
    for n in nodes {
        let s = states(&status(n, &c.key));
        assert!(s.iter().all(|(_, st)| st == "alive"), "{}: {s:?}", n.name);
    }
}

#[test]
fn lossy_slow_duplicating_links_do_not_kill_anyone() {
    let _g = serial();
    let c = Cluster::new("lossy");
    // Every datagram c sends or receives: 10 % lost, 10 % duplicated, 20 ms late.
    let faults = "seed = 42\n[[rule]]\npeer = \"*\"\ndrop = 0.1\nduplicate = 0.1\ndelay_ms = 20\n";
    let a = c.start("a", &[]);
    let b = c.start("b", &[&a]);
    let cn = c.start_with("c", free_port(), &[&a], &c.key, Some(faults));
    let nodes = [&a, &b, &cn];
    let start = Instant::now() - Duration::from_secs(60);
    converged(&nodes, start, PATIENCE).unwrap_or_else(|| panic!("{}", logs(&nodes)));
    std::thread::sleep(Duration::from_secs(5));
    for n in nodes {
        for other in ["a", "b", "c"] {
            assert!(
                n.saw(other, "dead", start, Duration::ZERO).is_none(),
                "{} declared {other} dead over a lossy link:\n{}",
                n.name,
                logs(&nodes)
            );
        }
    }
}

/// `vkml-node` started with `--name name`: it must refuse at once.
fn refused_name(c: &Cluster, name: &str) -> String {
    let port = free_port().to_string();
    let out = std::process::Command::new(BIN)
        .args(["--listen", &format!("127.0.0.1:{port}"), "--device", "cpu"])
        .arg("--name")
        .arg(name)
        .arg("--cluster-key")
        .arg(&c.key)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{name:?} was accepted");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn names_that_cannot_be_a_node_s_are_refused_at_start() {
    let c = Cluster::new("bad-names");
    // A newline would forge lines in every other node's log.
    let e = refused_name(
        &c,
        "n1\nINFO member n2 at 127.0.0.1:7002 (generation 1) is dead",
    );
    assert!(
        e.contains("--name: node name") && e.contains("'\\n'"),
        "{e}"
    );
    // 5,000 characters never fit a gossip packet: it could never join.
    let e = refused_name(&c, &"x".repeat(5000));
    assert!(
        e.contains("(5000 characters) is 5000 bytes long; at most 63"),
        "{e}"
    );
    let e = refused_name(&c, "");
    assert!(e.contains("cannot be empty"), "{e}");
}

/// A second node named like a running one: it stops with an error naming the first's
/// address, and the first, with everyone's view of it, is unchanged.
fn a_taken_name_is_refused(through_the_owner: bool) {
    let _g = serial();
    let c = Cluster::new("dup-name");
    let a = c.start("n1", &[]);
    let b = c.start("n2", &[&a]);
    converged(
        &[&a, &b],
        Instant::now() - Duration::from_secs(60),
        PATIENCE,
    )
    .unwrap_or_else(|| panic!("{}", logs(&[&a, &b])));
    // Joining through n1 itself, or through n2 (gossip then tells it of n1).
    let seed = if through_the_owner { &a } else { &b };
    let mut dup = c.start("n1", &[seed]);
    let status = dup.wait_exit(PATIENCE);
    let log = dup.log();
    assert!(
        status.is_some_and(|s| !s.success()),
        "the second n1 runs on:\n{log}"
    );
    assert!(
        log.contains("node names must be unique") && log.contains("another --name"),
        "{log}"
    );
    assert!(
        log.contains(&a.addr),
        "names where the first n1 runs:\n{log}"
    );
    std::thread::sleep(Duration::from_secs(1));
    for n in [&a, &b] {
        let s = status_of(n, &c);
        let n1 = s["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == "n1")
            .unwrap()
            .clone();
        assert_eq!(n1["addr"], a.addr.as_str(), "{}: {s}", n.name);
        assert_eq!(n1["state"], "alive");
    }
}

fn status_of(n: &Node, c: &Cluster) -> serde_json::Value {
    status(n, &c.key)
}

#[test]
fn a_second_node_with_a_taken_name_is_refused_by_its_owner() {
    a_taken_name_is_refused(true);
}

#[test]
fn a_second_node_with_a_taken_name_learned_by_gossip_stops() {
    a_taken_name_is_refused(false);
}
