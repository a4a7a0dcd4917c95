//! AWS: the AMI at `ami.id`, looked up by `placement.region`.
//!
//! An AMI the golden streams or the known images list is ours. Any other is judged by what EC2
//! says of its owner (the EC2 client, `src/ec2`, in [`crate::facts::ec2`]): Red Hat's RHCOS account moves to the golden AMI, an AWS
//! Marketplace RHCOS product to the newest AMI of that product, anyone else's is custom.

use serde_json::{Map, Value};

use super::{ImageOutcome, Input, PlatformRule, RuleContext, compare_single, invalid, skip};
use crate::facts::Lookup;
use crate::facts::ec2::{self as facts, AmiFacts, AmiOrigin, Answer, NoCandidate};
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

    fn provider_spec_fields(&self) -> &'static [&'static str] {
        &["ami", "placement"]
    }

    /// Of the placement, the region (the availability zone is never read). The AMI stays whole:
    /// an AMI chosen by ARN or filters is reported as it is written.
    fn keep_only_what_it_reads(&self, spec: &mut Map<String, Value>) {
        if let Some(Value::Object(placement)) = spec.get_mut("placement") {
            placement.retain(|field, _| field == "region");
        }
    }

    /// The region picks the AMI.
    fn decision_inputs(&self, spec: &Value) -> Vec<Input> {
        vec![Input::at(spec, REGION)]
    }

    /// A marketplace AMI's description names its RHCOS release (the MCO's
    /// `ExtractVersionFromDescription`, pkg/controller/bootimage/marketplace/marketplace.go);
    /// Red Hat's own AMIs are the golden release's, as the MCO takes them.
    fn rhcos_release(&self, spec: &Value, image: &Value, ctx: &RuleContext<'_>) -> Option<String> {
        let region = spec.pointer(REGION)?.as_str()?;
        let Answer::Known(facts) = ctx.ec2.answer(region, image.as_str()?) else {
            return None;
        };
        match facts.origin() {
            AmiOrigin::Marketplace { .. } => facts.rhcos_release().map(str::to_string),
            AmiOrigin::Rhcos | AmiOrigin::Custom => None,
        }
    }

    /// EC2 is asked about an AMI in a region of AWS's form that neither the golden streams nor
    /// the known images list.
    fn evaluate(&self, spec: &Value, ctx: &RuleContext<'_>) -> (ImageOutcome, Option<Lookup>) {
        let (current, region) = match ami_and_region(spec) {
            Ok(read) => read,
            Err(outcome) => return (*outcome, None),
        };
        let id = current.as_str().unwrap_or_default();
        let golden = ctx.stream.aws_image(ctx.arch, region);
        // The stream and the known images first: they need no EC2, and they stay right when EC2
        // cannot be reached. EC2 only widens what is recognised, never narrows it.
        let listed = golden.is_some_and(|g| g.image == id) || ctx.known_images.contains(id);
        // A name not of AWS's form is never put in a host a signed request goes to (see
        // `ec2::region`), nor asked about: the stream and the known images alone judge it.
        let recognised = crate::facts::region::is_region(region);
        // As messages show it: any other name bounded and quoted, since anyone who may edit
        // MachineSets writes it.
        let shown = match recognised {
            true => region.to_string(),
            false => format!("{:?}", region.chars().take(64).collect::<String>()),
        };
        let not_asked = format!("{shown} is not an AWS region name this controller recognises");
        let answer = (!listed).then(|| {
            if recognised {
                ctx.ec2.answer(region, id)
            } else {
                Answer::NotConsulted(Some(not_asked.as_str()))
            }
        });
        let asks = (!listed && recognised).then(|| Lookup::Ami {
            region: region.to_string(),
            image_id: id.to_string(),
        });
        if let Some(Answer::Known(facts)) = &answer {
            if let Some(arch) = facts.arch().filter(|a| *a != ctx.arch) {
                let mismatch = ImageOutcome::Error {
                    reason: Reason::ArchitectureMismatch,
                    message: format!(
                        "EC2 says AMI {id} is an {} image but the MachineSet's machines are {}; \
                         nothing is changed until the capacity annotation's kubernetes.io/arch \
                         and the AMI agree",
                        arch.kube_name(),
                        ctx.arch.kube_name()
                    ),
                    current: Some(current.clone()),
                };
                return (mismatch, asks);
            }
            if let AmiOrigin::Marketplace { product } = facts.origin() {
                return (marketplace(ctx, region, current, facts, &product), asks);
            }
        }
        // A skip, as upstream: `GetAwsRegionImage` fails alike for an architecture the stream
        // lacks and for a region it lacks, and `reconcileAWSProviderSpec` skips the MachineSet
        // on either (openshift/machine-config-operator, pkg/controller/bootimage/
        // platform_helpers.go; release-4.20 and main at 7ff337a4f).
        let Some(golden) = golden else {
            let unrecognised = (!recognised).then_some(not_asked.as_str());
            return (not_in_stream(ctx, &shown, unrecognised, current), asks);
        };
        let target = &golden.image;
        let outcome = match answer {
            None => compare_single(current, target, AMI_ID.into()),
            Some(answer) => unlisted(id, region, current, target, answer),
        };
        (outcome, asks)
    }
}

/// The skip for a region or architecture the golden stream publishes no AMI for; `unrecognised`
/// says why a region name is not asked about.
fn not_in_stream(
    ctx: &RuleContext<'_>,
    shown: &str,
    unrecognised: Option<&str>,
    current: &Value,
) -> ImageOutcome {
    let missing = if ctx.stream.has_arch(ctx.arch) {
        format!("no {} AMI for region {shown}", ctx.arch)
    } else {
        format!("no {} images at all", ctx.arch)
    };
    let unrecognised = unrecognised
        .map(|why| format!(" ({why}; nothing is sent to it)"))
        .unwrap_or_default();
    let message = format!(
        "the golden stream {} publishes {missing}{unrecognised}; the boot image is left as is \
         (check placement.region and the architecture in the capacity annotation; else copy a \
         published AMI into the region and set it by hand)",
        ctx.stream.stream
    );
    skip(Reason::RegionNotInStream, message, current)
}

/// The AMI id and the region of an AWS provider spec, or why they cannot be judged.
fn ami_and_region(spec: &Value) -> Result<(&Value, &str), Box<ImageOutcome>> {
    let ami = spec.get("ami");
    let Some(current) = ami.and_then(|a| a.get("id")).filter(|v| v.is_string()) else {
        if ami.is_some_and(|a| a.get("arn").is_some() || a.get("filters").is_some()) {
            return Err(Box::new(ImageOutcome::Skip {
                reason: Reason::ImageNotById,
                message: "the AMI is chosen by ARN or filters, not by id, so it cannot be \
                          compared with the golden stream; set ami.id to have it managed"
                    .into(),
                current: ami.cloned(),
            }));
        }
        return Err(Box::new(invalid(
            "providerSpec has no string ami.id; set ami.id to an AMI id",
            None,
        )));
    };
    let Some(region) = spec.pointer(REGION).and_then(Value::as_str) else {
        return Err(Box::new(invalid(
            "providerSpec has no string placement.region; set it to the AWS region of the \
             MachineSet",
            Some(current.clone()),
        )));
    };
    Ok((current, region))
}

/// An AMI neither the golden streams nor the known images list: what EC2 said about it decides.
fn unlisted(id: &str, region: &str, current: &Value, target: &str, answer: Answer) -> ImageOutcome {
    let custom = |why: String| {
        let message = format!("AMI {id} {why}; custom images are never replaced");
        skip(Reason::CustomImage, message, current)
    };
    let unknown = |reason, why: String| {
        let message = format!(
            "AMI {id} is neither in the golden streams nor in the known images, and {why}; \
             it is left as is until EC2 tells its owner (AMIs the streams and known images \
             list are still updated)"
        );
        skip(reason, message, current)
    };
    match answer {
        Answer::Known(facts) => match facts.origin() {
            AmiOrigin::Rhcos => compare_single(current, target, AMI_ID.into()),
            AmiOrigin::Marketplace { .. } | AmiOrigin::Custom => custom(format!(
                "belongs to AWS account {}, neither Red Hat's RHCOS account ({}) nor an AWS \
                 Marketplace RHCOS product ({})",
                facts.owner_id,
                facts::RHCOS_OWNER,
                facts::MARKETPLACE_OWNER
            )),
        },
        Answer::NotFound => custom(format!(
            "is not shown by EC2 in {region} (deregistered, or private to another account), \
             and it is neither in the golden streams nor in the known images"
        )),
        Answer::Unavailable(message) => unknown(
            Reason::Ec2Unavailable,
            format!("EC2 could not be asked about it in {region}: {message}"),
        ),
        Answer::Pending => unknown(
            Reason::Ec2LookupPending,
            format!("EC2 has not answered about it in {region} yet"),
        ),
        // As before EC2 was asked: the message the known-images file is the answer to.
        Answer::NotConsulted(why) => {
            let message = format!(
                "AMI {id} is not a published CoreOS AMI (not in the golden streams nor the \
                 known images{}); custom images are never replaced. If it is an RHCOS AMI, \
                 add its id to the known-images file (--known-images-file; on a cluster, \
                 the ConfigMap boot-image-controller-published-images)",
                why.map(|w| format!("; EC2 not consulted: {w}"))
                    .unwrap_or_default()
            );
            skip(Reason::CustomImage, message, current)
        }
    }
}

/// A marketplace AMI moves to the newest AMI of its product (ROSA's included) and architecture
/// whose RHCOS release is not newer than the golden stream's (the MCO's `resolveMarketplaceAMI`),
/// never to an older one than it has.
fn marketplace(
    ctx: &RuleContext<'_>,
    region: &str,
    current: &Value,
    facts: &AmiFacts,
    product: &str,
) -> ImageOutcome {
    let name = facts::product_name(product);
    let skip = |reason, message| skip(reason, message, current);
    let Some(release) = ctx.stream.release(ctx.arch, "aws") else {
        return skip(
            Reason::MarketplaceImageNotFound,
            format!(
                "AMI {} is from the AWS Marketplace product {name}, but the golden stream {} \
                 names no {} AWS release to compare its AMIs with",
                facts.image_id, ctx.stream.stream, ctx.arch
            ),
        );
    };
    match ctx
        .ec2
        .marketplace_target(region, product, ctx.arch, release)
    {
        Ok(target) => {
            let newer = |image: &AmiFacts| {
                let version = image.rhcos_release().and_then(facts::rhel_version);
                (version, image.creation_date.clone())
            };
            if newer(facts) >= newer(target) {
                return ImageOutcome::UpToDate {
                    current: current.clone(),
                };
            }
            compare_single(current, &target.image_id, AMI_ID.into())
        }
        Err(NoCandidate::Pending) => skip(
            Reason::Ec2LookupPending,
            format!(
                "AMI {} is from the AWS Marketplace product {name}; EC2 has not yet listed that \
                 product's AMIs in {region}",
                facts.image_id
            ),
        ),
        Err(NoCandidate::Unavailable(message)) => skip(
            Reason::Ec2Unavailable,
            format!(
                "AMI {} is from the AWS Marketplace product {name}; EC2 could not list that \
                 product's AMIs in {region}: {message}",
                facts.image_id
            ),
        ),
        Err(NoCandidate::None) => skip(
            Reason::MarketplaceImageNotFound,
            format!(
                "AMI {} is from the AWS Marketplace product {name}, which has no available {} \
                 AMI in {region} at RHCOS {} or earlier; it is left as is until one is published",
                facts.image_id,
                ctx.arch,
                release.splitn(3, '.').take(2).collect::<Vec<_>>().join(".")
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use crate::testkit::rules::Outcome;
    use serde_json::{Value, json};

    use super::Aws;
    use crate::arch::Arch;
    use crate::platform::ImageOutcome;
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
        Aws.outcome(&by_id(ami, region), &cluster().ctx(Arch::Amd64))
    }

    #[test]
    fn an_older_published_ami_moves_to_the_golden_ami_of_its_region() {
        let cluster = cluster().knowing(&[AMI_4_20_US_EAST_1]);
        let outcome = Aws.outcome(
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
        let outcome = Aws.outcome(
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
        let outcome = Aws.outcome(&by_id(ami, "us-east-1"), &cluster.ctx(Arch::Amd64));
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
    fn an_arch_missing_from_the_stream_is_skipped_as_upstream_skips_it() {
        let outcome = Aws.outcome(
            &by_id(AMI_4_20_US_EAST_1, "us-east-1"),
            &cluster().ctx(Arch::S390x),
        );
        assert!(matches!(outcome, ImageOutcome::Skip { .. }), "{outcome:?}");
        assert_eq!(reason(&outcome), Some(Reason::RegionNotInStream));
        assert!(
            message(&outcome).contains("no s390x images at all"),
            "{outcome:?}"
        );
    }

    #[test]
    fn amis_chosen_by_arn_or_filters_are_skipped() {
        let by_arn = json!({"arn": "arn:aws:ec2:us-east-1::image/ami-0123456789abcdef0"});
        let by_filters = json!({"filters": [{"name": "tag:Name", "values": ["rhcos"]}]});
        for ami in [by_arn, by_filters] {
            let outcome = Aws.outcome(&spec(ami.clone(), "us-east-1"), &cluster().ctx(Arch::Amd64));
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
            let outcome = Aws.outcome(&spec(ami, "us-east-1"), &cluster().ctx(Arch::Amd64));
            assert_eq!(
                reason(&outcome),
                Some(Reason::InvalidProviderSpec),
                "{outcome:?}"
            );
        }
        let outcome = Aws.outcome(&json!({}), &cluster().ctx(Arch::Amd64));
        assert_eq!(reason(&outcome), Some(Reason::InvalidProviderSpec));
    }

    #[test]
    fn a_region_this_controller_does_not_recognise_is_skipped_and_never_asked_about() {
        // EC2 would be asked about an unlisted AMI in a recognised region: never in these.
        let ec2 = crate::facts::ec2::Ec2Facts::consulted();
        for region in [
            "mars-east-1",
            "x@127.0.0.1:8443/",
            "us-east-1.example.com",
            "r",
        ] {
            let outcome = Aws.outcome(
                &by_id(AMI_4_20_US_EAST_1, region),
                &cluster().with_ec2(ec2.clone()).ctx(Arch::Amd64),
            );
            assert!(matches!(outcome, ImageOutcome::Skip { .. }), "{outcome:?}");
            assert_eq!(reason(&outcome), Some(Reason::RegionNotInStream));
            assert!(message(&outcome).contains(&format!("{region:?} is not an AWS region name")));
            let outcome = Aws.outcome(
                &by_id(CUSTOM_AMI, region),
                &cluster().with_ec2(ec2.clone()).ctx(Arch::Amd64),
            );
            assert_eq!(
                reason(&outcome),
                Some(Reason::RegionNotInStream),
                "{outcome:?}"
            );
        }
        // A region AWS opened after this controller's partition table: the stream still moves
        // its AMIs, and an AMI only EC2 could tell is left alone without asking.
        let mut stream = stream_421_all_platforms();
        let regions = &mut stream["architectures"]["x86_64"]["images"]["aws"]["regions"];
        regions["zz-north-1"] = regions["us-east-1"].clone();
        let cluster = Cluster::new(stream)
            .knowing(&[AMI_4_20_US_EAST_1])
            .with_ec2(ec2);
        let outcome = Aws.outcome(
            &by_id(AMI_4_20_US_EAST_1, "zz-north-1"),
            &cluster.ctx(Arch::Amd64),
        );
        assert_eq!(target(&outcome), AMI_4_21_US_EAST_1);
        let outcome = Aws.outcome(&by_id(CUSTOM_AMI, "zz-north-1"), &cluster.ctx(Arch::Amd64));
        assert_eq!(reason(&outcome), Some(Reason::CustomImage), "{outcome:?}");
        assert!(
            message(&outcome).contains("EC2 not consulted: \"zz-north-1\" is not an AWS region"),
            "{outcome:?}"
        );
    }

    #[test]
    fn a_spec_without_a_region_is_invalid() {
        let mut spec = by_id(AMI_4_20_US_EAST_1, "us-east-1");
        spec["placement"] = json!({"availabilityZone": "us-east-1a"});
        let outcome = Aws.outcome(&spec, &cluster().ctx(Arch::Amd64));
        assert_eq!(
            outcome,
            ImageOutcome::Error {
                reason: Reason::InvalidProviderSpec,
                message: message(&outcome).into(),
                current: Some(json!(AMI_4_20_US_EAST_1)),
            }
        );
    }

    mod with_ec2 {
        use super::{AMI_4_21_US_EAST_1, by_id, cluster};
        use crate::arch::Arch;
        use crate::facts::ec2::{AmiFacts, Consulted, Ec2Facts};
        use crate::facts::ec2::{RHCOS_OWNER, ROSA_PRODUCT};
        use crate::platform::{ImageOutcome, PlatformRule};
        use crate::reason::Reason;
        use crate::testkit::ec2::{ami, marketplace_ami as market};
        use crate::testkit::rules::Outcome;
        use crate::testkit::rules::{message, reason};
        use serde_json::json;

        use super::super::Aws;

        const OCP_X86: &str = "59ead7de-2540-4653-a8b0-fa7926d5c845";
        /// Outside the stream and the known images.
        const UNLISTED: &str = "ami-0aaaaaaaaaaaaaaa1";

        fn facts(images: Vec<AmiFacts>) -> Ec2Facts {
            let mut facts = Ec2Facts::consulted();
            for image in images {
                facts.add_image(image);
            }
            facts.add_search("us-east-1", OCP_X86);
            facts.add_search("us-east-1", ROSA_PRODUCT);
            facts
        }

        fn evaluate(ec2: Ec2Facts, id: &str, arch: Arch) -> ImageOutcome {
            Aws.outcome(&by_id(id, "us-east-1"), &cluster().with_ec2(ec2).ctx(arch))
        }

        fn target(outcome: &ImageOutcome) -> Option<&str> {
            match outcome {
                ImageOutcome::Update { target, .. } => target.as_str(),
                _ => None,
            }
        }

        #[test]
        fn an_rhcos_ami_outside_every_list_is_recognised_by_its_owner() {
            let ec2 = facts(vec![ami(UNLISTED, RHCOS_OWNER, "rhcos-4.14", "", "x86_64")]);
            let outcome = evaluate(ec2, UNLISTED, Arch::Amd64);
            assert_eq!(target(&outcome), Some(AMI_4_21_US_EAST_1), "{outcome:?}");
        }

        #[test]
        fn another_owners_ami_stays_custom() {
            let ec2 = facts(vec![ami(
                UNLISTED,
                "123456789012",
                "golden-rhcos",
                "",
                "x86_64",
            )]);
            let outcome = evaluate(ec2, UNLISTED, Arch::Amd64);
            assert_eq!(reason(&outcome), Some(Reason::CustomImage));
            assert!(message(&outcome).contains("123456789012"), "{outcome:?}");
            // An AMI EC2 does not show is not ours either.
            let outcome = evaluate(facts(vec![]), UNLISTED, Arch::Amd64);
            assert_eq!(reason(&outcome), Some(Reason::Ec2LookupPending));
            let mut ec2 = facts(vec![]);
            ec2.add_not_found("us-east-1", UNLISTED);
            let outcome = evaluate(ec2, UNLISTED, Arch::Amd64);
            assert_eq!(reason(&outcome), Some(Reason::CustomImage));
        }

        #[test]
        fn a_marketplace_ami_moves_to_the_newest_of_its_product_up_to_the_golden_release() {
            // The compact stream's x86_64 AWS release is 9.6.
            let ec2 = facts(vec![
                market("ami-0market96old0000", OCP_X86, "9.6.20250801-0", "x86_64"),
                market("ami-0market96new0000", OCP_X86, "9.6.20251015-0", "x86_64"),
                market("ami-0market980000000", OCP_X86, "9.8.20260403-0", "x86_64"),
                market("ami-0market96arm0000", OCP_X86, "9.6.20251101-0", "arm64"),
            ]);
            let outcome = evaluate(ec2.clone(), "ami-0market96old0000", Arch::Amd64);
            assert_eq!(
                target(&outcome),
                Some("ami-0market96new0000"),
                "{outcome:?}"
            );
            let outcome = evaluate(ec2.clone(), "ami-0market96new0000", Arch::Amd64);
            assert!(
                matches!(outcome, ImageOutcome::UpToDate { .. }),
                "{outcome:?}"
            );
            // Never back down from a newer marketplace AMI someone chose.
            let outcome = evaluate(ec2.clone(), "ami-0market980000000", Arch::Amd64);
            assert!(
                matches!(outcome, ImageOutcome::UpToDate { .. }),
                "{outcome:?}"
            );
            // A 4.18 AMI's release (418.94: RHEL 9.4) is older, however large its major.
            let mut ec2 = ec2;
            ec2.add_image(market(
                "ami-0market418000000",
                OCP_X86,
                "418.94.202511191518-0",
                "x86_64",
            ));
            let outcome = evaluate(ec2, "ami-0market418000000", Arch::Amd64);
            assert_eq!(
                target(&outcome),
                Some("ami-0market96new0000"),
                "{outcome:?}"
            );
        }

        #[test]
        fn only_a_marketplace_ami_tells_the_rhcos_release_it_boots() {
            let ec2 = facts(vec![
                market("ami-0market96new0000", OCP_X86, "9.6.20251015-0", "x86_64"),
                ami(UNLISTED, RHCOS_OWNER, "rhcos-9.6.20250801-0", "", "x86_64"),
            ]);
            let cluster = cluster().with_ec2(ec2);
            let release = |id: &str| {
                let spec = by_id(id, "us-east-1");
                Aws.rhcos_release(&spec, &json!(id), &cluster.ctx(Arch::Amd64))
            };
            assert_eq!(
                release("ami-0market96new0000").as_deref(),
                Some("9.6.20251015-0")
            );
            // Red Hat's own AMIs are the golden release's, as the MCO takes them.
            assert_eq!(release(UNLISTED), None);
            assert_eq!(release(AMI_4_21_US_EAST_1), None);
        }

        #[test]
        fn rosa_amis_follow_their_product_in_their_own_architecture() {
            let ec2 = facts(vec![
                market(
                    "ami-0rosa96old000000",
                    ROSA_PRODUCT,
                    "9.6.20250701-0",
                    "x86_64",
                ),
                market(
                    "ami-0rosa96x86000000",
                    ROSA_PRODUCT,
                    "9.6.20251015-0",
                    "x86_64",
                ),
                // The same product, newer, for the other architecture: not ours to take.
                market(
                    "ami-0rosa96arm000000",
                    ROSA_PRODUCT,
                    "9.6.20251101-0",
                    "arm64",
                ),
            ]);
            let outcome = evaluate(ec2, "ami-0rosa96old000000", Arch::Amd64);
            assert_eq!(
                target(&outcome),
                Some("ami-0rosa96x86000000"),
                "{outcome:?}"
            );
        }

        #[test]
        fn a_marketplace_product_without_a_fitting_ami_is_left_alone() {
            let ec2 = facts(vec![market(
                "ami-0market980000000",
                "f5da01a6-d046-487c-9072-42fe53b1cad4",
                "9.8.20260403-0",
                "x86_64",
            )]);
            let mut searched = ec2.clone();
            searched.add_search("us-east-1", "f5da01a6-d046-487c-9072-42fe53b1cad4");
            let outcome = evaluate(ec2, "ami-0market980000000", Arch::Amd64);
            assert_eq!(reason(&outcome), Some(Reason::Ec2LookupPending));
            // Searched, and only a newer release than the golden one exists: nothing to go to.
            let mut only_newer = searched;
            only_newer.add_image(market(
                "ami-0market970000000",
                "f5da01a6-d046-487c-9072-42fe53b1cad4",
                "9.7.20260101-0",
                "x86_64",
            ));
            let outcome = evaluate(only_newer, "ami-0market970000000", Arch::Amd64);
            assert_eq!(reason(&outcome), Some(Reason::MarketplaceImageNotFound));
            assert!(message(&outcome).contains("OPP x86_64"), "{outcome:?}");
        }

        #[test]
        fn without_ec2_only_the_lists_count_and_the_reason_says_so() {
            let mut ec2 = facts(vec![]);
            ec2.set_unavailable("us-east-1", "connection refused".into());
            let outcome = evaluate(ec2.clone(), UNLISTED, Arch::Amd64);
            assert_eq!(reason(&outcome), Some(Reason::Ec2Unavailable));
            assert!(
                message(&outcome).contains("connection refused"),
                "{outcome:?}"
            );
            // A listed AMI is still updated while EC2 is away.
            let listed = "ami-09d23adad19cdb25c";
            let outcome = Aws.outcome(
                &by_id(listed, "us-east-1"),
                &cluster().knowing(&[listed]).with_ec2(ec2).ctx(Arch::Amd64),
            );
            assert_eq!(target(&outcome), Some(AMI_4_21_US_EAST_1), "{outcome:?}");
            // No credentials: custom, as before EC2 was asked, and the message says why.
            let mut ec2 = Ec2Facts::default();
            ec2.consulted = Consulted::Unable("no Secret aws-cloud-credentials".into());
            let outcome = evaluate(ec2, UNLISTED, Arch::Amd64);
            assert_eq!(reason(&outcome), Some(Reason::CustomImage));
            assert!(
                message(&outcome).contains("aws-cloud-credentials"),
                "{outcome:?}"
            );
        }

        #[test]
        fn an_ami_of_another_architecture_is_an_error() {
            let ec2 = facts(vec![ami(UNLISTED, RHCOS_OWNER, "rhcos", "", "arm64")]);
            let outcome = evaluate(ec2, UNLISTED, Arch::Amd64);
            assert_eq!(reason(&outcome), Some(Reason::ArchitectureMismatch));
        }
    }
}
