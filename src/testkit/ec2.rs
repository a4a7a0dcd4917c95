//! What EC2 says about an AMI, for the unit tests of the EC2 facts and the AWS rule.

use crate::facts::ec2::AmiFacts;

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

/// An AWS Marketplace AMI of `product` in us-east-1 at RHCOS `release`, named and described as
/// the marketplace names them, created the day its release was built.
pub fn marketplace_ami(id: &str, product: &str, release: &str, arch: &str) -> AmiFacts {
    let mut image = ami(
        id,
        crate::facts::ec2::MARKETPLACE_OWNER,
        &format!("RHEL-9.4-RHCOS-{release}_HVM_GA-{arch}-0-{product}"),
        &format!("RHEL CoreOS {release} {arch}"),
        arch,
    );
    image.creation_date = format!("{release}T");
    image
}
