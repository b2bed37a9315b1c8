//! Flotilla in Kubernetes' terms:
//!
//! - [`form`]: every object in its Kubernetes form (`apiVersion`, `kind`, `metadata`, `spec`,
//!   `status`, Karmada's spellings), the one printer of `flotilla get -o yaml|json` and of the
//!   Kubernetes API;
//! - [`http`]: the pieces every Kubernetes API server of Flotilla's shares (member-sim's and
//!   the gateway's): `Status` failures, `/version`, discovery documents, request paths, watch
//!   event lines;
//! - [`manifest`]: the reader of Kubernetes-form documents (Karmada's YAML, JSON bodies):
//!   parsed, defaulted and validated into the api's wire objects, for `flotilla apply -f` and
//!   the gateway's writes alike;
//! - [`kubeconfig`]: a kubeconfig for the gateway (`flotilla kubeconfig`,
//!   `flotilla up --write-kubeconfig`);
//! - [`smp`]: strategic merge patch of Kubernetes' built-in kinds (what client-side
//!   `kubectl apply` sends for them);
//! - [`ssa`]: server-side apply and the field ownership of every write
//!   (`metadata.managedFields`);
//! - [`gateway`]: the Kubernetes API over the api's gRPC (docs/kubernetes-api.md), so that
//!   kubectl and client libraries read Flotilla's objects as they read karmada-apiserver's.

pub mod form;
pub mod gateway;
pub mod http;
pub mod kubeconfig;
pub mod manifest;
pub mod smp;
pub mod ssa;
pub mod table;
