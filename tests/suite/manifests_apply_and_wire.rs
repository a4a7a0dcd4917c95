//! The deployment manifests as kustomize renders them: they pass a server-side dry run on the
//! real API server, the namespace can be changed without moving the Roles that must stay in
//! OpenShift's namespaces, and Deployment, Service and ServiceMonitor are wired together.

use crate::deploy;

use std::collections::{BTreeMap, BTreeSet};

use deploy::*;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// Against the API server

#[test]
fn the_manifests_pass_a_server_side_dry_run() {
    let Some(cluster) = Cluster::from_env() else {
        return;
    };
    let rendered = Rendered::manifests(&cluster.kubectl);
    let (served, unserved) = split_by_served(&rendered.0, &cluster.served_kinds());
    if !unserved.is_empty() {
        eprintln!(
            "not validated, their CRDs are not installed on this server: {}",
            describe(&unserved)
        );
    }
    // Only the prometheus-operator kinds and the cloud credential operator's CredentialsRequest
    // may be missing (its CRD is the CCO's, which no Go module proxy serves): everything else
    // must be validated.
    for o in &unserved {
        let api_version = str_of(&o["apiVersion"]);
        assert!(
            api_version.starts_with("monitoring.coreos.com/")
                || api_version.starts_with("cloudcredential.openshift.io/"),
            "the server does not serve {}",
            describe(std::slice::from_ref(o))
        );
    }
    for kind in [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "Role",
        "RoleBinding",
        "Deployment",
        "Service",
        "NetworkPolicy",
    ] {
        assert!(
            served.iter().any(|o| o["kind"] == kind),
            "no {kind} validated"
        );
    }

    ensure_namespaces(&cluster, &rendered);
    let out = cluster.ok(
        &["apply", "--dry-run=server", "-f", "-"],
        Some(&list(&served)),
    );
    eprintln!("{out}");
}

// ---------------------------------------------------------------------------------------------
// The kustomize build

/// Every namespaced object sits in `ns`, except the pinned ones, which sit where their
/// annotation says; every binding of our ServiceAccount names `ns`, and so does the Secret of
/// the CredentialsRequest.
fn assert_placed(rendered: &Rendered, ns: &str) {
    let (sa_ns, sa) = rendered.service_account();
    assert_eq!(sa_ns, ns);
    let request = rendered.get("CredentialsRequest", "boot-image-controller");
    assert_eq!(request["spec"]["secretRef"]["namespace"], ns);
    assert_eq!(request["spec"]["serviceAccountNames"], json!([sa]));
    let namespaces: Vec<String> = rendered
        .of_kind("Namespace")
        .map(|o| str_of(&o["metadata"]["name"]))
        .collect();
    assert_eq!(
        namespaces,
        [ns],
        "the manifests create exactly their own namespace"
    );

    let mut pinned = BTreeMap::new();
    for o in &rendered.0 {
        let meta = &o["metadata"];
        let name = format!("{} {}", str_of(&o["kind"]), str_of(&meta["name"]));
        match (
            meta["annotations"][PINNED_ANNOTATION].as_str(),
            meta["namespace"].as_str(),
        ) {
            (Some(pin), actual) => {
                assert_eq!(actual, Some(pin), "{name} must stay in {pin}");
                pinned.insert(name.clone(), pin.to_string());
            }
            (None, Some(actual)) => assert_eq!(actual, ns, "{name}"),
            (None, None) => {}
        }
        if matches!(
            o["kind"].as_str(),
            Some("RoleBinding" | "ClusterRoleBinding")
        ) {
            for subject in o["subjects"].as_array().expect("subjects") {
                if subject["kind"] == "ServiceAccount" && subject["name"] == sa.as_str() {
                    assert_eq!(
                        subject["namespace"], ns,
                        "{name} binds the ServiceAccount in {ns}"
                    );
                }
            }
        }
    }
    // The Roles (and their bindings) for the MachineSets and for the golden ConfigMap.
    for (kind, name, pin) in [
        ("Role", "boot-image-controller-machine-api", MACHINE_API),
        (
            "RoleBinding",
            "boot-image-controller-machine-api",
            MACHINE_API,
        ),
        ("Role", "boot-image-controller-golden-configmap", MCO),
        ("RoleBinding", "boot-image-controller-golden-configmap", MCO),
        (
            "CredentialsRequest",
            "boot-image-controller",
            "openshift-cloud-credential-operator",
        ),
    ] {
        assert_eq!(
            pinned.get(&format!("{kind} {name}")).map(String::as_str),
            Some(pin)
        );
    }
}

#[test]
fn the_namespace_can_be_changed_without_moving_the_roles_for_other_namespaces() {
    let Some(kubectl) = kubectl_or_skip() else {
        return;
    };
    assert_placed(&Rendered::manifests(&kubectl), &kustomization_namespace());
    // The Cluster API component's Role stays in openshift-cluster-api.
    let with_cluster_api = Rendered::manifests_with_cluster_api(&kubectl);
    assert_placed(&with_cluster_api, &kustomization_namespace());
    let role = with_cluster_api.get("Role", "boot-image-controller-cluster-api");
    assert_eq!(role["metadata"]["namespace"], "openshift-cluster-api");

    let tmp = tempfile::tempdir().expect("temp dir");
    let base = tmp.path().join("manifests");
    copy_dir(&repo().join("manifests"), &base);

    // By editing the kustomization's namespace.
    let kustomization = read("manifests/kustomization.yaml");
    let line = format!("namespace: {}\n", kustomization_namespace());
    assert!(kustomization.contains(&line));
    std::fs::write(
        base.join("kustomization.yaml"),
        kustomization.replace(&line, "namespace: bic-edited\n"),
    )
    .expect("write kustomization");
    assert_placed(&Rendered::build(&kubectl, &base), "bic-edited");

    // By an overlay, as manifests/kustomization.yaml documents.
    let overlay = tmp.path().join("overlay");
    std::fs::create_dir(&overlay).expect("overlay dir");
    std::fs::write(
        overlay.join("kustomization.yaml"),
        "namespace: bic-overlay\nresources: [../manifests]\ntransformers: [../manifests/pinned-namespaces]\n",
    )
    .expect("write overlay");
    assert_placed(&Rendered::build(&kubectl, &overlay), "bic-overlay");
}

/// Label selector `selector` (matchLabels only) selects `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    let wanted = selector.as_object().expect("matchLabels");
    !wanted.is_empty() && wanted.iter().all(|(k, v)| &labels[k] == v)
}

#[test]
fn the_deployment_service_and_monitor_are_wired_together() {
    let Some(kubectl) = kubectl_or_skip() else {
        return;
    };
    let rendered = Rendered::manifests(&kubectl);
    let deployment = rendered.get("Deployment", "boot-image-controller");
    let pod = &deployment["spec"]["template"];
    let container = &pod["spec"]["containers"][0];
    let ports: BTreeMap<String, i64> = container["ports"]
        .as_array()
        .expect("container ports")
        .iter()
        .map(|p| {
            (
                str_of(&p["name"]),
                p["containerPort"].as_i64().expect("port"),
            )
        })
        .collect();
    let args: Vec<String> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(str_of)
        .collect();

    // The flags and the ports agree; the probes use the health port.
    assert_eq!(ports.get("metrics"), Some(&8080));
    assert_eq!(ports.get("health"), Some(&8081));
    assert!(
        args.contains(&"--metrics-bind-address=:8080".to_string()),
        "{args:?}"
    );
    assert!(
        args.contains(&"--health-probe-bind-address=:8081".to_string()),
        "{args:?}"
    );
    assert!(args.contains(&"--leader-elect".to_string()), "{args:?}");
    assert_eq!(
        container["livenessProbe"]["httpGet"],
        json!({"path": "/healthz", "port": "health"})
    );
    assert_eq!(
        container["readinessProbe"]["httpGet"],
        json!({"path": "/readyz", "port": "health"})
    );
    assert_eq!(deployment["spec"]["replicas"], 2);

    // The pod identity the Lease and the controller's namespace come from.
    let env: BTreeMap<String, Value> = container["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|e| {
            (
                str_of(&e["name"]),
                e["valueFrom"]["fieldRef"]["fieldPath"].clone(),
            )
        })
        .collect();
    assert_eq!(env.get("POD_NAME"), Some(&json!("metadata.name")));
    assert_eq!(env.get("POD_NAMESPACE"), Some(&json!("metadata.namespace")));

    // Hardened: what the restricted Pod Security Standard asks, and a read-only root.
    let security = &container["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(pod["spec"]["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["spec"]["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );

    // The known-images file is in the mounted ConfigMap the manifests create.
    let file_arg = args
        .iter()
        .find_map(|a| a.strip_prefix("--known-images-file="))
        .expect("--known-images-file");
    let mount = container["volumeMounts"]
        .as_array()
        .expect("volumeMounts")
        .iter()
        .find(|m| file_arg.starts_with(&format!("{}/", str_of(&m["mountPath"]))))
        .expect("a volume mounted where --known-images-file points");
    let volume = pod["spec"]["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the mounted volume");
    let configmap = rendered.get("ConfigMap", &str_of(&volume["configMap"]["name"]));
    let key = file_arg.rsplit('/').next().expect("file name");
    assert!(
        configmap["data"][key].is_string(),
        "the ConfigMap has the key {key}"
    );

    // The cluster's trusted CA bundle: the file --trusted-ca-bundle names is the key the network
    // operator fills in a ConfigMap the manifests create with the label that asks for it.
    let bundle_arg = args
        .iter()
        .find_map(|a| a.strip_prefix("--trusted-ca-bundle="))
        .expect("--trusted-ca-bundle");
    let mounts = container["volumeMounts"].as_array().expect("volumeMounts");
    let mount = (mounts.iter())
        .find(|m| bundle_arg.starts_with(&format!("{}/", str_of(&m["mountPath"]))))
        .expect("a volume mounted where --trusted-ca-bundle points");
    let volume = (pod["spec"]["volumes"].as_array().expect("volumes").iter())
        .find(|v| v["name"] == mount["name"])
        .expect("the mounted volume");
    assert_eq!(volume["configMap"]["optional"], true, "{volume}");
    assert_eq!(
        volume["configMap"]["items"],
        json!([{"key": "ca-bundle.crt", "path": bundle_arg.rsplit('/').next().unwrap()}])
    );
    let configmap = rendered.get("ConfigMap", &str_of(&volume["configMap"]["name"]));
    assert_eq!(
        configmap["metadata"]["labels"]["config.openshift.io/inject-trusted-cabundle"],
        "true"
    );

    // Service -> pods, ServiceMonitor -> Service and its port.
    let service = rendered.get("Service", "boot-image-controller");
    assert!(selects(
        &service["spec"]["selector"],
        &pod["metadata"]["labels"]
    ));
    assert!(
        service["spec"]["ports"]
            .as_array()
            .expect("service ports")
            .iter()
            .any(|p| p["name"] == "metrics" && p["targetPort"] == "metrics")
    );
    let monitor = rendered.get("ServiceMonitor", "boot-image-controller");
    assert!(selects(
        &monitor["spec"]["selector"]["matchLabels"],
        &service["metadata"]["labels"]
    ));
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(monitor["spec"]["endpoints"][0]["path"], "/metrics");
    assert!(
        selects(
            &deployment["spec"]["selector"]["matchLabels"],
            &pod["metadata"]["labels"]
        ),
        "the Deployment selects its pods"
    );
    let pdb = rendered.get("PodDisruptionBudget", "boot-image-controller");
    assert!(selects(
        &pdb["spec"]["selector"]["matchLabels"],
        &pod["metadata"]["labels"]
    ));

    // The NetworkPolicy covers the pods and lets the monitoring stacks reach the metrics port
    // (by name, so it follows the container port), and only that port.
    let policy = rendered.get("NetworkPolicy", "boot-image-controller");
    assert!(selects(
        &policy["spec"]["podSelector"]["matchLabels"],
        &pod["metadata"]["labels"]
    ));
    let ingress = policy["spec"]["ingress"].as_array().expect("ingress rules");
    let ports: Vec<&Value> = ingress
        .iter()
        .flat_map(|rule| rule["ports"].as_array().into_iter().flatten())
        .collect();
    assert_eq!(ports.len(), 1, "{policy}");
    assert_eq!(ports[0]["port"], "metrics", "{policy}");
    let sources: BTreeSet<&str> = ingress
        .iter()
        .flat_map(|rule| rule["from"].as_array().into_iter().flatten())
        .filter_map(|from| {
            from["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"].as_str()
        })
        .collect();
    assert_eq!(
        sources,
        BTreeSet::from(["openshift-monitoring", "openshift-user-workload-monitoring"])
    );

    // Egress is limited to the ports of the destinations docs/egress.md lists.
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    let egress: BTreeSet<String> = (policy["spec"]["egress"].as_array().expect("egress rules"))
        .iter()
        .flat_map(|rule| {
            assert!(rule.get("to").is_none(), "ports to any address: {rule}");
            rule["ports"].as_array().into_iter().flatten()
        })
        .map(|p| format!("{}/{}", p["port"], str_of(&p["protocol"])))
        .collect();
    for port in [
        "443/TCP", "6443/TCP", "53/UDP", "5353/UDP", "3128/TCP", "80/TCP",
    ] {
        assert!(egress.contains(port), "{port} not in {egress:?}");
    }

    // The alerts select the scrape job by the Service's name (the job label of a ServiceMonitor).
    let rules = read(PROMETHEUS_RULE);
    let job = format!("job=\"{}\"", str_of(&service["metadata"]["name"]));
    assert!(rules.contains(&job), "the alerts use {job}");
    assert!(
        !rules.replace(&job, "").contains("job="),
        "every job matcher in the alerts is {job}"
    );
}
