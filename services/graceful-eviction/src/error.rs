//! The service's error: the controllers' shared [`flotilla_runtime::ServiceError`], mapped
//! onto `tonic::Status` in one place for every service (`flotilla_runtime::status`).

pub use flotilla_runtime::ServiceError as Error;
