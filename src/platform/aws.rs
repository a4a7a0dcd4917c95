//! AWS: the AMI at `ami.id`, looked up by `placement.region`.

use serde_json::Value;

use super::{
    ImageOutcome, Input, PlatformRule, RuleContext, compare_single, invalid, not_in_stream,
};
use crate::reason::Reason;

pub(super) struct Aws;

/// Relative to the provider spec.
const AMI_ID: &str = "/ami/id";
const REGION: &str = "/placement/region";

impl PlatformRule for Aws {
    fn stream_key(&self) -> &'static str {
        "aws"
    }

    fn image_locations(&self, spec: &Value, _written: &Value) -> Option<Vec<(String, Value)>> {
        spec.get("ami")?;
        let current = spec.pointer(AMI_ID).cloned().unwrap_or(Value::Null);
        Some(vec![(AMI_ID.into(), current)])
    }

    fn display(&self, _image: &Value) -> Option<String> {
        None
    }

    /// The region picks the AMI.
    fn decision_inputs(&self, spec: &Value) -> Vec<Input> {
        vec![Input::at(spec, REGION)]
    }

    fn evaluate(&self, spec: &Value, ctx: &RuleContext<'_>) -> ImageOutcome {
        let ami = spec.get("ami");
        let Some(current) = ami.and_then(|a| a.get("id")).filter(|v| v.is_string()) else {
            if ami.is_some_and(|a| a.get("arn").is_some() || a.get("filters").is_some()) {
                return ImageOutcome::Skip {
                    reason: Reason::ImageNotById,
                    message: "the AMI is chosen by ARN or filters, not by id, so it cannot be \
                              compared with the golden stream; set ami.id to have it managed"
                        .into(),
                    current: ami.cloned(),
                };
            }
            return invalid(
                "providerSpec has no string ami.id; set ami.id to an AMI id",
                None,
            );
        };
        let Some(region) = spec.pointer(REGION).and_then(Value::as_str) else {
            return invalid(
                "providerSpec has no string placement.region; set it to the AWS region of the \
                 MachineSet",
                Some(current.clone()),
            );
        };
        if !ctx.stream.has_arch(ctx.arch) {
            return not_in_stream(
                ctx,
                "AMIs",
                "check the architecture in the MachineSet's capacity annotation",
                Some(current.clone()),
            );
        }
        let Some(golden) = ctx.stream.aws_image(ctx.arch, region) else {
            return ImageOutcome::Skip {
                reason: Reason::RegionNotInStream,
                message: format!(
                    "the golden stream {} publishes no {} AMI for region {region}; the boot image \
                     is left as is (copy a published AMI into the region and set it by hand if \
                     needed)",
                    ctx.stream.stream, ctx.arch
                ),
                current: Some(current.clone()),
            };
        };
        let target = Value::String(golden.image.clone());
        if *current != target
            && !current
                .as_str()
                .is_some_and(|id| ctx.known_images.contains(id))
        {
            return ImageOutcome::Skip {
                reason: Reason::CustomImage,
                message: format!(
                    "AMI {} is not a published CoreOS AMI (not in the golden streams nor the \
                     known images); custom images are never replaced. If it is an RHCOS AMI, \
                     add its id to the known-images file (--known-images-file; on a cluster, \
                     the ConfigMap boot-image-controller-published-images)",
                    current.as_str().unwrap_or_default()
                ),
                current: Some(current.clone()),
            };
        }
        compare_single(current, target, vec![AMI_ID.into()])
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::Aws;
    use crate::arch::Arch;
    use crate::platform::{ImageOutcome, PlatformRule};
    use crate::reason::Reason;
    use crate::testkit::provider_specs;
    use crate::testkit::rules::{Cluster, message, reason, single_update, target};
    use crate::testkit::streams::{
        AMI_420_US_EAST_1 as AMI_4_20_US_EAST_1, AMI_421_ARM_US_EAST_1,
        AMI_421_US_EAST_1 as AMI_4_21_US_EAST_1, AMI_421_US_EAST_2, CUSTOM_AMI,
        stream_421_all_platforms,
    };

    fn spec(ami: Value, region: &str) -> Value {
        let mut spec = provider_specs::aws("", region, "worker-user-data", "worker");
        spec["ami"] = ami;
        spec
    }

    fn by_id(id: &str, region: &str) -> Value {
        spec(json!({"id": id}), region)
    }

    fn cluster() -> Cluster {
        Cluster::new(stream_421_all_platforms())
    }

    /// What the rule answers for the MachineSet on `ami` in `region` of an x86_64 cluster.
    fn evaluate(ami: &str, region: &str) -> ImageOutcome {
        Aws.evaluate(&by_id(ami, region), &cluster().ctx(Arch::Amd64))
    }

    #[test]
    fn an_older_published_ami_moves_to_the_golden_ami_of_its_region() {
        let cluster = cluster().knowing(&[AMI_4_20_US_EAST_1]);
        let outcome = Aws.evaluate(
            &by_id(AMI_4_20_US_EAST_1, "us-east-1"),
            &cluster.ctx(Arch::Amd64),
        );
        assert_eq!(
            outcome,
            single_update("/ami/id", AMI_4_20_US_EAST_1, AMI_4_21_US_EAST_1)
        );
    }

    #[test]
    fn the_golden_ami_is_up_to_date() {
        assert_eq!(
            evaluate(AMI_4_21_US_EAST_1, "us-east-1"),
            ImageOutcome::UpToDate {
                current: json!(AMI_4_21_US_EAST_1)
            }
        );
    }

    #[test]
    fn a_golden_ami_of_another_region_is_known_through_the_stream_itself() {
        // Someone copied the MachineSet across regions: the AMI is ours (the planner merges the
        // stream's references into the known images) but wrong for us-east-2.
        let outcome = evaluate(AMI_4_21_US_EAST_1, "us-east-2");
        assert_eq!(target(&outcome), AMI_421_US_EAST_2);
    }

    #[test]
    fn the_arch_picks_the_stream_entry() {
        let outcome = Aws.evaluate(
            &by_id(AMI_4_21_US_EAST_1, "us-east-1"),
            &cluster().ctx(Arch::Arm64),
        );
        assert_eq!(target(&outcome), AMI_421_ARM_US_EAST_1);
    }

    #[test]
    fn an_unknown_ami_is_a_custom_image_and_never_replaced() {
        // The same AMI is replaced once the known-images list names it.
        let ami = CUSTOM_AMI;
        let outcome = evaluate(ami, "us-east-1");
        assert_eq!(reason(&outcome), Some(Reason::CustomImage));
        assert!(message(&outcome).contains(ami), "{outcome:?}");

        let cluster = cluster().knowing(&[ami]);
        let outcome = Aws.evaluate(&by_id(ami, "us-east-1"), &cluster.ctx(Arch::Amd64));
        assert!(
            matches!(outcome, ImageOutcome::Update { .. }),
            "{outcome:?}"
        );
    }

    #[test]
    fn a_region_without_a_golden_ami_is_skipped() {
        let outcome = evaluate(AMI_4_20_US_EAST_1, "eu-south-9");
        assert_eq!(reason(&outcome), Some(Reason::RegionNotInStream));
        assert!(message(&outcome).contains("eu-south-9"), "{outcome:?}");
    }

    #[test]
    fn an_arch_missing_from_the_stream_is_an_error() {
        let outcome = Aws.evaluate(
            &by_id(AMI_4_20_US_EAST_1, "us-east-1"),
            &cluster().ctx(Arch::S390x),
        );
        assert!(matches!(outcome, ImageOutcome::Error { .. }), "{outcome:?}");
        assert_eq!(reason(&outcome), Some(Reason::ArchitectureNotInStream));
    }

    #[test]
    fn amis_chosen_by_arn_or_filters_are_skipped() {
        let by_arn = json!({"arn": "arn:aws:ec2:us-east-1::image/ami-0123456789abcdef0"});
        let by_filters = json!({"filters": [{"name": "tag:Name", "values": ["rhcos"]}]});
        for ami in [by_arn, by_filters] {
            let outcome =
                Aws.evaluate(&spec(ami.clone(), "us-east-1"), &cluster().ctx(Arch::Amd64));
            assert_eq!(
                outcome,
                ImageOutcome::Skip {
                    reason: Reason::ImageNotById,
                    message: message(&outcome).into(),
                    current: Some(ami),
                }
            );
        }
    }

    #[test]
    fn a_spec_without_an_ami_id_is_invalid() {
        for ami in [json!({}), json!({"id": 42}), Value::Null] {
            let outcome = Aws.evaluate(&spec(ami, "us-east-1"), &cluster().ctx(Arch::Amd64));
            assert_eq!(
                reason(&outcome),
                Some(Reason::InvalidProviderSpec),
                "{outcome:?}"
            );
        }
        let outcome = Aws.evaluate(&json!({}), &cluster().ctx(Arch::Amd64));
        assert_eq!(reason(&outcome), Some(Reason::InvalidProviderSpec));
    }

    #[test]
    fn a_spec_without_a_region_is_invalid() {
        let mut spec = by_id(AMI_4_20_US_EAST_1, "us-east-1");
        spec["placement"] = json!({"availabilityZone": "us-east-1a"});
        let outcome = Aws.evaluate(&spec, &cluster().ctx(Arch::Amd64));
        assert_eq!(
            outcome,
            ImageOutcome::Error {
                reason: Reason::InvalidProviderSpec,
                message: message(&outcome).into(),
                current: Some(json!(AMI_4_20_US_EAST_1)),
            }
        );
    }
}
