//! A tool's side of the protocol (`vkml-node status`, tests): connect with the key as a
//! client, say hello, ask.

use std::net::SocketAddr;
use std::time::Duration;

use quinn::{Connection, Endpoint};
use vkml_protocol::{Message, pb};

use super::ClusterError;
use super::secret::Secret;
use super::tls::NodeTls;
use super::transport;

/// A client connection to one node.
pub struct Client {
    pub endpoint: Endpoint,
    pub conn: Connection,
    /// The node's name, as its welcome said, and its address: errors name them.
    pub node: String,
    pub addr: SocketAddr,
}

impl Client {
    pub async fn connect(to: &str, secret: &Secret) -> Result<Client, ClusterError> {
        let addr: SocketAddr = tokio::net::lookup_host(to)
            .await
            .map_err(|e| ClusterError::Config(format!("cannot resolve {to}: {e}")))?
            .next()
            .ok_or_else(|| ClusterError::Config(format!("{to} resolves to nothing")))?;
        let tls = NodeTls::new(secret, "vkml-client")?;
        let bind: SocketAddr = if addr.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let mut endpoint = transport::endpoint(&tls, bind, false)?;
        let mut cfg = tls.client_config(addr.ip().is_loopback())?;
        cfg.transport_config(transport::tool_transport_config(addr.ip().is_loopback()));
        endpoint.set_default_client_config(cfg);
        let hello = vkml_protocol::hello("vkml-client", pb::Role::Client, 0);
        let (conn, peer) = transport::connect(&endpoint, addr, hello.clone()).await?;
        // The node serves requests on its data endpoint: its listen address is gossip's.
        let data: Option<SocketAddr> = peer.data_addr.parse().ok().filter(|d| *d != addr);
        let Some(data) = data else {
            return Ok(Client {
                endpoint,
                conn,
                node: peer.name,
                addr,
            });
        };
        let (data_conn, _) = transport::connect(&endpoint, data, hello).await?;
        conn.close(quinn::VarInt::from_u32(0), b"moved to the data endpoint");
        Ok(Client {
            endpoint,
            conn: data_conn,
            node: peer.name,
            addr: data,
        })
    }

    /// What became of the connection, naming the node, once it is closed: why a request on
    /// it failed.
    pub fn lost(&self) -> Option<String> {
        let why = self.conn.close_reason()?;
        let what = match &why {
            quinn::ConnectionError::TimedOut => format!(
                "stopped answering (nothing for {} s: it died, or the network to it failed)",
                transport::TOOL_IDLE.as_secs()
            ),
            quinn::ConnectionError::ApplicationClosed(c) if c.reason.as_ref() == b"leaving" => {
                "left the cluster (it was stopped)".to_string()
            }
            quinn::ConnectionError::ApplicationClosed(c) => format!(
                "closed the connection ({})",
                String::from_utf8_lossy(&c.reason)
            ),
            quinn::ConnectionError::Reset => "reset the connection (it restarted?)".to_string(),
            quinn::ConnectionError::LocallyClosed => return None,
            other => format!("is unreachable: {other}"),
        };
        Some(format!("node {} at {} {what}", self.node, self.addr))
    }

    /// One request, one reply.
    pub async fn request(&self, m: &Message) -> Result<Message, ClusterError> {
        let work = async {
            let (mut send, mut recv) = self
                .conn
                .open_bi()
                .await
                .map_err(|e| ClusterError::Peer(e.to_string()))?;
            transport::write_message(&mut send, m).await?;
            let _ = send.finish();
            transport::read_message(&mut recv)
                .await?
                .ok_or_else(|| ClusterError::Peer("no reply".into()))
        };
        tokio::time::timeout(Duration::from_secs(10), work)
            .await
            .map_err(|_| ClusterError::Peer("no reply within 10 s".into()))?
    }

    pub async fn status(&self) -> Result<pb::StatusReply, ClusterError> {
        match self
            .request(&Message::StatusRequest(pb::StatusRequest {}))
            .await?
        {
            Message::StatusReply(r) => Ok(*r),
            Message::Error(e) => Err(ClusterError::Peer(e.message)),
            other => Err(ClusterError::Protocol(format!(
                "unexpected answer {:?}",
                other.kind()
            ))),
        }
    }

    pub async fn close(self) {
        self.conn.close(
            quinn::VarInt::from_u32(vkml_protocol::error_code::OK),
            b"bye",
        );
        let _ = tokio::time::timeout(Duration::from_secs(1), self.endpoint.wait_idle()).await;
    }
}
