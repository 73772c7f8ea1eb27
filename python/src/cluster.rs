//! A cluster from Python: a connection to one of its nodes, and models loaded through it,
//! which run with the same calls as a local session.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};

use pyo3::prelude::*;
use vkml::cluster::Secret;
use vkml::distributed::DistError;
use vkml::distributed::client::{ClusterClient, RemoteModel};

use crate::arrays;
use crate::errors::{ClusterError, InvalidInput, to_py};
use crate::session::{Arg, args};

/// A cluster error as a Python exception: the runtime's own kinds keep their classes.
fn dist_err(e: DistError) -> PyErr {
    match e {
        DistError::Runtime(e) => to_py(e),
        e => ClusterError::new_err(e.to_string()),
    }
}

/// Passes a load's progress to the Python callback, if any (its errors are printed: a
/// progress display must not fail the load).
fn report(progress: &Option<Py<PyAny>>, p: &vkml_protocol::pb::LoadProgress) {
    if let Some(cb) = progress {
        Python::attach(|py| {
            if let Err(e) = cb.call1(py, (&p.stage, p.done_bytes, p.total_bytes, &p.node)) {
                e.print(py);
            }
        });
    }
}

/// A connection to a node of a cluster (`vkml-node --listen ADDR --cluster-key FILE`).
#[pyclass(frozen, module = "vkml._vkml")]
pub struct Cluster {
    client: Mutex<Option<Arc<ClusterClient>>>,
}

impl Cluster {
    fn client(&self) -> PyResult<Arc<ClusterClient>> {
        self.client
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| ClusterError::new_err("the connection is closed"))
    }
}

#[pymethods]
impl Cluster {
    #[new]
    fn new(py: Python<'_>, addr: String, key_file: PathBuf) -> PyResult<Cluster> {
        let secret = Secret::read(&key_file).map_err(|e| {
            ClusterError::new_err(format!("the cluster key {}: {e}", key_file.display()))
        })?;
        let client = py
            .detach(|| ClusterClient::connect(&addr, &secret))
            .map_err(dist_err)?;
        Ok(Cluster {
            client: Mutex::new(Some(client)),
        })
    }

    /// Loads the model at `path` over the cluster; `progress(stage, done_bytes, total_bytes,
    /// node)` is called as it goes.
    #[pyo3(signature = (path, progress=None))]
    fn load(
        &self,
        py: Python<'_>,
        path: PathBuf,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<RemoteSession> {
        // The declared shapes and types, which the cluster's model does not carry.
        let declared = vkml::onnx::load(&path).map_err(|e| to_py(e.into()))?;
        let client = self.client()?;
        let model = py
            .detach(|| client.load(&path, |p| report(&progress, p)))
            .map_err(dist_err)?;
        let pick = |names: &[String], defs: &[vkml::model::ValueDef]| {
            args(
                names
                    .iter()
                    .map(|n| {
                        defs.iter().find(|d| &d.name == n).cloned().unwrap_or(
                            vkml::model::ValueDef {
                                name: n.clone(),
                                dtype: None,
                                dims: None,
                                kind: Default::default(),
                            },
                        )
                    })
                    .collect(),
            )
        };
        let inputs = pick(&model.inputs, &declared.graph.inputs);
        let outputs = pick(&model.outputs, &declared.graph.outputs);
        let nodes = model
            .placement
            .as_ref()
            .map(|p| p.parts.iter().map(|part| part.node.clone()).collect())
            .unwrap_or_default();
        Ok(RemoteSession {
            model: RwLock::new(Some(Arc::new(model))),
            inputs,
            outputs,
            nodes,
            path: path.display().to_string(),
        })
    }

    /// Loads the language model of folder `dir` (model.onnx, tokenizer.json) over the
    /// cluster, for generating text; each node keeps the caches of the layers it runs.
    #[pyo3(signature = (dir, progress=None))]
    fn load_generator(
        &self,
        py: Python<'_>,
        dir: PathBuf,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<crate::generate::Generator> {
        let client = self.client()?;
        let err = crate::generate::gen_err;
        py.detach(|| {
            let folder = vkml::generate::ModelFolder::open(&dir).map_err(err)?;
            let (model, io) = folder
                .load_on(&client, |p| report(&progress, p))
                .map_err(err)?;
            Ok(crate::generate::Generator::on_cluster(folder, model, io))
        })
    }

    /// Closes the connection once no model loaded through it is held.
    fn close(&self, py: Python<'_>) {
        let client = self.client.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(client) = client {
            py.detach(|| client.close());
        }
    }
}

/// A model loaded on a cluster.
#[pyclass(frozen, module = "vkml._vkml")]
pub struct RemoteSession {
    /// Shared by the runs in flight (concurrent runs pipeline through the nodes); taken by
    /// `unload`.
    model: RwLock<Option<Arc<RemoteModel>>>,
    inputs: Vec<Arg>,
    outputs: Vec<Arg>,
    /// The nodes its plan uses (empty where its sizes are symbolic: planned per run).
    nodes: Vec<String>,
    path: String,
}

#[pymethods]
impl RemoteSession {
    fn inputs(&self) -> Vec<Arg> {
        self.inputs.clone()
    }

    fn outputs(&self) -> Vec<Arg> {
        self.outputs.clone()
    }

    /// The nodes its plan put parts on.
    fn nodes(&self) -> Vec<String> {
        self.nodes.clone()
    }

    /// Runs once over the cluster; as `Session.run`.
    #[pyo3(signature = (names, feeds))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        names: Option<Vec<String>>,
        feeds: &Bound<'py, PyAny>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let all: Vec<String> = self.outputs.iter().map(|o| o.0.clone()).collect();
        let wanted = crate::session::wanted(&all, names.as_deref())?;
        let feeds = arrays::Feeds::new(feeds, arrays::Lend::Copy)?;
        let model = self
            .model
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| {
                InvalidInput::new_err(format!("{} was unloaded from the cluster", self.path))
            })?;
        let out = py.detach(|| model.run(&feeds.inputs())).map_err(dist_err)?;
        wanted
            .into_iter()
            .map(|i| arrays::to_numpy(py, &out.outputs[i].1))
            .collect()
    }

    /// Unloads the model from the cluster; later runs fail. With runs still in flight on
    /// other threads the model goes when the last of them ends.
    fn unload(&self, py: Python<'_>) -> PyResult<()> {
        let model = self.model.write().unwrap_or_else(|p| p.into_inner()).take();
        match model.map(Arc::try_unwrap) {
            Some(Ok(m)) => py.detach(|| m.unload()).map_err(dist_err),
            // Dropping the last handle asks the nodes to unload it.
            Some(Err(_)) | None => Ok(()),
        }
    }
}
