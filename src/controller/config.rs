//! `boot-image-controller run` flags, named as kubebuilder controllers name theirs.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::arch::Arch;
use crate::names;

/// Where the controller keeps its Lease and known-images ConfigMap when nothing else says.
pub const DEFAULT_NAMESPACE: &str = "openshift-machine-config-operator";
const SERVICE_ACCOUNT_NAMESPACE_FILE: &str =
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Args, Clone, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub cluster: crate::kubeconfig::ClusterArgs,
    /// Address of /metrics (`:8080` = all interfaces, `0` = off).
    #[arg(long, env = "BIC_METRICS_BIND_ADDRESS", default_value = ":8080")]
    pub metrics_bind_address: String,
    #[command(flatten)]
    pub metrics_server: crate::server::MetricsServerArgs,
    /// Address of /healthz and /readyz (`0` = off).
    #[arg(long, env = "BIC_HEALTH_PROBE_BIND_ADDRESS", default_value = ":8081")]
    pub health_probe_bind_address: String,
    /// Campaign for a Lease so that only one replica writes.
    #[arg(long, env = "BIC_LEADER_ELECT", default_value_t = false)]
    pub leader_elect: bool,
    /// Namespace of the leader Lease (default: the controller's namespace).
    #[arg(long, env = "BIC_LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// Name of the leader Lease; replicas with the same name elect one leader.
    #[arg(long, env = "BIC_LEADER_ELECTION_ID", default_value = names::LEADER_ELECTION_ID)]
    pub leader_election_id: String,
    // The three timings are OpenShift's defaults for operators: openshift/library-go
    // `LeaderElectionDefaulting`, pkg/config/leaderelection/leaderelection.go (checked at commit
    // 93ac9206, lines 96-118), chosen there to tolerate about a minute of kube-apiserver downtime
    // without a leader change, and 30 s of clock skew.
    /// How long a standby waits, after it last saw the leader renew the Lease, before taking
    /// over. OpenShift's operator default.
    #[arg(long, env = "BIC_LEADER_ELECT_LEASE_DURATION", default_value = "137s", value_parser = parse_period)]
    pub leader_elect_lease_duration: Duration,
    /// A leader that could not renew the Lease for this long stops writing and exits (shorter
    /// than the lease duration).
    #[arg(long, env = "BIC_LEADER_ELECT_RENEW_DEADLINE", default_value = "107s", value_parser = parse_period)]
    pub leader_elect_renew_deadline: Duration,
    /// Time between attempts to acquire or renew the Lease, and the bound of each attempt
    /// (shorter than the renew deadline).
    #[arg(long, env = "BIC_LEADER_ELECT_RETRY_PERIOD", default_value = "26s", value_parser = parse_period)]
    pub leader_elect_retry_period: Duration,
    /// The controller's own namespace (Lease, known-images ConfigMap) [default: the service
    /// account's namespace, else openshift-machine-config-operator].
    #[arg(long, env = "POD_NAMESPACE")]
    pub namespace: Option<String>,
    /// Identity in the Lease; the pod name in a cluster.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// The only namespace whose MachineSets are watched and patched.
    #[arg(long, env = "BIC_MACHINE_API_NAMESPACE", default_value = names::MACHINE_API_NAMESPACE)]
    pub machine_api_namespace: String,
    /// The only namespace whose Cluster API MachineSets and infrastructure templates are
    /// watched, created and patched (where the cluster serves them).
    #[arg(long, env = "BIC_CLUSTER_API_NAMESPACE", default_value = names::CLUSTER_API_NAMESPACE)]
    pub cluster_api_namespace: String,
    /// How old (from its creationTimestamp) an infrastructure template this controller created
    /// must be before it is deleted once nothing references it: a new one is referenced by
    /// nothing until its MachineSet's patch lands.
    #[arg(long, env = "BIC_CLUSTER_API_TEMPLATE_GRACE", default_value = "10m", value_parser = parse_period)]
    pub cluster_api_template_grace: Duration,
    /// Namespace of the golden boot image ConfigMap.
    #[arg(long, env = "BIC_GOLDEN_CONFIGMAP_NAMESPACE", default_value = names::GOLDEN_CONFIGMAP_NAMESPACE)]
    pub golden_configmap_namespace: String,
    /// Name of the golden boot image ConfigMap.
    #[arg(long, env = "BIC_GOLDEN_CONFIGMAP_NAME", default_value = names::GOLDEN_CONFIGMAP_NAME)]
    pub golden_configmap_name: String,
    /// Name of the MachineConfiguration that selects MachineSets and carries the conditions.
    #[arg(long, env = "BIC_MACHINE_CONFIGURATION_NAME", default_value = names::MACHINE_CONFIGURATION_NAME)]
    pub machine_configuration_name: String,
    /// Name of the Infrastructure singleton (tests run several simulated clusters side by side).
    #[arg(long, env = "BIC_INFRASTRUCTURE_NAME", default_value = names::INFRASTRUCTURE_NAME, hide = true)]
    pub infrastructure_name: String,
    /// Name of the ClusterVersion singleton.
    #[arg(long, env = "BIC_CLUSTER_VERSION_NAME", default_value = names::CLUSTER_VERSION_NAME, hide = true)]
    pub cluster_version_name: String,
    /// Overrides the architecture of control-plane machines, and of MachineSets that do not name
    /// theirs, which is otherwise the `kubernetes.io/arch` of the control-plane Nodes.
    #[arg(long, env = "BIC_CONTROL_PLANE_ARCH")]
    pub control_plane_arch: Option<Arch>,
    /// Whether the RHCOS AMIs this program ships (every AMI published for OpenShift 4.12 and
    /// later) count as CoreOS images: an AMI neither in them, nor in a golden stream, nor in
    /// --known-images-file is custom and never replaced.
    #[arg(long, env = "BIC_PUBLISHED_IMAGES", default_value_t = true, action = clap::ArgAction::Set)]
    pub published_images: bool,
    /// Plan, report and export metrics, but never write a MachineSet or ControlPlaneMachineSet.
    /// The controller also stands down by itself whenever another boot image manager is active;
    /// no flag makes it write beside one.
    #[arg(long, env = "BIC_REPORT_ONLY")]
    pub report_only: bool,
    /// Update Cluster API MachineDeployments too. A MachineDeployment replaces every one of its
    /// machines when its template changes, so they are skipped (MachineDeploymentNotOptedIn)
    /// unless this is set.
    #[arg(long, env = "BIC_UPDATE_MACHINE_DEPLOYMENTS")]
    pub update_machine_deployments: bool,
    /// When a MachineSet's new boot image fails to boot on a Machine it created since the move,
    /// put back the image it replaced and hold the MachineSet off the failed one. The
    /// annotation boot-image-controller.io/revert-failed-boot-images ("true" or "false") on the
    /// MachineConfiguration overrides this without a restart.
    #[arg(long, env = "BIC_REVERT_FAILED_BOOT_IMAGES")]
    pub revert_failed_boot_images: bool,
    /// A Machine on a new boot image whose instance exists but whose Node has not joined this
    /// long after the Machine was created counts as a failure of the image (e.g. `20m`).
    #[arg(long, env = "BIC_NODE_JOIN_TIMEOUT", default_value = "20m", value_parser = parse_period)]
    pub node_join_timeout: Duration,
    /// Extra known CoreOS image references, one per line; re-read when it changes.
    #[arg(long, env = "BIC_KNOWN_IMAGES_FILE")]
    pub known_images_file: Option<PathBuf>,
    /// On AWS, ask EC2 (DescribeImages, with the credentials Secret of the controller's own
    /// CredentialsRequest, else the machine API's aws-cloud-credentials) who owns AMIs that neither the golden streams nor the known images
    /// list: Red Hat's RHCOS AMIs are then updated, AWS Marketplace ones (ROSA's included) move
    /// to the newest AMI of their product, others stay custom.
    #[arg(long, env = "BIC_EC2_LOOKUPS", default_value_t = true, action = clap::ArgAction::Set)]
    pub ec2_lookups: bool,
    /// The EC2 endpoint of every region, instead of `https://ec2.<region>.amazonaws.com` (a VPC
    /// endpoint or proxy; a simulator in tests). `http://` is accepted.
    #[arg(long, env = "BIC_EC2_ENDPOINT")]
    pub ec2_endpoint: Option<String>,
    /// The STS endpoint of every region, instead of `https://sts.<region>.amazonaws.com`, where
    /// a ServiceAccount token is exchanged for temporary credentials when the credentials
    /// Secret names a role (`role_arn`, `web_identity_token_file`). `http://` is accepted.
    #[arg(long, env = "BIC_STS_ENDPOINT")]
    pub sts_endpoint: Option<String>,
    /// How long the temporary credentials STS gives are asked to last (`DurationSeconds`); they
    /// are exchanged again at four fifths of that. AWS accepts 15m up to the role's maximum
    /// session duration (1h unless raised); shorter ones are for simulators.
    #[arg(long, env = "BIC_STS_SESSION_DURATION", default_value = "1h", value_parser = parse_period)]
    pub sts_session_duration: Duration,
    /// On vSphere, import the golden release's OVA into vCenter as a template in each failure
    /// domain MachineSets use (with the machine API's Secret vsphere-cloud-credentials), then
    /// move those MachineSets to it. Off: vSphere decisions only say what would be imported.
    #[arg(long, env = "BIC_VSPHERE_TEMPLATE_IMPORTS", default_value_t = true, action = clap::ArgAction::Set)]
    pub vsphere_template_imports: bool,
    /// The vCenter SDK URL every vCenter server is reached at, instead of
    /// `https://<server>/sdk` (a proxy; a simulator in tests). `http://` is accepted.
    #[arg(long, env = "BIC_VCENTER_ENDPOINT")]
    pub vcenter_endpoint: Option<String>,
    /// PEM certificates trusted for vCenter besides the system's CA roots: the private CA that
    /// signed the vCenter's certificate (verification is never turned off).
    #[arg(long, env = "BIC_VCENTER_CA_FILE")]
    pub vcenter_ca_file: Option<PathBuf>,
    /// Where the golden stream's OVA cannot be reached (a disconnected cluster): a folder URL
    /// on a mirror serving the same OVAs under the stream's file names (each OVA's file name is
    /// appended). The OVA must still have the stream's sha256.
    #[arg(long, env = "BIC_VSPHERE_OVA_MIRROR", value_parser = crate::vcenter::ova::parse_mirror_url)]
    pub vsphere_ova_mirror: Option<String>,
    /// The exact URL one OVA is served at instead of the stream's, as STREAM_URL=MIRROR_URL
    /// (comma-separated, or the flag repeated); it wins over --vsphere-ova-mirror for that OVA.
    /// The OVA must still have the stream's sha256.
    #[arg(long, env = "BIC_VSPHERE_OVA_URLS", value_delimiter = ',', value_parser = crate::vcenter::ova::parse_mirror_entry)]
    pub vsphere_ova_url: Vec<(String, String)>,
    /// The cluster's trusted CA bundle (the `ca-bundle.crt` the network operator injects into a
    /// ConfigMap labelled `config.openshift.io/inject-trusted-cabundle`), trusted for every
    /// outbound call (EC2, vCenter, the OVA download) besides the system's CA roots; read again
    /// when it changes. A missing file adds nothing.
    #[arg(
        long,
        env = "BIC_TRUSTED_CA_BUNDLE",
        default_value = "/etc/pki/boot-image-controller/trusted-ca/ca-bundle.crt"
    )]
    pub trusted_ca_bundle: PathBuf,
    /// Where OVAs are downloaded before an import (about 1.3 GiB each, removed afterwards).
    #[arg(long, env = "BIC_VSPHERE_DOWNLOAD_DIR")]
    pub vsphere_download_dir: Option<PathBuf>,
    /// The longest one template import may take after its download (upload, template, rename);
    /// the download has as long again.
    #[arg(long, env = "BIC_VSPHERE_IMPORT_TIMEOUT", default_value = "1h", value_parser = parse_period)]
    pub vsphere_import_timeout: Duration,
    /// Old vSphere templates of ours kept per failure domain after a new one is imported (to go
    /// back to); older ones are destroyed, never one a MachineSet clones.
    #[arg(long, env = "BIC_VSPHERE_TEMPLATES_KEPT", default_value_t = 2)]
    pub vsphere_templates_kept: usize,
    /// Re-plan everything this often even without events (e.g. `10m`, `30s`).
    #[arg(long, env = "BIC_RESYNC_PERIOD", default_value = "10m", value_parser = parse_period)]
    pub resync_period: Duration,
    /// Window of the hot-loop guard.
    #[arg(long, env = "BIC_HOT_LOOP_WINDOW", default_value = "1h", value_parser = parse_period)]
    pub hot_loop_window: Duration,
    /// A gate that holds writes longer than this (e.g. a golden ConfigMap whose release never
    /// matches the cluster's) is reported by our own condition `BootImageUpdateHeldTooLong`, a
    /// metric and an alert, never as `BootImageUpdateDegraded`: the MCO's operator fails its
    /// sync while that is True, and the upgrade the hold waits for would never finish. Pauses
    /// are never reported: they are an administrator's choice. (`--hold-degrade-after` is the
    /// old name of this flag.)
    ///
    /// 6 h by default: an ordinary minor upgrade holds writes (`ClusterUpgrading`) for its whole
    /// `Partial` history entry, which lasts until every ClusterOperator is at the new version,
    /// `machine-config` only once the control-plane pool has updated (openshift/
    /// machine-config-operator, pkg/operator/sync.go, `syncRequiredMachineConfigPools`, up to 10
    /// minutes per control-plane node): one to two hours, more on large clusters or two in a
    /// row on an EUS-to-EUS path. An upgrade stuck longer is the platform's alerts' to report.
    #[arg(long, env = "BIC_HOLD_LIMIT", alias = "hold-degrade-after", default_value = "6h", value_parser = parse_period)]
    pub hold_limit: Duration,
    /// Patches of one object within the window, whatever their values, after which the guard
    /// stops us: something keeps reverting it, or the golden images keep changing.
    #[arg(long, env = "BIC_HOT_LOOP_THRESHOLD", default_value_t = 3)]
    pub hot_loop_threshold: usize,
    /// MachineSet patches in flight at once.
    #[arg(long, env = "BIC_MAX_CONCURRENT_PATCHES", default_value_t = 8)]
    pub max_concurrent_patches: usize,
    /// Log format on stderr: `text` for people, `json` for log collectors.
    #[arg(long, env = "BIC_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// A tracing filter: `info`, `debug`, `boot_image_controller=debug,kube=info`, ...
    #[arg(long, env = "BIC_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
}

impl RunArgs {
    /// `--namespace`, else `POD_NAMESPACE` (same flag), else the service account's namespace.
    pub fn own_namespace(&self) -> String {
        self.namespace
            .clone()
            .or_else(|| {
                std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE_FILE)
                    .ok()
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
            })
            .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string())
    }

    pub fn identity(&self) -> String {
        self.identity.clone().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_else(|_| "local".into());
            format!("{host}-{}", std::process::id())
        })
    }
}

/// The longest duration a flag accepts: a year. Longer ones are mistakes, and would overflow
/// the timers they arm.
const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);

/// A duration flag, written as Kubernetes users write durations: `90s`, `10m`, `1h`, `1h30m`,
/// `500ms` (jiff's "friendly" format, which also reads `1.5h` or `1h 30m`). It must not be zero
/// (a zero period would spin).
pub fn parse_period(text: &str) -> Result<Duration, String> {
    let invalid = |why: &dyn std::fmt::Display| format!("invalid duration {text:?}: {why}");
    let parser = jiff::fmt::friendly::SpanParser::new();
    let signed: jiff::SignedDuration =
        (parser.parse_duration(text.trim())).map_err(|e| invalid(&e))?;
    let period = Duration::try_from(signed).map_err(|_| invalid(&"negative"))?;
    if period > MAX_DURATION {
        return Err(invalid(&"longer than a year"));
    }
    if period.is_zero() {
        return Err(format!("invalid period {text:?}: must be longer than zero"));
    }
    Ok(period)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_period("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_period("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_period("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_period("10").is_err());
        assert!(parse_period("m").is_err());
        assert!(parse_period("5d").is_err());
        assert!(parse_period("-1h").is_err());
    }

    #[test]
    fn a_zero_period_and_overflowing_durations_are_refused_not_panics() {
        assert!(parse_period("0s").is_err());
        assert!(parse_period("0ms").is_err());
        assert_eq!(parse_period("2s"), Ok(Duration::from_secs(2)));
        for huge in [
            "99999999999999999999h",
            "18446744073709551615h",
            "9000h",
            "5124095576030431h",
        ] {
            let err = parse_period(huge).unwrap_err();
            assert!(
                err.contains("longer than a year") || err.contains("invalid"),
                "{huge}: {err}"
            );
        }
        assert_eq!(parse_period("8760h"), Ok(Duration::from_secs(8760 * 3600)));
    }

    /// An ordinary minor upgrade (about two hours of `Partial` history, twice on an EUS-to-EUS
    /// path) is not a hold held too long with the defaults; a hold that never ends still is,
    /// the same day.
    #[test]
    fn the_default_hold_limit_outlasts_an_ordinary_upgrade() {
        use clap::Parser as _;
        let cli = crate::cli::Cli::try_parse_from(["boot-image-controller", "run"]).expect("run");
        let crate::cli::Command::Run(args) = cli.command else {
            panic!("the run command")
        };
        let limit = jiff::SignedDuration::try_from(args.hold_limit).expect("a duration");
        let held = |hours: i64| crate::controller::status::conditions::HeldFor {
            duration: jiff::SignedDuration::from_hours(hours),
            limit,
        };
        assert!(
            !held(4).exceeded(),
            "two 2-hour upgrades in a row: {limit:?}"
        );
        assert!(held(12).exceeded(), "a hold that never ends: {limit:?}");
    }

    #[test]
    fn the_run_command_refuses_a_zero_resync_period_or_hold_limit() {
        use clap::Parser as _;
        // A zero hold limit would report every hold, however short, as held too long.
        for flag in ["--resync-period", "--hold-limit"] {
            let parsed =
                crate::cli::Cli::try_parse_from(["boot-image-controller", "run", flag, "0s"]);
            let err = parsed.expect_err("a zero period is refused");
            assert!(
                err.to_string().contains("longer than zero"),
                "{flag}: {err}"
            );
        }
    }
}
