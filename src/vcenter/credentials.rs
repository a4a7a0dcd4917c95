//! The machine API's vCenter credentials.
//!
//! The Secret `vsphere-cloud-credentials` in the machine API's namespace, written by the cloud
//! credential operator for the machine-api-operator's CredentialsRequest and named by every
//! vSphere providerSpec (`credentialsSecret`), holds `<server>.username` and
//! `<server>.password` for each vCenter. The Machine Config Operator reads the same keys, from
//! the root copy `kube-system/vsphere-creds` (`reconcileVSphereProviderSpec`,
//! pkg/controller/bootimage/platform_helpers.go, and `createNewVMTemplate`, vsphere_helpers.go,
//! at 7ff337a); we read the machine API's so that our RBAC stays in its namespace.

use super::VcenterError;
use crate::api::Secret;

/// The Secret's name (`credentialsSecret.name` of the installer's vSphere providerSpecs).
pub const SECRET_NAME: &str = "vsphere-cloud-credentials";

/// One vCenter's user and password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// The credentials `secret` holds for `server`.
pub fn for_server(secret: &Secret, server: &str) -> Result<Credentials, VcenterError> {
    let refused = |why: String| VcenterError::Credentials {
        server: server.into(),
        why,
    };
    let value = |key: String| -> Result<String, VcenterError> {
        // Read from the API server, which serves `stringData` as `data`.
        let bytes = (secret.data.as_ref().and_then(|d| d.get(&key)))
            .ok_or_else(|| refused(format!("Secret {SECRET_NAME} has no key {key}")))?;
        let text = String::from_utf8(bytes.0.clone())
            .map_err(|_| refused(format!("key {key} of Secret {SECRET_NAME} is not UTF-8")))?;
        let text = text.trim().to_string();
        if text.is_empty() {
            return Err(refused(format!(
                "key {key} of Secret {SECRET_NAME} is empty"
            )));
        }
        Ok(text)
    };
    Ok(Credentials {
        username: value(format!("{server}.username"))?,
        password: value(format!("{server}.password"))?,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;

    use super::*;

    fn secret(entries: &[(&str, &str)]) -> Secret {
        Secret {
            data: Some(
                entries
                    .iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Secret::default()
        }
    }

    #[test]
    fn keys_are_per_server() {
        let s = secret(&[
            ("vc1.example.com.username", "machine-api@vsphere.local"),
            ("vc1.example.com.password", "s3cret\n"),
        ]);
        let c = for_server(&s, "vc1.example.com").unwrap();
        assert_eq!(c.username, "machine-api@vsphere.local");
        assert_eq!(c.password, "s3cret");
        assert!(!format!("{c:?}").contains("s3cret"));
        let other = for_server(&s, "vc2.example.com").unwrap_err();
        assert!(
            other.to_string().contains("vc2.example.com.username"),
            "{other}"
        );
    }

    #[test]
    fn an_empty_password_is_no_credential() {
        let s = secret(&[("vc.username", "u"), ("vc.password", " ")]);
        assert!(matches!(
            for_server(&s, "vc"),
            Err(VcenterError::Credentials { .. })
        ));
    }
}
