//! The `flotilla.v1.MemberSim` gRPC service: validate → call [`Sim`] → convert.

use std::sync::Arc;

use flotilla_proto::v1;
use flotilla_proto::v1::member_sim_server::MemberSim;
use flotilla_runtime::status::{Failure, to_status};
use tonic::{Request, Response, Status};

use crate::sim::{
    ApiCall, Fault, FieldError, InjectedError, LookupError, Sim, key_of, parse_apply,
};

/// The status of an injected API error (F11); a timeout first hangs for 30 s.
async fn injected(e: InjectedError) -> Status {
    match e {
        InjectedError::Unavailable => {
            Status::unavailable("injected (F11): the member's API answered 500")
        }
        InjectedError::Conflict => Status::aborted("injected (F11): 409 Conflict"),
        InjectedError::LostReply => Status::unavailable("injected (F11): the reply was lost"),
        InjectedError::Timeout => {
            tokio::time::sleep(std::time::Duration::from_secs(30)).await;
            Status::deadline_exceeded("injected (F11): the member's API did not answer")
        }
    }
}

/// Errors of the MemberSim RPCs, mapped to gRPC codes in one place.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request field is invalid (INVALID_ARGUMENT naming the field).
    #[error(transparent)]
    Invalid(#[from] FieldError),
    /// The object does not exist, or an empty kind is ambiguous.
    #[error(transparent)]
    Lookup(#[from] LookupError),
}

impl From<Error> for Status {
    /// The codes every Flotilla service uses (`flotilla_runtime::status`): INVALID_ARGUMENT
    /// with one `google.rpc.BadRequest` violation naming the field, or NOT_FOUND.
    fn from(e: Error) -> Self {
        let message = e.to_string();
        let field = match &e {
            Error::Invalid(f) => f.clone(),
            Error::Lookup(LookupError::Ambiguous { .. }) => FieldError {
                field: "resource.kind".into(),
                message: message.clone(),
            },
            Error::Lookup(LookupError::NotFound(_)) => {
                return to_status(message, Failure::NotFound);
            }
        };
        let invalid = flotilla_core::validation::FieldError::invalid(
            &flotilla_core::validation::FieldPath::new(&field.field),
            field.message,
        );
        to_status(message, Failure::Invalid(&[invalid]))
    }
}

fn required_resource(
    resource: Option<v1::ObjectReference>,
) -> Result<v1::ObjectReference, FieldError> {
    let r = resource.ok_or_else(|| FieldError {
        field: "resource".into(),
        message: "must be set".into(),
    })?;
    if r.name.is_empty() {
        return Err(FieldError {
            field: "resource.name".into(),
            message: "must not be empty".into(),
        });
    }
    Ok(r)
}

/// The MemberSim service over one [`Sim`].
#[derive(Clone, Debug)]
pub struct MemberSimService {
    sim: Arc<Sim>,
}

impl MemberSimService {
    /// Serves `sim`.
    pub fn new(sim: Arc<Sim>) -> Self {
        Self { sim }
    }
}

#[tonic::async_trait]
impl MemberSim for MemberSimService {
    async fn apply_manifest(
        &self,
        request: Request<v1::ApplyManifestRequest>,
    ) -> Result<Response<v1::ApplyManifestResponse>, Status> {
        let req = request.into_inner();
        let spec = parse_apply(&req.manifest, req.resource, req.replicas).map_err(Error::from)?;
        match self.sim.inject(ApiCall::Apply) {
            None => {}
            Some(InjectedError::LostReply) => {
                self.sim.apply(spec);
                return Err(Status::unavailable(
                    "injected (F11): applied, but the reply was lost",
                ));
            }
            Some(other) => return Err(injected(other).await),
        }
        let (created, status) = self.sim.apply(spec);
        Ok(Response::new(v1::ApplyManifestResponse {
            created,
            status: Some(status),
        }))
    }

    async fn delete_manifest(
        &self,
        request: Request<v1::DeleteManifestRequest>,
    ) -> Result<Response<v1::DeleteManifestResponse>, Status> {
        let r = required_resource(request.into_inner().resource).map_err(Error::from)?;
        if let Some(e) = self.sim.inject(ApiCall::Delete) {
            return Err(injected(e).await);
        }
        let deleted = self.sim.delete(&key_of(&r));
        Ok(Response::new(v1::DeleteManifestResponse { deleted }))
    }

    async fn get_manifest(
        &self,
        request: Request<v1::GetManifestRequest>,
    ) -> Result<Response<v1::GetManifestResponse>, Status> {
        let r = required_resource(request.into_inner().resource).map_err(Error::from)?;
        if let Some(e) = self.sim.inject(ApiCall::Status) {
            return Err(injected(e).await);
        }
        let status = self.sim.get(&key_of(&r)).map_err(Error::from)?;
        Ok(Response::new(v1::GetManifestResponse {
            status: Some(status),
        }))
    }

    async fn probe(
        &self,
        _request: Request<v1::ProbeRequest>,
    ) -> Result<Response<v1::ProbeResponse>, Status> {
        let (healthy, code, message) = self.sim.probe();
        Ok(Response::new(v1::ProbeResponse {
            healthy,
            http_status: i32::from(code),
            message: message.into(),
        }))
    }

    async fn set_fault(
        &self,
        request: Request<v1::SetFaultRequest>,
    ) -> Result<Response<v1::SetFaultResponse>, Status> {
        let request = request.into_inner();
        let raw = request.mode;
        let fault = Fault::from_wire(raw).ok_or_else(|| {
            Error::from(FieldError {
                field: "mode".into(),
                message: format!(
                    "must be FAULT_MODE_HEALTHY, FAULT_MODE_UNHEALTHY or FAULT_MODE_UNREACHABLE, not {raw}"
                ),
            })
        })?;
        self.sim
            .set_api_errors(request.api_errors)
            .map_err(Error::from)?;
        let previous = self.sim.set_fault(fault);
        Ok(Response::new(v1::SetFaultResponse {
            previous: previous.to_wire().into(),
        }))
    }

    async fn get_status(
        &self,
        _request: Request<v1::MemberSimGetStatusRequest>,
    ) -> Result<Response<v1::MemberSimGetStatusResponse>, Status> {
        // the work-executor collects every manifest's status with this call: a status-read
        // fault must reach it too, not only GetManifest
        if let Some(e) = self.sim.inject(ApiCall::Status) {
            return Err(injected(e).await);
        }
        Ok(Response::new(self.sim.status()))
    }
}
