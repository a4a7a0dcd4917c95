//! The manifests' RBAC on the real API server: the controller's ServiceAccount may do what it
//! needs and nothing else, the metrics reader may only read /metrics, and the controller does
//! its whole job running as that ServiceAccount with exactly those rules.

use crate::deploy;
use crate::support;

use support::strip_ansi;

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use boot_image_controller::metrics::names;
use deploy::*;
use serde_json::{Value, json};

#[test]
fn the_service_account_may_do_what_the_controller_needs_and_nothing_else() {
    let Some(cluster) = Cluster::from_env() else {
        return;
    };
    let rendered = Rendered::manifests_with_cluster_api(&cluster.kubectl);
    let (ns, sa) = rendered.service_account();
    assert_eq!(
        ns,
        kustomization_namespace(),
        "the ServiceAccount lives in the kustomization's namespace"
    );
    let own = Some(ns.as_str());
    let machine_api = Some(MACHINE_API);
    let mco = Some(MCO);
    let cluster_api = Some("openshift-cluster-api");

    ensure_namespaces(&cluster, &rendered);
    let (served, _) = split_by_served(&rendered.0, &cluster.served_kinds());
    cluster.apply(&served);

    let user = format!("system:serviceaccount:{ns}:{sa}");
    // The table reads best unformatted: one question per line.
    #[rustfmt::skip]
    let checks = [
        // MachineSets and ControlPlaneMachineSets: watched and patched, where they live only.
        allowed("list",   "machinesets.machine.openshift.io", machine_api),
        allowed("watch",  "machinesets.machine.openshift.io", machine_api),
        allowed("patch",  "machinesets.machine.openshift.io", machine_api),
        allowed("patch",  "controlplanemachinesets.machine.openshift.io", machine_api),
        denied("patch",   "machinesets.machine.openshift.io", Some("default")),
        denied("list",    "machinesets.machine.openshift.io", Some("default")),
        denied("update",  "machinesets.machine.openshift.io", machine_api),
        denied("delete",  "machinesets.machine.openshift.io", machine_api),
        denied("create",  "machinesets.machine.openshift.io", machine_api),
        allowed("watch",  "machinehealthchecks.machine.openshift.io", machine_api),
        denied("patch",   "machinehealthchecks.machine.openshift.io", machine_api),
        denied("list",    "machinehealthchecks.machine.openshift.io", Some("default")),
        // Secrets: the managed stubs by name, and the machine API's AWS and vCenter credentials (read, never
        // watched or listed) for EC2 look-ups; nothing else anywhere.
        allowed("get",    "secrets/worker-user-data-managed", machine_api),
        allowed("watch",  "secrets/worker-user-data-managed", machine_api),
        allowed("get",    "secrets/master-user-data-managed", machine_api),
        allowed("get",    "secrets/worker-user-data", machine_api),
        allowed("watch",  "secrets/worker-user-data", machine_api),
        allowed("patch",  "secrets/worker-user-data", machine_api),
        allowed("patch",  "secrets/master-user-data", machine_api),
        denied("update",  "secrets/worker-user-data", machine_api),
        denied("patch",   "secrets/aws-cloud-credentials", machine_api),
        denied("patch",   "secrets/worker-user-data", Some("default")),
        allowed("get",    "secrets/aws-cloud-credentials", machine_api),
        denied("watch",   "secrets/aws-cloud-credentials", machine_api),
        denied("list",    "secrets/aws-cloud-credentials", machine_api),
        denied("get",     "secrets/gcp-cloud-credentials", machine_api),
        denied("get",     "secrets/aws-cloud-credentials", Some("default")),
        // The controller's own AWS credentials (its CredentialsRequest's Secret): read only.
        allowed("get",    "secrets/boot-image-controller-aws-credentials", own),
        denied("watch",   "secrets/boot-image-controller-aws-credentials", own),
        denied("list",    "secrets", own),
        denied("get",     "secrets/boot-image-controller-aws-credentials", machine_api),
        allowed("get",    "secrets/vsphere-cloud-credentials", machine_api),
        denied("watch",   "secrets/vsphere-cloud-credentials", machine_api),
        denied("list",    "secrets/vsphere-cloud-credentials", machine_api),
        denied("get",     "secrets/vsphere-cloud-credentials", Some("kube-system")),
        denied("list",    "secrets", machine_api),
        denied("patch",   "secrets/worker-user-data-managed", machine_api),
        denied("get",     "secrets/worker-user-data-managed", Some("default")),
        denied("get",     "secrets", Some("default")),
        denied("get",     "secrets", own),
        // Events on the MachineSets.
        allowed("create", "events.events.k8s.io", machine_api),
        denied("patch",   "events.events.k8s.io", machine_api),
        // Events about MachineConfiguration/cluster, cluster-scoped, live in `default`.
        allowed("create", "events.events.k8s.io", Some("default")),
        denied("patch",   "events.events.k8s.io", Some("default")),
        denied("create",  "events.events.k8s.io", Some("kube-system")),
        // MachineConfiguration/cluster: read it, write its status only.
        allowed("list",   "machinesets.cluster.x-k8s.io", cluster_api),
        allowed("watch",  "machinesets.cluster.x-k8s.io", cluster_api),
        allowed("patch",  "machinesets.cluster.x-k8s.io", cluster_api),
        denied("update",  "machinesets.cluster.x-k8s.io", cluster_api),
        denied("patch",   "machinesets.cluster.x-k8s.io", Some("default")),
        allowed("watch",  "machinedeployments.cluster.x-k8s.io", cluster_api),
        allowed("create", "awsmachinetemplates.infrastructure.cluster.x-k8s.io", cluster_api),
        allowed("delete", "awsmachinetemplates.infrastructure.cluster.x-k8s.io", cluster_api),
        denied("update",  "awsmachinetemplates.infrastructure.cluster.x-k8s.io", cluster_api),
        denied("patch",   "awsmachinetemplates.infrastructure.cluster.x-k8s.io", cluster_api),
        denied("create",  "awsmachinetemplates.infrastructure.cluster.x-k8s.io", Some("default")),
        allowed("get",    "secrets/worker-user-data", cluster_api),
        denied("get",     "secrets/aws-cloud-credentials", cluster_api),
        denied("list",    "secrets", cluster_api),
        allowed("get",    "machineconfigurations.operator.openshift.io/cluster", None),
        allowed("watch",  "machineconfigurations.operator.openshift.io/cluster", None),
        allowed("patch",  "machineconfigurations.operator.openshift.io/cluster", None).status(),
        denied("update",  "machineconfigurations.operator.openshift.io/cluster", None),
        denied("patch",   "machineconfigurations.operator.openshift.io/cluster", None),
        denied("patch",   "machineconfigurations.operator.openshift.io/other", None).status(),
        denied("list",    "machineconfigurations.operator.openshift.io", None),
        // The cluster singletons, read-only.
        allowed("get",    "infrastructures.config.openshift.io/cluster", None),
        allowed("get",    "clusterversions.config.openshift.io/version", None),
        denied("patch",   "infrastructures.config.openshift.io/cluster", None),
        denied("get",     "clusterversions.config.openshift.io/other", None),
        // The golden ConfigMap, and no other ConfigMap of the Machine Config Operator.
        allowed("get",    "configmaps/coreos-bootimages", mco),
        allowed("watch",  "configmaps/coreos-bootimages", mco),
        denied("patch",   "configmaps/coreos-bootimages", mco),
        denied("get",     "configmaps/machine-config-controller", mco),
        // Its own bookkeeping: the known-images ConfigMap and the Lease.
        allowed("patch",  "configmaps/boot-image-controller-known-images", own),
        allowed("create", "configmaps", own),
        denied("patch",   "configmaps/something-else", own),
        denied("delete",  "configmaps/boot-image-controller-known-images", own),
        allowed("get",    "leases.coordination.k8s.io/boot-image-controller", own),
        allowed("update", "leases.coordination.k8s.io/boot-image-controller", own),
        allowed("create", "leases.coordination.k8s.io", own),
        denied("update",  "leases.coordination.k8s.io/another-lease", own),
        denied("update",  "leases.coordination.k8s.io/boot-image-controller", Some("default")),
        // Checking who scrapes /metrics: the API server reviews the token and the access.
        allowed("create", "tokenreviews.authentication.k8s.io", None),
        allowed("create", "subjectaccessreviews.authorization.k8s.io", None),
        denied("create",  "localsubjectaccessreviews.authorization.k8s.io", own),
        denied("get",     "/metrics", None),
    ];

    // The authorizer learns about applied Roles and bindings through a watch, a moment later:
    // ask again until the answers settle, and fail if they are still wrong after a while.
    let deadline = Instant::now() + Duration::from_secs(20);
    let wrong = loop {
        let wrong: Vec<String> = ask_all(&checks, &cluster, &user)
            .into_iter()
            .zip(&checks)
            .filter(|(answer, c)| *answer != c.allowed)
            .map(|(_, c)| {
                let expected = if c.allowed { "allowed" } else { "denied" };
                format!("{} should be {expected}", c.describe())
            })
            .collect();
        if wrong.is_empty() || Instant::now() > deadline {
            break wrong;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(wrong.is_empty(), "as {user}:\n{}", wrong.join("\n"));
}

/// The identity the ServiceMonitor scrapes with may read /metrics, and nothing else.
#[test]
fn the_metrics_reader_may_get_metrics_and_nothing_else() {
    let Some(cluster) = Cluster::from_env() else {
        return;
    };
    let rendered = Rendered::manifests_with_cluster_api(&cluster.kubectl);
    let reader =
        &rendered.get("ServiceAccount", "boot-image-controller-metrics-reader")["metadata"];
    let user = format!(
        "system:serviceaccount:{}:{}",
        str_of(&reader["namespace"]),
        str_of(&reader["name"])
    );
    ensure_namespaces(&cluster, &rendered);
    let (served, _) = split_by_served(&rendered.0, &cluster.served_kinds());
    cluster.apply(&served);
    let own = Some(reader["namespace"].as_str().unwrap_or_default());
    #[rustfmt::skip]
    let checks = [
        allowed("get",   "/metrics", None),
        denied("post",   "/metrics", None),
        denied("get",    "/logs", None),
        denied("get",    "secrets", own),
        denied("list",   "pods", own),
        denied("get",    "machinesets.machine.openshift.io", Some(MACHINE_API)),
    ];
    let deadline = Instant::now() + Duration::from_secs(20);
    let wrong = loop {
        let wrong: Vec<String> = ask_all(&checks, &cluster, &user)
            .into_iter()
            .zip(&checks)
            .filter(|(answer, c)| *answer != c.allowed)
            .map(|(_, c)| c.describe())
            .collect();
        if wrong.is_empty() || Instant::now() > deadline {
            break wrong;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(wrong.is_empty(), "as {user}, wrong answer for: {wrong:?}");
}

// ---------------------------------------------------------------------------------------------
// The controller itself, as its ServiceAccount

/// Marks what the service-account scenario creates, so that it cleans up only its own objects
/// and recognises cluster singletons that belong to someone else.
const RBAC_TEST_LABEL: &str = "boot-image-controller.test/rbac-scenario";
/// Where the negative test's foreign MachineSet lives. Fixed: namespaces never finish deleting
/// on the local control plane, so a fresh one per run would pile up.
const ELSEWHERE: &str = "bic-rbac-elsewhere";

fn labelled(mut object: Value) -> Value {
    object["metadata"]["labels"][RBAC_TEST_LABEL] = json!("true");
    object
}

/// A kubeconfig that authenticates with `token` against the server and CA of the admin
/// kubeconfig's current context.
fn token_kubeconfig(admin: &Path, token: &str, namespace: &str) -> Value {
    let admin: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(admin).unwrap_or_else(|e| panic!("read {}: {e}", admin.display())),
    )
    .expect("the admin kubeconfig is YAML");
    let find = |list: &str, name: &Value| {
        admin[list]
            .as_array()
            .and_then(|items| items.iter().find(|i| &i["name"] == name))
            .unwrap_or_else(|| panic!("no {list} entry {name} in the admin kubeconfig"))
            .clone()
    };
    let context = find("contexts", &admin["current-context"]);
    let cluster = find("clusters", &context["context"]["cluster"]);
    json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "test", "cluster": cluster["cluster"]}],
        "users": [{"name": "service-account", "user": {"token": token}}],
        "contexts": [{"name": "service-account", "context": {"cluster": "test", "user": "service-account", "namespace": namespace}}],
        "current-context": "service-account",
    })
}

/// Deletes everything labelled [`RBAC_TEST_LABEL`] (and the controller's own objects) when
/// dropped, also when the test fails.
struct RbacScenarioCleanup<'a> {
    cluster: &'a Cluster,
    own_namespace: String,
}

impl RbacScenarioCleanup<'_> {
    fn run(&self) {
        let selector = format!("{RBAC_TEST_LABEL}=true");
        for (namespace, resources) in [
            (
                Some(MACHINE_API),
                "machinesets.machine.openshift.io,secrets",
            ),
            (Some(ELSEWHERE), "machinesets.machine.openshift.io"),
            (Some(MCO), "configmaps"),
            (
                None,
                "machineconfigurations.operator.openshift.io,infrastructures.config.openshift.io,clusterversions.config.openshift.io",
            ),
        ] {
            let mut args = vec!["delete", resources, "-l", &selector, "--ignore-not-found"];
            if let Some(ns) = namespace {
                args.extend(["-n", ns]);
            }
            let out = self.cluster.run(&args, None);
            if !out.status.success() {
                eprintln!(
                    "cleanup: kubectl {}: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        // What the controller created in its own namespace.
        let _ = self.cluster.run(
            &[
                "delete",
                "-n",
                &self.own_namespace,
                "--ignore-not-found",
                &format!(
                    "configmap/{}",
                    boot_image_controller::names::KNOWN_IMAGES_CONFIGMAP_NAME
                ),
                "lease.coordination.k8s.io/boot-image-controller",
            ],
            None,
        );
    }
}

impl Drop for RbacScenarioCleanup<'_> {
    fn drop(&mut self) {
        self.run();
    }
}

/// The cluster singletons and the golden ConfigMap that exist and were not created by this
/// scenario (for example by the demo on a shared local cluster).
async fn foreign_singletons(env: &support::TestEnv) -> Vec<String> {
    let mut foreign = Vec::new();
    for (api_version, kind, name) in [
        (
            "operator.openshift.io/v1",
            "MachineConfiguration",
            "cluster",
        ),
        ("config.openshift.io/v1", "Infrastructure", "cluster"),
        ("config.openshift.io/v1", "ClusterVersion", "version"),
    ] {
        if let Some(o) = env.get(api_version, kind, name).await
            && !o
                .metadata
                .labels
                .unwrap_or_default()
                .contains_key(RBAC_TEST_LABEL)
        {
            foreign.push(format!("{kind}/{name}"));
        }
    }
    let configmaps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(env.client.clone(), MCO);
    if let Some(cm) = configmaps.get_opt("coreos-bootimages").await.expect("get")
        && !cm
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key(RBAC_TEST_LABEL)
    {
        foreign.push(format!("{MCO}/configmaps/coreos-bootimages"));
    }
    foreign
}

/// The API requests the controller's debug log shows refused (403), as `METHOD URL`, and any
/// warning or error that mentions a refusal. None is expected: every request the controller
/// makes, including its probe for the ClusterVersion CRD, names what RBAC grants.
fn refused_requests(log: &str) -> Vec<String> {
    let plain = strip_ansi(log);
    let field = |line: &str, key: &str| {
        let start = line.find(key)? + key.len();
        let rest = &line[start..];
        Some(rest[..rest.find([' ', '}']).unwrap_or(rest.len())].to_string())
    };
    assert!(
        plain.contains("http.status_code=200"),
        "the log has no HTTP responses: is --log-level=debug on, and kube's trace format unchanged?"
    );
    let mut refused = Vec::new();
    for line in plain.lines() {
        if line.contains("http.status_code=403") {
            let url = field(line, "http.url=").unwrap_or_default();
            let method = field(line, "http.method=").unwrap_or_default();
            refused.push(format!("{method} {url}"));
        } else if (line.contains(" WARN ") || line.contains(" ERROR "))
            && (line.contains("403") || line.to_ascii_lowercase().contains("forbidden"))
        {
            refused.push(line.to_string());
        }
    }
    refused
}

/// kubectl's answer to a request the ServiceAccount must not be allowed to make.
fn assert_forbidden(out: &Output, what: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("Forbidden"),
        "{what} should be Forbidden; kubectl said:\n{}{stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// The real thing: the manifests applied, the controller started with a token of their
/// ServiceAccount (not as admin) and the real namespaces and singleton names, doing its whole
/// job: patching an outdated MachineSet, writing conditions, an Event, its known-images
/// ConfigMap and its Lease. Any rule missing from the manifests shows up as a 403.
///
/// This test owns the cluster singletons `MachineConfiguration/cluster`, `Infrastructure/cluster`
/// and `ClusterVersion/version` and the golden ConfigMap (every other test uses its own names).
/// If they exist and are not its own (the demo on the same cluster), it skips rather than
/// overwrite them; and its MachineConfiguration selects only its own MachineSets, so other
/// MachineSets in openshift-machine-api are never touched.
#[tokio::test]
async fn the_controller_works_as_its_service_account_with_exactly_the_manifests_rbac() {
    let Some(cluster) = Cluster::from_env() else {
        return;
    };
    let rendered = Rendered::manifests_with_cluster_api(&cluster.kubectl);
    let (own_ns, sa) = rendered.service_account();
    let admin = support::TestEnv {
        client: support::client().await,
        ns: MACHINE_API.to_string(),
        singleton: "cluster".to_string(),
    };
    let foreign = foreign_singletons(&admin).await;
    if !foreign.is_empty() {
        boot_image_controller::testkit::skips::skip(format_args!(
            "{} exist and were not created by this test (the demo?); \
             run it against a cluster of its own",
            foreign.join(", ")
        ));
        return;
    }

    // The namespaces OpenShift has, then the manifests exactly as rendered.
    let namespace =
        |name: &str| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    cluster.apply(&[namespace(MACHINE_API), namespace(MCO), namespace(ELSEWHERE)]);
    ensure_namespaces(&cluster, &rendered);
    let (served, _) = split_by_served(&rendered.0, &cluster.served_kinds());
    cluster.apply(&served);

    let cleanup = RbacScenarioCleanup {
        cluster: &cluster,
        own_namespace: own_ns.clone(),
    };
    cleanup.run(); // leftovers of an interrupted run

    // A kubeconfig with a token of the ServiceAccount (TokenRequest API).
    let token = cluster
        .ok(
            &["create", "token", &sa, "-n", &own_ns, "--duration=1h"],
            None,
        )
        .trim()
        .to_string();
    let tmp = tempfile::tempdir().expect("temp dir");
    let sa_kubeconfig = tmp.path().join("service-account.kubeconfig");
    std::fs::write(
        &sa_kubeconfig,
        token_kubeconfig(&cluster.kubeconfig, &token, &own_ns).to_string(),
    )
    .expect("write kubeconfig");
    let as_sa = Cluster {
        kubectl: cluster.kubectl.clone(),
        kubeconfig: sa_kubeconfig.clone(),
    };
    let whoami = as_sa.ok(
        &[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
        None,
    );
    assert_eq!(whoami, format!("system:serviceaccount:{own_ns}:{sa}"));

    // An OpenShift-on-AWS cluster at 4.21 with one worker MachineSet still on 4.20's AMI and the
    // installer's spec-2 stub secret (a cluster installed before 4.6). The MachineConfiguration
    // selects only this test's MachineSets.
    use support::fixtures::*;
    admin
        .apply(labelled(infrastructure("cluster", "AWS")))
        .await;
    admin
        .apply(labelled(cluster_version("version", "4.21.0", "Completed")))
        .await;
    let selector = json!({"matchLabels": {RBAC_TEST_LABEL: "true"}});
    admin
        .apply(labelled(machine_configuration(
            "cluster",
            Some(selection("Partial", Some(selector))),
        )))
        .await;
    admin
        .apply(labelled(golden_config_map(MCO, "4.21.0", &stream_421())))
        .await;
    admin
        .apply(labelled(stub_secret(
            MACHINE_API,
            "worker-user-data",
            "2.2.0",
        )))
        .await;
    admin
        .apply(labelled(stub_secret(
            MACHINE_API,
            "worker-user-data-managed",
            "3.2.0",
        )))
        .await;
    let name = format!("rbac-worker-{}", std::process::id());
    admin
        .apply(labelled(machine_set(MACHINE_API, &name).build()))
        .await;
    // 4.20's AMI is a published CoreOS image: the Deployment mounts such a list from the
    // boot-image-controller-published-images ConfigMap.
    let known_images = tmp.path().join("images.txt");
    std::fs::write(&known_images, format!("{AMI_420_US_EAST_1}\n")).expect("write images");

    // The controller as the Deployment runs it, but as a local process: the ServiceAccount's
    // token, the manifests' namespace, default names for everything else.
    let identity = format!("rbac-test-{}", std::process::id());
    let mut controller = support::ControllerProcess::spawn(
        "rbac-service-account",
        &[
            format!("--kubeconfig={}", sa_kubeconfig.display()),
            format!("--namespace={own_ns}"),
            "--leader-elect".into(),
            format!("--identity={identity}"),
            format!("--known-images-file={}", known_images.display()),
            "--log-level=debug".into(),
        ],
    );
    controller.wait_ready().await;
    let converge = Duration::from_secs(90);
    let failed = |what: &str, controller: &support::ControllerProcess| {
        format!(
            "{what}\nrefused requests: {:?}\n{}",
            refused_requests(&controller.logs()),
            strip_ansi(&controller.log_tail(40))
        )
    };

    // It leads (the Lease in its namespace names it) ...
    support::eventually_or_fail(
        converge,
        || async {
            let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
                kube::Api::namespaced(admin.client.clone(), &own_ns);
            let lease = leases.get_opt("boot-image-controller").await.ok()??;
            (lease.spec.as_ref()?.holder_identity.as_deref() == Some(identity.as_str()))
                .then_some(lease)
        },
        || failed("never acquired the Lease", &controller),
    )
    .await;

    // ... upgrades the stub in place and patches the MachineSet's image, keeping its stub ...
    support::eventually_or_fail(
        converge,
        || async {
            let ms = admin.machine_set(&name).await;
            (ami_of(&ms) == AMI_421_US_EAST_1 && secret_of(&ms) == "worker-user-data").then_some(ms)
        },
        || failed("the MachineSet was not updated", &controller),
    )
    .await;
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(admin.client.clone(), MACHINE_API);
    let stub = secrets
        .get("worker-user-data")
        .await
        .expect("the stub secret");
    let upgraded_to = stub.metadata.annotations.unwrap_or_default();
    assert_eq!(
        upgraded_to
            .get("machineconfiguration.openshift.io/stub-ignition-upgraded-to")
            .map(String::as_str),
        Some("3.2.0"),
        "the stub secret was not upgraded in place"
    );

    // ... writes its conditions ...
    let conditions = support::eventually(converge, || async {
        let progressing = admin.condition("BootImageUpdateProgressing").await?;
        let degraded = admin.condition("BootImageUpdateDegraded").await?;
        (progressing["status"] == "False"
            && progressing["reason"] == "BootImagesCurrent"
            && degraded["status"] == "False")
            .then_some(())
    })
    .await;
    if conditions.is_none() {
        let status = &admin.machine_configuration().await["status"];
        panic!(
            "{}",
            failed(
                &format!("conditions not written; now {status:?}"),
                &controller
            )
        );
    }

    // ... records an Event on the MachineSet ...
    support::eventually_or_fail(
        converge,
        || async {
            admin
                .events_for(&name)
                .await
                .into_iter()
                .find(|e| e["reason"] == "BootImageUpdated")
        },
        || failed("no BootImageUpdated Event", &controller),
    )
    .await;

    // ... and remembers the golden images in its own namespace.
    let configmaps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(admin.client.clone(), &own_ns);
    support::eventually_or_fail(
        converge,
        || async {
            let cm = configmaps
                .get_opt(boot_image_controller::names::KNOWN_IMAGES_CONFIGMAP_NAME)
                .await
                .ok()??;
            cm.data?
                .values()
                .any(|v| v.contains(AMI_421_US_EAST_1))
                .then_some(())
        },
        || {
            failed(
                "no known-images ConfigMap in the controller's namespace",
                &controller,
            )
        },
    )
    .await;
    assert_eq!(
        controller.metric(names::LEADER).await,
        Some(1.0),
        "boot_image_controller_leader"
    );
    assert_eq!(
        controller
            .metric(&format!(
                "{}{{target=\"ConfigMap\"}}",
                names::WRITE_FAILURES
            ))
            .await
            .unwrap_or(0.0),
        0.0,
        "bookkeeping writes failed"
    );

    // Nothing it needs was refused.
    let refused = refused_requests(&controller.logs());
    assert!(
        refused.is_empty(),
        "the controller was refused requests with the manifests' RBAC:\n{}",
        refused.join("\n")
    );
    assert_eq!(
        controller.terminate(),
        Some(0),
        "{}",
        controller.log_tail(30)
    );

    // What it must not do, asked with its own token: patch a MachineSet in another namespace,
    // write the managed stub secret (the MCO's). (It may read that one, so the token works and
    // the refusals are RBAC's.)
    admin
        .apply(labelled(machine_set(ELSEWHERE, "someone-elses").build()))
        .await;
    let patch = r#"[{"op":"replace","path":"/spec/template/spec/providerSpec/value/ami/id","value":"ami-0123456789abcdef0"}]"#;
    let deadline = Instant::now() + Duration::from_secs(20);
    // The first answers after applying the manifests may be stale (see the can-i test).
    while as_sa
        .run(
            &[
                "get",
                "secret",
                "worker-user-data-managed",
                "-n",
                MACHINE_API,
            ],
            None,
        )
        .status
        .code()
        != Some(0)
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(500));
    }
    as_sa.ok(
        &[
            "get",
            "secret",
            "worker-user-data-managed",
            "-n",
            MACHINE_API,
        ],
        None,
    );
    assert_forbidden(
        &as_sa.run(
            &[
                "patch",
                "machinesets.machine.openshift.io",
                "someone-elses",
                "-n",
                ELSEWHERE,
                "--type=json",
                "-p",
                patch,
            ],
            None,
        ),
        &format!("patching a MachineSet in {ELSEWHERE}"),
    );
    let secret_patch = r#"[{"op":"add","path":"/metadata/labels","value":{"x":"y"}}]"#;
    assert_forbidden(
        &as_sa.run(
            &[
                "patch",
                "secret",
                "worker-user-data-managed",
                "-n",
                MACHINE_API,
                "--type=json",
                "-p",
                secret_patch,
            ],
            None,
        ),
        "patching the managed stub secret",
    );
    drop(cleanup);
}
