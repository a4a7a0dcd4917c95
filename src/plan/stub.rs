//! The stub secret rule: point MachineSets at the user-data secret the MCO keeps current.
//!
//! The installer writes `<role>-user-data` once, with an Ignition config of its release; spec-2
//! stubs from old installs cannot boot current images. The MCO maintains
//! `<role>-user-data-managed` in the same namespace, so we switch to it, but only after checking
//! it exists and holds an Ignition 3.x config: pointing at a broken secret breaks scale-up.

use serde_json::Value;

use crate::api::Secret;
use crate::reason::Reason;

/// Suffix of the secrets the Machine Config Operator manages.
pub const MANAGED_SUFFIX: &str = "-managed";
/// The key of the stub secret that holds the Ignition config.
pub const USER_DATA_KEY: &str = "userData";

/// The managed name for a stub secret, or `None` when it already is the managed one.
pub fn managed_name(current: &str) -> Option<String> {
    (!current.ends_with(MANAGED_SUFFIX)).then(|| format!("{current}{MANAGED_SUFFIX}"))
}

/// A value as `oc adm inspect` writes secrets: empty, or `<N> bytes long`.
fn is_elided(bytes: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return false;
    };
    text.is_empty()
        || text
            .strip_suffix(" bytes long")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Checks that a managed stub secret can be pointed at.
pub fn verify(
    namespace: &str,
    name: &str,
    secret: Option<&Secret>,
) -> Result<(), (Reason, String)> {
    let Some(secret) = secret else {
        return Err((
            Reason::ManagedSecretMissing,
            format!(
                "stub secret {namespace}/{name} does not exist or cannot be read; the Machine \
                 Config Operator creates it (check that it runs), and the controller reads only \
                 the secrets its RBAC names (add a custom role's secret to its Role)"
            ),
        ));
    };
    let invalid = |why: &str| {
        Err((
            Reason::ManagedSecretInvalid,
            format!(
                "stub secret {namespace}/{name} {why}; it must hold an Ignition 3.x config under {USER_DATA_KEY}"
            ),
        ))
    };
    let bytes: Option<Vec<u8>> = secret
        .data
        .as_ref()
        .and_then(|d| d.get(USER_DATA_KEY))
        .map(|b| b.0.clone())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|d| d.get(USER_DATA_KEY))
                .map(|s| s.as_bytes().to_vec())
        });
    let Some(bytes) = bytes else {
        return invalid("has no userData");
    };
    // `oc adm inspect` (and so must-gather) keeps a secret's keys but replaces their values:
    // older releases with nothing, newer ones with "<N> bytes long" (openshift/oc,
    // pkg/cli/admin/inspect, `elideSecret`). Such a value says nothing about the real one:
    // unknown, not invalid Ignition.
    if is_elided(&bytes) {
        return Err((
            Reason::ManagedSecretUnverified,
            format!(
                "stub secret {namespace}/{name} has its {USER_DATA_KEY} blanked, as must-gather \
                 and `oc adm inspect` write secrets: it cannot be verified, so the stub secret is \
                 left as it is (plan on `oc get secret -o yaml` output to check it)"
            ),
        ));
    }
    let Ok(config) = serde_json::from_slice::<Value>(&bytes) else {
        return invalid("has a userData that is not JSON");
    };
    match config.pointer("/ignition/version").and_then(Value::as_str) {
        Some(v) if v.starts_with("3.") => Ok(()),
        Some(v) => invalid(&format!("has Ignition version {v}")),
        None => invalid("has no ignition.version"),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;

    use super::*;

    fn secret(user_data: &str) -> Secret {
        Secret {
            data: Some(BTreeMap::from([(
                USER_DATA_KEY.to_string(),
                ByteString(user_data.as_bytes().to_vec()),
            )])),
            ..Secret::default()
        }
    }

    #[test]
    fn managed_name_appends_suffix_once() {
        assert_eq!(
            managed_name("worker-user-data").as_deref(),
            Some("worker-user-data-managed")
        );
        assert_eq!(managed_name("worker-user-data-managed"), None);
    }

    #[test]
    fn accepts_ignition_3() {
        let s = secret(r#"{"ignition":{"version":"3.2.0"}}"#);
        assert_eq!(verify("ns", "w", Some(&s)), Ok(()));
    }

    #[test]
    fn rejects_missing_spec2_and_garbage() {
        assert_eq!(
            verify("ns", "w", None).unwrap_err().0,
            Reason::ManagedSecretMissing
        );
        let spec2 = secret(r#"{"ignition":{"version":"2.2.0"}}"#);
        let (reason, message) = verify("ns", "w", Some(&spec2)).unwrap_err();
        assert_eq!(reason, Reason::ManagedSecretInvalid);
        assert!(message.contains("2.2.0"), "{message}");
        let garbage = secret("#!/bin/bash");
        assert_eq!(
            verify("ns", "w", Some(&garbage)).unwrap_err().0,
            Reason::ManagedSecretInvalid
        );
        assert_eq!(
            verify("ns", "w", Some(&Secret::default())).unwrap_err().0,
            Reason::ManagedSecretInvalid
        );
    }

    #[test]
    fn a_blanked_secret_is_unverified_not_invalid() {
        for elided in ["", "1934 bytes long"] {
            let (reason, message) = verify("ns", "w", Some(&secret(elided))).unwrap_err();
            assert_eq!(reason, Reason::ManagedSecretUnverified, "{elided:?}");
            assert!(message.contains("must-gather"), "{message}");
        }
        let (reason, _) = verify("ns", "w", Some(&secret("bytes long"))).unwrap_err();
        assert_eq!(reason, Reason::ManagedSecretInvalid);
    }
}
