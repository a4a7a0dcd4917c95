//! EC2: what Amazon says about the AMIs MachineSets boot, so that standard RHCOS,
//! AWS Marketplace and custom AMIs can be told apart by their owner, as the Machine Config
//! Operator does since it stopped compiling in a list of AMIs.
//!
//! [`facts`] is the pure part the planner reads ([`Ec2Facts`], in the snapshot); [`query`] and
//! [`sigv4`] build and read DescribeImages requests; [`client`] sends them.

pub mod client;
pub mod facts;
pub mod query;
pub mod sigv4;

pub use facts::{AmiFacts, AmiOrigin, Answer, Consulted, Ec2Facts};
