//! vSphere end to end: the controller as a real process on a real kube-apiserver, vcsim as
//! vCenter (one per test) and the OVA served by the test. A fresh import moves the MachineSet to
//! the new template while a custom template stays; a wrong sha256 and an unreachable vCenter
//! are reported and nothing is patched.

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use support::fixtures::*;
use support::vcsim::{self, FileServer, Vcsim};
use support::{ControllerProcess, TestEnv, eventually, waits};

const CONVERGE: Duration = Duration::from_secs(90);
const SERVER: &str = "vcenter.test.local";
const INSTALLER_TEMPLATE: &str = "demo-x7k2p-rhcos-us-east-1a";
const GOLDEN_TEMPLATE: &str = "demo-x7k2p-rhcos-us-east-1a-9.6.20251023-0";
const CUSTOM_TEMPLATE: &str = "rhcos-hardened-by-hand";
const TEMPLATE_POINTER: &str = "/spec/template/spec/providerSpec/value/template";

/// The 4.21 stream whose vSphere OVA is at `url` with digest `sha256`.
fn stream_with_ova(url: &str, sha256: &str) -> String {
    let mut stream = stream_421_all_platforms();
    let disk =
        &mut stream["architectures"]["x86_64"]["artifacts"]["vmware"]["formats"]["ova"]["disk"];
    disk["location"] = json!(url);
    disk["sha256"] = json!(sha256);
    stream.to_string()
}

/// vcsim's inventory as the one failure domain of a vSphere Infrastructure.
fn infrastructure(name: &str) -> Value {
    json!({
        "apiVersion": "config.openshift.io/v1", "kind": "Infrastructure",
        "metadata": {"name": name},
        "spec": {"platformSpec": {"type": "VSphere", "vsphere": {
            "vcenters": [{"server": SERVER, "port": 443, "datacenters": [vcsim::DATACENTER]}],
            "failureDomains": [{
                "name": "us-east-1a", "region": "us-east", "zone": "us-east-1a", "server": SERVER,
                "topology": {
                    "datacenter": vcsim::DATACENTER,
                    "computeCluster": "/DC0/host/DC0_C0",
                    "networks": [vcsim::NETWORK],
                    "datastore": format!("/DC0/datastore/{}", vcsim::DATASTORE),
                    "resourcePool": vcsim::RESOURCE_POOL,
                    // The API wants a folder below /DC0/vm; the MachineSets' workspace, which
                    // decides where templates go, names vcsim's /DC0/vm itself.
                    "folder": "/DC0/vm/demo-x7k2p"
                }
            }]
        }}},
        "status": {"infrastructureName": "demo-x7k2p", "platform": "VSphere", "platformStatus": {"type": "VSphere"}}
    })
}

fn vsphere_machine_set(ns: &str, name: &str, template: &str) -> Value {
    let mut spec = boot_image_controller::testkit::provider_specs::vsphere(template);
    spec["workspace"] = json!({
        "server": SERVER,
        "datacenter": vcsim::DATACENTER,
        "datastore": format!("/DC0/datastore/{}", vcsim::DATASTORE),
        "resourcePool": vcsim::RESOURCE_POOL,
        "folder": vcsim::FOLDER
    });
    machine_set(ns, name).provider_spec(spec).build()
}

/// A vSphere cluster at 4.21 whose golden OVA is at `url` (`sha256`), with the machine API's
/// vCenter credentials and two MachineSets: one on the installer's template, one on a custom one.
async fn cluster(test: &str, url: &str, sha256: &str) -> TestEnv {
    let env = TestEnv::new(test).await;
    env.apply(infrastructure(&env.singleton)).await;
    for node in control_plane_nodes() {
        env.apply(node).await;
    }
    env.apply(cluster_version(&env.singleton, "4.21.0", "Completed"))
        .await;
    env.apply(machine_configuration(&env.singleton, None)).await;
    env.apply(golden_config_map(
        &env.ns,
        "4.21.0",
        &stream_with_ova(url, sha256),
    ))
    .await;
    env.apply(stub_secret(&env.ns, "worker-user-data", "2.2.0"))
        .await;
    env.apply(stub_secret(&env.ns, "worker-user-data-managed", "3.2.0"))
        .await;
    env.apply(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "vsphere-cloud-credentials", "namespace": env.ns},
        "stringData": {
            format!("{SERVER}.username"): vcsim::USERNAME,
            format!("{SERVER}.password"): vcsim::PASSWORD
        }
    }))
    .await;
    env.apply(vsphere_machine_set(&env.ns, "worker", INSTALLER_TEMPLATE))
        .await;
    // The custom one keeps its template: on the spec-2 stub the worker moves with, it would
    // hold the stub's upgrade and so the worker's move (`StubSecretShared`).
    let mut custom = vsphere_machine_set(&env.ns, "custom", CUSTOM_TEMPLATE);
    custom["spec"]["template"]["spec"]["providerSpec"]["value"]["userDataSecret"]["name"] =
        json!("worker-user-data-managed");
    env.apply(custom).await;
    env
}

/// vcsim, the test's OVA served over HTTP with its real digest, and a cluster whose golden
/// stream publishes it; `None` (the test is skipped) when vcsim cannot be built.
struct Simulated {
    vcsim: Vcsim,
    ova: Vec<u8>,
    server: FileServer,
    env: TestEnv,
}

impl Simulated {
    async fn start(test: &str) -> Option<Simulated> {
        let vcsim = Vcsim::start()?;
        let ova = vcsim::ova();
        let server = FileServer::start(ova.clone()).await;
        let env = cluster(test, &server.url, &vcsim::sha256(&ova)).await;
        Some(Simulated {
            vcsim,
            ova,
            server,
            env,
        })
    }
}

fn controller(env: &TestEnv, endpoint: &str, downloads: &tempfile::TempDir) -> ControllerProcess {
    controller_with(env, endpoint, downloads, &[])
}

fn controller_with(
    env: &TestEnv,
    endpoint: &str,
    downloads: &tempfile::TempDir,
    extra: &[&str],
) -> ControllerProcess {
    let endpoint = format!("--vcenter-endpoint={endpoint}");
    let dir = format!("--vsphere-download-dir={}", downloads.path().display());
    let mut flags = vec![endpoint.as_str(), dir.as_str()];
    flags.extend_from_slice(extra);
    env.controller(&flags)
}

/// Waits until the worker MachineSet clones the golden template.
async fn wait_for_golden(env: &TestEnv, controllers: &[&ControllerProcess]) {
    let moved = eventually(CONVERGE, || async {
        (template_of(env, "worker").await == GOLDEN_TEMPLATE).then_some(())
    })
    .await;
    assert!(
        moved.is_some(),
        "worker is on {}\n{}",
        template_of(env, "worker").await,
        waits::tails(controllers)
    );
}

async fn template_of(env: &TestEnv, name: &str) -> String {
    let ms = env.machine_set(name).await;
    ms.pointer(TEMPLATE_POINTER)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn resources(action: &str, reason: &str) -> String {
    format!(
        r#"boot_image_controller_machine_resources{{action="{action}",kind="MachineSet",reason="{reason}"}}"#
    )
}

async fn wait_for_metric(controller: &ControllerProcess, series: &str, ok: impl Fn(f64) -> bool) {
    waits::wait_for_metric(controller, series, CONVERGE, ok).await;
}

/// Waits until the worker MachineSet is reported with the error `reason` and an import has
/// ended with `result`.
async fn wait_for_error(controller: &ControllerProcess, reason: &str, result: &str) {
    wait_for_metric(controller, &resources("Error", reason), |v| v == 1.0).await;
    let imports =
        format!(r#"boot_image_controller_vsphere_template_imports_total{{result="{result}"}}"#);
    wait_for_metric(controller, &imports, |v| v >= 1.0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_golden_ova_is_imported_and_the_machine_set_moves_to_it_while_a_custom_template_stays()
{
    let Some(Simulated {
        vcsim, server, env, ..
    }) = Simulated::start("vsphere-import").await
    else {
        return;
    };
    let downloads = tempfile::tempdir().unwrap();
    let controller = controller(&env, &vcsim.sdk, &downloads);
    controller.wait_ready().await;

    wait_for_golden(&env, &[&controller]).await;
    // The installer's spec-2 stub was upgraded in place: the MachineSet still names it.
    let worker = env.machine_set("worker").await;
    assert_eq!(
        worker.pointer("/spec/template/spec/providerSpec/value/userDataSecret/name"),
        Some(&json!("worker-user-data"))
    );
    // vCenter has it as a template, imported once.
    let client = vcsim::login(&vcsim, Default::default()).await;
    let vm = client
        .find(&format!("DC0/vm/{GOLDEN_TEMPLATE}"))
        .await
        .unwrap()
        .expect("the template is in vCenter");
    assert!(client.is_template(&vm).await.unwrap());
    wait_for_metric(
        &controller,
        r#"boot_image_controller_vsphere_template_imports_total{result="imported"}"#,
        |v| v == 1.0,
    )
    .await;
    assert_eq!(server.downloads(), 1);
    // The custom template is reported and never touched.
    wait_for_metric(&controller, &resources("Skip", "CustomImage"), |v| v == 1.0).await;
    assert_eq!(template_of(&env, "custom").await, CUSTOM_TEMPLATE);
    assert_eq!(std::fs::read_dir(downloads.path()).unwrap().count(), 0);
}

/// A fresh cluster: the installer imported the golden OVA as its template, under a name without
/// the release. Its product says the golden release, so it is current as upstream judges it
/// (MCO `createNewVMTemplate`): nothing is imported, downloaded or patched.
#[tokio::test(flavor = "multi_thread")]
async fn a_fresh_cluster_on_templates_of_the_golden_release_imports_nothing() {
    let Some(vcsim) = Vcsim::start() else { return };
    let golden = vcsim::ova_of_release(VMWARE_RELEASE_421);
    let client = vcsim::login(&vcsim, Default::default()).await;
    vcsim::install_template(&client, INSTALLER_TEMPLATE, &golden).await;
    let before = vcsim::vm_names(&client).await;
    let server = FileServer::start(golden.clone()).await;
    let env = cluster("vsphere-fresh", &server.url, &vcsim::sha256(&golden)).await;
    // On the managed stub already, so that nothing but the template could be written.
    let mut worker = vsphere_machine_set(&env.ns, "worker", INSTALLER_TEMPLATE);
    worker["spec"]["template"]["spec"]["providerSpec"]["value"]["userDataSecret"]["name"] =
        json!("worker-user-data-managed");
    env.apply(worker).await;
    let downloads = tempfile::tempdir().unwrap();
    let controller = controller(&env, &vcsim.sdk, &downloads);
    controller.wait_ready().await;

    wait_for_metric(&controller, &resources("UpToDate", "UpToDate"), |v| {
        v == 1.0
    })
    .await;
    assert_eq!(template_of(&env, "worker").await, INSTALLER_TEMPLATE);
    let worker = env.machine_set("worker").await;
    assert!(history_of(&worker).is_empty(), "{worker}");
    let imports = r#"boot_image_controller_vsphere_template_imports_total{result="imported"}"#;
    assert_eq!(controller.metric(imports).await.unwrap_or_default(), 0.0);
    assert_eq!(server.downloads(), 0);
    assert_eq!(vcsim::vm_names(&client).await, before);
}

/// The installer's template of an earlier release is replaced by ours of the golden one.
#[tokio::test(flavor = "multi_thread")]
async fn a_template_of_an_earlier_release_is_replaced_by_the_golden_one() {
    let Some(Simulated {
        vcsim, server, env, ..
    }) = Simulated::start("vsphere-earlier").await
    else {
        return;
    };
    let client = vcsim::login(&vcsim, Default::default()).await;
    let earlier = vcsim::ova_of_release("9.6.20250826-1");
    vcsim::install_template(&client, INSTALLER_TEMPLATE, &earlier).await;
    let downloads = tempfile::tempdir().unwrap();
    let controller = controller(&env, &vcsim.sdk, &downloads);
    controller.wait_ready().await;

    wait_for_golden(&env, &[&controller]).await;
    assert_eq!(server.downloads(), 1);
    let names = vcsim::vm_names(&client).await;
    assert!(names.contains(&INSTALLER_TEMPLATE.to_string()), "{names:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_ova_with_the_wrong_sha256_is_refused_and_nothing_is_patched() {
    let Some(vcsim) = Vcsim::start() else { return };
    let server = FileServer::start(vcsim::ova()).await;
    let wrong = vcsim::sha256(b"not the OVA the stream publishes");
    let env = cluster("vsphere-digest", &server.url, &wrong).await;
    let downloads = tempfile::tempdir().unwrap();
    let controller = controller(&env, &vcsim.sdk, &downloads);
    controller.wait_ready().await;

    wait_for_error(&controller, "TemplateImportFailed", "digest_mismatch").await;
    // The metric moves when the pass ends; the condition is written just after it.
    let c = [&controller];
    waits::wait_for_message(&env, &c, "BootImageUpdateDegraded", &["sha256"]).await;
    assert_eq!(template_of(&env, "worker").await, INSTALLER_TEMPLATE);
    assert_eq!(std::fs::read_dir(downloads.path()).unwrap().count(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_vcenter_is_reported_and_nothing_is_patched() {
    let server = FileServer::start(vcsim::ova()).await;
    let env = cluster("vsphere-down", &server.url, &vcsim::sha256(&vcsim::ova())).await;
    let downloads = tempfile::tempdir().unwrap();
    let nowhere = format!("http://127.0.0.1:{}/sdk", support::free_port());
    let controller = controller(&env, &nowhere, &downloads);
    controller.wait_ready().await;

    wait_for_error(&controller, "VCenterUnavailable", "unavailable").await;
    assert_eq!(template_of(&env, "worker").await, INSTALLER_TEMPLATE);
    // vCenter is asked before the OVA is fetched.
    assert_eq!(server.downloads(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restart_after_a_crash_mid_import_removes_the_half_imported_vm_and_imports_again() {
    // The OVA keeps being served (`_serving`) for the import after the restart.
    let Some(Simulated {
        vcsim,
        ova,
        env,
        server: _serving,
    }) = Simulated::start("vsphere-restart").await
    else {
        return;
    };
    // What a controller killed during its upload leaves behind.
    let client = vcsim::login(&vcsim, Default::default()).await;
    vcsim::crash_mid_import(&client, &ova, GOLDEN_TEMPLATE).await;
    let temporary = boot_image_controller::vcenter::import::temporary_name(GOLDEN_TEMPLATE);
    assert!(vcsim::vm_names(&client).await.contains(&temporary));
    // The restarted controller takes it for a crash's once it is older than the import
    // timeout (vcsim dates VMs to the second).
    tokio::time::sleep(Duration::from_millis(3100)).await;
    let downloads = tempfile::tempdir().unwrap();
    let timeout = ["--vsphere-import-timeout=3s"];
    let controller = controller_with(&env, &vcsim.sdk, &downloads, &timeout);
    controller.wait_ready().await;

    wait_for_golden(&env, &[&controller]).await;
    let names = vcsim::vm_names(&client).await;
    assert!(names.contains(&GOLDEN_TEMPLATE.to_string()), "{names:?}");
    assert!(!names.contains(&temporary), "{names:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn two_replicas_import_the_template_once() {
    let Some(Simulated {
        vcsim, server, env, ..
    }) = Simulated::start("vsphere-replicas").await
    else {
        return;
    };
    let client = vcsim::login(&vcsim, Default::default()).await;
    let before = vcsim::vm_names(&client).await;
    let lease = format!("bic-{}", env.ns);
    let flags = ["--leader-elect", "--leader-election-id", lease.as_str()];
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = controller_with(&env, &vcsim.sdk, &dir_a, &flags);
    let b = controller_with(&env, &vcsim.sdk, &dir_b, &flags);
    a.wait_ready().await;
    b.wait_ready().await;

    wait_for_golden(&env, &[&a, &b]).await;
    let imported = r#"boot_image_controller_vsphere_template_imports_total{result="imported"}"#;
    let (by_a, by_b) = (a.metric(imported).await, b.metric(imported).await);
    assert_eq!(
        by_a.unwrap_or_default() + by_b.unwrap_or_default(),
        1.0,
        "{by_a:?} {by_b:?}"
    );
    assert_eq!(server.downloads(), 1);
    let mut expected = before;
    expected.push(GOLDEN_TEMPLATE.to_string());
    expected.sort();
    assert_eq!(vcsim::vm_names(&client).await, expected);
}

/// Where the stream says the OVA is and nothing listens, as the Internet is from a
/// disconnected cluster.
fn unreachable_ova_url() -> String {
    let port = support::free_port();
    format!("http://127.0.0.1:{port}/rhcos-9.6.20251023-0-vmware.x86_64.ova")
}

/// Disconnected: the stream's OVA host cannot be reached, and the administrator's mirror serves
/// the same OVA under the stream's file name: the template is imported from the mirror.
#[tokio::test(flavor = "multi_thread")]
async fn with_the_ova_host_unreachable_the_template_is_imported_from_the_mirror() {
    let Some(vcsim) = Vcsim::start() else { return };
    let ova = vcsim::ova();
    let mirror = FileServer::start(ova.clone()).await;
    let env = cluster(
        "vsphere-mirror",
        &unreachable_ova_url(),
        &vcsim::sha256(&ova),
    )
    .await;
    let base = mirror
        .url
        .replace("/rhcos-vmware.x86_64.ova", "/rhcos/4.21/");
    let flag = format!("--vsphere-ova-mirror={base}");
    let downloads = tempfile::tempdir().unwrap();
    let controller = controller_with(&env, &vcsim.sdk, &downloads, &[&flag]);
    controller.wait_ready().await;

    wait_for_golden(&env, &[&controller]).await;
    assert_eq!(
        mirror.paths(),
        ["/rhcos/4.21/rhcos-9.6.20251023-0-vmware.x86_64.ova"]
    );
    let client = vcsim::login(&vcsim, Default::default()).await;
    let vm = client.find(&format!("DC0/vm/{GOLDEN_TEMPLATE}")).await;
    assert!(client.is_template(&vm.unwrap().unwrap()).await.unwrap());
}

/// The mirror is held to the stream's sha256 as the stream's host is: other bytes are refused
/// and nothing is patched. (The OVA is named by its exact URL here, the other shape.)
#[tokio::test(flavor = "multi_thread")]
async fn a_mirror_serving_other_bytes_is_refused_and_nothing_is_patched() {
    let Some(vcsim) = Vcsim::start() else { return };
    let mirror = FileServer::start(b"an OVA of another release".to_vec()).await;
    let stream = unreachable_ova_url();
    let env = cluster(
        "vsphere-mirror-digest",
        &stream,
        &vcsim::sha256(&vcsim::ova()),
    )
    .await;
    let flag = format!("--vsphere-ova-url={stream}={}", mirror.url);
    let downloads = tempfile::tempdir().unwrap();
    let controller = controller_with(&env, &vcsim.sdk, &downloads, &[&flag]);
    controller.wait_ready().await;

    wait_for_error(&controller, "TemplateImportFailed", "digest_mismatch").await;
    let c = [&controller];
    waits::wait_for_message(
        &env,
        &c,
        "BootImageUpdateDegraded",
        &[&mirror.url, "sha256"],
    )
    .await;
    assert_eq!(template_of(&env, "worker").await, INSTALLER_TEMPLATE);
    assert_eq!(std::fs::read_dir(downloads.path()).unwrap().count(), 0);
}

/// Disconnected without a mirror: the OVA's host out of reach is its own reason, which says
/// what to do, and degrades as the MCO's failed download does; nothing is patched.
#[tokio::test(flavor = "multi_thread")]
async fn without_a_mirror_an_unreachable_ova_host_is_its_own_reason() {
    let Some(vcsim) = Vcsim::start() else { return };
    let stream = unreachable_ova_url();
    let env = cluster("vsphere-no-egress", &stream, &vcsim::sha256(&vcsim::ova())).await;
    let downloads = tempfile::tempdir().unwrap();
    let controller = controller(&env, &vcsim.sdk, &downloads);
    controller.wait_ready().await;

    wait_for_error(&controller, "OvaUnreachable", "ova_unreachable").await;
    let c = [&controller];
    let parts = ["OvaUnreachable", stream.as_str(), "--vsphere-ova-mirror"];
    let degraded = waits::wait_for_message(&env, &c, "BootImageUpdateDegraded", &parts).await;
    assert_eq!(degraded["status"], "True", "{degraded}");
    assert_eq!(template_of(&env, "worker").await, INSTALLER_TEMPLATE);
}
