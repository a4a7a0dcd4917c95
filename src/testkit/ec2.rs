//! What EC2 says about an AMI, for the unit tests of the EC2 facts and the AWS rule.

use crate::ec2::AmiFacts;

/// An AMI in us-east-1 as DescribeImages would describe it.
pub fn ami(id: &str, owner: &str, name: &str, description: &str, arch: &str) -> AmiFacts {
    AmiFacts {
        image_id: id.into(),
        region: "us-east-1".into(),
        owner_id: owner.into(),
        name: name.into(),
        description: description.into(),
        architecture: arch.into(),
        creation_date: "2026-01-01T00:00:00.000Z".into(),
    }
}
