//! Azure: marketplace images (and migration of legacy installer uploads). Being written.

use serde_json::Value;

use super::{BootImageRule, ImageOutcome, RuleContext};
use crate::reason::Reason;

pub(super) struct Azure;

impl BootImageRule for Azure {
    fn evaluate(&self, spec: &Value, _ctx: &RuleContext<'_>) -> ImageOutcome {
        ImageOutcome::Skip {
            reason: Reason::PlatformNotSupported,
            message: "Azure is not supported yet".into(),
            current: spec.get("image").cloned(),
        }
    }
}
