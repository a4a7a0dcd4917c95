//! What EC2 said about AMIs, as plain data the planner reads: the owner, product and
//! architecture of each AMI a MachineSet names, and the marketplace AMIs that could replace it.
//!
//! The rules here are the Machine Config Operator's (openshift/machine-config-operator 7ff337a,
//! `pkg/controller/bootimage/aws_helpers.go` and `marketplace/marketplace.go`): an AMI is
//! classified by its owner account, a marketplace AMI by the product id at the end of its name,
//! and a marketplace AMI is replaced by the newest AMI of the same product whose RHCOS version
//! is not newer than the golden release's.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::arch::Arch;

/// Red Hat's account that owns the standard RHCOS AMIs (`awsRHCOSOwnerID`, aws_helpers.go).
pub const RHCOS_OWNER: &str = "531415883065";
/// The AWS Marketplace account that owns every marketplace AMI (`awsMarketplaceOwnerID`,
/// aws_helpers.go); the MCO searches it by its alias `aws-marketplace`, which names the same
/// account. We search by the id, which EC2 accepts in `Owner.N` as well.
pub const MARKETPLACE_OWNER: &str = "679593333241";
/// ROSA Classic's marketplace product (`ROSAProductID`, marketplace.go). Its AMIs come in both
/// architectures under the one product, so candidates are also matched on architecture.
pub const ROSA_PRODUCT: &str = "34850061-abaf-402d-92df-94325c9e947f";

/// The marketplace products Red Hat lists (`Products`, marketplace.go), for messages only: an
/// unlisted product id from the marketplace account is still followed.
const PRODUCT_NAMES: &[(&str, &str)] = &[
    ("59ead7de-2540-4653-a8b0-fa7926d5c845", "OCP x86_64"),
    ("963b36c3-de6f-48ed-b802-2b38b2a2cdeb", "OKE x86_64"),
    ("f5da01a6-d046-487c-9072-42fe53b1cad4", "OPP x86_64"),
    ("abc249f8-7440-45f7-a4b1-c026baff64c1", "OCP arm64"),
    ("d2d3ebcd-c1ca-43d8-bf0a-530433200f35", "OKE arm64"),
    ("be6d3e94-c8dc-4a3e-9218-4b449b11f06f", "OPP arm64"),
    ("962791c7-3ae5-46d1-ba62-c7a5ebac54fd", "OCP EMEA x86_64"),
    ("7026c8d7-392c-4010-b93c-f93f7bc5495f", "OKE EMEA x86_64"),
    ("628c9df3-0254-4f91-bc1f-8619d1b8eaa8", "OPP EMEA x86_64"),
    (ROSA_PRODUCT, "ROSA"),
];

/// One AMI as DescribeImages shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AmiFacts {
    pub image_id: String,
    pub region: String,
    pub owner_id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// EC2's spelling: `x86_64`, `arm64`, ...
    #[serde(default)]
    pub architecture: String,
    /// ISO 8601, as EC2 writes it; compared as text, which orders such timestamps.
    #[serde(default)]
    pub creation_date: String,
}

/// Where an AMI comes from, judged by its owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AmiOrigin {
    /// A standard RHCOS AMI: replaced by the golden stream's AMI.
    Rhcos,
    /// An AWS Marketplace RHCOS AMI (ROSA's included): replaced by a newer AMI of its product.
    Marketplace { product: String },
    /// Anyone else's, or a marketplace AMI without a product id: never replaced.
    Custom,
}

impl AmiFacts {
    pub fn origin(&self) -> AmiOrigin {
        match self.owner_id.as_str() {
            RHCOS_OWNER => AmiOrigin::Rhcos,
            MARKETPLACE_OWNER => match product_id(&self.name) {
                Some(product) => AmiOrigin::Marketplace {
                    product: product.to_string(),
                },
                None => AmiOrigin::Custom,
            },
            _ => AmiOrigin::Custom,
        }
    }

    /// The architecture EC2 reports, if it is one we know.
    pub fn arch(&self) -> Option<Arch> {
        match self.architecture.as_str() {
            "x86_64" => Some(Arch::Amd64),
            "arm64" => Some(Arch::Arm64),
            _ => None,
        }
    }

    /// The RHCOS release the description names (`RHEL CoreOS 9.6 9.6.20260210-0 x86_64`,
    /// ROSA's `rhcos-9.6.20250701-0-x86_64`).
    pub fn rhcos_release(&self) -> Option<&str> {
        release_in(&self.description)
    }
}

/// A product's name for people: `OCP x86_64`, `ROSA`, else the id itself.
pub fn product_name(product: &str) -> &str {
    PRODUCT_NAMES
        .iter()
        .find(|(id, _)| *id == product)
        .map_or(product, |(_, name)| name)
}

/// The product id a marketplace AMI name ends with: its last five `-`-separated parts, when
/// they form a UUID (`RHEL-9.4-RHCOS-9.6_HVM_GA-20260210-x86_64-0-<product>`; `ExtractProductID`
/// and its `productIDRegex`, marketplace.go).
pub fn product_id(name: &str) -> Option<&str> {
    static PRODUCT: LazyLock<Regex> = LazyLock::new(|| {
        let uuid = r"[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}";
        Regex::new(&format!("(?:^|-){uuid}$")).expect("a valid pattern")
    });
    let found = PRODUCT.find(name)?.as_str();
    Some(found.strip_prefix('-').unwrap_or(found))
}

/// The first `N.M.<8 or 12 digits>-<digits>` in `text`: the MCO's `descriptionVersionRe`
/// (marketplace.go), with ASCII digits only.
pub fn release_in(text: &str) -> Option<&str> {
    static RELEASE: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"[0-9]+\.[0-9]+\.(?:[0-9]{8}|[0-9]{12})-[0-9]+").expect("a valid pattern")
    });
    Some(RELEASE.find(text)?.as_str())
}

/// The `major.minor` of a release (`9.6.20260210-0` -> (9, 6)), which is what marketplace AMIs
/// are compared by (`marketplaceVersionToken`, `CmpVersionToken`).
pub fn version_token(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.splitn(3, '.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// The RHEL release an RHCOS release is built on, as the MCO's skew check reads it
/// (`checkRHCOSVersionSkew`, pkg/operator/status.go): the `major.minor` of a release stamped
/// YYYYMMDD (`9.6.20251023-0` -> (9, 6)); of a legacy one stamped YYYYMMDDHHmm, whose major is
/// the OpenShift release, the minor's first digit and the rest (`418.94.202511191518-0` ->
/// (9, 4)). Newer by this is newer RHCOS; by [`version_token`], 4.18's would beat 9.6's.
pub fn rhel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.splitn(3, '.');
    let (major, minor, rest) = (parts.next()?, parts.next()?, parts.next()?);
    let stamp = rest.split('-').next()?;
    let number = |s: &str| s.parse::<u32>().ok();
    match stamp.len() {
        8 => Some((number(major)?, number(minor)?)),
        12 => Some((number(minor.get(..1)?)?, number(minor.get(1..)?)?)),
        _ => None,
    }
}

/// What EC2 said about one AMI, or why it could not say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer<'a> {
    Known(&'a AmiFacts),
    /// EC2 was asked and does not show the AMI (deregistered, or private to another account).
    NotFound,
    /// EC2 could not be asked in this region (unreachable, throttled, refused): the message.
    Unavailable(&'a str),
    /// Asked, not answered yet.
    Pending,
    /// EC2 is not consulted (no credentials, or not an option here): why, if anything to say.
    NotConsulted(Option<&'a str>),
}

/// Whether EC2 is consulted at all.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Consulted {
    /// Never asked: `plan` without `--ec2-facts`, or the controller with `--ec2-lookups=false`.
    #[default]
    No,
    /// Would be asked but cannot be: the message says why (e.g. no credentials Secret).
    Unable(String),
    Yes,
}

/// Every EC2 answer a plan may need, by region. Its JSON form (`plan --ec2-facts FILE`) holds
/// lists, so it reads and diffs well.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Ec2Facts {
    #[serde(default = "consulted_yes")]
    pub consulted: Consulted,
    /// By (region, id).
    #[serde(default, with = "listed")]
    images: BTreeMap<(String, String), AmiFacts>,
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    not_found: BTreeSet<RegionalImage>,
    /// Marketplace searches answered.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    marketplace_searches: BTreeSet<MarketplaceSearch>,
    /// One per region.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    unavailable: BTreeSet<RegionUnavailable>,
}

fn consulted_yes() -> Consulted {
    Consulted::Yes
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RegionalImage {
    region: String,
    image_id: String,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct MarketplaceSearch {
    region: String,
    product_id: String,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RegionUnavailable {
    region: String,
    message: String,
}

/// The images, written as a list (each names its region and id).
mod listed {
    use super::*;

    type Images = BTreeMap<(String, String), AmiFacts>;

    pub fn serialize<S: serde::Serializer>(images: &Images, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(images.values())
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Images, D::Error> {
        let images = Vec::<AmiFacts>::deserialize(d)?;
        let keyed = |i: AmiFacts| ((i.region.clone(), i.image_id.clone()), i);
        Ok(images.into_iter().map(keyed).collect())
    }
}

/// Why no marketplace AMI can replace the current one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoCandidate<'a> {
    /// The search has not been answered yet, or could not be made (the message).
    Pending,
    Unavailable(&'a str),
    /// Answered: none of the product's AMIs fits.
    None,
}

impl Ec2Facts {
    /// Facts of a consulted EC2 (as the controller gathers them).
    pub fn consulted() -> Self {
        Ec2Facts {
            consulted: Consulted::Yes,
            ..Ec2Facts::default()
        }
    }

    pub fn add_image(&mut self, image: AmiFacts) {
        let (region, image_id) = (image.region.clone(), image.image_id.clone());
        self.not_found.remove(&RegionalImage { region, image_id });
        (self.images).insert((image.region.clone(), image.image_id.clone()), image);
    }

    pub fn add_not_found(&mut self, region: &str, image_id: &str) {
        let key = (region.to_string(), image_id.to_string());
        if !self.images.contains_key(&key) {
            let (region, image_id) = key;
            self.not_found.insert(RegionalImage { region, image_id });
        }
    }

    pub fn add_search(&mut self, region: &str, product: &str) {
        let (region, product_id) = (region.to_string(), product.to_string());
        (self.marketplace_searches).insert(MarketplaceSearch { region, product_id });
    }

    pub fn set_unavailable(&mut self, region: &str, message: String) {
        self.unavailable.retain(|u| u.region != region);
        let region = region.to_string();
        self.unavailable
            .insert(RegionUnavailable { region, message });
    }

    /// The regions EC2 could not be asked in, and why.
    pub fn unavailable(&self) -> impl Iterator<Item = (&str, &str)> {
        (self.unavailable.iter()).map(|u| (u.region.as_str(), u.message.as_str()))
    }

    /// Why EC2 could not be asked in `region`, if it could not.
    fn unavailable_in(&self, region: &str) -> Option<&str> {
        let found = self.unavailable.iter().find(|u| u.region == region);
        found.map(|u| u.message.as_str())
    }

    /// What EC2 said about `image_id` in `region`.
    pub fn answer(&self, region: &str, image_id: &str) -> Answer<'_> {
        match &self.consulted {
            Consulted::No => return Answer::NotConsulted(None),
            Consulted::Unable(why) => return Answer::NotConsulted(Some(why)),
            Consulted::Yes => {}
        }
        let key = (region.to_string(), image_id.to_string());
        if let Some(image) = self.images.get(&key) {
            return Answer::Known(image);
        }
        let missing = RegionalImage {
            region: key.0,
            image_id: key.1,
        };
        if self.not_found.contains(&missing) {
            return Answer::NotFound;
        }
        match self.unavailable_in(region) {
            Some(message) => Answer::Unavailable(message),
            None => Answer::Pending,
        }
    }

    /// The marketplace AMI of `product` for `arch` in `region` that a MachineSet on that product
    /// moves to: the highest RHCOS `major.minor` not above `golden_release`'s, the newest of
    /// those. One minor behind is accepted, as the MCO does (`findMarketplaceAMI`): a release
    /// reaches every region's marketplace later than the stream.
    pub fn marketplace_target(
        &self,
        region: &str,
        product: &str,
        arch: Arch,
        golden_release: &str,
    ) -> Result<&AmiFacts, NoCandidate<'_>> {
        let search = MarketplaceSearch {
            region: region.to_string(),
            product_id: product.to_string(),
        };
        if !self.marketplace_searches.contains(&search) {
            return Err(match self.unavailable_in(region) {
                Some(message) => NoCandidate::Unavailable(message),
                None => NoCandidate::Pending,
            });
        }
        let ceiling = version_token(golden_release).ok_or(NoCandidate::None)?;
        let candidates = self.images.values().filter_map(|image| {
            let fits = image.region == region
                && image.origin()
                    == (AmiOrigin::Marketplace {
                        product: product.to_string(),
                    })
                && image.arch() == Some(arch);
            let version = version_token(image.rhcos_release()?)?;
            (fits && version <= ceiling).then_some((version, image))
        });
        candidates
            .max_by(|(va, a), (vb, b)| {
                va.cmp(vb)
                    .then_with(|| a.creation_date.cmp(&b.creation_date))
                    // A deterministic pick between twins, so two passes agree.
                    .then_with(|| b.image_id.cmp(&a.image_id))
            })
            .map(|(_, image)| image)
            .ok_or(NoCandidate::None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::ec2::ami as image;

    const OCP_X86: &str = "59ead7de-2540-4653-a8b0-fa7926d5c845";

    fn marketplace(id: &str, product: &str, release: &str, arch: &str, date: &str) -> AmiFacts {
        let mut image = image(
            id,
            MARKETPLACE_OWNER,
            &format!("RHEL-9.4-RHCOS-{release}_HVM_GA-{arch}-0-{product}"),
            &format!("RHEL CoreOS 9.6 {release} {arch}"),
            arch,
        );
        image.creation_date = date.into();
        image
    }

    #[test]
    fn the_owner_decides_the_origin() {
        let rhcos = image("ami-1", RHCOS_OWNER, "rhcos-9.6", "", "x86_64");
        assert_eq!(rhcos.origin(), AmiOrigin::Rhcos);
        let market = marketplace("ami-2", OCP_X86, "9.6.20260210-0", "x86_64", "");
        assert_eq!(
            market.origin(),
            AmiOrigin::Marketplace {
                product: OCP_X86.into()
            }
        );
        // The marketplace account without a product id in the name, and anyone else: custom.
        let nameless = image("ami-3", MARKETPLACE_OWNER, "some-image", "", "x86_64");
        assert_eq!(nameless.origin(), AmiOrigin::Custom);
        let mine = image("ami-4", "123456789012", &market.name, "", "x86_64");
        assert_eq!(mine.origin(), AmiOrigin::Custom);
    }

    #[test]
    fn product_ids_come_from_the_end_of_the_name() {
        let rosa = format!("rhcos-9.6.20250701-0-x86_64-{ROSA_PRODUCT}");
        assert_eq!(product_id(&rosa), Some(ROSA_PRODUCT));
        assert_eq!(product_id(OCP_X86), Some(OCP_X86));
        assert_eq!(
            product_id("RHEL-9.4-RHCOS-9.6_HVM_GA-20260210-x86_64-0"),
            None
        );
        assert_eq!(product_id("x-59ead7de-2540-4653-a8b0-fa7926d5c84"), None);
        assert_eq!(product_id("x-159ead7de-2540-4653-a8b0-fa7926d5c845"), None);
        assert_eq!(product_id(""), None);
        assert_eq!(product_name(ROSA_PRODUCT), "ROSA");
        assert_eq!(product_name("unlisted"), "unlisted");
    }

    #[test]
    fn releases_are_read_from_both_description_formats() {
        assert_eq!(
            release_in("RHEL CoreOS 9.6 9.6.20260210-0 x86_64"),
            Some("9.6.20260210-0")
        );
        assert_eq!(
            release_in("rhcos-9.6.20250701-0-x86_64"),
            Some("9.6.20250701-0")
        );
        assert_eq!(
            release_in("OpenShift 418.94.202511191518-0"),
            Some("418.94.202511191518-0")
        );
        assert_eq!(release_in("RHEL CoreOS 9.6"), None);
        assert_eq!(release_in("9.6.2026021-0"), None);
        assert_eq!(release_in("9.6.2026021012-0"), None);
        // Only ASCII digits are digits here, as in Go's `\d` (Rust's counts others).
        let arabic_six = "9.\u{0666}.20260210-0, then 9.6.20260210-0";
        assert_eq!(release_in(arabic_six), Some("9.6.20260210-0"));
        assert_eq!(release_in(""), None);
        assert_eq!(version_token("9.6.20260210-0"), Some((9, 6)));
        assert_eq!(version_token("10.2.20260405-0"), Some((10, 2)));
        assert_eq!(version_token("nine"), None);
        assert!(version_token("10.0.20260101-0") > version_token("9.8.20260101-0"));
        assert_eq!(rhel_version("9.6.20260210-0"), Some((9, 6)));
        assert_eq!(rhel_version("418.94.202511191518-0"), Some((9, 4)));
        assert_eq!(rhel_version("48.84.202208021106-0"), Some((8, 4)));
        assert_eq!(rhel_version("410.810.202405011200-0"), Some((8, 10)));
        assert_eq!(rhel_version("9.6.2026021-0"), None);
        assert_eq!(rhel_version("4é8.é4.202208021106-0"), None);
        assert!(rhel_version("418.94.202511191518-0") < rhel_version("9.6.20260210-0"));
    }

    fn searched(images: Vec<AmiFacts>) -> Ec2Facts {
        let mut facts = Ec2Facts::consulted();
        for image in images {
            facts.add_image(image);
        }
        facts.add_search("us-east-1", OCP_X86);
        facts
    }

    #[test]
    fn the_newest_marketplace_ami_not_newer_than_the_golden_release_wins() {
        let facts = searched(vec![
            marketplace(
                "ami-96old",
                OCP_X86,
                "9.6.20251001-0",
                "x86_64",
                "2025-10-01",
            ),
            marketplace(
                "ami-96new",
                OCP_X86,
                "9.6.20260210-0",
                "x86_64",
                "2026-02-10",
            ),
            marketplace("ami-98", OCP_X86, "9.8.20260403-0", "x86_64", "2026-04-03"),
            marketplace(
                "ami-96arm",
                OCP_X86,
                "9.6.20260301-0",
                "arm64",
                "2026-03-01",
            ),
            marketplace(
                "ami-other",
                "963b36c3-de6f-48ed-b802-2b38b2a2cdeb",
                "9.6.20260301-0",
                "x86_64",
                "2026-03-01",
            ),
        ]);
        let pick = |release| {
            facts
                .marketplace_target("us-east-1", OCP_X86, Arch::Amd64, release)
                .map(|i| i.image_id.as_str())
        };
        assert_eq!(pick("9.6.20260210-0"), Ok("ami-96new"));
        assert_eq!(pick("9.8.20260403-0"), Ok("ami-98"));
        // 9.7 is not published in the marketplace yet: one behind is fine.
        assert_eq!(pick("9.7.20260301-0"), Ok("ami-96new"));
        assert_eq!(pick("9.4.20240101-0"), Err(NoCandidate::None));
        // Another region's search was never made.
        assert_eq!(
            facts.marketplace_target("eu-west-1", OCP_X86, Arch::Amd64, "9.6.20260210-0"),
            Err(NoCandidate::Pending)
        );
    }

    #[test]
    fn answers_say_why_ec2_could_not_tell() {
        let mut facts = searched(vec![image("ami-1", RHCOS_OWNER, "", "", "x86_64")]);
        facts.add_not_found("us-east-1", "ami-gone");
        facts.set_unavailable("eu-west-1", "throttled".into());
        assert!(matches!(
            facts.answer("us-east-1", "ami-1"),
            Answer::Known(_)
        ));
        assert_eq!(facts.answer("us-east-1", "ami-gone"), Answer::NotFound);
        assert_eq!(facts.answer("us-east-1", "ami-2"), Answer::Pending);
        assert_eq!(
            facts.answer("eu-west-1", "ami-1"),
            Answer::Unavailable("throttled")
        );
        assert_eq!(
            Ec2Facts::default().answer("us-east-1", "ami-1"),
            Answer::NotConsulted(None)
        );
    }

    #[test]
    fn the_facts_file_round_trips() {
        let mut facts = searched(vec![marketplace(
            "ami-96",
            OCP_X86,
            "9.6.20260210-0",
            "x86_64",
            "2026-02-10",
        )]);
        facts.add_not_found("us-east-1", "ami-gone");
        facts.set_unavailable("eu-west-1", "timed out".into());
        let text = serde_json::to_string(&facts).unwrap();
        assert_eq!(serde_json::from_str::<Ec2Facts>(&text).unwrap(), facts);
        // A hand-written file without `consulted` means EC2 was asked.
        let minimal: Ec2Facts = serde_json::from_str(r#"{"images": []}"#).unwrap();
        assert_eq!(minimal.consulted, Consulted::Yes);
        assert!(serde_json::from_str::<Ec2Facts>(r#"{"imagez": []}"#).is_err());
    }
}
