//! Templates in vCenter, against vcsim (govmomi's vCenter simulator, one per test): a fresh
//! import from an OVA served over HTTP, found again instead of imported twice, a wrong sha256
//! refused, wrong credentials and an unreachable vCenter reported, the VM a crashed import left
//! behind removed, and two importers at once making one template.

use crate::support;

use std::time::Duration;

use boot_image_controller::facts::vcenter::{TemplateKey, TemplateRequest, TemplateVersion};
use boot_image_controller::vcenter::VcenterError;
use boot_image_controller::vcenter::client::{Limits, VcenterClient, inventory_path, sdk_url};
use boot_image_controller::vcenter::credentials::Credentials;
use boot_image_controller::vcenter::import::{
    Ensured, ImportLimits, ensure_template, temporary_name,
};
use boot_image_controller::vcenter::retention::prune;
use boot_image_controller::vcenter::version::template_version;
use support::vcsim::{self, FileServer, Vcsim};

const TEMPLATE: &str = "demo-x7k2p-rhcos-us-east-1a-9.6.20251023-0";

fn credentials() -> Credentials {
    Credentials {
        username: vcsim::USERNAME.into(),
        password: vcsim::PASSWORD.into(),
    }
}

fn limits() -> Limits {
    Limits {
        poll_interval: Duration::from_millis(50),
        ..Limits::default()
    }
}

fn import_limits(dir: &tempfile::TempDir) -> ImportLimits {
    ImportLimits {
        download_timeout: Duration::from_secs(60),
        import_timeout: Duration::from_secs(60),
        download_dir: dir.path().to_path_buf(),
        progress_interval: Duration::from_millis(50),
        ..ImportLimits::default()
    }
}

/// The template of vcsim's one failure domain, from the OVA at `url` with digest `sha256`.
fn request(vcsim: &Vcsim, url: &str, sha256: &str) -> TemplateRequest {
    vcsim.template_request(TEMPLATE, url, sha256)
}

async fn login(vcsim: &Vcsim) -> VcenterClient {
    vcsim::login(vcsim, limits()).await
}

async fn template_exists(client: &VcenterClient) -> bool {
    let path = format!(
        "{}/{TEMPLATE}",
        inventory_path(vcsim::DATACENTER, "vm", vcsim::FOLDER)
    );
    match client.find(&path).await.unwrap() {
        Some(vm) => client.is_template(&vm).await.unwrap(),
        None => false,
    }
}

/// One vcsim, the test's OVA served over HTTP, a download folder and a logged-in client.
struct Simulated {
    vcsim: Vcsim,
    ova: Vec<u8>,
    digest: String,
    server: FileServer,
    dir: tempfile::TempDir,
    client: VcenterClient,
}

impl Simulated {
    /// `None` (the test is skipped) when vcsim cannot be built.
    async fn start() -> Option<Simulated> {
        let vcsim = Vcsim::start()?;
        let ova = vcsim::ova();
        let digest = vcsim::sha256(&ova);
        let server = FileServer::start(ova.clone()).await;
        let client = login(&vcsim).await;
        Some(Simulated {
            vcsim,
            ova,
            digest,
            server,
            dir: tempfile::tempdir().unwrap(),
            client,
        })
    }

    /// The golden template, from the served OVA with its real digest.
    fn request(&self) -> TemplateRequest {
        request(&self.vcsim, &self.server.url, &self.digest)
    }
}

/// The release a template says is read from its vApp product, which vCenter fills from the
/// OVA's product section; a template without one, or none at all, says no release.
#[tokio::test]
async fn the_release_of_a_template_is_read_from_its_product() {
    let Some(vcsim) = Vcsim::start() else { return };
    let client = login(&vcsim).await;
    let dir = tempfile::tempdir().unwrap();
    let ova = vcsim::ova_of_release("9.6.20250826-1");
    let server = FileServer::start(ova.clone()).await;
    let installer = TemplateRequest {
        key: TemplateKey {
            name: "demo-x7k2p-rhcos-us-east-1a".into(),
            ..request(&vcsim, &server.url, &vcsim::sha256(&ova)).key
        },
        ..request(&vcsim, &server.url, &vcsim::sha256(&ova))
    };
    let imported = ensure_template(&client, &installer, &import_limits(&dir), &|_| {}).await;
    assert_eq!(imported.unwrap(), Ensured::Imported);

    // The MachineSet names it bare (found in its workspace folder) or by its inventory path.
    let reading = |name: &str| TemplateRequest {
        current: TemplateKey {
            name: name.into(),
            ..installer.key.clone()
        },
        ..installer.clone()
    };
    for name in [
        "demo-x7k2p-rhcos-us-east-1a".to_string(),
        format!("{}/demo-x7k2p-rhcos-us-east-1a", vcsim::FOLDER),
    ] {
        let version = template_version(&client, &reading(&name)).await.unwrap();
        assert_eq!(
            version,
            TemplateVersion::Release("9.6.20250826-1".into()),
            "{name}"
        );
    }
    let version = template_version(&client, &reading("not-there"))
        .await
        .unwrap();
    assert!(
        matches!(&version, TemplateVersion::Unknown(why) if why.contains("no template not-there")),
        "{version:?}"
    );
    // vcsim's own VMs come from no OVA: no product, no release.
    let version = template_version(&client, &reading("DC0_H0_VM0"))
        .await
        .unwrap();
    assert!(
        matches!(&version, TemplateVersion::Unknown(why) if why.contains("no vApp product")),
        "{version:?}"
    );
}

#[tokio::test]
async fn an_ova_becomes_a_template_once_and_is_found_afterwards() {
    let Some(sim) = Simulated::start().await else {
        return;
    };
    let (client, dir, server) = (&sim.client, &sim.dir, &sim.server);
    let request = sim.request();
    let before = vcsim::vm_names(client).await;

    let seen = std::sync::Mutex::new(Vec::new());
    let progress = |p: u8| seen.lock().unwrap().push(p);
    let ensured = ensure_template(client, &request, &import_limits(dir), &progress).await;
    assert_eq!(ensured.unwrap(), Ensured::Imported);
    assert!(template_exists(client).await, "no template {TEMPLATE}");
    let progress = seen.lock().unwrap().clone();
    assert_eq!(progress.last(), Some(&100), "{progress:?}");
    assert!(progress.windows(2).all(|w| w[0] <= w[1]), "{progress:?}");
    // Nothing else left in the folder: no temporary VM, and the download is gone.
    let mut expected = before.clone();
    expected.push(TEMPLATE.to_string());
    expected.sort();
    assert_eq!(vcsim::vm_names(client).await, expected);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

    // A second run (a restart, another replica) finds it: no download, no second VM.
    let again = ensure_template(client, &request, &import_limits(dir), &|_| {}).await;
    assert_eq!(again.unwrap(), Ensured::Found);
    assert_eq!(server.downloads(), 1);
    assert_eq!(vcsim::vm_names(client).await, expected);
    client.logout().await;
}

#[tokio::test]
async fn an_ova_whose_sha256_differs_from_the_stream_is_refused() {
    let Some(sim) = Simulated::start().await else {
        return;
    };
    let (client, dir) = (&sim.client, &sim.dir);
    let wrong = vcsim::sha256(b"another release");
    let server = &sim.server;
    let before = vcsim::vm_names(client).await;
    let result = ensure_template(
        client,
        &request(&sim.vcsim, &server.url, &wrong),
        &import_limits(dir),
        &|_| {},
    )
    .await;
    let Err(VcenterError::DigestMismatch {
        expected, actual, ..
    }) = result
    else {
        panic!("not refused: {result:?}");
    };
    assert_eq!(expected, wrong);
    assert_eq!(actual, vcsim::sha256(&vcsim::ova()));
    // Nothing imported, nothing downloaded left behind.
    assert_eq!(vcsim::vm_names(client).await, before);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[tokio::test]
async fn wrong_credentials_and_an_unreachable_vcenter_are_reported_as_unavailable() {
    let Some(vcsim) = Vcsim::start() else { return };
    let wrong = Credentials {
        username: vcsim::USERNAME.into(),
        password: "not-the-password".into(),
    };
    let refused = VcenterClient::login(sdk_url(&vcsim.sdk).unwrap(), &wrong, limits()).await;
    let Err(error) = refused else {
        panic!("logged in with a wrong password")
    };
    assert!(error.is_unavailable(), "{error}");
    assert!(
        matches!(&error, VcenterError::Fault { kind, .. } if kind == "InvalidLogin"),
        "{error}"
    );

    let port = support::free_port();
    let nowhere = sdk_url(&format!("http://127.0.0.1:{port}/sdk")).unwrap();
    let unreachable = VcenterClient::login(nowhere, &credentials(), limits()).await;
    let Err(error) = unreachable else {
        panic!("reached a closed port")
    };
    assert!(matches!(error, VcenterError::Unreachable(_)), "{error}");
    assert!(error.is_unavailable());
}

#[tokio::test]
async fn a_restart_mid_import_waits_for_the_other_import_then_replaces_what_a_crash_left() {
    let Some(sim) = Simulated::start().await else {
        return;
    };
    let (client, dir) = (&sim.client, &sim.dir);
    vcsim::crash_mid_import(client, &sim.ova, TEMPLATE).await;
    assert!(
        vcsim::vm_names(client)
            .await
            .contains(&temporary_name(TEMPLATE))
    );

    // Young, the temporary VM may be another replica's import under way: left alone.
    let request = sim.request();
    let busy = ensure_template(client, &request, &import_limits(dir), &|_| {}).await;
    assert!(
        matches!(busy, Err(VcenterError::ImportInProgress(_))),
        "{busy:?}"
    );
    assert!(
        vcsim::vm_names(client)
            .await
            .contains(&temporary_name(TEMPLATE))
    );

    // Older than the import timeout, it was left by a crash: removed, and the import done.
    // (vcsim dates VMs to the second.)
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let patient_but_stale = ImportLimits {
        import_timeout: Duration::from_secs(1),
        ..import_limits(dir)
    };
    let done = ensure_template(client, &request, &patient_but_stale, &|_| {}).await;
    assert_eq!(done.unwrap(), Ensured::Imported);
    assert!(template_exists(client).await);
    assert!(
        !vcsim::vm_names(client)
            .await
            .contains(&temporary_name(TEMPLATE))
    );
}

#[tokio::test]
async fn two_importers_at_once_make_one_template() {
    let Some(sim) = Simulated::start().await else {
        return;
    };
    // A second replica: its own session and download folder.
    let (a, b) = (&sim.client, login(&sim.vcsim).await);
    let dir_b = tempfile::tempdir().unwrap();
    let before = vcsim::vm_names(a).await;
    let request = sim.request();
    let (limits_a, limits_b) = (import_limits(&sim.dir), import_limits(&dir_b));
    let (ra, rb) = tokio::join!(
        ensure_template(a, &request, &limits_a, &|_| {}),
        ensure_template(&b, &request, &limits_b, &|_| {}),
    );
    // At least one made or found it; the other may have found the first one's import under
    // way (and would find the template next time), never a second template.
    let outcomes = [&ra, &rb];
    assert!(outcomes.iter().any(|r| r.is_ok()), "{ra:?} {rb:?}");
    for r in outcomes {
        assert!(
            matches!(
                r,
                Ok(_)
                    | Err(VcenterError::ImportInProgress(_))
                    | Err(VcenterError::Fault { .. })
                    | Err(VcenterError::Import(_))
            ),
            "{r:?}"
        );
    }
    assert!(template_exists(a).await);
    let mut expected = before;
    expected.push(TEMPLATE.to_string());
    expected.sort();
    assert_eq!(vcsim::vm_names(a).await, expected, "{ra:?} {rb:?}");
    // And the loser, asked again, finds it.
    let again = ensure_template(&b, &request, &limits_b, &|_| {}).await;
    assert_eq!(again.unwrap(), Ensured::Found);
}

#[tokio::test]
async fn old_templates_beyond_those_kept_are_destroyed_but_never_one_in_use() {
    let Some(sim) = Simulated::start().await else {
        return;
    };
    let (client, dir) = (&sim.client, &sim.dir);
    let prefix = "demo-x7k2p-rhcos-us-east-1a-";
    let of_release = |release: &str| {
        let mut request = sim.request();
        request.ova.release = release.into();
        request.key.name = format!("{prefix}{release}");
        request
    };
    for release in ["9.6.1-0", "9.6.2-0", "9.6.3-0", "9.6.4-0"] {
        let (request, limits) = (of_release(release), import_limits(dir));
        let imported = ensure_template(client, &request, &limits, &|_| {}).await;
        assert_eq!(imported.unwrap(), Ensured::Imported);
    }
    let current = of_release("9.6.4-0");
    // A MachineSet still clones the oldest; one more old template is kept.
    let in_use = std::collections::BTreeSet::from([format!("{prefix}9.6.1-0")]);
    let destroyed = prune(client, &current, &in_use, 1).await.unwrap();
    assert_eq!(destroyed, [format!("{prefix}9.6.2-0")]);
    let names = vcsim::vm_names(client).await;
    for kept in ["9.6.1-0", "9.6.3-0", "9.6.4-0"] {
        assert!(
            names.contains(&format!("{prefix}{kept}")),
            "{kept} gone: {names:?}"
        );
    }
    assert!(!names.contains(&format!("{prefix}9.6.2-0")), "{names:?}");
    // Nothing more to remove.
    assert!(
        prune(client, &current, &in_use, 1)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_vcenter_with_a_private_ca_is_trusted_only_with_its_ca_file() {
    let Some(vcsim) = Vcsim::start_tls() else {
        return;
    };
    let sdk = sdk_url(&vcsim.sdk).unwrap();
    // No system CA vouches for vcsim's certificate: never trusted by default.
    let untrusted = VcenterClient::login(sdk.clone(), &credentials(), limits()).await;
    let Err(error) = untrusted else {
        panic!("trusted a certificate no CA vouches for");
    };
    assert!(error.is_unavailable(), "{error}");
    assert!(error.to_string().contains("certificate"), "{error}");
    // With its CA: logged in, and an import goes through (the disks to vcsim's HTTPS too).
    let trusting = Limits {
        ca_file: vcsim.ca_file.clone(),
        ..limits()
    };
    let client = VcenterClient::login(sdk, &credentials(), trusting)
        .await
        .expect("log in trusting the private CA");
    let ova = vcsim::ova();
    let server = FileServer::start(ova.clone()).await;
    let request = request(&vcsim, &server.url, &vcsim::sha256(&ova));
    let dir = tempfile::tempdir().unwrap();
    let imported = ensure_template(&client, &request, &import_limits(&dir), &|_| {}).await;
    assert_eq!(imported.unwrap(), Ensured::Imported);
    // A CA file without certificates is refused rather than trusting less than asked.
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").unwrap();
    let unusable = Limits {
        ca_file: Some(empty),
        ..limits()
    };
    let refused =
        VcenterClient::login(sdk_url(&vcsim.sdk).unwrap(), &credentials(), unusable).await;
    assert!(
        matches!(refused, Err(VcenterError::Protocol(_))),
        "{:?}",
        refused.err()
    );
}
