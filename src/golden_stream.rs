//! CoreOS stream metadata: the golden boot images a release ships.
//!
//! Parsing is lenient about everything we do not read (other platforms, formats, checksums) and
//! strict about what we do: an architecture whose AWS regions are not objects is rejected as a
//! whole, since guessing would risk writing a wrong image. Rejected per architecture and per OS
//! stream, not for the whole ConfigMap: a malformed entry for an architecture or stream nobody
//! runs must not stop the others (the MCO reads only the entries of the machine resources it
//! enrolls: `syncMAPIMachineSet`, pkg/controller/bootimage/ms_helpers.go, release-4.21).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::LazyLock;

use regex::Regex;
use serde::Deserialize;
use serde_json::Value;

use crate::api::ConfigMap;
use crate::arch::Arch;

/// Key of the golden ConfigMap holding the default stream.
pub const STREAM_KEY: &str = "stream";
/// Key of newer golden ConfigMaps holding every OS stream by name (a JSON map).
pub const STREAMS_KEY: &str = "streams";
/// The OS stream the `stream` key describes: the Machine Config Operator's default, and the only
/// one it updates (`SupportedOSStream`, pkg/controller/bootimage/boot_image_controller.go; the
/// names are in pkg/osimagestream/streams.go).
pub const DEFAULT_OS_STREAM: &str = "rhel-9";
/// Key naming the OpenShift release the ConfigMap belongs to.
pub const RELEASE_VERSION_KEY: &str = "releaseVersion";

#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error("the golden ConfigMap has no `{STREAM_KEY}` key")]
    MissingStreamKey,
    #[error("stream metadata is not valid JSON of the CoreOS stream format: {0}")]
    Invalid(#[from] serde_json::Error),
    #[error("stream metadata lists no architectures")]
    NoArchitectures,
}

/// One parsed CoreOS stream (`stream.json`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GoldenStream {
    /// Stream name, e.g. `rhcos-4.21`.
    pub stream: String,
    /// Each architecture's images, or why its entry is malformed (then never read).
    architectures: BTreeMap<String, Result<StreamArch, String>>,
    /// Every image reference the stream publishes and its architecture, built once when the
    /// stream is read: the planner asks it for every MachineSet.
    references: HashMap<String, Arch>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
struct StreamArch {
    artifacts: BTreeMap<String, Value>,
    images: StreamImages,
    #[serde(rename = "rhel-coreos-extensions")]
    extensions: Extensions,
}

/// What each target a stream publishes for a platform we write must look like, as the message
/// about it shows it: an AMI id (`ami-` and 8 or 17 hexadecimal digits), a GCP image path
/// (project and image of lowercase letters, digits and dashes), an Azure marketplace URN (four
/// fields, none empty, without a separator or a space), and a vSphere OVA's location (an
/// http(s) URL without spaces) with its SHA-256 (64 hexadecimal digits).
static SHAPES: LazyLock<[Regex; 4]> = LazyLock::new(|| {
    [
        r"^ami-(?:[0-9a-fA-F]{8}|[0-9a-fA-F]{17})$",
        r"^projects/[a-z0-9-]+/global/images/[a-z0-9-]+$",
        r"^[^: /]+(?::[^: /]+){3}$",
        r"^https?://\S* \(sha256 [0-9a-fA-F]{64}\)$",
    ]
    .map(|pattern| Regex::new(pattern).expect("a valid pattern"))
});

impl StreamArch {
    /// Every image this architecture publishes for a platform we write is well-formed, or why
    /// not: a malformed target is never written, whatever else the stream says.
    fn validate(&self, arch: &str) -> Result<(), String> {
        let [ami, gcp, urn, ova] = &*SHAPES;
        let regions = self.images.aws.iter().flat_map(|aws| &aws.regions);
        let aws = regions.map(|(region, image)| {
            let what = format!("AWS image for {region}");
            (what, image.image.clone(), ami, "an AMI id")
        });
        let gcp = self.images.gcp.iter().map(|image| {
            let expected = "a GCP image in a project";
            ("GCP image".to_string(), image.reference(), gcp, expected)
        });
        let market = self.extensions.marketplace.iter().flat_map(|m| &m.azure);
        let azure = market.flat_map(|(variant, generations)| {
            generations.iter().map(move |(generation, image)| {
                let what = format!("Azure {variant} {generation} image");
                (what, image.urn(), urn, "a marketplace URN")
            })
        });
        // vSphere's target is a template we import from this OVA: a download we cannot verify
        // or a location that is not a URL would be imported into every vCenter.
        let vmware = self.artifacts.get(VMWARE_KEY).and_then(vmware_ova);
        let vmware = vmware.map(|image| {
            let value = format!("{} (sha256 {})", image.location, image.sha256);
            let expected = "an http(s) URL with a SHA-256";
            ("vmware OVA".to_string(), value, ova, expected)
        });
        let mut targets = aws.chain(gcp).chain(azure).chain(vmware);
        match targets.find(|(_, value, shape, _)| !shape.is_match(value)) {
            None => Ok(()),
            Some((what, value, _, expected)) => Err(format!(
                "the stream's {arch} {what} is {value:?}, which is not {expected}"
            )),
        }
    }

    fn image_references(&self) -> impl Iterator<Item = String> + '_ {
        let aws = self.images.aws.iter().flat_map(|aws| aws.regions.values());
        let market = self.extensions.marketplace.iter();
        let azure = market.flat_map(|m| m.azure.values().flat_map(BTreeMap::values));
        aws.map(|r| r.image.clone())
            .chain(self.images.gcp.iter().map(GcpImage::reference))
            .chain(azure.map(AzureMarketplaceImage::urn))
    }
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
struct StreamImages {
    aws: Option<AwsImages>,
    gcp: Option<GcpImage>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
struct AwsImages {
    #[serde(default)]
    regions: BTreeMap<String, AwsRegionImage>,
}

/// The AMI published for one AWS region.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct AwsRegionImage {
    pub image: String,
}

/// The image published in the `rhcos-cloud` GCP project.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct GcpImage {
    pub project: String,
    pub name: String,
}

impl GcpImage {
    /// The reference a MachineSet's boot disk uses for this image.
    pub fn reference(&self) -> String {
        ["projects/", &self.project, "/global/images/", &self.name].concat()
    }
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
struct Extensions {
    marketplace: Option<Marketplace>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
struct Marketplace {
    /// variant (`no-purchase-plan`, `ocp`, ...) -> Hyper-V generation -> image
    #[serde(default)]
    azure: BTreeMap<String, BTreeMap<String, AzureMarketplaceImage>>,
}

/// The vSphere OVA of a release (`artifacts.vmware`): imported into vCenter as a VM template.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct VmwareOva {
    pub release: String,
    pub location: String,
    /// Lowercase hexadecimal SHA-256 of the whole OVA file.
    pub sha256: String,
}

/// An Azure marketplace image as stream metadata and providerSpecs both spell it.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct AzureMarketplaceImage {
    pub publisher: String,
    pub offer: String,
    pub sku: String,
    pub version: String,
}

/// The stream key of vSphere's artifacts (its Infrastructure name is `VSphere`).
pub const VMWARE_KEY: &str = "vmware";

/// The OVA of a `vmware` artifact, when it has one (location and digest, as published).
fn vmware_ova(artifact: &Value) -> Option<VmwareOva> {
    let disk = artifact.pointer("/formats/ova/disk")?;
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_string();
    Some(VmwareOva {
        release: text(artifact.get("release")),
        location: text(disk.get("location")),
        sha256: text(disk.get("sha256")).to_ascii_lowercase(),
    })
}

impl GoldenStream {
    pub fn parse(json: &str) -> Result<Self, StreamError> {
        /// The document with each architecture still unread, so each is judged on its own.
        #[derive(Default, Deserialize)]
        #[serde(default)]
        struct Document {
            stream: String,
            architectures: BTreeMap<String, Value>,
        }
        let document: Document = serde_json::from_str(json)?;
        if document.architectures.is_empty() {
            return Err(StreamError::NoArchitectures);
        }
        let architectures = (document.architectures.into_iter())
            .map(|(arch, entry)| {
                let parsed = serde_json::from_value::<StreamArch>(entry)
                    .map_err(|e| StreamError::from(e).to_string())
                    .and_then(|images| images.validate(&arch).map(|()| images));
                (arch, parsed)
            })
            .collect();
        let mut stream = GoldenStream {
            stream: document.stream,
            architectures,
            ..GoldenStream::default()
        };
        stream.references = Arch::ALL
            .into_iter()
            .filter_map(|arch| Some((arch, stream.arch(arch)?)))
            .flat_map(|(arch, images)| images.image_references().map(move |r| (r, arch)))
            .collect();
        Ok(stream)
    }

    /// Why this architecture's entry cannot be used, when it is malformed.
    pub fn invalid_entry(&self, arch: Arch) -> Option<&str> {
        let entry = self.architectures.get(arch.stream_key())?;
        entry.as_ref().err().map(String::as_str)
    }

    fn arch(&self, arch: Arch) -> Option<&StreamArch> {
        self.architectures.get(arch.stream_key())?.as_ref().ok()
    }

    /// Whether the stream publishes anything at all for this architecture.
    pub fn has_arch(&self, arch: Arch) -> bool {
        self.arch(arch).is_some()
    }

    /// The CoreOS release of this architecture's artifacts for a platform (`aws`, `gcp`, ...).
    pub fn release(&self, arch: Arch, platform: &str) -> Option<&str> {
        self.arch(arch)?
            .artifacts
            .get(platform)
            .and_then(|artifact| artifact.get("release"))?
            .as_str()
    }

    pub fn aws_image(&self, arch: Arch, region: &str) -> Option<&AwsRegionImage> {
        self.arch(arch)?.images.aws.as_ref()?.regions.get(region)
    }

    pub fn gcp_image(&self, arch: Arch) -> Option<&GcpImage> {
        self.arch(arch)?.images.gcp.as_ref()
    }

    /// The vSphere OVA of this architecture (`artifacts.vmware.formats.ova.disk`).
    pub fn vmware_ova(&self, arch: Arch) -> Option<VmwareOva> {
        vmware_ova(self.arch(arch)?.artifacts.get(VMWARE_KEY)?)
    }

    /// Marketplace images for Azure, by variant then Hyper-V generation (`hyperVGen1`/`2`).
    pub fn azure_marketplace(
        &self,
        arch: Arch,
    ) -> Option<&BTreeMap<String, BTreeMap<String, AzureMarketplaceImage>>> {
        let azure = &self.arch(arch)?.extensions.marketplace.as_ref()?.azure;
        (!azure.is_empty()).then_some(azure)
    }

    /// Every image reference the stream publishes: AMIs, GCP image paths and Azure marketplace
    /// URNs. Images listed here are "ours": an image found here is never a custom image.
    pub fn image_references(&self) -> BTreeSet<String> {
        (self.architectures.values().flatten())
            .flat_map(StreamArch::image_references)
            .collect()
    }

    /// The architecture whose images include `reference` (an AMI, GCP image path or Azure URN).
    pub fn arch_of(&self, reference: &str) -> Option<Arch> {
        self.references.get(reference).copied()
    }
}

/// The release a golden ConfigMap belongs to (`releaseVersion`), read without its streams: the
/// release gate comes before the streams are parsed.
pub fn release_version(cm: &ConfigMap) -> Option<String> {
    let value = cm.data.as_ref()?.get(RELEASE_VERSION_KEY)?.trim();
    (!value.is_empty()).then(|| value.to_string())
}

impl AzureMarketplaceImage {
    /// `publisher:offer:sku:version`, the form `az vm image` commands use.
    pub fn urn(&self) -> String {
        format!(
            "{}:{}:{}:{}",
            self.publisher, self.offer, self.sku, self.version
        )
    }
}

/// What the golden ConfigMap says: the default stream, any extra streams, and the release.
/// Empty (the default) where nothing is enrolled and the ConfigMap is not read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GoldenConfig {
    pub stream: GoldenStream,
    /// Other OS streams of the same release by OS stream name (`streams` key, e.g. `rhel-10`);
    /// MachineSets labelled with one of them are updated from it, and their images are known.
    pub other_streams: BTreeMap<String, GoldenStream>,
    /// Other OS streams whose entry is malformed, and why: never read.
    pub invalid_streams: BTreeMap<String, String>,
    pub release_version: Option<String>,
}

impl GoldenConfig {
    pub fn from_config_map(cm: &ConfigMap) -> Result<Self, StreamError> {
        let data = cm.data.as_ref();
        let get = |key: &str| data.and_then(|d| d.get(key));
        let stream = GoldenStream::parse(get(STREAM_KEY).ok_or(StreamError::MissingStreamKey)?)?;
        let mut other_streams = BTreeMap::new();
        let mut invalid_streams = BTreeMap::new();
        if let Some(json) = get(STREAMS_KEY) {
            let by_name: BTreeMap<String, Value> = serde_json::from_str(json)?;
            for (name, v) in by_name {
                // Values may be embedded objects or JSON strings; accept both.
                let text = match v {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                match GoldenStream::parse(&text) {
                    Ok(stream) => {
                        other_streams.insert(name, stream);
                    }
                    Err(e) => {
                        invalid_streams.insert(name, e.to_string());
                    }
                }
            }
        }
        Ok(GoldenConfig {
            stream,
            other_streams,
            invalid_streams,
            release_version: release_version(cm),
        })
    }

    /// The stream a machine labelled with OS stream `label` boots: the default `stream` for no
    /// label or the default OS stream's name, else the `streams` entry of that name. `None` when
    /// the ConfigMap does not carry the stream.
    pub fn os_stream(&self, label: Option<&str>) -> Option<&GoldenStream> {
        match label {
            None => Some(&self.stream),
            // The CoreOS stream's own name was once written here too; it means the default.
            Some(name) if name == DEFAULT_OS_STREAM || name == self.stream.stream => {
                Some(&self.stream)
            }
            Some(name) => self.other_streams.get(name),
        }
    }

    fn streams(&self) -> impl Iterator<Item = &GoldenStream> {
        std::iter::once(&self.stream).chain(self.other_streams.values())
    }

    /// The architecture of `reference` in any stream of the ConfigMap.
    pub fn arch_of(&self, reference: &str) -> Option<Arch> {
        self.streams().find_map(|s| s.arch_of(reference))
    }

    /// Image references of every stream in the ConfigMap: each plan counts them as known.
    pub fn image_references(&self) -> BTreeSet<String> {
        self.streams()
            .flat_map(GoldenStream::image_references)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compact() -> String {
        crate::testkit::streams::stream_421_all_platforms().to_string()
    }

    #[test]
    fn reads_aws_gcp_and_release() {
        let s = GoldenStream::parse(&compact()).unwrap();
        assert_eq!(s.stream, "rhcos-4.21");
        assert_eq!(
            s.aws_image(Arch::Amd64, "us-east-1").unwrap().image,
            "ami-01095d1967818437c"
        );
        assert!(s.aws_image(Arch::Amd64, "mars-1").is_none());
        assert!(s.aws_image(Arch::Arm64, "us-east-2").is_none());
        assert_eq!(
            s.gcp_image(Arch::Amd64).unwrap().reference(),
            "projects/rhcos-cloud/global/images/rhcos-9-6-20251023-0-gcp-x86-64"
        );
        assert_eq!(s.release(Arch::Amd64, "aws"), Some("9.6.20251023-0"));
    }

    #[test]
    fn malformed_streams_are_errors_not_panics() {
        assert!(matches!(
            GoldenStream::parse("{not json"),
            Err(StreamError::Invalid(_))
        ));
        assert!(matches!(
            GoldenStream::parse(r#"{"stream":"x","architectures":{}}"#),
            Err(StreamError::NoArchitectures)
        ));
        // An architecture of the wrong shape is rejected, and only it.
        let wrong_shape =
            r#"{"architectures":{"x86_64":{"images":{"aws":{"regions":{"us-east-1":"ami-1"}}}}}}"#;
        let parsed = GoldenStream::parse(wrong_shape).unwrap();
        assert!(!parsed.has_arch(Arch::Amd64));
        assert!(parsed.invalid_entry(Arch::Amd64).is_some());
    }

    #[test]
    fn image_references_cover_every_region_and_platform() {
        let refs = GoldenStream::parse(&compact()).unwrap().image_references();
        assert!(refs.contains("ami-01095d1967818437c"));
        assert!(
            refs.contains("projects/rhcos-cloud/global/images/rhcos-9-6-20251023-0-gcp-x86-64")
        );
    }

    #[test]
    fn a_malformed_target_sets_its_architecture_aside() {
        let with = |images: &str| {
            format!(r#"{{"stream": "s", "architectures": {{"x86_64": {{"images": {images}}}}}}}"#)
        };
        let good =
            with(r#"{"aws": {"regions": {"us-east-1": {"image": "ami-01095d1967818437c"}}}}"#);
        assert!(GoldenStream::parse(&good).is_ok());
        // Rejected with its architecture, and only that: the others stay usable.
        let beside = |images: &str| {
            format!(
                r#"{{"stream": "s", "architectures": {{"x86_64": {{"images": {images}}},
                "aarch64": {{"images": {{"aws": {{"regions": {{"us-east-1":
                {{"image": "ami-08e3890b24e081680"}}}}}}}}}}}}}}"#
            )
        };
        for bad in [
            r#"{"aws": {"regions": {"us-east-1": {"image": ""}}}}"#,
            r#"{"aws": {"regions": {"us-east-1": {"image": "ami-xyz"}}}}"#,
            r#"{"aws": {"regions": {"us-east-1": {"image": "arn:aws:ec2:ami-01095d1967818437c"}}}}"#,
            r#"{"gcp": {"project": "rhcos-cloud", "name": ""}}"#,
            r#"{"gcp": {"project": "../other", "name": "rhcos"}}"#,
        ] {
            let parsed = GoldenStream::parse(&beside(bad)).unwrap();
            let why = parsed.invalid_entry(Arch::Amd64).expect(bad);
            assert!(why.contains("x86_64"), "{bad}: {why}");
            assert!(parsed.aws_image(Arch::Amd64, "us-east-1").is_none());
            assert!(parsed.aws_image(Arch::Arm64, "us-east-1").is_some());
            assert_eq!(parsed.invalid_entry(Arch::Arm64), None);
            assert!(!parsed.image_references().iter().any(|r| r.is_empty()));
        }
        let market = r#"{"stream": "s", "architectures": {"x86_64": {"rhel-coreos-extensions":
            {"marketplace": {"azure": {"ocp": {"hyperVGen2":
            {"publisher": "redhat", "offer": "", "sku": "x", "version": "1"}}}}}}}}"#;
        let parsed = GoldenStream::parse(market).unwrap();
        assert!(parsed.azure_marketplace(Arch::Amd64).is_none());
        assert!(parsed.invalid_entry(Arch::Amd64).is_some());
    }

    /// The shapes as the hand-written checks they replaced drew them.
    #[test]
    fn each_target_shape_takes_what_the_stream_publishes_and_nothing_near_it() {
        let [ami, gcp, urn, ova] = &*SHAPES;
        let digest = "14fa549bb83b2e730de22312419b503bc1ce85adf72269582f0af60e366d87ff";
        let cases = [
            (ami, "ami-01095d1967818437c", true),
            (ami, "ami-0123ABCD", true),
            (ami, "ami-0123456", false),
            (ami, "ami-01095d1967818437c\n", false),
            (ami, "xami-0123abcd", false),
            (gcp, "projects/rhcos-cloud/global/images/rhcos-9-6", true),
            (gcp, "projects/RHCOS/global/images/rhcos", false),
            (gcp, "projects//global/images/rhcos", false),
            (gcp, "projects/a/b/global/images/rhcos", false),
            (urn, "redhat:rh-ocp-worker:rh-ocp-worker:4.18.2025", true),
            (urn, "redhat::sku:1", false),
            (urn, "redhat:offer:sku:1:2", false),
            (urn, "red hat:offer:sku:1", false),
            (urn, "redhat:of/fer:sku:1", false),
        ];
        for (shape, value, expected) in cases {
            assert_eq!(shape.is_match(value), expected, "{value}");
        }
        let ova_of = |location: &str, digest: &str| format!("{location} (sha256 {digest})");
        assert!(ova.is_match(&ova_of("https://x/y.ova", digest)));
        assert!(ova.is_match(&ova_of("http://mirror/y.ova", digest)));
        assert!(!ova.is_match(&ova_of("https://x/a b.ova", digest)));
        assert!(!ova.is_match(&ova_of("https://x/a\u{a0}b.ova", digest)));
        assert!(!ova.is_match(&ova_of("ftp://x/y.ova", digest)));
        assert!(!ova.is_match(&ova_of("https://x/y.ova", &digest[1..])));
        assert!(!ova.is_match(&ova_of("https://x/y.ova", &format!("{digest}0"))));
    }

    #[test]
    fn a_malformed_os_stream_is_set_aside_and_the_others_kept() {
        let data = [
            ("stream", compact()),
            ("releaseVersion", "4.21.0".to_string()),
            (
                "streams",
                serde_json::json!({"rhel-10": "{not json", "centos-10": compact()}).to_string(),
            ),
        ];
        let cm = ConfigMap {
            data: Some(data.map(|(k, v)| (k.to_string(), v)).into()),
            ..ConfigMap::default()
        };
        let golden = GoldenConfig::from_config_map(&cm).unwrap();
        assert!(golden.os_stream(Some("centos-10")).is_some());
        assert!(golden.os_stream(Some("rhel-10")).is_none());
        assert!(golden.invalid_streams.contains_key("rhel-10"));
        assert_eq!(release_version(&cm).as_deref(), Some("4.21.0"));
    }

    #[test]
    fn the_vmware_ova_is_read_and_must_be_verifiable() {
        let s = GoldenStream::parse(&compact()).unwrap();
        let ova = s.vmware_ova(Arch::Amd64).unwrap();
        assert_eq!(ova.release, "9.6.20251023-0");
        assert!(ova.location.ends_with("vmware.x86_64.ova"));
        assert_eq!(ova.sha256.len(), 64);
        assert!(s.vmware_ova(Arch::Arm64).is_none());
        let with = |disk: &str| {
            format!(
                r#"{{"stream": "s", "architectures": {{"x86_64": {{"artifacts": {{"vmware":
                {{"release": "1", "formats": {{"ova": {{"disk": {disk}}}}}}}}}}}}}}}"#
            )
        };
        let digest = "14fa549bb83b2e730de22312419b503bc1ce85adf72269582f0af60e366d87ff";
        let good = format!(r#"{{"location": "https://x/y.ova", "sha256": "{digest}"}}"#);
        assert!(GoldenStream::parse(&with(&good)).is_ok());
        for bad in [
            format!(
                r#"{{"location": "https://x/y.ova", "sha256": "{}"}}"#,
                &digest[1..]
            ),
            format!(r#"{{"location": "file:///etc/passwd", "sha256": "{digest}"}}"#),
            format!(r#"{{"location": "", "sha256": "{digest}"}}"#),
            r#"{"location": "https://x/y.ova"}"#.to_string(),
        ] {
            let parsed = GoldenStream::parse(&with(&bad)).unwrap();
            assert!(parsed.vmware_ova(Arch::Amd64).is_none(), "{bad}");
            assert!(parsed.invalid_entry(Arch::Amd64).is_some(), "{bad}");
        }
    }
}
