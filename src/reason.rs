//! Stable reasons: the one vocabulary shared by plans, conditions, Events, logs and metrics.
//!
//! Each reason is a static CamelCase word (valid as a condition reason and as a bounded metric
//! label); the free text that explains it travels separately as a message.

use std::fmt;

use serde::{Serialize, Serializer};

macro_rules! reasons {
    ($($(#[$doc:meta])* $name:ident),+ $(,)?) => {
        /// Why a MachineSet got its action, or why the whole plan is blocked.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Reason { $($(#[$doc])* $name),+ }

        impl Reason {
            pub const ALL: &'static [Reason] = &[$(Reason::$name),+];

            pub fn as_str(self) -> &'static str {
                match self { $(Reason::$name => stringify!($name)),+ }
            }
        }
    };
}

reasons! {
    // Update and UpToDate.
    /// The boot image (and possibly the stub secret) is older than the golden one.
    BootImageOutdated,
    /// The image is current but the MachineSet still points at the unmanaged stub secret.
    StubSecretOutdated,
    UpToDate,

    // Skips: deliberate, nothing is wrong.
    /// The MachineSet carries the opt-out annotation.
    OptedOut,
    /// The MachineConfiguration does not select this MachineSet.
    NotSelected,
    /// Another controller (Hive, Cluster API, ...) owns the MachineSet and would revert us.
    Owned,
    WindowsMachine,
    NonDefaultOSStream,
    /// An image the golden streams and the known-images list do not contain.
    CustomImage,
    RegionNotInStream,
    /// The AMI is chosen by ARN or filters, which we cannot compare with a stream.
    ImageNotById,
    PlatformNotSupported,
    /// Azure confidential or trusted-launch VMs need images the marketplace stream lacks.
    SecurityTypeUnsupported,
    ArchitectureNotSupported,

    // Errors: the MachineSet needs attention.
    MalformedObject,
    InvalidProviderSpec,
    InvalidSelector,
    UnknownArchitecture,
    ArchitectureUndetermined,
    ArchitectureNotInStream,
    ImageNotInStream,
    ManagedSecretMissing,
    ManagedSecretInvalid,
    /// The managed stub secret's userData is blank, as must-gather and `oc adm inspect` write
    /// every secret: it cannot be verified, so it is not switched to.
    ManagedSecretUnverified,
    /// Someone keeps reverting our patch; we stop instead of fighting.
    HotLoop,
    PatchFailed,

    // Gates: the whole plan is blocked.
    MachineConfigurationMissing,
    InfrastructureMissing,
    GoldenConfigMapMissing,
    GoldenStreamInvalid,
    ReleaseVersionMissing,
    ClusterUpgrading,
    ReleaseMismatch,
    Paused,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Reason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The condition-reason pattern the Kubernetes API enforces.
    fn is_valid_condition_reason(s: &str) -> bool {
        let bytes = s.as_bytes();
        let inner = |c: &u8| c.is_ascii_alphanumeric() || b"_,:".contains(c);
        bytes.first().is_some_and(u8::is_ascii_alphabetic)
            && bytes.iter().all(inner)
            && bytes
                .last()
                .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
    }

    #[test]
    fn every_reason_is_a_valid_condition_reason() {
        for r in Reason::ALL {
            assert!(is_valid_condition_reason(r.as_str()), "{r}");
        }
    }
}
