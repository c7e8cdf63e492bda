//! The fluid model (placeholder until written).
use crate::{Metrics, SimConfig, SimError, Workload};
/// Runs the fluid model.
pub fn run(_config: &SimConfig, _workload: &Workload) -> Result<Metrics, SimError> {
    Err(SimError("fluid model not written yet".into()))
}
