//! vCenter: the VM templates vSphere MachineSets clone. [`facts`] is the pure part the planner
//! reads ([`VcenterFacts`], in the snapshot).

pub mod facts;

pub use facts::{TemplateKey, TemplateState, VcenterFacts};
