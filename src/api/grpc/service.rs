//! `inference.GRPCInferenceService`: each call translated to the function the HTTP route
//! calls (`health.rs`, `models.rs`, `repository.rs`, `infer.rs`, `stats.rs`,
//! `regions.rs`) and its answer back.
//! The calls that change state or infer need the tokens their HTTP routes need
//! (`access.rs`, as `authorization: Bearer <token>` metadata); reading calls are open.

use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};

use super::super::error::ApiError;
use super::super::regions::RegionStatus;
use super::super::stats::{self, Duration, ModelStat};
use super::super::{health, models, repository, ApiState};
use super::proto::grpc_inference_service_server::GrpcInferenceService;
use super::proto::model_metadata_response::TensorMetadata;
use super::proto::repository_index_response::ModelIndex;
use super::proto::system_shared_memory_status_response::RegionStatus as ProtoRegion;
use super::proto::*;
use super::status::status;
use super::{config, infer, stream};
use crate::config::Role;
use crate::outcome::Outcome;

/// The service over the API's state.
pub struct GrpcApi {
    /// What every HTTP handler reaches too.
    pub state: ApiState,
    /// Cancelled when the server shuts down: open streams then end (`stream.rs`).
    pub streams: CancellationToken,
}

type Answer<T> = Result<Response<T>, Status>;

/// A string field as given: proto3 has no absent string, so an empty one is none (an
/// empty version: the one the server serves; an empty name where a call takes one or all,
/// regions or statistics: all).
fn given(field: &str) -> Option<&str> {
    Some(field).filter(|f| !f.is_empty())
}

/// Lets a call of `role` through if the access rules of the HTTP routes (`access.rs`)
/// accept its `authorization` metadata; a refusal is counted as HTTP's are.
fn allowed<T>(state: &ApiState, request: &Request<T>, role: Role) -> Result<(), Status> {
    let authorization = request.metadata().get("authorization");
    let checked = state
        .access
        .check(role, authorization.map(|v| v.as_bytes()));
    checked.map_err(|refusal| {
        state.metrics.api_error(&refusal, None);
        status(&refusal)
    })
}

fn answer<T>(result: Result<T, ApiError>) -> Answer<T> {
    result.map(Response::new).map_err(|e| status(&e))
}

#[tonic::async_trait]
impl GrpcInferenceService for GrpcApi {
    async fn server_live(&self, _: Request<ServerLiveRequest>) -> Answer<ServerLiveResponse> {
        Ok(Response::new(ServerLiveResponse { live: true }))
    }

    async fn server_ready(&self, _: Request<ServerReadyRequest>) -> Answer<ServerReadyResponse> {
        let ready = health::admitting(&self.state).await;
        Ok(Response::new(ServerReadyResponse { ready }))
    }

    /// Not ready (rather than an error) for a model that is known but not servable now;
    /// an unknown model or version is NOT_FOUND.
    async fn model_ready(&self, request: Request<ModelReadyRequest>) -> Answer<ModelReadyResponse> {
        let r = request.into_inner();
        let checked = models::check_ready(&self.state, &r.name, given(&r.version)).await;
        match checked {
            Ok(()) => Ok(Response::new(ModelReadyResponse { ready: true })),
            Err(e) if matches!(e.kind(), Outcome::UnknownModel | Outcome::UnknownVersion) => {
                Err(status(&e))
            }
            Err(_) => Ok(Response::new(ModelReadyResponse { ready: false })),
        }
    }

    async fn server_metadata(
        &self,
        _: Request<ServerMetadataRequest>,
    ) -> Answer<ServerMetadataResponse> {
        let server = health::identity();
        Ok(Response::new(ServerMetadataResponse {
            name: server.name,
            version: server.version,
            extensions: server.extensions,
        }))
    }

    async fn model_metadata(
        &self,
        request: Request<ModelMetadataRequest>,
    ) -> Answer<ModelMetadataResponse> {
        let r = request.into_inner();
        let tensor = |t: models::TensorMetadata| TensorMetadata {
            name: t.name,
            datatype: t.datatype,
            shape: t.shape,
        };
        answer(
            models::describe(&self.state, &r.name, given(&r.version)).map(|m| {
                ModelMetadataResponse {
                    name: m.name,
                    versions: m.versions,
                    platform: m.platform,
                    inputs: m.inputs.into_iter().map(tensor).collect(),
                    outputs: m.outputs.into_iter().map(tensor).collect(),
                }
            }),
        )
    }

    async fn model_infer(&self, request: Request<ModelInferRequest>) -> Answer<ModelInferResponse> {
        allowed(&self.state, &request, Role::Infer)?;
        infer::infer(&self.state, request).await
    }

    type ModelStreamInferStream = stream::Answers;

    async fn model_stream_infer(
        &self,
        request: Request<Streaming<ModelInferRequest>>,
    ) -> Answer<Self::ModelStreamInferStream> {
        allowed(&self.state, &request, Role::Infer)?;
        let requests = request.into_inner();
        let (state, closing) = (self.state.clone(), self.streams.clone());
        Ok(Response::new(stream::serve(state, requests, closing)))
    }

    async fn model_config(
        &self,
        request: Request<ModelConfigRequest>,
    ) -> Answer<ModelConfigResponse> {
        let r = request.into_inner();
        let json = models::configuration(&self.state, &r.name, given(&r.version));
        answer(json.map(|c| ModelConfigResponse {
            config: Some(config::from_json(&c)),
        }))
    }

    /// `ready`: only the models ready; otherwise every model.
    async fn repository_index(
        &self,
        request: Request<RepositoryIndexRequest>,
    ) -> Answer<RepositoryIndexResponse> {
        let ready = request.into_inner().ready.then_some(true);
        let models = repository::entries(&self.state, ready)
            .into_iter()
            .map(|e| ModelIndex {
                name: e.name,
                version: e.version,
                state: e.state,
                reason: e.reason,
            });
        Ok(Response::new(RepositoryIndexResponse {
            models: models.collect(),
        }))
    }

    async fn repository_model_load(
        &self,
        request: Request<RepositoryModelLoadRequest>,
    ) -> Answer<RepositoryModelLoadResponse> {
        allowed(&self.state, &request, Role::Admin)?;
        let r = request.into_inner();
        let loaded = async {
            repository::refuse_overrides(r.parameters.keys().map(String::as_str))?;
            repository::load_model(&self.state, r.model_name).await
        };
        answer(loaded.await.map(|()| RepositoryModelLoadResponse {}))
    }

    async fn repository_model_unload(
        &self,
        request: Request<RepositoryModelUnloadRequest>,
    ) -> Answer<RepositoryModelUnloadResponse> {
        allowed(&self.state, &request, Role::Admin)?;
        let r = request.into_inner();
        let unloaded = repository::refuse_overrides(r.parameters.keys().map(String::as_str))
            .and_then(|()| repository::unload_model(&self.state, &r.model_name));
        answer(unloaded.map(|()| RepositoryModelUnloadResponse {}))
    }

    async fn system_shared_memory_status(
        &self,
        request: Request<SystemSharedMemoryStatusRequest>,
    ) -> Answer<SystemSharedMemoryStatusResponse> {
        let name = request.into_inner().name;
        let listed = self.state.regions.status(given(&name));
        let region = |r: RegionStatus| {
            let status = ProtoRegion {
                name: r.name.clone(),
                key: r.key,
                offset: r.offset,
                byte_size: r.byte_size,
            };
            (r.name, status)
        };
        answer(listed.map(|all| SystemSharedMemoryStatusResponse {
            regions: all.into_iter().map(region).collect(),
        }))
    }

    async fn system_shared_memory_register(
        &self,
        request: Request<SystemSharedMemoryRegisterRequest>,
    ) -> Answer<SystemSharedMemoryRegisterResponse> {
        allowed(&self.state, &request, Role::Admin)?;
        let r = request.into_inner();
        let registered = self.state.regions.register(RegionStatus {
            name: r.name,
            key: r.key,
            offset: r.offset,
            byte_size: r.byte_size,
        });
        answer(registered.map(|()| SystemSharedMemoryRegisterResponse {}))
    }

    async fn system_shared_memory_unregister(
        &self,
        request: Request<SystemSharedMemoryUnregisterRequest>,
    ) -> Answer<SystemSharedMemoryUnregisterResponse> {
        allowed(&self.state, &request, Role::Admin)?;
        let name = request.into_inner().name;
        let unregistered = self.state.regions.unregister(given(&name));
        answer(unregistered.map(|()| SystemSharedMemoryUnregisterResponse {}))
    }

    /// An empty name: every model and pipeline; an empty version: the one served.
    async fn model_statistics(
        &self,
        request: Request<ModelStatisticsRequest>,
    ) -> Answer<ModelStatisticsResponse> {
        let r = request.into_inner();
        let selected = stats::select(&self.state, given(&r.name), given(&r.version));
        answer(selected.map(|all| ModelStatisticsResponse {
            model_stats: all.into_iter().map(model_statistics).collect(),
        }))
    }
}

/// One entry of the statistics extension as its message.
fn model_statistics(stat: ModelStat) -> ModelStatistics {
    let d = |d: Duration| {
        Some(StatisticDuration {
            count: d.count,
            ns: d.ns,
        })
    };
    let s = stat.inference_stats;
    ModelStatistics {
        name: stat.name,
        version: stat.version,
        last_inference: stat.last_inference,
        inference_count: stat.inference_count,
        execution_count: stat.execution_count,
        inference_stats: Some(InferStatistics {
            success: d(s.success),
            fail: d(s.fail),
            queue: d(s.queue),
            compute_input: d(s.compute_input),
            compute_infer: d(s.compute_infer),
            compute_output: d(s.compute_output),
            cache_hit: d(s.cache_hit),
            cache_miss: d(s.cache_miss),
        }),
        batch_stats: stat
            .batch_stats
            .into_iter()
            .map(|b| InferBatchStatistics {
                batch_size: b.batch_size,
                compute_input: d(b.compute_input),
                compute_infer: d(b.compute_infer),
                compute_output: d(b.compute_output),
            })
            .collect(),
    }
}
