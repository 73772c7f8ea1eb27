//! The frames target: a node started inside the worker (CPU backend, its own key) and
//! connections to it that hold the key, as a client and as a member. Each case is a short
//! conversation: a model submitted and run, a participant's fragment and its weights, or a
//! soup of frames, any of them mutated field by field (see `protowire`) or byte by byte.
//! After each case the node must still answer a status request within 5 s; a node that does
//! not, or that panics in any task, is a finding.

mod fragments;
mod models;
mod talk;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arbitrary::{Result, Unstructured};
use vkml::cluster::{Cluster, ClusterConfig, Secret};
use vkml::distributed::Exec;
use vkml_protocol::{Message, pb};

use talk::{Conn, End};

/// How long a node may take to answer a status request after a case.
const LIVENESS: Duration = Duration::from_secs(5);

pub struct Target {
    rt: tokio::runtime::Runtime,
    secret: Secret,
    addr: SocketAddr,
    cluster: Cluster,
    _exec: Arc<Exec>,
    client: Option<Conn>,
    member: Option<Conn>,
    models: Vec<Vec<u8>>,
    fragments: Vec<fragments::Built>,
    cases: u64,
}

impl Target {
    pub fn start() -> std::result::Result<Target, String> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let secret = Secret::generate().map_err(|e| e.to_string())?;
        let tuning = vkml::Tuning::default();
        let (devices, inventory) = vkml::cluster::inventory::local_devices(
            vkml::DeviceSelection::Cpu,
            Some(256 << 20),
            &tuning.vulkan,
            // Estimated figures: the fuzz target plans nothing worth measuring for.
            |_| Vec::new(),
        )
        .map_err(|e| e.to_string())?;
        let cfg = ClusterConfig {
            name: "target".into(),
            listen: "127.0.0.1:0".parse().expect("an address"),
            advertise: None,
            join: Vec::new(),
            secret: secret.clone(),
            devices: inventory.clone(),
            tuning,
            tensor_lanes: vkml::cluster::tensors::default_lanes(),
            faults: None,
            lease_grace: vkml::cluster::DEFAULT_LEASE_GRACE,
            sequence_idle: vkml::cluster::DEFAULT_SEQUENCE_IDLE,
            data_listen: None,
        };
        let (cluster, exec) = rt.block_on(async {
            let cluster = Cluster::start(cfg).await.map_err(|e| e.to_string())?;
            let weights = vkml::distributed::weights::WeightStore::new(None, None);
            let exec = Exec::start(cluster.clone(), devices, inventory, weights);
            Ok::<_, String>((cluster, exec))
        })?;
        let addr = cluster.addr();
        let models = models::all();
        let fragments = models
            .iter()
            .filter_map(|m| fragments::build(m, &cluster).ok())
            .collect();
        Ok(Target {
            rt,
            secret,
            addr,
            cluster,
            _exec: exec,
            client: None,
            member: None,
            models,
            fragments,
            cases: 0,
        })
    }

    /// Runs one case; its outcome's name. Panics when the node stops answering.
    pub fn run(&mut self, data: &[u8]) -> String {
        self.cases += 1;
        // Connections are reused between cases (a handshake costs more than a case), and
        // renewed now and then so that what a case left open is let go.
        if self.cases.is_multiple_of(64) {
            self.client = None;
            self.member = None;
        }
        let mut u = Unstructured::new(data);
        let outcome = match u.int_in_range(0..=3u8).unwrap_or(0) {
            0 => self.submit_and_run(&mut u),
            1 => self.fragment(&mut u),
            _ => self.soup(&mut u),
        }
        .unwrap_or_else(|e| format!("case ended early: {e}"));
        self.check_alive();
        outcome
    }

    fn conn(&mut self, member: bool) -> std::result::Result<Conn, String> {
        let slot = if member {
            &mut self.member
        } else {
            &mut self.client
        };
        if let Some(c) = slot
            && c.is_open()
        {
            return Ok(c.clone());
        }
        let c = self
            .rt
            .block_on(Conn::open(&self.secret, self.addr, member))?;
        *slot = Some(c.clone());
        Ok(c)
    }

    fn check_alive(&mut self) {
        for attempt in 0..2 {
            let alive = self.conn(false).and_then(|c| {
                self.rt.block_on(async {
                    tokio::time::timeout(
                        LIVENESS,
                        c.ask(Message::StatusRequest(pb::StatusRequest {})),
                    )
                    .await
                    .map_err(|_| "no status reply".to_string())?
                })
            });
            match alive {
                Ok(Some(Message::StatusReply(_))) => return,
                // Our connection may have been closed for the case's frames: a new one must
                // be served.
                _ if attempt == 0 => self.client = None,
                other => panic!(
                    "the node stopped answering: no status reply within {} s after case {} ({other:?})",
                    LIVENESS.as_secs(),
                    self.cases
                ),
            }
        }
    }

    /// A client's conversation: submit one of the models (maybe damaged), run it (inputs
    /// maybe wrong), unload it.
    fn submit_and_run(&mut self, u: &mut Unstructured) -> Result<String> {
        let conn = match self.conn(false) {
            Ok(c) => c,
            Err(e) => return Ok(format!("submit|no connection: {e}")),
        };
        let mut model = u.choose(&self.models)?.clone();
        let submit = talk::submit(u, &mut model)?;
        let reply = self
            .rt
            .block_on(conn.exchange(submit, End::Finish, Duration::from_secs(10)));
        let Some(Message::Loaded(loaded)) = reply.first else {
            return Ok(format!("submit|{}", reply.class));
        };
        let run = talk::run(u, loaded.model_id)?;
        let ran = self
            .rt
            .block_on(conn.exchange(run, End::Finish, Duration::from_secs(10)));
        let unload = talk::frame(&Message::Unload(pb::Unload {
            model_id: loaded.model_id,
            reason: "fuzz case done".into(),
            keep_weights: false,
        }));
        let _ = self
            .rt
            .block_on(conn.exchange(unload, End::Finish, Duration::from_secs(5)));
        Ok(format!("submit|loaded|run {}", ran.class))
    }

    /// A member's conversation: a fragment of one of the models with its weights, mutated and
    /// mostly re-hashed so that it passes the plan check; unloaded again when it loads.
    fn fragment(&mut self, u: &mut Unstructured) -> Result<String> {
        if self.fragments.is_empty() {
            return Ok("fragment|none built".into());
        }
        let conn = match self.conn(true) {
            Ok(c) => c,
            Err(e) => return Ok(format!("fragment|no connection: {e}")),
        };
        let built = u.choose(&self.fragments)?;
        let (bytes, model_id) = fragments::mutated(u, built)?;
        let reply = self
            .rt
            .block_on(conn.exchange(bytes, End::Finish, Duration::from_secs(10)));
        if let Some(Message::LoadAck(ack)) = &reply.first
            && ack.ok
        {
            let unload = talk::frame(&Message::Unload(pb::Unload {
                model_id,
                reason: "fuzz case done".into(),
                keep_weights: false,
            }));
            let _ = self.rt.block_on(conn.send_uni(unload));
        }
        Ok(format!("fragment|{}", reply.class))
    }

    /// One to three streams of frames: messages of every kind with fields mutated, raw
    /// headers, stray bytes; ended cleanly, reset, or left open.
    fn soup(&mut self, u: &mut Unstructured) -> Result<String> {
        let member = u.ratio(1, 2)?;
        let conn = match self.conn(member) {
            Ok(c) => c,
            Err(e) => return Ok(format!("soup|no connection: {e}")),
        };
        let mut outcome = format!("soup {}", if member { "member" } else { "client" });
        for _ in 0..u.int_in_range(1..=3)? {
            let bytes = talk::soup(u, &self.models)?;
            let end = *u.choose(&[End::Finish, End::Finish, End::Reset, End::Open])?;
            let reply = if u.ratio(3, 4)? {
                self.rt
                    .block_on(conn.exchange(bytes, end, Duration::from_millis(300)))
            } else {
                self.rt.block_on(conn.send_uni(bytes))
            };
            outcome.push('|');
            outcome.push_str(&reply.class);
        }
        Ok(outcome)
    }

    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }
}
