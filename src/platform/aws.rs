//! AWS: the AMI at `ami.id`, looked up by `placement.region`.

use serde_json::Value;

use super::{BootImageRule, ImageOutcome, RuleContext, compare_single, invalid};
use crate::reason::Reason;

pub(super) struct Aws;

impl BootImageRule for Aws {
    fn evaluate(&self, spec: &Value, ctx: &RuleContext<'_>) -> ImageOutcome {
        let ami = spec.get("ami");
        let Some(current) = ami.and_then(|a| a.get("id")).filter(|v| v.is_string()) else {
            if ami.is_some_and(|a| a.get("arn").is_some() || a.get("filters").is_some()) {
                return ImageOutcome::Skip {
                    reason: Reason::ImageNotById,
                    message: "the AMI is chosen by ARN or filters, not by id; it cannot be \
                              compared with the golden stream"
                        .into(),
                    current: ami.cloned(),
                };
            }
            return invalid("providerSpec has no string ami.id", None);
        };
        let Some(region) = spec.pointer("/placement/region").and_then(Value::as_str) else {
            return invalid(
                "providerSpec has no string placement.region",
                Some(current.clone()),
            );
        };
        if !ctx.stream.has_arch(ctx.arch) {
            return ImageOutcome::Error {
                reason: Reason::ArchitectureNotInStream,
                message: format!(
                    "the golden stream {} publishes no {} images",
                    ctx.stream.stream, ctx.arch
                ),
                current: Some(current.clone()),
            };
        }
        let Some(golden) = ctx.stream.aws_image(ctx.arch, region) else {
            return ImageOutcome::Skip {
                reason: Reason::RegionNotInStream,
                message: format!(
                    "the golden stream {} publishes no {} AMI for region {region}",
                    ctx.stream.stream, ctx.arch
                ),
                current: Some(current.clone()),
            };
        };
        let target = Value::String(golden.image.clone());
        if *current != target && !current.as_str().is_some_and(|id| ctx.known_images.contains(id)) {
            return ImageOutcome::Skip {
                reason: Reason::CustomImage,
                message: format!(
                    "AMI {} is not a published CoreOS AMI (not in the golden streams nor the \
                     known images); custom images are never replaced",
                    current.as_str().unwrap_or_default()
                ),
                current: Some(current.clone()),
            };
        }
        compare_single(current, target, vec!["/ami/id".into()])
    }
}
