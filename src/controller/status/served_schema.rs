//! Which boot-image status fields the served `MachineConfiguration` schema declares, read from
//! the API server's OpenAPI v3 document and followed as it changes.
//!
//! Every release serves its own version of the CRD (openshift/api, release branches; the Default
//! feature set): 4.16 declares neither `spec.managedBootImages` nor any boot-image status,
//! 4.17 and 4.18 no `status.managedBootImagesStatus`, 4.19 to 4.21 no
//! `status.bootImageSkewEnforcementStatus` and only `machinesets` as a managed resource. A
//! server-side apply that carries a field the schema does not declare, or an enum value it does
//! not allow, is refused whole, so the conditions (which every release declares) must never
//! travel with a field this schema lacks. Until the schema is known we write conditions only.
//!
//! The OpenAPI v3 document needs no RBAC of its own (the `system:discovery` ClusterRole lets
//! every authenticated user read `/openapi/*`), and its index names each group-version's
//! document by a hash of its content: a changed CRD (a cluster upgrade) is a new URL, so reading
//! the small index again now and then is enough to follow it.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use futures::AsyncReadExt as _;
use kube::Client;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::time::Instant;
use tracing::{debug, info, warn};

/// The group-version of `MachineConfiguration`, as the OpenAPI v3 index names it.
const GROUP_VERSION_PATH: &str = "apis/operator.openshift.io/v1";
/// The schema's name in that document: the API server names a CRD's schema after its group
/// written backwards, its version and its kind.
const SCHEMA_NAME: &str = "io.openshift.operator.v1.MachineConfiguration";
/// How long after a read the index is read again, when no refusal asked for it sooner.
const READ_AGAIN: Duration = Duration::from_secs(300);
/// The most of one OpenAPI document (or the index) read. The group-version's document holds
/// every kind of `operator.openshift.io/v1`: 131 kB for the MachineConfiguration CRD alone (105
/// kB of YAML), so about 2 to 3 MB on OpenShift (28 CRDs, about 1 MB of YAML, in openshift/api's
/// Default feature set), against the pod's 128 Mi. Beyond it the document is not read and the
/// status goes on with what the last read said (conditions alone until the first).
pub const MAX_DOCUMENT_BYTES: usize = 16 * 1024 * 1024;

/// What the served schema lets us write into `status` besides the conditions. The default is
/// nothing (conditions only: what every release accepts), used until the schema has been read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatusSchema {
    /// `status.managedBootImagesStatus` is declared.
    pub managed_boot_images: bool,
    /// The values its machine managers' `resource` may take, where the schema lists them (an
    /// enum); any otherwise.
    pub managed_resources: Option<BTreeSet<String>>,
    /// `status.bootImageSkewEnforcementStatus` is declared.
    pub skew_enforcement: bool,
}

impl StatusSchema {
    /// Whether a machine manager entry of `managedBootImagesStatus` may carry `resource`.
    pub fn allows(&self, resource: &str) -> bool {
        (self.managed_resources.as_ref()).is_none_or(|values| values.contains(resource))
    }

    /// Reads the schema of `MachineConfiguration` out of the group-version's OpenAPI v3
    /// document. Only that one schema is decoded: the document holds every kind of the group.
    pub fn from_openapi(document: &str) -> Result<StatusSchema, SchemaError> {
        #[derive(Deserialize)]
        struct Document<'a> {
            #[serde(borrow)]
            components: Components<'a>,
        }
        #[derive(Deserialize)]
        struct Components<'a> {
            #[serde(borrow)]
            schemas: HashMap<Cow<'a, str>, &'a RawValue>,
        }
        let document: Document<'_> = serde_json::from_str(document)?;
        let raw =
            (document.components.schemas.get(SCHEMA_NAME)).ok_or(SchemaError::KindNotServed)?;
        let schema: Value = serde_json::from_str(raw.get())?;
        Ok(StatusSchema::from_kind_schema(&schema))
    }

    /// The same from the kind's schema itself (the CRD's `openAPIV3Schema` has this shape too).
    pub fn from_kind_schema(schema: &Value) -> StatusSchema {
        let status = &schema["properties"]["status"]["properties"];
        let managed = &status["managedBootImagesStatus"];
        let resource = &managed["properties"]["machineManagers"]["items"]["properties"]["resource"];
        let values = resource.get("enum").and_then(Value::as_array);
        StatusSchema {
            managed_boot_images: !managed.is_null(),
            managed_resources: values.map(|values| {
                (values.iter())
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            }),
            skew_enforcement: status.get("bootImageSkewEnforcementStatus").is_some(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error("the API server's OpenAPI v3 index does not list {GROUP_VERSION_PATH}")]
    GroupVersionNotServed,
    #[error("the OpenAPI v3 document of {GROUP_VERSION_PATH} has no {SCHEMA_NAME}")]
    KindNotServed,
    #[error("cannot read the OpenAPI v3 document: {0}")]
    Json(#[from] serde_json::Error),
    #[error("cannot read {path}: {message}")]
    Read { path: String, message: String },
}

/// The served schema as last read. The leader's status write reads the index again once
/// [`READ_AGAIN`] has passed since the last read, and at once after the API server refused a
/// write as invalid; the document only when the index names a new one.
pub struct ServedSchema {
    client: Client,
    pub current: StatusSchema,
    /// The URL the document was read from.
    read_from: Option<String>,
    /// When the index is due to be read again.
    due: Instant,
}

impl ServedSchema {
    /// Not read yet: due at once.
    pub fn new(client: Client) -> ServedSchema {
        ServedSchema {
            client,
            current: StatusSchema::default(),
            read_from: None,
            due: Instant::now(),
        }
    }

    /// Reads the schema if [`READ_AGAIN`] has passed since the last read (or none was made).
    pub async fn read_if_due(&mut self) {
        if self.due <= Instant::now() {
            self.read().await;
        }
    }

    /// Reads the index, and the document if the index names a new one.
    pub async fn read(&mut self) {
        self.due = Instant::now() + READ_AGAIN;
        // Keep what we had: conditions alone are always accepted.
        if let Err(e) = self.read_if_changed().await {
            warn!(error = %e, "cannot read the served MachineConfiguration schema; status fields other than conditions wait for it")
        }
    }

    /// Reads the document the index names, unless it is the one read last: its URL is a hash
    /// of its content, so the same document read again would say the same.
    async fn read_if_changed(&mut self) -> Result<(), SchemaError> {
        let index: Value = serde_json::from_str(&get(&self.client, "/openapi/v3").await?)?;
        let url = (index["paths"][GROUP_VERSION_PATH]["serverRelativeURL"].as_str())
            .ok_or(SchemaError::GroupVersionNotServed)?;
        if self.read_from.as_deref() == Some(url) {
            return Ok(());
        }
        let document = get(&self.client, url).await?;
        debug!(%url, bytes = document.len(), "read the served schema's OpenAPI document");
        let schema = StatusSchema::from_openapi(&document)?;
        if self.current != schema {
            info!(?schema, "read the served MachineConfiguration schema");
            self.current = schema;
        }
        self.read_from = Some(url.to_string());
        Ok(())
    }
}

/// The body at `path`, at most [`MAX_DOCUMENT_BYTES`] of it, answered within the bound of a call.
async fn get(client: &Client, path: &str) -> Result<String, SchemaError> {
    let read = async {
        let request = hyper::Request::get(path).body(Vec::new());
        // Answers an HTTP error as the API server's Status, and the body as it arrives.
        let body = client.request_stream(request.map_err(kube::Error::HttpError)?);
        read_limited(body.await?)
            .await
            .map_err(|e| kube::Error::Service(e.into()))
    };
    let read = crate::api_client::bounded(read).await;
    read.map_err(|e| SchemaError::Read {
        path: path.to_string(),
        message: e.to_string(),
    })
}

/// `body` as text, refused once it passes [`MAX_DOCUMENT_BYTES`] (nothing more is read).
async fn read_limited(body: impl futures::AsyncRead) -> std::io::Result<String> {
    let limit = MAX_DOCUMENT_BYTES as u64;
    let mut bytes = Vec::new();
    // A byte past the bound tells a document at the bound from a larger one.
    std::pin::pin!(body.take(limit + 1))
        .read_to_end(&mut bytes)
        .await?;
    // Bound and UTF-8 checked as for every other input, at the cost of one copy within the bound.
    crate::bounded_read::read_bounded(bytes.as_slice(), limit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kind_schema(status: Value) -> Value {
        json!({"properties": {"status": {"properties": status}}})
    }

    /// A body sent in chunks of 1 MiB, `chunks` of them.
    fn chunked(chunks: usize) -> impl futures::AsyncRead {
        use futures::TryStreamExt as _;
        let chunk = bytes::Bytes::from(vec![b' '; 1024 * 1024]);
        let frames = (0..chunks).map(move |_| Ok(chunk.clone()));
        futures::stream::iter(frames).into_async_read()
    }

    #[tokio::test]
    async fn a_document_is_read_up_to_its_bound_and_no_further() {
        let within = read_limited(chunked(MAX_DOCUMENT_BYTES / (1024 * 1024))).await;
        assert_eq!(within.expect("at the bound").len(), MAX_DOCUMENT_BYTES);
        // An endless body: refused once past the bound, without waiting for its end.
        let endless = read_limited(chunked(usize::MAX)).await;
        let error = endless.expect_err("past the bound").to_string();
        assert!(error.contains("larger than 16 MiB"), "{error}");
    }

    #[test]
    fn conditions_only_when_the_schema_declares_no_boot_image_status() {
        let schema = kind_schema(json!({"conditions": {}, "observedGeneration": {}}));
        assert_eq!(
            StatusSchema::from_kind_schema(&schema),
            StatusSchema::default()
        );
    }

    #[test]
    fn the_resources_a_manager_may_name_come_from_the_enum() {
        let schema = kind_schema(json!({
            "managedBootImagesStatus": {"properties": {"machineManagers": {"items": {"properties": {
                "resource": {"enum": ["machinesets"], "type": "string"}}}}}},
        }));
        let read = StatusSchema::from_kind_schema(&schema);
        assert!(read.managed_boot_images);
        assert!(read.allows("machinesets"));
        assert!(!read.allows("controlplanemachinesets"));
        assert!(!read.skew_enforcement);
    }

    #[test]
    fn the_kind_is_found_among_the_group_versions_schemas() {
        let document = json!({"components": {"schemas": {
            "io.openshift.operator.v1.Other": {"properties": {}},
            SCHEMA_NAME: kind_schema(json!({"bootImageSkewEnforcementStatus": {}})),
        }}});
        let read = StatusSchema::from_openapi(&document.to_string()).unwrap();
        assert!(read.skew_enforcement);
        assert!(!read.managed_boot_images);
        let without = json!({"components": {"schemas": {}}}).to_string();
        assert!(matches!(
            StatusSchema::from_openapi(&without),
            Err(SchemaError::KindNotServed)
        ));
    }

    /// Every release's CRD, as `fixtures/crds/releases/` holds them, read as the API server
    /// would publish it.
    #[test]
    fn each_release_declares_what_its_crd_says() {
        let Some(shared) = crate::testkit::skips::shared_dir() else {
            return;
        };
        let dir = shared.join("fixtures/crds/releases");
        let expected = [
            ("4.16", None, false),
            ("4.17", None, false),
            ("4.18", None, false),
            ("4.19", Some(false), false),
            ("4.20", Some(false), false),
            ("4.21", Some(false), false),
            ("4.22", Some(true), true),
        ];
        for (release, control_plane_allowed, skew) in expected {
            let path = dir
                .join(release)
                .join("machineconfigurations.operator.openshift.io.yaml");
            let text = std::fs::read_to_string(&path).unwrap();
            let crd: Value = serde_saphyr::from_str(&text).unwrap();
            let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
            let read = StatusSchema::from_kind_schema(schema);
            let declared = read.managed_boot_images;
            let control_plane = declared.then(|| read.allows("controlplanemachinesets"));
            assert_eq!(control_plane, control_plane_allowed, "{release}");
            assert!(!declared || read.allows("machinesets"), "{release}");
            assert_eq!(read.skew_enforcement, skew, "{release}");
        }
    }
}
