//! What the clouds answered, as plain data: the model below the planner, the platform rules and
//! the cloud clients alike. The clients (`src/ec2`, `src/vcenter`) fill it, the controller puts
//! it in the snapshot, the rules read it; none of them needs another to name it.

pub mod ec2;
pub mod region;
pub mod vcenter;
