//! vSphere: the VM template a MachineSet clones (`template`), which lives in vCenter.
//!
//! The golden stream publishes an OVA, not a template: the template for a release is one we
//! import into each failure domain, under a name that says which (so a restart or a second
//! replica finds it instead of importing again). Whether it exists is a fact of vCenter that the
//! controller gathers in the background ([`crate::facts::vcenter::VcenterFacts`]); this rule only reads
//! it. Until it is there, the rule says what it would import.

use ring::digest;
use serde_json::Value;

use super::{
    Changes, ImageOutcome, Input, PlatformRule, RuleContext, invalid, not_in_stream, skip,
};
use crate::facts::Lookup;
use crate::facts::vcenter::{
    FailureDomain, TemplateKey, TemplateRequest, TemplateState, TemplateVersion,
};
use crate::reason::Reason;

pub(super) struct VSphere;

/// vCenter refuses longer VM names (the MCO checks the same limit before importing,
/// pkg/controller/bootimage/vsphere_helpers.go at 7ff337a).
const MAX_TEMPLATE_NAME: usize = 80;

/// The workspace fields that place a MachineSet in a failure domain. The same fields the MCO
/// (`createNewVMTemplate`, vsphere_helpers.go at 7ff337a) and the control-plane machine set
/// operator (providerconfig/vsphere.go) compare.
const WORKSPACE_INPUTS: [&str; 5] = [
    "/workspace/server",
    "/workspace/datacenter",
    "/workspace/datastore",
    "/workspace/resourcePool",
    "/workspace/vmGroup",
];

impl FailureDomain {
    fn from_json(fd: &Value) -> Self {
        let text = |pointer: &str| fd.pointer(pointer).and_then(Value::as_str).unwrap_or("");
        FailureDomain {
            name: text("/name").into(),
            server: text("/server").into(),
            datacenter: text("/topology/datacenter").into(),
            datastore: text("/topology/datastore").into(),
            resource_pool: text("/topology/resourcePool").into(),
            folder: text("/topology/folder").into(),
            network: text("/topology/networks/0").into(),
            vm_group: text("/zoneAffinity/hostGroup/vmGroup").into(),
        }
    }

    /// Whether a provider spec's workspace is in this failure domain: every placing field equal,
    /// resource pools compared as paths (a trailing slash does not count).
    fn holds(&self, workspace: &Value) -> bool {
        let text = |key: &str| workspace.get(key).and_then(Value::as_str).unwrap_or("");
        let clean = |path: &str| path.trim_end_matches('/').to_string();
        text("server") == self.server
            && text("datacenter") == self.datacenter
            && text("datastore") == self.datastore
            && text("vmGroup") == self.vm_group
            && clean(text("resourcePool")) == clean(&self.resource_pool)
    }
}

/// Every failure domain of an Infrastructure's `spec.platformSpec`; entries without a name or
/// server are ignored (the API requires both).
pub fn failure_domains(platform_spec: Option<&Value>) -> Vec<FailureDomain> {
    platform_spec
        .and_then(|p| p.pointer("/vsphere/failureDomains"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(FailureDomain::from_json)
        .filter(|fd| !fd.name.is_empty() && !fd.server.is_empty())
        .collect()
}

/// The name of our template of `release` in the failure domain `domain` of cluster `infra`:
/// `<infra>-rhcos-<domain>-<release>`. The installer names its templates
/// `<infra>-rhcos-<region>-<zone>` (or `<infra>-rhcos` before failure domains), the MCO
/// `<infra>-rhcos-<domain>` (replaced in place on each release); ours carry the release, so an
/// old one is never overwritten while a MachineSet still clones it. A domain name that would
/// make the name too long for vCenter is replaced by a digest of it.
pub fn template_name(infra: &str, domain: &str, release: &str) -> String {
    let name = format!("{infra}-rhcos-{domain}-{release}");
    if name.len() <= MAX_TEMPLATE_NAME {
        return name;
    }
    let hash = digest::digest(&digest::SHA256, domain.as_bytes());
    let short = hex::encode(&hash.as_ref()[..4]);
    format!("{infra}-rhcos-{short}-{release}")
}

/// Whether `template` (a name or an inventory path) is one of this cluster's RHCOS templates,
/// made by the installer, the MCO or us: all three start with `<infra>-rhcos`. Anything else
/// was chosen by an administrator and is never replaced.
pub fn is_cluster_template(template: &str, infra: &str) -> bool {
    let name = template.rsplit('/').next().unwrap_or(template);
    name.strip_prefix(infra)
        .and_then(|rest| rest.strip_prefix("-rhcos"))
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('-'))
}

/// The template a provider spec clones and the cluster's infrastructure name, when the template
/// is one of this cluster's RHCOS templates; else the outcome that leaves it as it is.
fn cluster_template<'s>(
    spec: &'s Value,
    ctx: &RuleContext<'s>,
) -> Result<(&'s str, &'s str), Box<ImageOutcome>> {
    let Some(current) = spec.get("template").and_then(Value::as_str) else {
        return Err(Box::new(invalid(
            "providerSpec has no template name; fix the MachineSet",
            None,
        )));
    };
    let skipped = |reason, message| Err(Box::new(skip(reason, message, &Value::from(current))));
    let Some(infra) = ctx.infrastructure_name.filter(|i| !i.is_empty()) else {
        let message = "the Infrastructure has no infrastructureName, so this cluster's templates \
                       cannot be told from custom ones; the template is left as is";
        return skipped(Reason::VSphereTopologyUnknown, message.into());
    };
    if !is_cluster_template(current, infra) {
        let message = format!(
            "template {current} was not created by the installer or a boot image controller for \
             this cluster (their names start with {infra}-rhcos); custom templates are never \
             replaced"
        );
        return skipped(Reason::CustomImage, message);
    }
    Ok((current, infra))
}

/// The template a vSphere provider spec should clone, or the outcome that stops there (not
/// ours, no failure domain, nothing published).
fn template_request(
    spec: &Value,
    ctx: &RuleContext<'_>,
) -> Result<TemplateRequest, Box<ImageOutcome>> {
    let (current, infra) = cluster_template(spec, ctx)?;
    let current_value = Value::from(current);
    let skipped = |reason, message| Err(Box::new(skip(reason, message, &current_value)));
    let domains = failure_domains(ctx.platform_spec);
    if domains.is_empty() {
        // The MCO skips such clusters too (`reconcileVSphereProviderSpec`, platform_helpers.go
        // at 7ff337a): without failure domains there is no datastore or cluster to import into.
        let message = "the Infrastructure lists no vSphere failure domains \
                       (spec.platformSpec.vsphere.failureDomains), so there is nowhere to import \
                       a new template; the template is left as is";
        return skipped(Reason::VSphereTopologyUnknown, message.into());
    }
    let workspace = spec.get("workspace").unwrap_or(&Value::Null);
    let Some(domain) = domains.into_iter().find(|fd| fd.holds(workspace)) else {
        // A skip, not a failure: the MCO degraded here for a while and undid it because it
        // degraded clusters whose MachineSets predate their failure domains (openshift/
        // machine-config-operator PR 6477, OCPBUGS-115203, reverting f5ca014a8 of
        // `createNewVMTemplate`, vsphere_helpers.go). Such a MachineSet keeps its template and
        // falls behind on skew, so the message says the two ways out upstream gives.
        let message = format!(
            "the providerSpec workspace {} matches no failure domain of the Infrastructure \
             (server, datacenter, datastore, resourcePool and vmGroup must all match one), so \
             there is nowhere to import a new template and the template is left as is; add a \
             failure domain for this workspace to the Infrastructure's \
             spec.platformSpec.vsphere.failureDomains, or manage this MachineSet's boot image by \
             hand: opt it out (and where the release enforces boot image skew, set that to \
             Manual, or to None if the MachineSet is never scaled up)",
            compact(workspace)
        );
        return skipped(Reason::FailureDomainNotFound, message);
    };
    let Some(ova) = ctx.stream.vmware_ova(ctx.arch) else {
        return Err(Box::new(not_in_stream(
            ctx,
            "vSphere OVA",
            "the template is left as is until the stream carries one",
            Some(current_value),
        )));
    };
    let folder = workspace
        .get("folder")
        .and_then(Value::as_str)
        .filter(|f| !f.is_empty())
        .unwrap_or(&domain.folder)
        .to_string();
    Ok(TemplateRequest {
        key: TemplateKey {
            server: domain.server.clone(),
            datacenter: domain.datacenter.clone(),
            name: template_name(infra, &domain.name, &ova.release),
        },
        current: TemplateKey {
            server: domain.server.clone(),
            datacenter: domain.datacenter.clone(),
            name: current.to_string(),
        },
        failure_domain: domain,
        folder,
        ova,
    })
}

fn compact(workspace: &Value) -> String {
    WORKSPACE_INPUTS
        .iter()
        .filter_map(|p| {
            let key = p.rsplit('/').next()?;
            Some(format!("{key}={}", workspace.get(key)?.as_str()?))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The outcome once the golden template is wanted: move to it when it is ready, else what its
/// import is doing (`why` says why it is wanted).
fn by_import(
    request: &TemplateRequest,
    current: Value,
    target: Value,
    place: &str,
    why: &str,
    ctx: &RuleContext<'_>,
) -> ImageOutcome {
    let pending = |reason, message| skip(reason, message, &current);
    match ctx.vcenter.templates.get(&request.key) {
        Some(TemplateState::Ready) => ImageOutcome::Update {
            current,
            target,
            changes: Changes::Whole("/template".into()),
        },
        Some(TemplateState::Importing { percent }) => pending(
            Reason::TemplateImporting,
            format!(
                "importing {} as template {} into {place}: {percent}% uploaded; the \
                 MachineSet moves to it once it is a template",
                request.ova.location, request.key.name
            ),
        ),
        Some(TemplateState::Failed { reason, message }) => ImageOutcome::Error {
            reason: *reason,
            message: format!(
                "importing {} as template {} into {place} failed: {message}; retried with \
                 backoff, the template is left as is meanwhile",
                request.ova.location, request.key.name
            ),
            current: Some(current),
        },
        None => pending(
            Reason::TemplateImportPending,
            format!(
                "{} {} (sha256 {}) as template {} into {place}, then move to it ({why})",
                if ctx.vcenter.consulted {
                    "will import"
                } else {
                    "would import, unless vCenter already has it,"
                },
                request.ova.location,
                request.ova.sha256,
                request.key.name
            ),
        ),
    }
}

/// The outcome for a provider spec whose golden template is `request`: up to date by name or by
/// release, else what vCenter says of the release and of the golden template.
fn judge(request: &TemplateRequest, spec: &Value, ctx: &RuleContext<'_>) -> ImageOutcome {
    let current = Value::from(spec.get("template").and_then(Value::as_str).unwrap_or(""));
    let target = Value::from(request.key.name.clone());
    if current == target {
        return ImageOutcome::UpToDate { current };
    }
    // Current by its release, not its name: the installer's templates of a fresh cluster
    // are at the golden release under names without one, and the MCO keeps a template
    // whose product version is the stream's release (`createNewVMTemplate`,
    // vsphere_helpers.go at 7ff337a). Anything else about it (another release, no
    // version, no such template) means importing ours, as before.
    let version = ctx.vcenter.versions.get(&request.current);
    let release = &request.ova.release;
    if matches!(version, Some(TemplateVersion::Release(r)) if r == release) {
        return ImageOutcome::UpToDate { current };
    }
    let place = format!(
        "{}/{} (datastore {}, folder {})",
        request.key.server,
        request.key.datacenter,
        request.failure_domain.datastore,
        request.folder
    );
    let pending = |reason, message| skip(reason, message, &current);
    if let Some(why) = ctx.vcenter.unavailable.get(&request.key.server) {
        return ImageOutcome::Error {
            reason: Reason::VCenterUnavailable,
            message: format!(
                "vCenter {} cannot be asked for template {}: {why}; the template is left \
                 as is until it answers",
                request.key.server, request.key.name
            ),
            current: Some(current),
        };
    }
    let name = request.current.name.as_str();
    let why = match version {
        Some(TemplateVersion::Release(other)) => {
            format!("template {name} is RHCOS {other}, not the golden {release}")
        }
        Some(TemplateVersion::Unknown(why)) => why.clone(),
        None if ctx.vcenter.consulted => {
            return pending(
                Reason::TemplateVersionPending,
                format!(
                    "asking vCenter {} which RHCOS release template {name} is: a template \
                     at the golden {release} is kept, another one is replaced by {} \
                     imported into {place}",
                    request.key.server, request.key.name
                ),
            );
        }
        None => format!("if template {name} is not RHCOS {release} already"),
    };
    by_import(request, current, target, &place, &why, ctx)
}

impl PlatformRule for VSphere {
    fn stream_key(&self) -> &'static str {
        crate::golden_stream::VMWARE_KEY
    }

    /// vCenter is asked about the golden template of every MachineSet that has one, whatever
    /// the outcome: the release of the template it clones, then the golden template found or
    /// imported (and found again hourly, retried after a failure).
    fn evaluate(&self, spec: &Value, ctx: &RuleContext<'_>) -> (ImageOutcome, Option<Lookup>) {
        let request = match template_request(spec, ctx) {
            Ok(request) => request,
            Err(outcome) => return (*outcome, None),
        };
        let outcome = judge(&request, spec, ctx);
        (outcome, Some(Lookup::Template(Box::new(request))))
    }

    /// The one `template` field, when the provider spec is a vSphere one (it has a workspace).
    fn image_locations(&self, spec: &Value, _written: &Value) -> Option<Vec<(String, Value)>> {
        spec.get("workspace")?;
        let template = spec.get("template")?;
        Some(vec![("/template".into(), template.clone())])
    }

    fn provider_spec_fields(&self) -> &'static [&'static str] {
        &["template", "workspace"]
    }

    /// The workspace chose the failure domain, and so the template.
    fn decision_inputs(&self, spec: &Value) -> Vec<Input> {
        WORKSPACE_INPUTS
            .iter()
            .map(|pointer| Input::at(spec, *pointer))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::testkit::rules::Outcome;
    use serde_json::{Value, json};

    use super::*;
    use crate::arch::Arch;
    use crate::facts::vcenter::VcenterFacts;
    use crate::testkit::provider_specs::{INFRASTRUCTURE_NAME as INFRA, vsphere as spec};
    use crate::testkit::rules::{Cluster, message, reason, single_update};
    use crate::testkit::streams::{VMWARE_OVA_421, VMWARE_RELEASE_421, stream_421_all_platforms};

    fn ours() -> String {
        format!("{INFRA}-rhcos-us-east-1a-{VMWARE_RELEASE_421}")
    }

    fn cluster(vcenter: VcenterFacts) -> Cluster {
        Cluster::new(stream_421_all_platforms())
            .named(INFRA)
            .on_vsphere()
            .with_vcenter(vcenter)
    }

    /// vCenter has our template in `state`, and says every template the tests clone is of an
    /// earlier release.
    fn facts(state: Option<TemplateState>) -> VcenterFacts {
        let mut facts = VcenterFacts {
            consulted: true,
            ..VcenterFacts::default()
        };
        if let Some(state) = state {
            facts.templates.insert(key(), state);
        }
        for template in [
            format!("{INFRA}-rhcos"),
            format!("{INFRA}-rhcos-us-east-1a"),
            format!("/dc1/vm/{INFRA}/{INFRA}-rhcos-us-east-1a"),
        ] {
            facts
                .versions
                .insert(in_dc1(&template), release("9.6.20250826-1"));
        }
        facts
    }

    fn release(release: &str) -> TemplateVersion {
        TemplateVersion::Release(release.into())
    }

    fn in_dc1(name: &str) -> TemplateKey {
        TemplateKey {
            server: "vcenter.example.com".into(),
            datacenter: "dc1".into(),
            name: name.into(),
        }
    }

    fn key() -> TemplateKey {
        in_dc1(&ours())
    }

    fn evaluate(spec: &Value, vcenter: VcenterFacts) -> ImageOutcome {
        VSphere.outcome(spec, &cluster(vcenter).ctx(Arch::Amd64))
    }

    #[test]
    fn the_installer_template_moves_to_ours_once_vcenter_has_it() {
        let installer = format!("{INFRA}-rhcos-us-east-1a");
        let outcome = evaluate(&spec(&installer), facts(Some(TemplateState::Ready)));
        assert_eq!(outcome, single_update("/template", &installer, &ours()));
        let outcome = evaluate(&spec(&ours()), facts(Some(TemplateState::Ready)));
        assert_eq!(
            outcome,
            ImageOutcome::UpToDate {
                current: json!(ours())
            }
        );
    }

    /// Upstream judges a template by the release its vApp product says (MCO
    /// `createNewVMTemplate`): the installer's template of a fresh cluster is current.
    #[test]
    fn a_template_at_the_golden_release_is_current_whatever_its_name() {
        let installer = format!("{INFRA}-rhcos-us-east-1a");
        let mut vcenter = facts(None);
        vcenter
            .versions
            .insert(in_dc1(&installer), release(VMWARE_RELEASE_421));
        let outcome = evaluate(&spec(&installer), vcenter.clone());
        assert_eq!(
            outcome,
            ImageOutcome::UpToDate {
                current: json!(installer)
            }
        );
        // Known current, it stays current while vCenter cannot be asked again.
        vcenter
            .unavailable
            .insert("vcenter.example.com".into(), "connection refused".into());
        let outcome = evaluate(&spec(&installer), vcenter);
        assert!(
            matches!(outcome, ImageOutcome::UpToDate { .. }),
            "{outcome:?}"
        );
    }

    #[test]
    fn a_template_of_another_or_no_release_is_replaced_by_ours() {
        let installer = format!("{INFRA}-rhcos-us-east-1a");
        let mut vcenter = facts(None);
        let outcome = evaluate(&spec(&installer), vcenter.clone());
        assert_eq!(reason(&outcome), Some(Reason::TemplateImportPending));
        assert!(message(&outcome).contains("is RHCOS 9.6.20250826-1, not the golden"));
        let unknown = TemplateVersion::Unknown(format!("vCenter has no template {installer}"));
        vcenter.versions.insert(in_dc1(&installer), unknown);
        vcenter.templates.insert(key(), TemplateState::Ready);
        let outcome = evaluate(&spec(&installer), vcenter);
        assert_eq!(outcome, single_update("/template", &installer, &ours()));
    }

    #[test]
    fn until_vcenter_says_the_release_nothing_is_imported() {
        let installer = format!("{INFRA}-rhcos-us-east-1a");
        let mut vcenter = facts(Some(TemplateState::Ready));
        vcenter.versions.clear();
        let outcome = evaluate(&spec(&installer), vcenter);
        assert_eq!(reason(&outcome), Some(Reason::TemplateVersionPending));
        let said = message(&outcome);
        for part in [installer.as_str(), VMWARE_RELEASE_421, &ours()] {
            assert!(said.contains(part), "{part} missing from {said}");
        }
    }

    #[test]
    fn without_the_template_the_decision_says_what_would_be_imported() {
        let installer = format!("{INFRA}-rhcos");
        let outcome = evaluate(&spec(&installer), VcenterFacts::default());
        assert_eq!(reason(&outcome), Some(Reason::TemplateImportPending));
        let said = message(&outcome);
        for part in [VMWARE_OVA_421, &ours(), "dc1", "datastore1", "would import"] {
            assert!(said.contains(part), "{part} missing from {said}");
        }
    }

    #[test]
    fn an_import_in_progress_or_failed_is_reported_and_nothing_changes() {
        let installer = format!("{INFRA}-rhcos-us-east-1a");
        let importing = evaluate(
            &spec(&installer),
            facts(Some(TemplateState::Importing { percent: 40 })),
        );
        assert_eq!(reason(&importing), Some(Reason::TemplateImporting));
        assert!(message(&importing).contains("40%"));
        let failed = TemplateState::Failed {
            reason: Reason::TemplateImportFailed,
            message: "sha256 mismatch".into(),
        };
        let failed = evaluate(&spec(&installer), facts(Some(failed)));
        assert_eq!(reason(&failed), Some(Reason::TemplateImportFailed));
        assert!(message(&failed).contains("sha256 mismatch"));
        // The OVA's host out of reach is its own reason, an error as upstream's.
        let unreachable = TemplateState::Failed {
            reason: Reason::OvaUnreachable,
            message: "the OVA https://x/y.ova cannot be reached".into(),
        };
        let unreachable = evaluate(&spec(&installer), facts(Some(unreachable)));
        assert_eq!(reason(&unreachable), Some(Reason::OvaUnreachable));
        assert!(message(&unreachable).contains("cannot be reached"));
        assert!(Reason::OvaUnreachable.degrades());
        let mut down = facts(Some(TemplateState::Ready));
        down.unavailable
            .insert("vcenter.example.com".into(), "connection refused".into());
        let down = evaluate(&spec(&installer), down);
        assert!(matches!(
            down,
            ImageOutcome::Error {
                reason: Reason::VCenterUnavailable,
                ..
            }
        ));
    }

    #[test]
    fn templates_not_named_after_the_cluster_are_custom() {
        for template in [
            "rhcos-4.18-golden",
            "my-template",
            "/dc1/vm/templates/other-cluster-rhcos",
            &format!("{INFRA}-rhcosx"),
        ] {
            let outcome = evaluate(&spec(template), facts(Some(TemplateState::Ready)));
            assert_eq!(reason(&outcome), Some(Reason::CustomImage), "{template}");
        }
        // An inventory path to one of ours is ours.
        let path = format!("/dc1/vm/{INFRA}/{INFRA}-rhcos-us-east-1a");
        let outcome = evaluate(&spec(&path), facts(Some(TemplateState::Ready)));
        assert_eq!(reason(&outcome), None, "{outcome:?}");
    }

    /// Upstream skips these since MCO PR 6477: a cluster whose MachineSets predate its failure
    /// domains must not be degraded for it.
    #[test]
    fn a_workspace_outside_every_failure_domain_is_skipped_with_a_way_out() {
        let mut moved = spec(&format!("{INFRA}-rhcos"));
        moved["workspace"]["datastore"] = json!("datastore9");
        let outcome = evaluate(&moved, facts(Some(TemplateState::Ready)));
        assert!(
            matches!(
                outcome,
                ImageOutcome::Skip {
                    reason: Reason::FailureDomainNotFound,
                    ..
                }
            ),
            "{outcome:?}"
        );
        assert!(!Reason::FailureDomainNotFound.degrades());
        let said = message(&outcome);
        for part in ["datastore=datastore9", "failureDomains", "opt it out"] {
            assert!(said.contains(part), "{part} missing from {said}");
        }
    }

    #[test]
    fn without_failure_domains_or_infrastructure_name_the_template_stays() {
        let template = format!("{INFRA}-rhcos");
        let bare = Cluster::new(stream_421_all_platforms()).named(INFRA);
        let outcome = VSphere.outcome(&spec(&template), &bare.ctx(Arch::Amd64));
        assert_eq!(reason(&outcome), Some(Reason::VSphereTopologyUnknown));
        let unnamed = Cluster::new(stream_421_all_platforms()).on_vsphere();
        let outcome = VSphere.outcome(&spec(&template), &unnamed.ctx(Arch::Amd64));
        assert_eq!(reason(&outcome), Some(Reason::VSphereTopologyUnknown));
    }

    #[test]
    fn a_stream_without_an_ova_for_the_arch_is_an_error() {
        let template = format!("{INFRA}-rhcos");
        let outcome = VSphere.outcome(&spec(&template), &cluster(facts(None)).ctx(Arch::Arm64));
        assert_eq!(reason(&outcome), Some(Reason::ImageNotInStream));
    }

    #[test]
    fn malformed_provider_specs_are_invalid() {
        for bad in [json!({"workspace": {}}), json!({"template": 7})] {
            let outcome = evaluate(&bad, facts(None));
            assert_eq!(reason(&outcome), Some(Reason::InvalidProviderSpec), "{bad}");
        }
    }

    #[test]
    fn template_names_are_deterministic_and_fit_vcenter() {
        assert_eq!(
            template_name("c-1", "fd", "9.6.1-0"),
            "c-1-rhcos-fd-9.6.1-0"
        );
        let long = "a-very-long-failure-domain-name-that-an-administrator-chose-for-us";
        let name = template_name(INFRA, long, VMWARE_RELEASE_421);
        assert!(name.len() <= MAX_TEMPLATE_NAME, "{name}");
        assert_eq!(name, template_name(INFRA, long, VMWARE_RELEASE_421));
        assert!(is_cluster_template(&name, INFRA));
    }

    proptest::proptest! {
        /// Whatever the provider spec and the Infrastructure say, the rule answers (never
        /// panics), and it only ever replaces the `template` string it read, with vCenter's
        /// template.
        #[test]
        fn arbitrary_specs_and_topologies_never_panic_and_only_move_the_template(
            spec in proptest::prop_oneof![
                3 => proptest::strategy::Just(spec(&format!("{INFRA}-rhcos"))),
                1 => crate::testkit::generators::arb_json(),
            ],
            platform_spec in proptest::prop_oneof![
                3 => proptest::strategy::Just(crate::testkit::provider_specs::vsphere_platform_spec()),
                1 => crate::testkit::generators::arb_json(),
            ],
            workspace in proptest::option::of(crate::testkit::generators::arb_json()),
            template in proptest::option::of(".{0,40}"),
        ) {
            let mut spec = spec;
            if let Some(object) = spec.as_object_mut() {
                if let Some(workspace) = workspace {
                    object.insert("workspace".into(), workspace);
                }
                if let Some(template) = template {
                    object.insert("template".into(), Value::from(template));
                }
            }
            let mut cluster = cluster(facts(Some(TemplateState::Ready)));
            cluster.platform_spec = Some(platform_spec);
            let _ = template_request(&spec, &cluster.ctx(Arch::Amd64));
            if let ImageOutcome::Update { changes, target, current } =
                VSphere.outcome(&spec, &cluster.ctx(Arch::Amd64))
            {
                proptest::prop_assert_eq!(changes, Changes::Whole("/template".into()));
                proptest::prop_assert_eq!(spec.get("template"), Some(&current));
                proptest::prop_assert_eq!(target, Value::from(ours()));
            }
        }
    }
}
