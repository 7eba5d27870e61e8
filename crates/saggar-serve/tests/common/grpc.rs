//! A minimal client of `inference.GRPCInferenceService` over tonic, for the tests and the load
//! generator (`benches/gpu_serve_load.rs`): one unary call per method, with saggar-serve's own
//! message types.

use saggar_serve::grpc::proto;
use tonic::transport::Channel;

/// A connected client.
#[derive(Debug, Clone)]
pub struct Client {
    grpc: tonic::client::Grpc<Channel>,
}

impl Client {
    /// Connects to `addr` (`127.0.0.1:8001`).
    pub async fn connect(addr: std::net::SocketAddr) -> Result<Client, tonic::transport::Error> {
        let channel = Channel::from_shared(format!("http://{addr}")).expect("valid uri").connect().await?;
        Ok(Client { grpc: tonic::client::Grpc::new(channel).max_decoding_message_size(usize::MAX) })
    }

    /// One unary call of `method`.
    pub async fn call<Req, Resp>(&mut self, method: &'static str, request: Req) -> Result<Resp, tonic::Status>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        self.grpc.ready().await.map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        let path = http::uri::PathAndQuery::from_static(method);
        let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
        self.grpc.unary(tonic::Request::new(request), path, codec).await.map(tonic::Response::into_inner)
    }

    /// `ModelInfer`.
    pub async fn infer(
        &mut self,
        request: proto::ModelInferRequest,
    ) -> Result<proto::ModelInferResponse, tonic::Status> {
        self.call("/inference.GRPCInferenceService/ModelInfer", request).await
    }
}
