//! AWS region names, and the EC2 and STS hosts each one is served from.
//!
//! A MachineSet's `placement.region` is written by whoever may edit MachineSets; it becomes part
//! of the host that receives a signed request carrying the machine API's access key id. Only a
//! name of AWS's own form is ever put in a host, so every request goes to an AWS domain.
//!
//! The partitions, their region forms (`regionRegex`) and DNS suffixes are those of the AWS
//! SDKs' endpoint data (`packages/util-endpoints/src/lib/aws/partitions.json` in
//! aws/aws-sdk-js-v3; botocore and the Go SDK ship the same file).

use std::sync::LazyLock;

use regex::Regex;

/// A region of any partition: `<prefix>-<word>-<number>`, the partitions' `regionRegex` in one,
/// their `\w+` narrowed to what AWS uses (1 to 20 lowercase letters), since it ends up in a
/// host name. Captures the prefix, which names the partition.
static REGION: LazyLock<Regex> = LazyLock::new(|| {
    let prefixes = "us|eu|ap|sa|ca|me|af|il|mx|cn|us-gov|us-iso|us-isob|eu-isoe|us-isof|eusc-de";
    Regex::new(&format!("^({prefixes})-[a-z]{{1,20}}-[0-9]{{1,3}}$")).expect("a valid pattern")
});

/// The DNS suffix of `region`'s partition, `None` when it is not an AWS region name.
fn dns_suffix(region: &str) -> Option<&'static str> {
    let prefix = REGION.captures(region)?.get(1)?.as_str();
    Some(match prefix {
        "cn" => "amazonaws.com.cn",
        "us-iso" => "c2s.ic.gov",
        "us-isob" => "sc2s.sgov.gov",
        "eu-isoe" => "cloud.adc-e.uk",
        "us-isof" => "csp.hci.ic.gov",
        "eusc-de" => "amazonaws.eu",
        // The commercial partition's and `us-gov`'s.
        _ => "amazonaws.com",
    })
}

/// Whether `region` has the form of an AWS region name.
pub fn is_region(region: &str) -> bool {
    REGION.is_match(region)
}

/// `service`'s regional endpoint in `region` (`ec2`, `sts`: both are served at
/// `<service>.<region>.<suffix>` in every partition), `None` when it is not an AWS region name.
pub fn endpoint(service: &str, region: &str) -> Option<String> {
    dns_suffix(region).map(|suffix| format!("https://{service}.{region}.{suffix}/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_partitions_regions_have_their_endpoint() {
        for (region, host) in [
            ("us-east-1", "ec2.us-east-1.amazonaws.com"),
            ("ap-southeast-7", "ec2.ap-southeast-7.amazonaws.com"),
            ("mx-central-1", "ec2.mx-central-1.amazonaws.com"),
            ("cn-northwest-1", "ec2.cn-northwest-1.amazonaws.com.cn"),
            ("us-gov-west-1", "ec2.us-gov-west-1.amazonaws.com"),
            ("us-iso-east-1", "ec2.us-iso-east-1.c2s.ic.gov"),
            ("us-isob-east-1", "ec2.us-isob-east-1.sc2s.sgov.gov"),
            ("eu-isoe-west-1", "ec2.eu-isoe-west-1.cloud.adc-e.uk"),
            ("us-isof-south-1", "ec2.us-isof-south-1.csp.hci.ic.gov"),
            ("eusc-de-east-1", "ec2.eusc-de-east-1.amazonaws.eu"),
        ] {
            let sts = host.replacen("ec2.", "sts.", 1);
            assert_eq!(endpoint("sts", region), Some(format!("https://{sts}/")));
            assert_eq!(
                endpoint("ec2", region),
                Some(format!("https://{host}/")),
                "{region}"
            );
        }
    }

    #[test]
    fn anything_else_is_no_region() {
        for region in [
            "x@127.0.0.1:8443/",
            "x@localhost:8443/",
            "us-east-1.evil.example/",
            "us-east-1#",
            "us-east-1/",
            "US-EAST-1",
            "us-east",
            "us-east1",
            "us-east-1a",
            "zz-east-1",
            "us-east-x-1",
            "us--1",
            "",
            "r",
        ] {
            assert_eq!(endpoint("ec2", region), None, "{region:?}");
            assert_eq!(endpoint("sts", region), None, "{region:?}");
        }
    }
}
