//! deploy/acm/, the controller for a fleet on a Red Hat ACM hub (docs/fleet.md): the Policy is
//! what hack/acm-policy.sh renders from the same kustomize build as `oc apply -k`, every ACM
//! object passes a server-side dry run against ACM's own CRDs (from their Go modules,
//! hack/ensure-acm-crds.sh), and the Placements and the opt-in select what docs/fleet.md says.

use crate::deploy;

use std::collections::BTreeSet;
use std::process::Command;

use boot_image_controller::names::OPT_IN_ANNOTATION;
use boot_image_controller::testkit::skips::skip;
use deploy::*;
use serde_json::{Value, json};

const POLICY: &str = "deploy/acm/policy.yaml";
const HUB_NAMESPACE: &str = "boot-image-controller-policies";
const OBSERVABILITY_NAMESPACE: &str = "open-cluster-management-observability";

fn yaml_documents(text: &str) -> Vec<Value> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).expect("valid YAML");
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// The ConfigurationPolicies a Policy carries.
fn configuration_policies(policy: &Value) -> Vec<Value> {
    (policy["spec"]["policy-templates"]
        .as_array()
        .expect("policy-templates")
        .iter())
    .map(|t| t["objectDefinition"].clone())
    .filter(|o| o["kind"] == "ConfigurationPolicy")
    .collect()
}

fn object_definitions(configuration_policy: &Value) -> Vec<Value> {
    (configuration_policy["spec"]["object-templates"]
        .as_array()
        .expect("object-templates")
        .iter())
    .map(|t| {
        assert_eq!(t["complianceType"], "musthave", "{t}");
        t["objectDefinition"].clone()
    })
    .collect()
}

#[test]
fn the_committed_policy_is_what_hack_acm_policy_sh_renders() {
    let Some(kubectl) = kubectl_or_skip() else {
        return;
    };
    let out = tempfile::tempdir().expect("temp dir");
    let rendered = out.path().join("policy.yaml");
    let status = Command::new(repo().join("hack/acm-policy.sh"))
        .env("KUBECTL", &kubectl)
        .arg("--overlay")
        .arg(repo().join("manifests"))
        .arg("--out")
        .arg(&rendered)
        .status()
        .expect("run hack/acm-policy.sh");
    assert!(status.success(), "hack/acm-policy.sh failed");
    let rendered = std::fs::read_to_string(&rendered).expect("the rendered policy");
    assert!(
        rendered == read(POLICY),
        "{POLICY} is stale: run hack/acm-policy.sh after a change to manifests/"
    );
}

/// The install policy carries every object of the overlay, whatever the script does with text.
#[test]
fn the_install_policy_carries_every_object_of_the_kustomize_build() {
    let Some(kubectl) = kubectl_or_skip() else {
        return;
    };
    let policy = yaml_documents(&read(POLICY)).remove(0);
    assert_eq!(policy["kind"], "Policy");
    assert_eq!(
        policy["spec"]["remediationAction"], "inform",
        "as shipped it only reports (docs/fleet.md)"
    );
    let templates = configuration_policies(&policy);
    assert_eq!(templates.len(), 1);
    // Prometheus's {{ $labels }} in the alerts must reach the cluster as they are.
    for meta in [&policy["metadata"], &templates[0]["metadata"]] {
        assert_eq!(
            meta["annotations"]["policy.open-cluster-management.io/disable-templates"],
            "true"
        );
    }
    assert_eq!(
        object_definitions(&templates[0]),
        Rendered::manifests(&kubectl).0
    );
}

/// Every ACM object (the Policies, Placements, PlacementBindings, the ManagedClusterSetBinding,
/// and each ConfigurationPolicy as the policy framework creates it on a managed cluster) and the
/// hub's observability ConfigMaps pass a server-side dry run, with ACM's CRDs installed; a
/// misspelt field of ACM's is refused, so the CRDs do check.
#[test]
fn the_acm_objects_pass_a_server_side_dry_run_against_acms_crds() {
    let Some(cluster) = Cluster::from_env() else {
        return;
    };
    let Some(crds) = crate::support::ensured_tool("hack/ensure-acm-crds.sh") else {
        skip(
            "ACM's CRDs cannot be fetched (hack/ensure-acm-crds.sh needs Go and the Go module proxy)",
        );
        return;
    };
    cluster.ok(&["apply", "--server-side", "-f", &crds], None);
    cluster.wait_established(&[
        "crd/policies.policy.open-cluster-management.io",
        "crd/placementbindings.policy.open-cluster-management.io",
        "crd/configurationpolicies.policy.open-cluster-management.io",
        "crd/placements.cluster.open-cluster-management.io",
        "crd/managedclustersetbindings.cluster.open-cluster-management.io",
    ]);
    for ns in [HUB_NAMESPACE, OBSERVABILITY_NAMESPACE] {
        let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        cluster.apply(&[namespace]);
    }

    let hub = Rendered::build(&cluster.kubectl, &repo().join("deploy/acm")).0;
    let kinds: BTreeSet<&str> = hub.iter().filter_map(|o| o["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        BTreeSet::from([
            "ManagedClusterSetBinding",
            "Namespace",
            "Placement",
            "PlacementBinding",
            "Policy"
        ])
    );
    let mut objects = hub.clone();
    for policy in hub.iter().filter(|o| o["kind"] == "Policy") {
        for mut template in configuration_policies(policy) {
            template["metadata"]["namespace"] = json!(HUB_NAMESPACE);
            objects.push(template);
        }
    }
    objects.extend(Rendered::build(&cluster.kubectl, &repo().join("deploy/acm/observability")).0);
    let out = cluster.ok(
        &["apply", "--dry-run=server", "-f", "-"],
        Some(&list(&objects)),
    );
    eprintln!("{out}");
    assert_eq!(
        out.lines()
            .filter(|l| l.contains("(server dry run)"))
            .count(),
        objects.len(),
        "{out}"
    );

    // The CRDs validate: a compliance type ACM does not know is refused.
    let mut broken = objects
        .iter()
        .find(|o| o["kind"] == "ConfigurationPolicy")
        .cloned()
        .expect("a ConfigurationPolicy");
    broken["spec"]["object-templates"][0]["complianceType"] = json!("mustexist");
    let refused = cluster.run(
        &["apply", "--dry-run=server", "-f", "-"],
        Some(&list(&[broken])),
    );
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("complianceType"),
        "{refused:?}"
    );
}

/// The label selector of a Placement's single predicate, as (matchLabels, matchExpressions).
fn predicate(placement: &Value) -> (Value, Vec<Value>) {
    let predicates = placement["spec"]["predicates"]
        .as_array()
        .expect("predicates");
    assert_eq!(predicates.len(), 1);
    let selector = &predicates[0]["requiredClusterSelector"]["labelSelector"];
    let expressions = selector["matchExpressions"].as_array().cloned();
    (
        selector["matchLabels"].clone(),
        expressions.unwrap_or_default(),
    )
}

/// Whether a ManagedCluster with `labels` is selected by (matchLabels, matchExpressions), as
/// Kubernetes label selectors match (only the operators the Placements use).
fn selects((labels_required, expressions): &(Value, Vec<Value>), labels: &Value) -> bool {
    let required = labels_required.as_object().into_iter().flatten();
    required.into_iter().all(|(k, v)| &labels[k] == v)
        && expressions.iter().all(|e| {
            assert_eq!(e["operator"], "In", "{e}");
            let key = e["key"].as_str().unwrap();
            e["values"].as_array().unwrap().contains(&labels[key])
        })
}

#[test]
fn the_placements_select_openshift_4_16_to_4_20_on_the_platforms_with_a_rule_and_opt_in_by_label() {
    let docs: Vec<Value> = ["deploy/acm/placement.yaml", "deploy/acm/opt-in.yaml"]
        .iter()
        .flat_map(|f| yaml_documents(&read(f)))
        .collect();
    let placement = |name: &str| {
        predicate(
            docs.iter()
                .find(|d| d["kind"] == "Placement" && d["metadata"]["name"] == name)
                .unwrap_or_else(|| panic!("no Placement {name}")),
        )
    };
    let install = placement("boot-image-controller");
    let opt_in = placement("boot-image-controller-opt-in");
    // ManagedCluster labels as ACM sets them (stolostron/cluster-lifecycle-api,
    // clusterinfo/v1beta1/types.go).
    let cluster = |vendor: &str, release: &str, cloud: &str| {
        json!({"vendor": vendor, "openshiftVersion-major-minor": release, "cloud": cloud,
               "openshiftVersion": format!("{release}.3"), "name": "a"})
    };
    for release in ["4.16", "4.17", "4.18", "4.19", "4.20"] {
        for cloud in ["Amazon", "Google", "Azure", "VSphere"] {
            let labels = cluster("OpenShift", release, cloud);
            assert!(selects(&install, &labels), "{labels}");
            assert!(!selects(&opt_in, &labels), "not labelled: {labels}");
            let mut labelled = labels.clone();
            labelled["boot-image-controller.io/opt-in"] = json!("All");
            assert!(selects(&opt_in, &labelled), "{labelled}");
        }
    }
    for labels in [
        cluster("OpenShift", "4.15", "Amazon"),
        cluster("OpenShift", "4.21", "Amazon"),
        cluster("OpenShift", "4.20", "BareMetal"),
        cluster("OpenShift", "4.20", "Nutanix"),
        cluster("EKS", "4.20", "Amazon"),
    ] {
        assert!(!selects(&install, &labels), "{labels}");
    }

    // Each Placement is bound to the Policy of the same name.
    for name in ["boot-image-controller", "boot-image-controller-opt-in"] {
        let binding = docs
            .iter()
            .find(|d| d["kind"] == "PlacementBinding" && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no PlacementBinding {name}"));
        assert_eq!(binding["placementRef"]["name"], name);
        assert_eq!(binding["subjects"][0]["kind"], "Policy");
        assert_eq!(binding["subjects"][0]["name"], name);
    }

    // The opt-in policy sets exactly the annotation the controller reads, to every MachineSet,
    // on machineconfiguration/cluster, once the install policy is Compliant there.
    let policy = docs
        .iter()
        .find(|d| d["kind"] == "Policy")
        .expect("the opt-in Policy");
    assert_eq!(
        policy["spec"]["dependencies"][0]["name"],
        "boot-image-controller"
    );
    let objects = object_definitions(&configuration_policies(policy)[0]);
    assert_eq!(objects.len(), 1);
    assert_eq!(objects[0]["kind"], "MachineConfiguration");
    assert_eq!(objects[0]["metadata"]["name"], "cluster");
    let annotations = objects[0]["metadata"]["annotations"].as_object().unwrap();
    assert_eq!(annotations.keys().collect::<Vec<_>>(), [OPT_IN_ANNOTATION]);
    let value: Value = serde_json::from_str(annotations[OPT_IN_ANNOTATION].as_str().unwrap())
        .expect("the annotation is JSON");
    assert_eq!(
        value,
        json!({"machineManagers": [{"resource": "machinesets", "apiGroup": "machine.openshift.io",
                                     "selection": {"mode": "All"}}]})
    );
}
