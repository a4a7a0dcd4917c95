//! CPU architectures, in the two spellings OpenShift uses for them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// An architecture CoreOS publishes boot images for.
///
/// Kubernetes labels say `amd64`/`arm64`; stream metadata is keyed by RPM arches
/// (`x86_64`/`aarch64`). Keeping one enum avoids comparing the two spellings by accident.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    Amd64,
    Arm64,
    Ppc64le,
    S390x,
}

impl Arch {
    pub const ALL: [Arch; 4] = [Arch::Amd64, Arch::Arm64, Arch::Ppc64le, Arch::S390x];

    /// The `kubernetes.io/arch` spelling.
    pub fn kube_name(self) -> &'static str {
        match self {
            Arch::Amd64 => "amd64",
            Arch::Arm64 => "arm64",
            Arch::Ppc64le => "ppc64le",
            Arch::S390x => "s390x",
        }
    }

    /// The key of `architectures` in CoreOS stream metadata.
    pub fn stream_key(self) -> &'static str {
        match self {
            Arch::Amd64 => "x86_64",
            Arch::Arm64 => "aarch64",
            Arch::Ppc64le => "ppc64le",
            Arch::S390x => "s390x",
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown architecture {0:?}: expected one of amd64, arm64, ppc64le, s390x")]
pub struct UnknownArch(pub String);

impl FromStr for Arch {
    type Err = UnknownArch;

    /// Accepts the Kubernetes spelling only: that is what annotations and flags carry.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Arch::ALL
            .into_iter()
            .find(|a| a.kube_name() == s)
            .ok_or_else(|| UnknownArch(s.to_string()))
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kube_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_names_round_trip_and_map_to_rpm_arches() {
        for arch in Arch::ALL {
            assert_eq!(arch.kube_name().parse::<Arch>(), Ok(arch));
        }
        assert_eq!(Arch::Amd64.stream_key(), "x86_64");
        assert_eq!(Arch::Arm64.stream_key(), "aarch64");
    }

    #[test]
    fn rpm_spelling_is_not_a_kubernetes_arch() {
        assert_eq!("x86_64".parse::<Arch>(), Err(UnknownArch("x86_64".into())));
    }
}
