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
        let endpoint = transport::endpoint(&tls, bind, false)?;
        let hello = vkml_protocol::hello("vkml-client", pb::Role::Client, 0);
        let (conn, _) = transport::connect(&endpoint, addr, hello).await?;
        Ok(Client { endpoint, conn })
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
            Message::StatusReply(r) => Ok(r),
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
