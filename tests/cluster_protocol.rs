//! The peer protocol against a real node: malformed and oversized frames are rejected without
//! a crash, unknown versions are refused with a reason, a node will not start without a key,
//! and `status` prints its table.

mod cluster_harness;

use std::time::Duration;

use cluster_harness::*;
use vkml::cluster::client::Client;
use vkml::cluster::tls::NodeTls;
use vkml::cluster::{ClusterError, Secret, transport};
use vkml_protocol::{Message, pb};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Sends raw bytes on a new stream; returns what the node answered (a frame, or an error).
async fn raw(client: &Client, bytes: &[u8]) -> Result<Option<Message>, ClusterError> {
    let (mut send, mut recv) = client.conn.open_bi().await.unwrap();
    let _ = send.write_all(bytes).await;
    let _ = send.finish();
    tokio::time::timeout(Duration::from_secs(10), transport::read_message(&mut recv))
        .await
        .expect("the node did not answer within 10 s")
}

#[test]
fn malformed_and_oversized_frames_are_rejected_and_the_node_lives_on() {
    let _g = serial();
    let c = Cluster::new("frames");
    let mut a = c.start("a", &[]);
    let secret = Secret::read(&c.key).unwrap();
    rt().block_on(async {
        let client = Client::connect(&a.addr, &secret).await.unwrap();
        let cases: [(&str, Vec<u8>); 5] = [
            // A Hello claiming 4 GiB: refused from its header.
            ("oversized", vec![1, 0xff, 0xff, 0xff, 0xff]),
            // A status reply claiming 2 MiB (its cap is 1 MiB).
            ("over cap", vec![7, 0, 0x20, 0, 0]),
            ("unknown kind", vec![99, 0, 0, 0, 0]),
            // A Hello body that is a broken varint.
            ("garbage body", vec![1, 0, 0, 0, 2, 0x08, 0xff]),
            // A header promising 100 bytes, then the end of the stream.
            ("truncated", vec![6, 0, 0, 0, 100, 1, 2, 3]),
        ];
        for (what, bytes) in cases {
            match raw(&client, &bytes).await {
                Ok(Some(Message::Error(e))) => assert_eq!(
                    e.code,
                    vkml_protocol::error_code::BAD_FRAME,
                    "{what}: {e:?}"
                ),
                other => panic!("{what}: expected a BAD_FRAME error, got {other:?}"),
            }
        }
        // Same connection, still served.
        let s = client.status().await.unwrap();
        assert_eq!(s.members.len(), 1);
        client.close().await;
    });
    assert!(a.running(), "the node died:\n{}", a.log());
}

#[test]
fn an_unknown_version_is_refused_with_a_reason() {
    let _g = serial();
    let c = Cluster::new("version");
    let a = c.start("a", &[]);
    let secret = Secret::read(&c.key).unwrap();
    rt().block_on(async {
        let tls = NodeTls::new(&secret, "future").unwrap();
        let ep = transport::endpoint(&tls, "127.0.0.1:0".parse().unwrap(), false).unwrap();
        let hello = pb::Hello {
            min_version: 90,
            max_version: 99,
            name: "future".into(),
            role: pb::Role::Member as i32,
            generation: 1,
        };
        let Err(err) = transport::connect(&ep, a.addr.parse().unwrap(), hello).await else {
            panic!("a node speaking versions 90..=99 was accepted");
        };
        let text = err.to_string();
        assert!(
            text.contains("speaks protocol versions 90..=99"),
            "unclear refusal: {text}"
        );
    });
}

#[test]
fn no_key_no_start_and_insecure_only_on_loopback() {
    let out = std::process::Command::new(BIN)
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--cluster-key"), "{err}");
    let out = std::process::Command::new(BIN)
        .args(["--listen", "0.0.0.0:0", "--insecure"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("only on a loopback"), "{err}");
}

#[test]
fn keygen_writes_an_owner_only_key_and_will_not_overwrite() {
    use std::os::unix::fs::PermissionsExt;
    let c = Cluster::new("keygen");
    let mode = std::fs::metadata(&c.key).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let text = std::fs::read_to_string(&c.key).unwrap();
    assert_eq!(text.trim().len(), 64, "32 bytes in hex");
    let out = std::process::Command::new(BIN)
        .arg("keygen")
        .arg("--out")
        .arg(&c.key)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert_eq!(std::fs::read_to_string(&c.key).unwrap(), text);
}

#[test]
fn status_prints_a_table_with_devices() {
    let _g = serial();
    let c = Cluster::new("table");
    let a = c.start("a", &[]);
    let out = std::process::Command::new(BIN)
        .args(["status", "--to", &a.addr])
        .arg("--cluster-key")
        .arg(&c.key)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("NAME"), "{text}");
    assert!(lines[1].starts_with("a "), "{text}");
    assert!(
        lines[1].contains("alive") && lines[1].contains(&a.addr),
        "{text}"
    );
    assert!(lines[1].contains("cpu"), "{text}");
    let json = status(&a, &c.key);
    assert_eq!(json["members"][0]["devices"][0]["kind"], "cpu");
}

#[test]
fn a_node_starts_from_a_config_file_and_flags_override_it() {
    let _g = serial();
    let c = Cluster::new("config");
    let port = free_port();
    // The key path is relative to the config file.
    let cfg = c.dir.join("node.toml");
    std::fs::write(
        &cfg,
        format!(
            "name = \"from-file\"\nlisten = \"127.0.0.1:{port}\"\ncluster_key = \"cluster.key\"\ndevice = \"cpu\"\ndevice_memory_limit = 1048576\n"
        ),
    )
    .unwrap();
    let mut cmd = std::process::Command::new(BIN);
    cmd.arg("--config").arg(&cfg).args(["--name", "from-flag"]);
    let node = spawn(cmd, "from-flag", port);
    let s = status(&node, &c.key);
    assert_eq!(s["members"][0]["name"], "from-flag");
    assert_eq!(s["members"][0]["devices"][0]["memory_budget"], 1048576);
    // Unknown keys are refused, naming the file.
    std::fs::write(&cfg, "listen = \"127.0.0.1:1\"\nlisten_port = 3\n").unwrap();
    let out = std::process::Command::new(BIN)
        .arg("--config")
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("node.toml"), "{err}");
}
