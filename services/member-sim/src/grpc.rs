//! The `flotilla.v1.MemberSim` control service: faults in, the simulation's counters out.
//! The member's objects are served by its Kubernetes API (`kube.rs`), not here.

use std::sync::Arc;

use flotilla_proto::v1;
use flotilla_proto::v1::member_sim_server::MemberSim;
use flotilla_runtime::status::{Failure, to_status};
use tonic::{Request, Status};

use crate::sim::{Fault, FieldError, Sim};

/// A request field that is invalid: INVALID_ARGUMENT with one `google.rpc.BadRequest`
/// violation naming the field (the codes every Flotilla service uses).
fn invalid(field: FieldError) -> Status {
    let message = field.to_string();
    let violation = flotilla_core::validation::FieldError::invalid(
        &flotilla_core::validation::FieldPath::new(&field.field),
        field.message,
    );
    to_status(message, Failure::Invalid(&[violation]))
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

    async fn set_fault(
        &self,
        request: Request<v1::SetFaultRequest>,
    ) -> Result<v1::SetFaultResponse, Status> {
        let request = request.into_inner();
        let raw = request.mode;
        let fault = Fault::from_wire(raw).ok_or_else(|| {
            invalid(FieldError {
                field: "mode".into(),
                message: format!(
                    "must be FAULT_MODE_HEALTHY, FAULT_MODE_UNHEALTHY or FAULT_MODE_UNREACHABLE, not {raw}"
                ),
            })
        })?;
        if request.watch_delay_ms > crate::sim::MAX_WATCH_DELAY_MS {
            return Err(invalid(FieldError {
                field: "watch_delay_ms".into(),
                message: format!(
                    "must be at most {}, not {}",
                    crate::sim::MAX_WATCH_DELAY_MS,
                    request.watch_delay_ms
                ),
            }));
        }
        self.sim
            .set_api_errors(request.api_errors)
            .map_err(invalid)?;
        self.sim
            .set_watch_delay(std::time::Duration::from_millis(u64::from(
                request.watch_delay_ms,
            )))
            .map_err(invalid)?;
        let previous = self.sim.set_fault(fault);
        Ok(v1::SetFaultResponse {
            previous: previous.to_wire().into(),
        })
    }

    async fn get_stats(
        &self,
        _request: Request<v1::GetStatsRequest>,
    ) -> Result<v1::GetStatsResponse, Status> {
        Ok(self.sim.stats())
    }
}

flotilla_runtime::unary_service! {
    impl MemberSim for MemberSimService {
        set_fault(v1::SetFaultRequest) -> v1::SetFaultResponse = Self::set_fault;
        get_stats(v1::GetStatsRequest) -> v1::GetStatsResponse = Self::get_stats;
    }
}
